"""`python -m automation clean`: deletes the local runs' directories under ./runs, newest kept, after a yes;
and the newest run it keeps is the one `report` and `status` name."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from automation import cli
from automation.errors import DriverError
from workloads.metrics import METRICS_FILE, RUN_MARKER_FILE, local_runs, mark_run_dir


@pytest.fixture
def runs(tmp_path, monkeypatch):
    """Three run directories under tmp_path/runs, r1 oldest, plus a file and a directory that are no run."""
    monkeypatch.chdir(tmp_path)
    root = tmp_path / "runs"
    for age, name in enumerate(("r3", "r2", "r1")):
        mark_run_dir(root / name, name)
        (root / name / "summary.json").write_text("{}")
        os.utime(root / name / RUN_MARKER_FILE, (1_000_000 - age * 100, 1_000_000 - age * 100))  # its start
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


def test_report_clean_and_status_agree_on_the_newest_run(runs, capsys):
    # r1 started first, but a report written into it since makes its directory the most recently changed
    (runs / "r1" / "report.html").write_text("<html>")
    (runs / "r3" / METRICS_FILE).write_text("")
    from automation.commands.report import newest_local_run

    reported = Path(newest_local_run(runs)).name
    cli.main(["status", "--json"])
    shown = json.loads(capsys.readouterr().out)["newest_run"]
    cli.main(["clean", "--keep", "1", "--yes"])
    kept = [p.name for p in local_runs(runs)]
    assert (reported, shown, kept) == ("r3", "r3", ["r3"]), f"report, status, clean: {reported}, {shown}, {kept}"


def test_report_names_a_newest_run_without_metrics_instead_of_an_older_one(runs):
    # r3 stopped before its first step; reporting r2 instead would show the wrong run's figures
    (runs / "r2" / METRICS_FILE).write_text("")
    from automation.commands.report import newest_local_run

    with pytest.raises(DriverError, match=r"newest run .*, r3, has no .*pass an older run: r2"):
        newest_local_run(runs)
