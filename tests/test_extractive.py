from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

import pytest
from conftest import load_rows

from contextfold import Memory, Session, View
from contextfold.core.folds import Fold
from contextfold.core.messages import text_of
from contextfold.core.tokens import get_counter
from contextfold.extract import filler
from contextfold.extract.artifacts import sentences
from contextfold.extract.candidates import Source, candidates_of
from contextfold.extract.salience import select, weigh
from contextfold.strategies import Pipeline
from contextfold.strategies.extractive import ExtractiveSummary
from contextfold.strategies.triggers import Rounds

COUNTER = get_counter("approx")
FILLER = [
    "We went over the weekly plan and agreed to keep going.",
    "The weather was grey so most of the afternoon went to reading.",
    "Lunch took longer than expected because the cafe was crowded.",
    "Nothing new on the garden, the tomatoes still need more sun.",
    "The team call drifted into a chat about favourite films.",
    "I cleaned up my desk and sorted the old notebooks.",
    "We compared notes on podcasts and found a couple in common.",
    "The train was late again, which seems to be the usual now.",
]


def filler_round(i: int) -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": f"{FILLER[i % len(FILLER)]} How was yours?"},
        {"role": "assistant", "content": f"{FILLER[(i + 3) % len(FILLER)]} Sounds familiar."},
    ]


def tool_round(i: int, result: str) -> list[dict[str, Any]]:
    call = {"id": f"call_{i}", "type": "function", "function": {"name": "run", "arguments": "{}"}}
    return [
        {"role": "user", "content": "Please run the test suite."},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": f"call_{i}", "content": result},
        {"role": "assistant", "content": "The run finished; details are above."},
    ]


def new_session(messages: list[dict[str, Any]], system: str | None = None) -> Session:
    session = Memory().session("s", system=system)
    session.extend(messages)
    return session


def summaries(view: View, *, include_superseded: bool = False) -> list[Fold]:
    return [f for f in view.folds(include_superseded=include_superseded) if f.kind == "summary"]


def full_tokens(session: Session) -> int:
    return session.view("measure").state().tokens


NAMES = [
    "Ada",
    "Bram",
    "Cleo",
    "Dov",
    "Edda",
    "Finn",
    "Gus",
    "Hana",
    "Ivo",
    "Juno",
    "Kai",
    "Lena",
    "Milo",
    "Nia",
    "Otto",
    "Pia",
]


def news_round(i: int) -> list[dict[str, Any]]:
    """A round of words seen once each, beside the common words the must-keep items use."""
    name = NAMES[i % len(NAMES)]
    return [
        {"role": "user", "content": f"{name} never met Zorb{i}; the release branch will change."},
        {
            "role": "assistant",
            "content": f"{name} saw Vex{i}, a bad ValueError in src app settings py.",
        },
    ]


def test_keeps_artifacts_and_constraints_in_the_fold() -> None:
    messages: list[dict[str, Any]] = []
    for i in range(30):
        messages += news_round(i)
    messages[10] = {"role": "user", "content": "Never change the release branch."}
    messages[21] = {"role": "assistant", "content": "The app settings are in src/app/settings.py."}
    messages[40:40] = tool_round(1, "collected 12 items\nValueError: bad settings\nFAILED 1")
    session = new_session(messages)
    # Must-keep items go first, up to must_share of the fold; prose gets the rest. At this
    # budget that share holds all five here (the constraint, the path, three tool lines),
    # which the rare-word rounds would crowd out on information alone. A chat's verbatim
    # share: the tool round would make it an agent view, whose fold gets half the room.
    budget = full_tokens(session) * 2 // 5
    view = session.view("v", preset="offline", budget=budget, kind="chat")
    view.compact()
    (fold,) = summaries(view)
    assert fold.data["sentences"] < 0.5 * len(messages)
    for item in (
        "Never change the release branch.",
        "src/app/settings.py",
        "ValueError: bad settings",
    ):
        assert item in fold.text
    assert "src/app/settings.py" in fold.data["artifacts"]
    assert fold.data["artifacts_dropped"] == 0
    assert view.render_report().tokens <= budget


