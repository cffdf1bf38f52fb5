"""The Store contract's promises about what may follow what in a log
(``contextfold.core.order``), checked by the store itself, one writer at a time.

Part of ``contextfold.testing.store_contract.StoreContract``. The same rules
under concurrent writers are ``store_contract_concurrent``.
"""

from __future__ import annotations

import pytest

from contextfold.core.errors import InvalidInput
from contextfold.core.log import NewMessage
from contextfold.core.order import SYSTEM_KEY
from contextfold.store.base import Store


def _user(text: str, key: str | None = None) -> NewMessage:
    return NewMessage({"role": "user", "content": text}, 5, key)


def _call(*ids: str) -> NewMessage:
    calls = [
        {"id": i, "type": "function", "function": {"name": "read", "arguments": "{}"}} for i in ids
    ]
    return NewMessage({"role": "assistant", "content": None, "tool_calls": calls}, 10)


def _result(call_id: str, text: str = "done") -> NewMessage:
    return NewMessage({"role": "tool", "tool_call_id": call_id, "content": text}, 5)


def _system(text: str) -> NewMessage:
    return NewMessage({"role": "system", "content": text}, 7)


def _refused(
    store: Store, sid: str, batch: list[NewMessage], *, whole_keys: bool = False
) -> InvalidInput:
    before = [m.message for m in store.messages(sid)]
    with pytest.raises(InvalidInput) as caught:
        store.append(sid, batch, whole_keys=whole_keys)
    assert [m.message for m in store.messages(sid)] == before  # nothing of the batch
    return caught.value


class OrderContract:
    """The rules of ``contextfold.core.order``, refused by the store's own append."""

    def test_results_follow_their_call_and_answer_it_once(self, store: Store) -> None:
        store.create_session("s", encoding="o200k_base")
        store.append("s", [_user("go"), _call("a", "b"), _result("a")])
        store.append("s", [_result("b")])
        exc = _refused(store, "s", [_result("b", "again")])
        assert (exc.index, exc.field) == (4, "tool_call_id")
        store.append("s", [_call("c"), _user("meanwhile")])  # c is answered at render
        exc = _refused(store, "s", [_user("fine"), _result("c")])
        assert (exc.index, exc.field) == (7, "tool_call_id")
        exc = _refused(store, "s", [_result("zz")])
        assert "no earlier assistant message called" in exc.reason

    def test_a_batch_breaking_a_rule_late_writes_nothing(self, store: Store) -> None:
        store.create_session("s", encoding="o200k_base")
        store.append("s", [_user("go"), _call("a")])
        exc = _refused(store, "s", [_result("a"), _user("next", key="k"), _result("a")])
        assert (exc.index, exc.field) == (4, "tool_call_id")
        assert [m.seq for m in store.append("s", [_user("other", key="k")])] == [3]

    def test_a_key_names_one_message(self, store: Store) -> None:
        store.create_session("s", encoding="o200k_base")
        first = store.append("s", [_user("hello", key="k")])[0]
        assert store.append("s", [_user("hello", key="k")]) == [first]
        exc = _refused(store, "s", [_user("fine"), _user("other", key="k")])
        assert (exc.index, exc.field) == (2, "key")
        exc = _refused(store, "s", [_user("one", key="j"), _user("two", key="j")])
        assert (exc.index, exc.field) == (2, "key")

    def test_whole_keys_store_a_batch_once_or_refuse_it_whole(self, store: Store) -> None:
        store.create_session("s", encoding="o200k_base")
        first = store.append("s", [_user("a", "r:0"), _user("b", "r:1")], whole_keys=True)
        assert [m.seq for m in first] == [1, 2]
        again = store.append("s", [_user("a", "r:0"), _user("b", "r:1")], whole_keys=True)
        assert again == first  # a retry: answered from the log
        longer = [_user("a", "r:0"), _user("b", "r:1"), _user("c", "r:2")]
        exc = _refused(store, "s", longer, whole_keys=True)
        assert exc.field == "key"
        exc = _refused(store, "s", [_user("x", "r:0"), _user("y", "r:1")], whole_keys=True)
        assert exc.field == "key"
        exc = _refused(store, "s", [_user("a", "q:0"), _user("unkeyed")], whole_keys=True)
        assert (exc.index, exc.field) == (1, "key")
        # Without whole keys the same longer batch is taken message by message.
        assert [m.seq for m in store.append("s", longer)] == [1, 2, 3]

    def test_a_batch_resumed_after_its_logged_messages_stays_one_chain(self, store: Store) -> None:
        """Another writer logged the batch's first messages meanwhile at its place (after
        seq 1), and a branch grew elsewhere since: the rest follows them, not the parent."""
        store.create_session("s", encoding="o200k_base")
        store.append("s", [_user("root")])
        store.append("s", [_user("a", "p:a"), _user("b", "p:b")], parent=1)
        store.append("s", [_user("elsewhere")], parent=1)
        batch = [_user("a", "p:a"), _user("b", "p:b"), _user("c", "p:c")]
        logged = store.append("s", batch, parent=1)
        assert [(m.seq, m.parent) for m in logged] == [(2, 1), (3, 2), (5, 3)]
        # A keyed record elsewhere in the log (not where this batch goes) moves nothing:
        # the new message follows the batch's own place, the newest message.
        assert store.append("s", [_user("a", "p:a"), _user("d", "p:d")])[1].parent == 5

    def test_a_session_is_created_with_its_system_prompt_in_one_call(self, store: Store) -> None:
        record = store.create_session("s", encoding="o200k_base", system=_system("Be brief."))
        again = store.create_session("s", encoding="o200k_base", system=_system("Be brief."))
        assert again == record
        [logged] = store.messages("s")
        assert (logged.seq, logged.key, logged.message["content"]) == (1, SYSTEM_KEY, "Be brief.")
        with pytest.raises(InvalidInput) as caught:
            store.create_session("s", encoding="o200k_base", system=_system("Be verbose."))
        assert caught.value.field == "system"
        assert [m.message["content"] for m in store.messages("s")] == ["Be brief."]

    def test_the_system_prompt_goes_first(self, store: Store) -> None:
        store.create_session("s", encoding="o200k_base")
        store.append("s", [_user("hi")])
        with pytest.raises(InvalidInput) as caught:
            store.create_session("s", encoding="o200k_base", system=_system("Late."))
        assert caught.value.field == "system"
        exc = _refused(store, "s", [NewMessage(_system("Late.").message, 7, SYSTEM_KEY)])
        assert exc.field == "system"
        with pytest.raises(InvalidInput) as caught:
            store.create_session("t", encoding="o200k_base", system=_user("not a system"))
        assert caught.value.field == "system"
