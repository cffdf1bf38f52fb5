"""A scripted OpenAI model for LangChain's own agent loop, answering from what it is sent.

``FakeProvider("openai")`` answers Chat Completions with ``scripted_reply``, a
function of the request, so the agent's prompt may be compacted in any way and
the script still knows where it is: a user message ``task T: read K notes``
starts a task, each ``read_note`` result names its step (``note T.j of K``),
and after the K-th result the model answers ``done with task T``. A task whose
text says ``email`` calls ``send_email`` (a tool a human approves) and then
answers; one that says ``recall WORDS`` searches the log with contextfold's
``contextfold_search`` and answers with the seqs it found (each note carries a
mark, ``wTxJ``, to search for). A request without tools is a summarizer's (LangChain's
``SummarizationMiddleware`` calls the model bare) and gets a summary.

``agent_tools`` are real LangChain tools; ``chat_model`` points ``ChatOpenAI``
at the server. Every request the model got is in ``provider.requests``.
"""

from __future__ import annotations

import json
import re
from typing import Any

from fake_openai import openai_reply
from fake_providers import Reply, Request

NOTE_PADDING = "The loader reads each shard, checks its header and keeps the index in memory. " * 6
SUMMARY = "Summary: earlier tasks read their notes one by one and each finished."
_TASK = re.compile(r"task (\d+): read (\d+) notes")
_NOTE = re.compile(r"note (\d+)\.(\d+) of (\d+)")
_EMAIL = re.compile(r"task (\d+): email (\S+)")
_RECALL = re.compile(r"task (\d+): recall (.+)")


def task_text(task: int, notes: int) -> str:
    return f"task {task}: read {notes} notes"


def email_text(task: int, to: str) -> str:
    return f"task {task}: email {to}"


def recall_text(task: int, words: str) -> str:
    return f"task {task}: recall {words}"


def call_reply(calls: list[tuple[str, dict[str, Any], str]]) -> Reply:
    """A chat completion calling tools: (name, arguments, id) each."""
    reply = openai_reply("")
    choice = reply.body["choices"][0]
    choice["message"] = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": cid,
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(args)},
            }
            for name, args, cid in calls
        ],
    }
    choice["finish_reason"] = "tool_calls"
    return reply


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return " ".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content or ""


def scripted_reply(request: Request) -> Reply:
    """The model's next move, read from the end of the prompt it was sent."""
    body = request.body
    if not body.get("tools"):
        return openai_reply(SUMMARY)
    last = body["messages"][-1]
    text = _text(last)
    if last["role"] == "user":
        recall = _RECALL.search(text)
        if recall:
            task, words = int(recall.group(1)), recall.group(2)
            return call_reply([("contextfold_search", {"query": words}, f"recall_{task}")])
        email = _EMAIL.search(text)
        if email:
            task, to = int(email.group(1)), email.group(2)
            return call_reply([("send_email", {"to": to, "body": "hello"}, f"mail_{task}")])
        found = _TASK.search(text)
        if found is None:
            return openai_reply(f"I answer: {text[:40]}")
        task, notes = int(found.group(1)), int(found.group(2))
        return call_reply([("read_note", {"task": task, "step": 1, "of": notes}, f"call_{task}_1")])
    if last["role"] == "tool":
        if last["tool_call_id"].startswith("recall_"):
            hits = json.loads(text)["hits"]
            return openai_reply(f"recalled seqs {sorted(hit['seq'] for hit in hits)}")
        note = _NOTE.search(text)
        if note is None:
            return openai_reply(f"done after {last['tool_call_id']}")
        task, step, notes = (int(g) for g in note.groups())
        if step < notes:
            args = {"task": task, "step": step + 1, "of": notes}
            return call_reply([("read_note", args, f"call_{task}_{step + 1}")])
        return openai_reply(f"done with task {task}")
    return openai_reply("ok")


def agent_tools() -> list[Any]:
    """``read_note`` (a long result) and ``send_email`` (approved by a human)."""
    from langchain_core.tools import tool

    @tool
    def read_note(task: int, step: int, of: int) -> str:
        """Read one note of a task."""
        return f"note {task}.{step} of {of} (mark w{task}x{step}): {NOTE_PADDING}"

    @tool
    def send_email(to: str, body: str) -> str:
        """Send an email."""
        return f"sent to {to}"

    return [read_note, send_email]


def chat_model(base_url: str) -> Any:
    """``ChatOpenAI`` on the scripted server (``base_url`` with ``/v1``)."""
    from langchain_openai import ChatOpenAI

    return ChatOpenAI(
        model="gpt-4o-mini",
        base_url=base_url,
        api_key="unused",  # type: ignore[arg-type]
        max_retries=0,
    )
