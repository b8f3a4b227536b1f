"""A `capacity --probe` process to be killed: it probes one AZ of a FileWorld (argv[1]) and, once EC2 has made the
reservation and before the probe cancels it, writes argv[2] and sleeps, so the test can SIGKILL it right there.

Run as `python tests/support/_killed_probe.py STATE READY` from the repository root.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

# This checkout's packages and the stand-in beside this file, ahead of any installed copy.
HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parents[1])]

from _reservations_world import FileWorld  # noqa: E402

from automation.capacity_finder import Zone  # noqa: E402
from automation.capacity_probe import probe  # noqa: E402


def main(state: str, ready: str) -> None:
    def say(line: str) -> None:
        # capacity_probe.probe says "... created" after EC2 answered the create and before it cancels.
        if " created" in line:
            Path(ready).write_text(line)
            time.sleep(600)

    zone = Zone("us-west-2", "us-west-2a", True, efa=True, vcpus_needed=96, vcpus_free=1000)
    assert Path(probe.__code__.co_filename).is_relative_to(HERE.parents[1]), "not this checkout's capacity_probe"
    probe([zone], FileWorld(Path(state)).client, "g6.12xlarge", 2, say=say)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
