"""What a wire format's messages keep goes back upstream with the prompt's unchanged messages.

A wire that reads more than a chat message holds (a Responses reasoning item,
an image's detail) keeps it in the logged message's ``meta`` under its own
key (``Wire.keeps``). Render sends no ``meta`` to a model, so the rendered
prompt has none; this puts the wire's key back on each prompt message that
is a logged message shown whole (``Rendered.shown`` less ``clipped``, and the
system prompt), found in log order by what a model sees of it. Folds,
markers, clipped messages and the synthetic answers of unanswered calls get
nothing: the wire then writes them from their fields.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from contextfold.core.log import LoggedMessage
from contextfold.core.messages import Message, for_model
from contextfold.core.render import Rendered
from contextfold.memory.session import Session


def with_kept(session: Session, rendered: Rendered, key: str, system: int) -> list[Message]:
    """``rendered.messages`` with ``meta[key]`` of the logged messages they show whole.

    ``system`` is the number of leading system messages of the log (the system
    prompt render puts first).
    """
    whole = set(rendered.shown) - set(rendered.clipped)
    seqs = sorted(whole | set(range(1, system + 1)))
    kept = [m for m in _read(session, seqs) if _has(m.message, key)]
    if not kept:
        return rendered.messages
    found = [(for_model(m.message), m.message["meta"][key]) for m in kept]
    out: list[Message] = []
    at = 0
    for message in rendered.messages:
        match = next((j for j in range(at, len(found)) if found[j][0] == message), None)
        if match is None:
            out.append(message)
            continue
        out.append({**message, "meta": {key: found[match][1]}})
        at = match + 1
    return out


def _has(message: Message, key: str) -> bool:
    meta = message.get("meta")
    return isinstance(meta, dict) and key in meta


def _read(session: Session, seqs: Sequence[int]) -> Iterable[LoggedMessage]:
    """The logged messages at ``seqs`` (ascending), one read per run of consecutive seqs."""
    wanted = set(seqs)
    start = 0
    for i, seq in enumerate(seqs):
        if i + 1 == len(seqs) or seqs[i + 1] != seq + 1:
            first = seqs[start]
            for logged in session.messages(after=first - 1, limit=seq - first + 1):
                if logged.seq in wanted:
                    yield logged
            start = i + 1
