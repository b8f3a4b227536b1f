"""The local target's pure parts: reading Ray's resources again when a just-started raylet drops the reader."""

from __future__ import annotations

import pytest

from automation.errors import DriverError
from automation.targets.local import read_resources

DROPPED = "cannot read the local Ray cluster's resources (rc 1): Failed to register worker to Raylet"


def reader(failures: int):
    """A stand-in for ray_resources that fails `failures` times, then answers; `calls` counts the calls."""
    calls = []

    def read(address: str) -> dict[str, float]:
        calls.append(address)
        if len(calls) <= failures:
            raise DriverError(DROPPED)
        return {"CPU": 2.0}

    return read, calls


def test_resources_are_read_again_after_a_dropped_registration():
    read, calls = reader(failures=2)
    got = read_resources("127.0.0.1:1", attempts=3, pause_s=0, read=read)
    assert (got, len(calls)) == ({"CPU": 2.0}, 3), f"expected CPU 2 on the third call, got {got} after {len(calls)}"


def test_resources_that_never_answer_fail_naming_the_attempts():
    read, calls = reader(failures=5)
    with pytest.raises(DriverError) as e:
        read_resources("127.0.0.1:1", attempts=3, pause_s=0, read=read)
    assert len(calls) == 3 and "tried 3 times" in str(e.value), f"got {len(calls)} calls: {e.value}"


def test_rays_uploading_package_line_stays_out_of_the_run_output(capsys):
    import logging

    from automation.targets.local import RAY_SDK_LOGGER, quiet_ray_sdk

    quiet_ray_sdk()
    logger = logging.getLogger(RAY_SDK_LOGGER)
    handler = logging.StreamHandler()  # on the logger itself: Ray's own loggers may not propagate to the root
    logger.addHandler(handler)
    try:
        logger.info("Uploading package gcs://_ray_pkg_0123.zip.")
        logger.warning("a warning still shows")
    finally:
        logger.removeHandler(handler)
    err = capsys.readouterr().err
    assert "Uploading package" not in err and "a warning still shows" in err, f"got {err!r}"


def test_local_dashboard_of_a_stopped_cluster_is_not_offered(capsys):
    # a dashboard process that is exiting still has its command line but no listener
    import argparse
    import socket

    from automation.commands.dashboard import run_local
    from automation.errors import DriverError

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"  # bound, never listening
        args = argparse.Namespace(json=False)
        with pytest.raises(DriverError) as err:
            run_local(args, None, find=lambda: [dead])
    assert "stops its Ray cluster" in str(err.value) and "report" in str(err.value), str(err.value)


def test_local_dashboard_that_answers_is_printed(capsys):
    import argparse
    import socket

    from automation.commands.dashboard import run_local
    from automation.ui import Ui

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        live = f"http://127.0.0.1:{s.getsockname()[1]}"
        rc = run_local(argparse.Namespace(json=False), Ui(), find=lambda: [live])
    assert rc == 0 and live in capsys.readouterr().out, f"expected {live} printed"
