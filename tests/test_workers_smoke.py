"""The worker path end to end: a CeleryRunner here, a real worker process, PostgreSQL and Redis."""

from __future__ import annotations

from workers_harness import REDIS, fresh_queue, wait_for, worker

from contextfold.core.events import Event
from contextfold.memory.session import Memory
from contextfold.workers import CeleryRunner


def test_a_job_sent_here_is_compacted_by_a_worker_and_its_events_come_back(database: str) -> None:
    memory = Memory(database)
    session = memory.session("t/s1", system="You are helpful.")
    view = session.view("default", preset="rolling", budget=600, model="slow:0.05")
    events: list[Event] = []
    with fresh_queue() as queue, worker(database, queue):
        runner = CeleryRunner(REDIS, queue=queue, settle_s=0.02, on_event=[events.append])
        try:
            assert runner.listening(10)
            runner.watch(view)
            for i in range(40):
                session.append(
                    {"role": "user", "content": f"Remember code word alpha{i}, number {i * 7}."}
                )
                session.append({"role": "assistant", "content": f"Noted alpha{i} and {i * 7}."})
            assert wait_for(lambda: any(e.kind == "committed" for e in events), 30)
            assert view.folds()
            assert len(session.history()) == 81
            assert wait_for(lambda: runner.job(view) is None, 10)
            stats = runner.queue.stats()
            assert stats["enqueued"] >= 1 and stats["committed"] >= 1
            assert stats["enqueued"] <= 3  # 80 appends, one pending job at a time
        finally:
            runner.stop()
    memory.close()
