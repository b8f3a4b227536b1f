""".ci/checks/line_budget.py over small trees written for each test: automation/ over its budget fails naming both
numbers, a tree at the budget passes, and every .py file below automation/ counts, in subfolders too."""

from __future__ import annotations

import pytest
from _ci_checks import loaded, written


@pytest.fixture(scope="module")
def check():
    yield from loaded("line_budget.py")


def tree(root, sizes: dict[str, int]):
    return written(root, {f"automation/{name}": "x = 1\n" * n for name, n in sizes.items()})


def test_a_driver_at_its_budget_passes(check, tmp_path, monkeypatch):
    monkeypatch.setattr(check, "BUDGET", 100)
    repo = tree(tmp_path, {"cli.py": 60, "hang.py": 20, "steps/gate.py": 20})
    assert check.problems(repo) == [], "100 lines against a budget of 100 is within it"


def test_a_driver_over_its_budget_fails_naming_both_numbers(check, tmp_path, monkeypatch):
    monkeypatch.setattr(check, "BUDGET", 100)
    repo = tree(tmp_path, {"cli.py": 50, "steps/verify.py": 11, "hang.py": 40})
    found = check.problems(repo)
    assert len(found) == 1 and "101 lines, over its budget of 100" in found[0], found


def test_files_outside_automation_and_not_python_do_not_count(check, tmp_path, monkeypatch):
    monkeypatch.setattr(check, "BUDGET", 100)
    repo = written(
        tree(tmp_path, {"cli.py": 100}), {"automation/notes.txt": "x\n" * 50, "workloads/train.py": "x = 1\n" * 50}
    )
    assert check.problems(repo) == [], "only automation/'s .py files count"
