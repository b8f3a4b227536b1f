""".ci/checks/import_cycles.py over small package trees written for each test: it finds a cycle that an
import inside a function hides, one through a registry of module names (`importlib.import_module`),
and one through a package's __init__; it refuses a first-party import inside a function that its
allow-list does not name, and passes a tree whose imports point one way."""

from __future__ import annotations

import pytest
from _ci_checks import loaded, written


@pytest.fixture(scope="module")
def check():
    yield from loaded("import_cycles.py")


def test_a_tree_whose_imports_point_one_way_passes(check, tmp_path):
    repo = written(tmp_path, {"app/__init__.py": "", "app/a.py": "from app import b\n", "app/b.py": "import json\n"})
    assert check.problems(repo, ("app",), {}) == [], "expected no problem in a -> b"


def test_a_cycle_hidden_inside_a_function_is_found(check, tmp_path):
    repo = written(
        tmp_path,
        {"app/__init__.py": "", "app/a.py": "from app import b\n", "app/b.py": "def f():\n    from app import a\n"},
    )
    found = check.problems(repo, ("app",), {("app.b", "app.a"): "allowed, to see the cycle alone"})
    assert found == ["import cycle among app.a, app.b: app.a -> app.b; app.b -> app.a"], f"got {found}"


def test_a_first_party_import_inside_a_function_needs_an_allow_list_entry(check, tmp_path):
    repo = written(tmp_path, {"app/__init__.py": "", "app/a.py": "def f():\n    from app import b\n", "app/b.py": ""})
    found = check.problems(repo, ("app",), {})
    assert len(found) == 1 and found[0].startswith("app/a.py:2: app.a imports app.b inside a function"), found


def test_a_cycle_through_a_registry_of_module_names_is_found(check, tmp_path):
    files = {
        "app/__init__.py": "",
        "app/cli.py": 'import importlib\nCOMMANDS = {"x": "app.x"}\n',
        "app/x.py": "from app.cli import COMMANDS\n",
    }
    found = check.problems(written(tmp_path, files), ("app",), {})
    assert found == ["import cycle among app.cli, app.x: app.cli -> app.x; app.x -> app.cli"], f"got {found}"


def test_a_cycle_through_a_package_init_is_found(check, tmp_path):
    files = {
        "app/__init__.py": "",
        "app/steps/__init__.py": "from app.steps import one\n",
        "app/steps/one.py": "from app import target\n",
        "app/target.py": "from app.steps.helpers import X\n",
        "app/steps/helpers.py": "X = 1\n",
    }
    found = check.problems(written(tmp_path, files), ("app",), {})
    assert len(found) == 1 and "app.steps, app.steps.one, app.target" in found[0], f"got {found}"


def test_an_allow_list_entry_no_import_in_a_function_needs_is_reported(check, tmp_path):
    repo = written(tmp_path, {"app/__init__.py": "", "app/a.py": "from app import b\n", "app/b.py": ""})
    found = check.problems(repo, ("app",), {("app.a", "app.b"): "stale: a imports b at module level now"})
    assert found == ["ALLOWED_LOCAL names app.a -> app.b, which no longer imports it in a function: remove it"], found
