"""`python -m automation clean`: deletes the local runs' directories under ./runs, newest kept, after a yes."""

from __future__ import annotations

import os

import pytest

from automation import cli
from workloads.metrics import mark_run_dir


@pytest.fixture
def runs(tmp_path, monkeypatch):
    """Three run directories under tmp_path/runs, r1 oldest, plus a file and a directory that are no run."""
    monkeypatch.chdir(tmp_path)
    root = tmp_path / "runs"
    for age, name in enumerate(("r3", "r2", "r1")):
        mark_run_dir(root / name, name)
        (root / name / "summary.json").write_text("{}")
        os.utime(root / name, (1_000_000 - age * 100, 1_000_000 - age * 100))
    (root / "notes.txt").write_text("mine")
    (root / ".cache").mkdir()
    return root


def left(root):
    return sorted(p.name for p in root.iterdir())


def test_clean_keeps_the_newest_runs_and_what_is_no_run(runs, capsys):
    rc = cli.main(["clean", "--keep", "1", "--yes"])
    assert (rc, left(runs)) == (0, [".cache", "notes.txt", "r3"]), f"got rc={rc}, left {left(runs)}"


def test_clean_without_yes_and_without_a_terminal_deletes_nothing(runs, capsys, monkeypatch):
    monkeypatch.setattr("sys.stdin.isatty", lambda: False)
    rc = cli.main(["clean"])
    err = " ".join(capsys.readouterr().err.split())
    assert (rc, left(runs)) == (2, [".cache", "notes.txt", "r1", "r2", "r3"]), f"got rc={rc}, left {left(runs)}"
    assert "pass --yes to go ahead" in err, err


def test_negative_keep_is_refused(runs, capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["clean", "--keep", "-1", "--yes"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "argument --keep: -1 is below 0" in err, f"got {e.value.code}: {err}"


def test_clean_leaves_a_folder_named_like_a_run_without_the_run_marker(runs, capsys):
    # a user's own folder under runs/ (a dataset, notes) once went with the runs
    (runs / "20261204-170212-fa9897").mkdir()
    (runs / "20261204-170212-fa9897" / "mine.txt").write_text("keep me")
    rc = cli.main(["clean", "--yes"])
    assert (rc, left(runs)) == (0, [".cache", "20261204-170212-fa9897", "notes.txt"]), f"got rc={rc}, left {left(runs)}"


def test_clean_lists_what_it_will_delete_before_asking(runs, capsys):
    asked = []

    def confirm(question):
        asked.append(capsys.readouterr().out)
        return False

    from automation.commands import clean

    args = cli.build_parser().parse_args(["clean", "--keep", "1"])
    with pytest.raises(Exception, match="not confirmed"):
        clean.run(args, _Ui(), confirm=confirm)
    assert asked and "r2, r1" in " ".join(asked[0].split()), f"expected r2, r1 listed before the question, got {asked}"
    assert left(runs) == [".cache", "notes.txt", "r1", "r2", "r3"], f"expected nothing deleted, left {left(runs)}"


class _Ui:
    def note(self, text):
        print(text)
