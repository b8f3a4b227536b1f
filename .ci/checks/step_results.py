"""No step result is looked up by a step's name: the steps, the console and the report read the run's typed
state by attribute (automation/pipeline.py, RunState), never `prior.get("step")`, `result.result("step")` or a
result's data recovered with `isinstance`."""

from __future__ import annotations

import re
import sys

from _repo import REPO, finish

BY_NAME = re.compile(r"""prior\.get\(|\.result\(["']|isinstance\([^)]*\.data\b""")


def problems() -> list[str]:
    out = []
    for path in sorted((REPO / "automation").rglob("*.py")):
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if BY_NAME.search(line):
                out.append(f"{path.relative_to(REPO)}:{n} looks a step result up by name: read RunState's attribute")
    return out


if __name__ == "__main__":
    sys.exit(finish("step results", problems()))
