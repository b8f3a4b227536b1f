""".ci/checks/contract_imports.py over small trees written for each test: a product package that imports
bench/ fails, as does a contract module that imports more than the standard library; a tree that keeps
both rules passes."""

from __future__ import annotations

import pytest
from _ci_checks import loaded, written

CONTRACT = ("workloads.config",)


@pytest.fixture(scope="module")
def check():
    yield from loaded("contract_imports.py")


def tree(root, files: dict[str, str]):
    return written(root, {"workloads/__init__.py": "", "workloads/config.py": "import json\n", **files})


def test_a_tree_that_keeps_the_rules_passes(check, tmp_path):
    files = {"automation/cli.py": "from workloads.config import X\n", "bench/x.py": "import automation\n"}
    repo = tree(tmp_path, files)
    assert check.problems(repo, CONTRACT) == [], "expected no problem: bench may import the product, not the reverse"


def test_a_product_module_that_imports_bench_fails(check, tmp_path):
    repo = tree(tmp_path, {"automation/steps/gate.py": "def f():\n    from bench import throughput_model\n"})
    found = check.problems(repo, CONTRACT)
    assert found == ["automation/steps/gate.py:2 imports bench: a product package never imports bench/"], found


def test_a_contract_module_that_imports_a_third_party_package_fails(check, tmp_path):
    repo = tree(tmp_path, {"workloads/config.py": "import torch\n"})
    found = check.problems(repo, CONTRACT)
    assert found == ["workloads/config.py:1 imports torch: a contract module takes the stdlib only"], found
