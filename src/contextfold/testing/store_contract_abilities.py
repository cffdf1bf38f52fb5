"""The Store contract's check that a backend's ``abilities`` are honest.

Part of ``contextfold.testing.store_contract.StoreContract``. Callers trust the
record instead of probing for methods, so each claim is tried:

- ``service``: the store is a ``ServiceStore`` (its tests run in
  ``store_contract_admin``); a store declaring nothing is refused by
  ``service_port`` with a clear error.
- ``wake_across_processes``: an append made by another process, opening the
  store by ``store_url``, reaches a listener on the store's own wake. A store
  making the claim must give that URL.
"""

from __future__ import annotations

import multiprocessing
import threading
from typing import cast

import pytest

from contextfold.core.errors import InvalidInput
from contextfold.store.base import ServiceStore, Store, service_port
from contextfold.store.wake import WakingStore
from contextfold.testing.store_contract_common import ContractHooks, message, opened

WAKE_WAIT_S = 30.0


def _append_elsewhere(url: str, session_id: str) -> None:
    """In a process of its own: open the store by URL and log one message."""
    from contextfold.store.registry import open_store

    store = open_store(url)
    try:
        store.append(session_id, [message("from another process")])
    finally:
        store.close()


class AbilitiesContract(ContractHooks):
    """Each ability a store declares, tried."""

    def test_a_store_has_the_library_port_and_declares_its_abilities(self, store: Store) -> None:
        assert isinstance(store, Store)
        if store.abilities.service:
            assert isinstance(store, ServiceStore)
            assert service_port(store) is store
        else:
            with pytest.raises(InvalidInput):
                service_port(store)

    def test_a_declared_cross_process_wake_hears_another_process(self, store: Store) -> None:
        if not store.abilities.wake_across_processes:
            pytest.skip("this store declares no wake across processes")
        url = self.store_url(store)
        assert url is not None, "a store waking other processes must give store_url"
        sid = opened(store, 1)
        heard = threading.Event()
        stop = cast(WakingStore, store).wake().listen(sid, lambda _: heard.set())
        try:
            writer = multiprocessing.get_context("spawn").Process(
                target=_append_elsewhere, args=(url, sid)
            )
            writer.start()
            writer.join(WAKE_WAIT_S)
            assert writer.exitcode == 0
            assert heard.wait(WAKE_WAIT_S), "the append in another process woke no listener"
        finally:
            stop()
        assert store.last_seq(sid) == 2
