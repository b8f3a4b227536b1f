"""Ctrl-C and SIGTERM as the driver takes them: Python's own handler, counted first.

CPython drops an exception raised while a finalizer runs ("Exception ignored in: <finalize object>", the
`weakref.finalize` docs): a KeyboardInterrupt that lands while garbage collection closes a urllib3 connection pool
is lost, and the run would go on to its end and exit 0. Each signal is counted before the handler raises, so the
job follow (automation/ray_head.py), which polls, sees one that never reached it and raises it again."""

from __future__ import annotations

import signal
from types import FrameType

_received = 0


def on_signal(signum: int, frame: FrameType | None) -> None:
    global _received  # noqa: PLW0603 - the one process-wide count a signal handler can leave
    _received += 1
    signal.default_int_handler(signum, frame)


def received() -> int:
    """How many signals `on_signal` has taken in this process."""
    return _received


def raise_if_new(seen: int) -> None:
    """KeyboardInterrupt when a signal came after `received()` answered `seen` (one may have been swallowed)."""
    if _received != seen:
        raise KeyboardInterrupt
