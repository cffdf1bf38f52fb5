"""The Store contract's promises about listings, session figures, deletion, API keys
and the look-up of idempotency keys.

Part of ``contextfold.testing.store_contract.StoreContract``, which inherits
these tests; kept apart because they are what the service asks of a store
beside the log.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from contextfold.core.errors import InvalidInput, NotFound
from contextfold.core.folds import Fold
from contextfold.core.log import ApiKey, NewMessage
from contextfold.store.base import ServiceStore, Store, service_port


def _new(text: str, tokens: int = 3) -> NewMessage:
    return NewMessage({"role": "user", "content": text}, tokens)


def _keyed(text: str, key: str) -> NewMessage:
    return NewMessage({"role": "user", "content": text}, 3, key)


def _fold(start: int, end: int) -> Fold:
    return Fold(
        view="default",
        start=start,
        end=end,
        kind="summary",
        text="s",
        messages=({"role": "user", "content": "s"},),
        strategy="test",
        tokens_before=10,
        tokens_after=1,
    )


def _blank(field: str) -> dict[str, Any]:
    return {field: ""}


class SessionAdminContract:
    """Listings, ``session_info``, ``delete_session``, API keys and ``keyed``.

    The tests of the service's port (``ServiceStore``) ask for ``service``: the
    store itself when its abilities declare ``service``, else they are skipped.
    """

    @pytest.fixture
    def service(self, store: Store) -> ServiceStore:
        if not store.abilities.service:
            pytest.skip("this store does not declare the service's port")
        return service_port(store)

    def test_keyed_finds_the_records_stored_under_keys(self, service: ServiceStore) -> None:
        service.create_session("s", encoding="o200k_base")
        logged = service.append(
            "s", [_new("plain"), _keyed("a", "r:0"), _keyed("b", "r:1"), _keyed("c", "q:0")]
        )
        found = service.keyed("s", ["r:0", "r:1", "r:2", "nope"])
        assert found == {"r:0": logged[1], "r:1": logged[2]}
        assert service.keyed("s", ["q:0"]) == {"q:0": logged[3]}
        assert service.keyed("s", []) == {}
        assert service.keyed("s", ["r:0", "r:0"]) == {"r:0": logged[1]}

    def test_keyed_is_per_session_and_hands_out_copies(self, service: ServiceStore) -> None:
        for sid in ("s", "t"):
            service.create_session(sid, encoding="o200k_base")
        service.append("s", [_keyed("mine", "k")])
        assert service.keyed("t", ["k"]) == {}
        service.keyed("s", ["k"])["k"].message["content"] = "edited"
        assert service.keyed("s", ["k"])["k"].message["content"] == "mine"
        assert service.keyed("s", ["k"])["k"].seq == 1
        with pytest.raises(NotFound):
            service.keyed("missing", ["k"])
        with pytest.raises(NotFound):
            service.keyed("missing", [])

    def test_list_sessions_by_prefix_in_id_order(self, service: ServiceStore) -> None:
        for sid in ("b/2", "a/3", "a/1", "a/10", "ab/1", "c"):
            service.create_session(sid, encoding="o200k_base")
        assert service.list_sessions() == ["a/1", "a/10", "a/3", "ab/1", "b/2", "c"]
        assert service.list_sessions("a/") == ["a/1", "a/10", "a/3"]
        assert service.list_sessions("zz/") == []

    def test_list_sessions_paged_by_last_id(self, service: ServiceStore) -> None:
        ids = [f"t/s{i:03d}" for i in range(25)]
        for sid in reversed(ids):
            service.create_session(sid, encoding="o200k_base")
        service.create_session("u/s000", encoding="o200k_base")
        pages: list[list[str]] = []
        after: str | None = None
        while True:
            page = service.list_sessions("t/", after=after, limit=10)
            if not page:
                break
            pages.append(page)
            after = page[-1]
        assert [len(p) for p in pages] == [10, 10, 5]
        assert [i for p in pages for i in p] == ids

    def test_list_sessions_search_ignores_ascii_case_after_the_prefix(
        self, service: ServiceStore
    ) -> None:
        for sid in ("t/Alpha-Chat", "t/beta", "t/ALPHABET", "t/alpha\u00c9", "u/alpha"):
            service.create_session(sid, encoding="o200k_base")
        assert service.list_sessions("t/", search="alpha") == [
            "t/ALPHABET",
            "t/Alpha-Chat",
            "t/alpha\u00c9",
        ]
        assert service.list_sessions("t/", search="CHAT") == ["t/Alpha-Chat"]
        assert service.list_sessions("t/", search="t/") == []  # the prefix is not searched
        assert service.list_sessions("t/", search="\u00c9") == ["t/alpha\u00c9"]
        assert service.list_sessions("t/", search="alpha", limit=1) == ["t/ALPHABET"]

    @pytest.mark.parametrize(
        ("kwargs", "field"),
        [
            ({"limit": 0}, "limit"),
            ({"limit": -1}, "limit"),
            ({"limit": True}, "limit"),
            ({"limit": 2.5}, "limit"),
            ({"after": 3}, "after"),
            ({"search": ["x"]}, "search"),
        ],
    )
    def test_list_sessions_arguments_checked(
        self, service: ServiceStore, kwargs: dict[str, Any], field: str
    ) -> None:
        with pytest.raises(InvalidInput) as caught:
            service.list_sessions(**kwargs)
        assert caught.value.field == field

    def test_session_info_counts_and_last_activity(self, service: ServiceStore) -> None:
        record = service.create_session("s", encoding="o200k_base", meta={"app": "x"})
        empty = service.session_info("s")
        assert (empty.last_seq, empty.messages, empty.tokens) == (0, 0, 0)
        assert empty.last_at == record.created_at
        assert empty.meta == {"app": "x"}
        logged = service.append("s", [_new("a", 3), _new("b", 4)])
        logged += service.append("s", [_new("c", 5)])
        info = service.session_info("s")
        assert (info.id, info.encoding) == ("s", "o200k_base")
        assert (info.last_seq, info.messages, info.tokens) == (3, 3, 12)
        assert info.last_at == logged[-1].created_at
        info.meta["app"] = "edited"
        assert service.session_info("s").meta == {"app": "x"}
        with pytest.raises(NotFound):
            service.session_info("missing")

    def test_delete_session_removes_it_whole(self, service: ServiceStore) -> None:
        service.create_session("gone", encoding="o200k_base")
        service.create_session("kept", encoding="o200k_base")
        for sid in ("gone", "kept"):
            service.append(sid, [_new(f"m{i}") for i in range(4)])
            service.commit_folds(sid, "default", [_fold(1, 2)], 0)
            service.put_view(sid, "default", {"preset": "offline"})
            assert service.acquire_lease(sid, "default", "me")
        assert service.delete_session("gone") is True
        assert service.delete_session("gone") is False
        assert "gone" not in service.list_sessions()
        with pytest.raises(NotFound):
            service.messages("gone")
        kept = service.session_info("kept")
        assert (kept.messages, len(service.folds("kept", "default"))) == (4, 1)
        assert service.get_view("kept", "default") is not None

    def test_recreated_session_starts_a_new_log(self, store: Store) -> None:
        store.create_session("s", encoding="o200k_base")
        store.append("s", [_new("old", 3)])
        store.commit_folds("s", "default", [_fold(1, 1)], 0)
        store.put_view("s", "default", {"preset": "offline"})
        assert store.acquire_lease("s", "default", "someone")
        store.delete_session("s")
        store.create_session("s", encoding="o200k_base")
        assert [m.seq for m in store.append("s", [_new("new")])] == [1]
        assert store.folds("s", "default") == []
        assert store.get_view("s", "default") is None
        assert store.acquire_lease("s", "default", "me")

    def test_api_keys_stored_by_id(self, service: ServiceStore) -> None:
        first = ApiKey("k1", "acme", "hash-1", "ci", 10.0)
        service.put_api_key(first)
        service.put_api_key(ApiKey("k2", "other", "hash-2", "", 20.0))
        service.put_api_key(ApiKey("k3", "acme", "hash-3", "", 30.0))
        assert service.get_api_key("k1") == first
        assert service.get_api_key("nope") is None
        assert [k.id for k in service.list_api_keys()] == ["k1", "k2", "k3"]
        assert [k.id for k in service.list_api_keys("acme")] == ["k1", "k3"]
        with pytest.raises(InvalidInput) as caught:
            service.put_api_key(ApiKey("k1", "evil", "hash-x"))
        assert caught.value.field == "id"
        assert service.get_api_key("k1") == first

    def test_revoked_key_kept_and_marked(self, service: ServiceStore) -> None:
        service.put_api_key(ApiKey("k1", "acme", "hash-1", "", 10.0))
        assert service.revoke_api_key("k1") is True
        assert service.revoke_api_key("k1") is False
        assert service.revoke_api_key("missing") is False
        revoked = service.get_api_key("k1")
        assert revoked is not None and revoked.revoked_at is not None
        assert revoked.secret_hash == "hash-1"

    @pytest.mark.parametrize("field", ["id", "tenant", "secret_hash"])
    def test_api_key_fields_checked(self, service: ServiceStore, field: str) -> None:
        with pytest.raises(InvalidInput) as caught:
            service.put_api_key(replace(ApiKey("k", "t", "h"), **_blank(field)))
        assert caught.value.field == field
        assert service.list_api_keys() == []