def test_fold_shape() -> None:
    messages = [m for i in range(20) for m in filler_round(i)]
    session = new_session(messages, system="You are terse.")
    view = session.view("v", preset="offline", budget=full_tokens(session) // 3)
    report = view.compact()
    (fold,) = report.folds
    assert (fold.kind, fold.placement, fold.strategy) == ("summary", "in_place", "extractive")
    assert fold.start == 2
    (message,) = fold.messages
    assert message["role"] == "user"
    rounds = sum(1 for m in session.history()[: fold.end] if m["role"] == "user")
    assert fold.text.startswith(f"[Conversation History Summary (Rounds 1-{rounds})]\n[SUMMARIZED]")
    assert fold.data["rounds"] == [1, rounds]
    assert fold.data["sentences"] > 0
    assert fold.tokens_after == session.counter.message(message)
    assert fold.tokens_before == sum(
        session.counter.message(m) for m in session.history()[fold.start - 1 : fold.end]
    )


def is_round_start(session: Session, seq: int) -> bool:
    history = session.history()
    return seq > len(history) or history[seq - 1]["role"] == "user"


def test_folds_only_closed_whole_rounds_never_the_round_in_progress() -> None:
    messages: list[dict[str, Any]] = []
    for i in range(24):
        messages += tool_round(i, f"ran {i} checks, all passed") if i % 3 == 0 else filler_round(i)
    in_progress = tool_round(99, "x " * 400)[:3]
    session = new_session(messages + in_progress)
    budget = full_tokens(session) // 3
    view = session.view("v", preset="offline", budget=budget, keep_rounds=0)
    view.compact()
    (fold,) = summaries(view)
    history = session.history()
    first_of_last_round = len(history) - len(in_progress) + 1
    assert fold.end < first_of_last_round
    assert is_round_start(session, fold.start) and is_round_start(session, fold.end + 1)
    for seq, message in enumerate(history, start=1):
        if message["role"] == "tool":
            call_seq = next(
                s
                for s in range(seq - 1, 0, -1)
                if any(
                    c["id"] == message["tool_call_id"]
                    for c in history[s - 1].get("tool_calls") or ()
                )
            )
            assert (call_seq <= fold.end) == (seq <= fold.end)
    assert view.render_report().tokens <= budget


@pytest.mark.parametrize("share", [0.1, 0.25, 0.5])
def test_output_fits_the_budget_without_render_cutting(share: float) -> None:
    rows = load_rows("locomo_dev", limit=1)
    session = new_session(rows[0]["messages"][:300])
    budget = int(full_tokens(session) * share)
    # Recall off: it would take room from the raw window, which is not the fold's doing.
    view = session.view("v", preset="offline", budget=budget, recall=False)
    view.compact()
    rendered = view.render_report()
    assert rendered.tokens <= budget
    assert rendered.omitted == 0 and rendered.clipped == ()
    assert view.state().tokens == rendered.tokens


def test_plans_nothing_when_the_view_fits() -> None:
    session = new_session([m for i in range(10) for m in filler_round(i)])
    assert (
        session.view("roomy", preset="offline", budget=10 * full_tokens(session)).compact().folds
        == ()
    )
    assert session.view("unbounded", preset="offline").compact().folds == ()


def test_a_budgetless_trigger_folds_to_its_ratio_and_converges() -> None:
    session = new_session([m for i in range(12) for m in filler_round(i)])
    strategy = ExtractiveSummary(trigger=Rounds(1), ratio=0.3)
    view = session.view("v", pipeline=Pipeline([strategy]))
    (fold,) = view.compact().folds
    assert fold.tokens_after <= 0.3 * fold.tokens_before + 1
    assert fold.data["rounds"] == [1, 11]
    assert view.compact().folds == ()


def test_converges_when_the_round_in_progress_alone_is_over_budget() -> None:
    messages = [m for i in range(20) for m in filler_round(i)]
    messages.append({"role": "user", "content": "word " * 600})
    session = new_session(messages)
    view = session.view("v", preset="offline", budget=700)
    report = view.compact()
    assert 1 <= len(report.folds) <= 2
    assert view.compact().folds == ()
    assert view.render_report().tokens <= 700


def test_incremental_fold_supersedes_the_previous_one() -> None:
    rows = load_rows("locomo_dev", limit=1)
    messages = rows[0]["messages"]
    session = new_session(messages[:150])
    view = session.view("v", preset="offline", budget=1500)
    (first,) = view.compact().folds
    session.extend(messages[150:300])
    (second,) = view.compact().folds
    assert second.start == first.start and second.end > first.end
    assert second.data["rounds"][1] > first.data["rounds"][1]
    (old,) = [f for f in summaries(view, include_superseded=True) if f.id == first.id]
    assert old.superseded_by == second.id
    assert [f.id for f in summaries(view)] == [second.id]
    assert view.render_report().tokens <= 1500


def fold_sentences(fold: Fold) -> set[str]:
    """The sentences a summary fold quotes (its lines after the header, speakers dropped)."""
    return {
        text
        for line in fold.text.split("\n")[2:]
        for piece in line.partition(": ")[2].split(" … ")
        for _, text in sentences(piece)
    }


def test_replayed_turn_by_turn_the_fold_keeps_what_one_fold_of_everything_keeps() -> None:
    """Compacted after every append, each fold brings the view down to the low-water mark
    (not below: the room is the budget's) and the last one quotes most of the sentences one
    fold of the whole conversation quotes, though it was re-selected dozens of times."""
    (row,) = load_rows("locomo_dev", limit=1)
    messages = row["messages"]
    session = new_session(messages)
    budget = full_tokens(session) // 10
    once = session.view("once", preset="offline", budget=budget)
    once.compact()
    (whole,) = summaries(once)
    replay = Memory().session("r")
    view = replay.view("v", preset="offline", budget=budget)
    low = view.state().low_mark(budget)
    folded_to = []
    for message in messages:
        replay.append(message)
        if view.compact().folds:
            folded_to.append(view.state().tokens)
    (last,) = summaries(view)
    assert len(summaries(view, include_superseded=True)) >= 10
    assert min(folded_to) >= 0.9 * low
    assert last.tokens_after >= 0.9 * whole.tokens_after
    kept = fold_sentences(whole)
    assert len(kept & fold_sentences(last)) >= 0.8 * len(kept)
    assert view.render_report().tokens <= budget


def test_same_input_same_fold_text() -> None:
    rows = load_rows("locomo_dev", limit=1)
    texts = []
    for _ in range(2):
        session = new_session(rows[0]["messages"][:200])
        view = session.view("v", preset="offline", budget=1200)
        (fold,) = view.compact().folds
        texts.append(fold.text)
    assert texts[0] == texts[1]


def quoted(piece: str, said: str) -> bool:
    """Whether ``piece`` is a run of ``said``'s words in their order, only filler words
    left out."""
    words = re.findall(r"\w+", said.lower())
    wanted = re.findall(r"\w+", piece.lower())

    def from_(at: int) -> bool:
        for word in wanted[1:]:
            at += 1
            while at < len(words) and words[at] != word and words[at] in filler.FILLER:
                at += 1
            if at == len(words) or words[at] != word:
                return False
        return True

    return any(w == wanted[0] and from_(i) for i, w in enumerate(words))


def test_locomo_fold_reads_as_quoted_sentences_under_session_dates() -> None:
    rows = load_rows("locomo_dev", limit=1)
    messages = rows[0]["messages"]
    session = new_session(messages)
    view = session.view("v", preset="offline", budget=full_tokens(session) // 10)
    (fold,) = view.compact().folds
    # Headers are the session dates without their time of day ("1:56 pm on 8 May, 2023").
    dates = {m["meta"]["session_date_time"].split(" on ")[-1] for m in messages}
    said = [(str(m["name"]), str(m["content"])) for m in messages]
    lines = fold.text.split("\n")[2:]
    spoken = [line for line in lines if line.rstrip(":") not in dates]
    assert len(spoken) < len(lines)
    shortened = 0
    for line in spoken:
        speaker, _, text = line.partition(": ")
        for piece in text.split(" … "):
            sources = [s for name, s in said if name == speaker and quoted(piece, s)]
            assert sources, piece
            shortened += all(piece not in s for s in sources)
    assert shortened > 0
    ends = [line for line in spoken if re.search(r"[.!?\"')\]]$", line)]
    assert len(ends) >= 0.8 * len(spoken)


def test_reads_no_meta_but_session_dates_and_ids() -> None:
    messages = [m for i in range(16) for m in filler_round(i)]
    for m in messages:
        m["meta"] = {"session": 3, "session_date_time": "9 June 2023", "secret": "ZEBRA-991"}
    session = new_session(messages)
    view = session.view("v", preset="offline", budget=full_tokens(session) // 2)
    (fold,) = view.compact().folds
    assert "9 June 2023" in fold.text
    assert "ZEBRA" not in fold.text


def test_longmemeval_session_dates_and_ids_head_their_sessions() -> None:
    messages = [m for i in range(16) for m in filler_round(i)]
    for i, m in enumerate(messages):
        m["meta"] = {"session_id": f"s_{i // 16}", "session_date": "2023/05/21 (Sun) 19:50"}
    for m in messages[16:]:
        del m["meta"]["session_date"]
    session = new_session(messages)
    # Half the session, and room for the fold's range label ([folded: seq 1-32]).
    view = session.view("v", preset="offline", budget=full_tokens(session) // 2 + 16)
    (fold,) = view.compact().folds
    lines = fold.text.split("\n")
    # The date without its time of day: the hour is rarely asked, and each header costs.
    assert "2023/05/21 (Sun):" in lines
    assert "19:50" not in fold.text
    assert "Session s_1:" in lines


def test_a_word_said_a_few_times_is_worth_one_said_once() -> None:
    """Among specific words (few messages use them) how rare matters little: a sentence
    of four said three times each outranks one of three said once."""
    few = "Kumquat marimba zither quokka."
    once = "Persimmon bassoon pagoda."
    texts = [few, once, few.lower(), few.upper()] + ["Nothing much happened."] * 36
    sources = [Source(None, "user", text, True) for text in texts]
    candidates = candidates_of(sources, COUNTER)
    room = max(candidates[0].cost, candidates[1].cost) + 1
    chosen = select(candidates, sources, room, 0.0, COUNTER)
    assert [candidates[i].text for i in chosen] == [few]


def test_a_model_says_again_what_a_person_cannot() -> None:
    """Of two sentences as informative, a person's goes before an unnamed assistant's."""
    sources = [
        Source(None, "assistant", "Quokkas live on Rottnest island.", False),
        Source(None, "user", "Marimba lessons start on Tuesday.", True),
        Source(None, "Melanie", "Zither strings snapped again yesterday.", False),
    ]
    candidates = candidates_of(sources, COUNTER)
    weights = weigh(candidates, sources)
    person, model, named = (sum(x for _, x in weights.words[i]) for i in (1, 0, 2))
    assert model == pytest.approx(0.5 * person)
    assert named == pytest.approx(person)
    room = candidates[1].cost + 1
    chosen = select(candidates, sources, room, 0.0, COUNTER, weights)
    assert [candidates[i].source for i in chosen] == [1]


def test_rounds_over_budget_alone_fold_into_the_summary_and_what_it_dropped_comes_back() -> None:
    """Each answer nearly fills the budget, so the newest round alone holds the view over
    it: the summary takes that round in (no rescue fold, which it could not read as
    lines), and what a squeezed fold dropped comes back once a fold has room."""
    messages: list[dict[str, Any]] = []
    for i in range(12):
        messages.append({"role": "user", "content": f"{NAMES[i]} lent me the book Zorb{i}."})
        answer = " ".join(FILLER[(i + j) % len(FILLER)] for j in range(44))
        messages.append({"role": "assistant", "content": answer})
    session = Memory().session("s")
    view = session.view("v", preset="offline", budget=600, recall=False)
    for message in messages:
        session.append(message)
        view.compact()
        assert view.render_report().tokens <= 600
    folds = view.folds(include_superseded=True)
    assert {f.strategy for f in folds} == {"extractive"}
    (last,) = summaries(view)
    assert last.data["rounds"] == [1, 11]
    named = [sum(f"Zorb{i}" in f.text for i in range(12)) for f in folds]
    assert max(named) == 11


def test_word_counts_a_fold_carries_weigh_its_lines_as_over_every_message() -> None:
    """A refold reads an earlier fold's lines and the messages since; with the counts that
    fold carried, a word the whole conversation uses weighs what it weighs over every
    message, where counted over the refold's few sources it would look specific."""
    old = [
        Source(None, "user", f"The garden needs {NAMES[i % 16]} today.", True) for i in range(30)
    ]
    new = [
        Source(None, "user", "Garden gnomes went missing.", True),
        Source(None, "Melanie", "Quokkas visited again.", False),
    ]
    whole = weigh(candidates_of([*old, *new], COUNTER), [*old, *new])
    first = weigh(candidates_of(old, COUNTER), old)
    kept = replace(old[3], counted=True)
    carried = first.frequencies.carried(candidates_of([kept], COUNTER)[0].words)
    sources = [kept, *new]
    refold = weigh(candidates_of(sources, COUNTER), sources, carried)
    assert refold.words[0] == whole.words[3]
    assert refold.frequencies.sources == whole.frequencies.sources == len(old) + len(new)
    alone = weigh(candidates_of(sources, COUNTER), sources)
    assert dict(alone.words[0])["garden"] == alone.top > dict(refold.words[0])["garden"]


STOPWORDS = set(
    [
        "a",
        "an",
        "and",
        "the",
        "of",
        "to",
        "in",
        "on",
        "at",
        "for",
        "with",
        "is",
        "was",
        "were",
        "be",
        "her",
        "his",
        "my",
        "their",
        "it",
    ]
)


def answer_words_kept(view: View, questions: list[dict[str, Any]]) -> int:
    seen = set(re.findall(r"[a-z0-9]+", " ".join(text_of(m) for m in view.render()).lower()))
    kept = 0
    for q in questions:
        asked = set(re.findall(r"[a-z0-9]+", str(q["question"]).lower()))
        words = set(re.findall(r"[a-z0-9]+", str(q["answer"]).lower())) - STOPWORDS - asked
        kept += len(words & seen)
    return kept


def test_offline_keeps_more_answer_words_than_keep_recent_at_ten_percent() -> None:
    (row,) = load_rows("locomo_dev", limit=1)
    session = new_session(row["messages"])
    budget = full_tokens(session) // 10
    questions = [q for q in row["questions"] if q.get("category") in (1, 2, 3, 4)]
    kept = {}
    for preset in ("offline", "keep-recent"):
        view = session.view(preset, preset=preset, budget=budget)
        view.compact()
        assert view.render_report().tokens <= budget
        kept[preset] = answer_words_kept(view, questions)
    assert kept["offline"] > 1.5 * kept["keep-recent"]
