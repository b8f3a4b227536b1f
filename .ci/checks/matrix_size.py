"""The bad-input matrix (tests/integration/test_bad_input_matrix.py) keeps at least 60 cases over the
entry points (the driver, the trainer, the NCCL check, the policy pack) and the Pulumi program's render,
so a refactor that drops cases is seen."""

from __future__ import annotations

import importlib.util
import sys

from _repo import REPO, finish

MIN_CASES = 60
ENTRIES = {"automation", "train", "nccl", "policy"}


def problems() -> list[str]:
    sys.path.insert(0, str(REPO))
    path = REPO / "tests" / "integration" / "test_bad_input_matrix.py"
    spec = importlib.util.spec_from_file_location("bad_input_matrix", path)
    matrix = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = matrix  # dataclasses look their module up there
    spec.loader.exec_module(matrix)
    cases = matrix.CASES.values()
    kinds = {c.entry.removesuffix("-proc") for c in cases}
    renders = [c for c in cases if c.argv[:1] == ("render",)]
    out = []
    if len(cases) < MIN_CASES:
        out.append(f"expected at least {MIN_CASES} cases, got {len(cases)}")
    if not ENTRIES <= kinds:
        out.append(f"expected cases over each entry point of {sorted(ENTRIES)}, got {sorted(kinds)}")
    if not renders:
        out.append("expected at least one case of `automation render` (the Pulumi program), got none")
    return out


if __name__ == "__main__":
    sys.exit(finish(f"bad-input matrix size (at least {MIN_CASES} cases)", problems()))
