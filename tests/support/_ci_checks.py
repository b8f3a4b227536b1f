"""A script of .ci/checks/ loaded as a module for its tests, as CI runs it (its sibling _repo.py importable)."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

CHECKS = Path(__file__).resolve().parents[2] / ".ci" / "checks"


def loaded(script: str) -> Iterator[ModuleType]:
    """Yield .ci/checks/<script> as a module; for a module-scoped fixture (`yield from loaded("x.py")`)."""
    sys.path.insert(0, str(CHECKS))  # the check imports its sibling _repo.py as CI runs it
    try:
        spec = importlib.util.spec_from_file_location(f"{Path(script).stem}_check", CHECKS / script)
        assert spec and spec.loader, f"no check {CHECKS / script}"
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.path.remove(str(CHECKS))


def written(root: Path, files: dict[str, str]) -> Path:
    """``root`` with each of ``files`` (its path under root: its text) written, folders made: a tree to check."""
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root
