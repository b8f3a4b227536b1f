"""Each command's --help and its options' defaults, as they were before the flag tables left automation/flags.py:
the refactor that moves each command's flags into its own module must not change what a user sees."""

from __future__ import annotations

import argparse
import json

import pytest
from conftest import FIXTURES

from automation import cli
from workloads.config import RUNS_DIR_ENV

SNAPSHOT = FIXTURES / "cli_help_snapshot.json"


def _commands() -> dict[str, argparse.ArgumentParser]:
    return cli.build_parser()._subparsers._group_actions[0].choices  # noqa: SLF001


def _describe(p: argparse.ArgumentParser) -> dict:
    return {
        "help": p.format_help(),
        "defaults": {a.dest: repr(a.default) for a in p._actions if a.dest != "help"},  # noqa: SLF001
    }


def current() -> dict:
    return {name: _describe(p) for name, p in _commands().items()}


@pytest.mark.parametrize("command", list(json.loads(SNAPSHOT.read_text())))
def test_help_and_defaults_of_each_command_are_unchanged(monkeypatch, command):
    monkeypatch.setenv("COLUMNS", "120")
    monkeypatch.delenv(RUNS_DIR_ENV, raising=False)  # report's --runs-root default reads it
    expected = json.loads(SNAPSHOT.read_text())[command]
    assert _describe(_commands()[command]) == expected


if __name__ == "__main__":  # writes the snapshot of the code as it is
    import os

    os.environ["COLUMNS"] = "120"
    SNAPSHOT.write_text(json.dumps(current(), indent=1) + "\n")
