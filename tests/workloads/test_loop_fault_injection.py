"""Fault injection under Ray Train waits for the controller to take the worker's reports before the
death (workloads.loop._maybe_fail): a death before that loses the last checkpoint."""

from __future__ import annotations

import queue
import threading
import time

import pytest

from workloads import loop

context = pytest.importorskip("ray.train.v2._internal.execution.context")


class _Ctx:
    def __init__(self, q: queue.Queue):
        self.q = q

    def get_result_queue(self) -> queue.Queue:
        return self.q


@pytest.fixture
def result_queue(monkeypatch) -> queue.Queue:
    q: queue.Queue = queue.Queue(maxsize=1)  # as Ray Train V2 makes it
    monkeypatch.setattr(context, "get_train_context", lambda: _Ctx(q))
    return q


def test_waits_until_the_controller_takes_the_pending_report(result_queue):
    result_queue.put("checkpoint report")
    taken_at: list[float] = []

    def controller_poll():
        time.sleep(0.4)
        result_queue.get_nowait()
        taken_at.append(time.monotonic())

    threading.Thread(target=controller_poll, daemon=True).start()
    loop._wait_until_reports_taken(timeout_s=10)
    returned_at = time.monotonic()
    assert taken_at, "returned before the report was taken"
    assert returned_at >= taken_at[0], f"returned {taken_at[0] - returned_at:.3f} s before the report was taken"


def test_returns_at_once_when_no_report_is_pending(result_queue):
    t0 = time.monotonic()
    loop._wait_until_reports_taken(timeout_s=10)
    assert time.monotonic() - t0 < 1.0, "waited with an empty queue"


def test_a_report_never_taken_fails_naming_the_wait(result_queue):
    result_queue.put("checkpoint report")
    with pytest.raises(RuntimeError, match="took no report of this worker in 0 s"):
        loop._wait_until_reports_taken(timeout_s=0.2)
