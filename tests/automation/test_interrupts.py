"""automation/interrupts.py: each signal is counted, then raised as Python's own handler raises it; a poll raises
one it never saw; and `main` takes SIGINT through it, so a Ctrl-C CPython dropped in a finalizer still ends the
command with 130."""

from __future__ import annotations

import signal
import sys
import weakref

import pytest

from automation import cli, interrupts


def test_a_signal_is_counted_and_raised_as_ctrl_c():
    seen = interrupts.received()
    with pytest.raises(KeyboardInterrupt):
        interrupts.on_signal(signal.SIGTERM, None)
    assert interrupts.received() == seen + 1


def test_a_poll_raises_only_a_signal_that_came_after_it_looked():
    with pytest.raises(KeyboardInterrupt):
        interrupts.on_signal(signal.SIGINT, None)
    seen = interrupts.received()
    interrupts.raise_if_new(seen)  # the one before is not raised again
    with pytest.raises(KeyboardInterrupt):
        interrupts.on_signal(signal.SIGINT, None)
    with pytest.raises(KeyboardInterrupt):
        interrupts.raise_if_new(seen)


def test_a_ctrl_c_a_finalizer_swallowed_during_a_command_is_counted_and_exits_130(capsys, monkeypatch):
    swallowed: list[object] = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: swallowed.append(u.exc_value))

    def run(args, ui):
        seen = interrupts.received()
        weakref.finalize(type("Pool", (), {})(), signal.raise_signal, signal.SIGINT)  # its KeyboardInterrupt is lost
        interrupts.raise_if_new(seen)  # as ray_head.follow_job does at each poll
        raise AssertionError("the swallowed Ctrl-C was not counted")

    monkeypatch.setattr("automation.commands.status.run", run)
    rc = cli.main(["status"])
    assert (rc, [type(e) for e in swallowed]) == (130, [KeyboardInterrupt]), (rc, swallowed, capsys.readouterr().err)
