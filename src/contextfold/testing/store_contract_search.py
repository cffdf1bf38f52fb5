"""The Store contract's promises about full-text search over a session's log.

Part of ``contextfold.testing.store_contract.StoreContract``, which inherits
these tests; kept apart because search is what recall asks of a store.
"""

from __future__ import annotations

from typing import Any

import pytest

from contextfold.core.errors import InvalidInput, NotFound
from contextfold.core.log import NewMessage
from contextfold.store.base import Store
from contextfold.store.search import CANDIDATES


def _said(text: str, role: str = "user") -> NewMessage:
    return NewMessage({"role": role, "content": text}, 3)


def _log(store: Store, texts: list[str], session_id: str = "s") -> None:
    store.create_session(session_id, encoding="o200k_base")
    store.append(session_id, [_said(t) for t in texts])


def _seqs(store: Store, query: str, **kwargs: Any) -> list[int]:
    return [hit.seq for hit in store.search("s", query, **kwargs)]


class SearchContract:
    """``Store.search``: relevance, bounds, isolation and safety with user text."""

    def test_search_ranks_the_relevant_messages_first(self, store: Store) -> None:
        _log(
            store,
            [
                "we talked about the weather",
                "the deploy script failed on the staging database",
                "lunch was pasta",
                "the database migration needs a rollback plan for the database",
                "nothing to see",
            ],
        )
        hits = store.search("s", "database")
        assert [h.seq for h in hits] == [4, 2]
        assert hits[0].score > hits[1].score
        assert _seqs(store, "staging database")[0] == 2
        assert _seqs(store, "volcano") == []

    def test_search_ranks_by_the_rarest_words_of_the_session(self, store: Store) -> None:
        common = CANDIDATES + 1
        _log(store, ["apple pie"] * common + ["apple banana", "banana split"])
        assert sorted(_seqs(store, "apple banana")) == [common + 1, common + 2]
        assert _seqs(store, "apple", limit=3) == [common + 1, common, common - 1]
        _log(store, ["apple banana", "banana split", "cherry"], "other")
        assert {h.seq for h in store.search("other", "apple banana")} == {1, 2}
        assert store.delete_session("s")
        _log(store, ["apple pie", "banana split"])
        assert sorted(_seqs(store, "apple banana")) == [1, 2]

    def test_search_of_a_word_in_too_many_messages_ranks_the_newest(self, store: Store) -> None:
        many = CANDIDATES + 5
        _log(store, ["apple pie"] * many + ["no fruit"])
        found = _seqs(store, "apple", limit=many)
        assert sorted(found) == list(range(6, many + 1))
        assert sorted(_seqs(store, "apple pie", limit=many, before=many)) == list(range(5, many))
        assert _seqs(store, "apple", limit=2, before=3) == [2, 1]

    def test_search_by_role_ranks_the_newest_of_that_role(self, store: Store) -> None:
        many = CANDIDATES + 5
        store.create_session("s", encoding="o200k_base")
        said = [_said("apple crumble", "assistant") for _ in range(3)]
        said += [_said("apple pie") for _ in range(many)]
        said += [_said("apple tart", "assistant"), _said("apple juice", "system")]
        store.append("s", said)
        last = many + 5
        assert sorted(_seqs(store, "apple", limit=10, roles=["assistant"])) == [1, 2, 3, last - 1]
        assert _seqs(store, "apple crumble", roles={"assistant"}, limit=1) == [3]
        found = _seqs(store, "apple", limit=many, roles=("user", "system"))
        assert sorted(found) == [*range(many - CANDIDATES + 5, many + 4), last]
        assert _seqs(store, "apple", roles=["tool"]) == []
        assert _seqs(store, "apple", roles=["assistant"], before=last - 1) == [3, 2, 1]
        assert _seqs(store, "apple", roles=["assistant"], after=2, before=last - 1) == [3]

    def test_search_after_a_seq_ranks_the_newest_after_it(self, store: Store) -> None:
        many = CANDIDATES + 5
        _log(store, ["apple pie"] * many)
        assert sorted(_seqs(store, "apple", limit=many, after=many - 3)) == [
            many - 2,
            many - 1,
            many,
        ]
        assert _seqs(store, "apple", after=3, before=6) == [5, 4]
        assert _seqs(store, "apple", after=many) == []
        assert _seqs(store, "apple", after=5, before=5) == []
        assert len(_seqs(store, "apple", limit=many, after=-(10**30))) == CANDIDATES
        assert _seqs(store, "apple", after=10**30) == []

    def test_search_finds_tool_calls_and_content_parts(self, store: Store) -> None:
        store.create_session("s", encoding="o200k_base")
        function = {"name": "grep_repo", "arguments": '{"pattern": "frobnicate"}'}
        call = {"id": "c1", "type": "function", "function": function}
        parts = [{"type": "text", "text": "see the attached kumquat"}]
        store.append(
            "s",
            [
                NewMessage({"role": "assistant", "content": None, "tool_calls": [call]}, 5),
                NewMessage({"role": "user", "content": parts}, 5),
            ],
        )
        assert _seqs(store, "frobnicate") == [1]
        assert _seqs(store, "grep") == [1]
        assert _seqs(store, "kumquat") == [2]

    def test_search_respects_before_and_limit(self, store: Store) -> None:
        _log(store, [f"apple number {i}" for i in range(1, 11)])
        assert sorted(_seqs(store, "apple")) == list(range(1, 11))
        assert sorted(_seqs(store, "apple", before=4)) == [1, 2, 3]
        assert _seqs(store, "apple", before=1) == []
        assert len(_seqs(store, "apple", limit=3)) == 3
        assert _seqs(store, "apple number 7", limit=1) == [7]

    def test_search_sees_each_append_at_once(self, store: Store) -> None:
        _log(store, ["first"])
        assert _seqs(store, "zeppelin") == []
        store.append("s", [_said("a zeppelin overhead")])
        assert _seqs(store, "zeppelin") == [2]

    def test_search_never_returns_another_sessions_messages(self, store: Store) -> None:
        _log(store, ["mango in mine"], "s")
        _log(store, ["mango in theirs", "more mango mango"], "other")
        assert _seqs(store, "mango") == [1]
        assert {h.seq for h in store.search("other", "mango")} == {1, 2}

    @pytest.mark.parametrize(
        "query",
        [
            '"',
            "'",
            'owl" OR "*',
            "owl AND NOT (",
            "NEAR(owl moon, 2)",
            "owl:* & !moon | <->",
            "col:owl ^owl owl*",
            "-owl +owl {owl} [owl] \\owl %owl _owl",
            "owl;DROP TABLE messages;--",
        ],
    )
    def test_search_reads_syntax_in_a_query_as_plain_words(self, store: Store, query: str) -> None:
        _log(store, ["an owl at night", "the moon"])
        found = _seqs(store, query)
        assert set(found) <= {1, 2}
        if "owl" in query:
            assert 1 in found
        assert _seqs(store, "owl") == [1]

    def test_search_matches_unicode_words(self, store: Store) -> None:
        _log(store, ["Ünïcode café crème", "日本語 テキスト", "plain ascii", "ΑΘΗΝΑ"])
        assert _seqs(store, "café") == [1]
        assert _seqs(store, "CAFÉ") == [1]
        assert _seqs(store, "テキスト") == [2]
        assert _seqs(store, "αθηνα") == [4]

    def test_an_empty_or_stopword_query_finds_nothing(self, store: Store) -> None:
        _log(store, ["the cat and the hat", "of it is"])
        for query in ("", "   ", "the", "the and of", "?!.,", '""'):
            assert _seqs(store, query) == []

    def test_a_deleted_session_leaves_no_hits(self, store: Store) -> None:
        _log(store, ["walrus one", "walrus two"])
        _log(store, ["walrus elsewhere"], "kept")
        assert store.delete_session("s")
        with pytest.raises(NotFound):
            store.search("s", "walrus")
        _log(store, ["no sea creatures"])
        assert _seqs(store, "walrus") == []
        store.append("s", [_said("a walrus again")])
        assert _seqs(store, "walrus") == [2]
        assert _seqs(store, "walrus", before=2) == []
        assert [h.seq for h in store.search("kept", "walrus")] == [1]

    def test_search_of_an_unknown_session_is_not_found(self, store: Store) -> None:
        with pytest.raises(NotFound):
            store.search("missing", "anything")
        with pytest.raises(NotFound):
            store.search("missing", "the")

    @pytest.mark.parametrize(
        ("kwargs", "field"),
        [
            ({"query": None}, "query"),
            ({"query": 3}, "query"),
            ({"limit": 0}, "limit"),
            ({"limit": -1}, "limit"),
            ({"limit": True}, "limit"),
            ({"limit": 2.0}, "limit"),
            ({"before": "5"}, "before"),
            ({"before": 1.5}, "before"),
            ({"after": "5"}, "after"),
            ({"after": True}, "after"),
            ({"roles": "user"}, "roles"),
            ({"roles": []}, "roles"),
            ({"roles": ["wizard"]}, "roles"),
            ({"roles": [None]}, "roles"),
            ({"roles": 3}, "roles"),
        ],
    )
    def test_search_refuses_bad_arguments(
        self, store: Store, kwargs: dict[str, Any], field: str
    ) -> None:
        _log(store, ["x"])
        args: dict[str, Any] = {"query": "x", **kwargs}
        with pytest.raises(InvalidInput) as err:
            store.search("s", args.pop("query"), **args)
        assert err.value.field == field

    def test_a_huge_message_is_logged_and_found_by_its_beginning(self, store: Store) -> None:
        distinct = " ".join(f"w{i:06d}x{i * 7919 % 100003:05d}" for i in range(60_000))
        _log(store, ["heron " + distinct + " ending"])
        assert _seqs(store, "heron") == [1]
        assert _seqs(store, "w000001x07919") == [1]

    def test_search_takes_any_integer_bound(self, store: Store) -> None:
        _log(store, ["ibis"])
        assert _seqs(store, "ibis", before=10**30) == [1]
        assert _seqs(store, "ibis", before=-(10**30)) == []
        assert _seqs(store, "ibis", before=0) == []
