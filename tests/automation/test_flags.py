"""Every command refuses bad input offline: before its first AWS, Kubernetes, Pulumi or Ray call, with exit 2, one
line naming the input, no traceback, and no run folder left behind (issue 40, the fourth set's classes).

The walk covers every flag of every command `python -m automation --help` lists: a flag that takes a value gets a
bad one from BAD (a test fails when a command gains a flag BAD lacks), each command gets an unknown flag, and each
flag declared `not_in` a mode (automation/flags.py) is given in that mode (issue 45: never dropped). Each case
runs in-process through `automation.cli.main` with the outside world's constructors replaced by a tripwire that
raises: boto3's Session and client, the Pulumi stack, the Kubernetes client, ray.init and any child process. The
pulumi CLI is reported present, so its absence (exit 2 too) cannot hide a check that comes too late.
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import socket
from pathlib import Path
from unittest.mock import patch

import pytest

from automation import cli
from automation.flags import AWS, LOCAL, NOT_IN

REPO = Path(__file__).resolve().parents[2]
STACK = ("--stack", "us-west-2")  # Pulumi.us-west-2.yaml, the repository's stack


class ClientBuilt(BaseException):
    """Raised by a tripwire: not an Exception, so no handler of the code under test can swallow it."""


def _tripwire(what: str):
    def built(*args, **kwargs):
        raise ClientBuilt(what)

    return built


@contextlib.contextmanager
def offline():
    """The outside world's constructors raise ClientBuilt naming themselves."""
    wires = {
        "boto3.Session": "boto3.Session",
        "boto3.client": "boto3.client",
        "automation.targets.aws.select_stack": "the Pulumi stack",
        "automation.kube.KubeApi.__init__": "the Kubernetes client",
        "ray.init": "ray.init",
        "subprocess.Popen": "a child process",
    }
    with contextlib.ExitStack() as stack:
        for target, what in wires.items():
            stack.enter_context(patch(target, _tripwire(what)))
        stack.enter_context(patch("automation.targets.aws.shutil.which", lambda name: f"/usr/bin/{name}"))
        yield


def refused(capsys, argv: list[str]) -> str:
    """The one-line error of ``argv``, asserted: exit 2, no client built, no traceback."""
    code: int | str | None
    try:
        with offline():
            code = cli.main(argv)
    except SystemExit as e:  # argparse's own errors
        code = e.code
    except ClientBuilt as e:
        pytest.fail(f"{argv}: {e} was constructed before the input was refused")
    out, err = capsys.readouterr()
    assert "Traceback" not in err + out, f"{argv}: a traceback:\n{err}"
    lines = [line for line in err.splitlines() if "error:" in line]
    assert code == 2 and len(lines) == 1, f"{argv}: expected exit 2 and one error line, got {code}:\n{err}"
    return lines[0]


@pytest.fixture
def here(tmp_path, monkeypatch) -> Path:
    """A fresh working folder: whatever a refused command leaves in it shows."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    return cwd


def _existing_file(d: Path) -> str:
    f = d / "existing.txt"
    f.write_text("a file, not a folder\n")
    return str(f)


# A bad value for every flag that takes one (a callable gets the test's tmp folder). Each breaks one rule the
# command states in its --help or docs; the error must name the flag or the value.
BAD = {
    "--stack": lambda d: "Pulumi.us-west-2.yaml",  # the stack's file, not its name
    "--target": lambda d: "gcp",
    "--num-workers": lambda d: "0",
    "--kubeconfig": lambda d: str(d / "absent-kubeconfig"),
    "--run-id": lambda d: "../x",
    "--resume": lambda d: "a/b",
    "--steps": lambda d: "0",
    "--storage-path": lambda d: "s3://",
    "--capture": _existing_file,
    "--keep": lambda d: "-1",
    "--compare": lambda d: "../x",  # with --stack, copied into --runs-root/<run>: a path would write elsewhere
    "--out": _existing_file,
    "--runs-root": _existing_file,
    "--port": lambda d: "70000",
    "--worker": lambda d: "-1",
    "--gpu-nodes": lambda d: "-1",
    "--instance-type": lambda d: "g6.xlarge",  # in the catalog, without EFA
    "--count": lambda d: "0",
    "--regions": lambda d: "us-west-9",
    "--write-stack": lambda d: "Pulumi.east1.yaml",  # a file name for a stack name
    "--timeout": lambda d: "0",  # seconds: a job stopped before it starts
    "--hang-factor": lambda d: "1",  # K × the median: a step a little slower than the median would be a hang
    "--hang-floor": lambda d: "30",  # seconds: less than a checkpoint's save
    "--max-recoveries": lambda d: "-1",  # a count of resumed jobs
    "--recovery-minutes": lambda d: "0",  # minutes: a recovery that could never wait for a node
    "--max-mib": lambda d: "0",
    "--iters": lambda d: "0",
}
NO_VALUE = "store_true"  # flags without a value: their misuse is a combination, below
SKIPPED = {"--help", "--json", "--project-dir"}  # argparse's own, the output switch, a test-only hidden flag
BASE = {"scale": ["--gpu-nodes", "0"], "report": ["r1"]}  # what a command needs besides the flag under test


def _commands() -> dict[str, argparse.ArgumentParser]:
    actions = cli.build_parser()._actions  # noqa: SLF001
    return next(a for a in actions if isinstance(a, argparse._SubParsersAction)).choices  # noqa: SLF001


def _flags(command: str) -> list[tuple[str, bool]]:
    """(flag, takes a value) of each of ``command``'s optional arguments."""
    actions = _commands()[command]._actions  # noqa: SLF001
    return [(a.option_strings[-1], a.nargs != 0) for a in actions if a.option_strings]


WALK = [
    (command, flag) for command in _commands() for flag, valued in _flags(command) if valued and flag not in SKIPPED
]


def test_every_valued_flag_of_every_command_has_a_bad_value_in_the_walk():
    missing = sorted({flag for _, flag in WALK} - set(BAD))
    assert not missing, f"flags without a bad value in BAD (add one, or the walk skips them): {missing}"


@pytest.mark.parametrize(("command", "flag"), WALK, ids=[f"{c}{f}" for c, f in WALK])
def test_a_bad_value_of_any_flag_is_refused_offline_naming_it(capsys, here, tmp_path, command, flag):
    value = BAD[flag](tmp_path)
    takes_stack = any(f == "--stack" for f, _ in _flags(command))
    context = list(STACK) if takes_stack and flag not in ("--stack", "--target") else []
    line = refused(capsys, [command, *BASE.get(command, []), *context, flag, value])
    assert flag.lstrip("-") in line or value in line, f"{command} {flag} {value!r}: the error names neither: {line}"
    assert not any(here.iterdir()), f"{command} {flag}: the refused command left {sorted(here.iterdir())}"


@pytest.mark.parametrize("command", list(_commands()))
def test_an_unknown_flag_names_the_flags_the_command_takes(capsys, here, command):
    line = refused(capsys, [command, *BASE.get(command, []), "--no-such-flag"])
    assert "--no-such-flag" in line and f"`{command}` takes" in line, line


# ---- a flag in a mode it has no meaning in: refused, never dropped ------------------------------------------
# The flags that choose each mode a flag is declared `not_in` (a test fails when a mode lacks them).
CHOOSE = {
    LOCAL.name: [],
    AWS.name: list(STACK),
    "--plan": [*STACK, "--plan"],
    "--detach": [*STACK, "--detach"],
    "--resume": [*STACK, "--resume", "r0"],
    "--collectives": ["--collectives"],
    "without --collectives": list(STACK),
    "--gpu-nodes 0": [*STACK, "--gpu-nodes", "0"],
    "--cleanup": ["--cleanup"],
    "without --probe": [],
}
# A good value of each valued flag so declared, away from its default: only the mode can refuse it.
GOOD = {
    "--kubeconfig": lambda d: str(d / "kubeconfig"),
    "--run-id": lambda d: "r1",
    "--resume": lambda d: "r1",
    "--steps": lambda d: "30",
    "--num-workers": lambda d: "8",
    "--storage-path": lambda d: str(d / "storage"),
    "--capture": lambda d: str(d / "capture"),
    "--timeout": lambda d: "60",
    "--hang-factor": lambda d: "20",
    "--hang-floor": lambda d: "900",
    "--max-recoveries": lambda d: "3",
    "--recovery-minutes": lambda d: "30",
    "--max-mib": lambda d: "4",
    "--iters": lambda d: "3",
    "--port": lambda d: "8000",
    "--instance-type": lambda d: "p5.48xlarge",
    "--count": lambda d: "3",
    "--write-stack": lambda d: "fresh",
}


def _declared(command: str) -> list[tuple[str, bool, str]]:
    """(flag, takes a value, mode) of each mode each of ``command``'s flags is declared not to apply in."""
    actions = _commands()[command]._actions  # noqa: SLF001
    return [(a.option_strings[0], a.nargs != 0, mode.name) for a in actions for mode, _ in NOT_IN.get(a, ())]


OUT_OF_MODE = [(command, *case) for command in _commands() for case in _declared(command)]


def test_every_declared_mode_and_flag_has_what_the_walk_gives_it():
    modes = {mode for *_, mode in OUT_OF_MODE} - set(CHOOSE)
    flags = {flag for _, flag, valued, _ in OUT_OF_MODE if valued} - set(GOOD)
    assert not modes | flags, f"add to CHOOSE the flags that choose these modes, to GOOD a value: {modes | flags}"


@pytest.mark.parametrize(
    ("command", "flag", "valued", "mode"), OUT_OF_MODE, ids=[f"{c}{f}-in-{m}" for c, f, _, m in OUT_OF_MODE]
)
def test_a_flag_given_in_a_mode_it_does_not_apply_to_is_refused_naming_both(
    capsys, here, tmp_path, command, flag, valued, mode
):
    given = [flag, GOOD[flag](tmp_path)] if valued else [flag]
    line = refused(capsys, [command, *BASE.get(command, []), *CHOOSE[mode], *given])
    assert f"{flag} does not apply to {command} {mode} (" in line, f"{command} {flag} in {mode}: {line}"
    assert not any(here.iterdir()), f"{command} {flag}: the refused command left {sorted(here.iterdir())}"


def test_a_flag_whose_help_names_one_target_is_declared_not_in_the_other():
    tag = {LOCAL.name: "aws:", AWS.name: "local:"}  # refused on the local target: a flag for aws, and back
    for command, parser in _commands().items():
        for a in (a for a in parser._actions if a.option_strings):  # noqa: SLF001
            said = next((t for t in ("aws:", "local:") if (a.help or "").startswith(t)), None)
            declared = next((tag[m.name] for m, _ in NOT_IN.get(a, ()) if m.name in tag), None)
            assert said == declared, f"{command} {a.option_strings[0]}: help says {said}, declared for {declared}"


# ---- the fourth set's classes, one case each beyond the walk ------------------------------------------------
@pytest.fixture
def project(tmp_path) -> Path:
    """A copy of the project's Pulumi.yaml and program, with the repository's us-west-2 stack."""
    d = tmp_path / "project"
    d.mkdir()
    for name in ("Pulumi.yaml", "__main__.py", "Pulumi.us-west-2.yaml"):
        shutil.copy(REPO / name, d / name)
    return d


def test_a_stack_file_that_cannot_be_parsed_is_named_by_a_command_reading_every_stack(capsys, here, project):
    (project / "Pulumi.broken.yaml").write_text("config: [unclosed\n  - : :\n")
    line = refused(capsys, ["capacity", "--project-dir", str(project)])
    assert "Pulumi.broken.yaml" in line and "--regions" in line, line


@pytest.mark.parametrize("command", ["render", "preflight", "status"])
@pytest.mark.parametrize("region", ["us-east-1", "us-west-1"])  # another coast, and the neighbour one digit off
def test_a_stack_named_after_another_region_is_refused(capsys, here, project, command, region):
    (project / "Pulumi.us-west-2.yaml").write_text(
        f"config:\n  aws:region: {region}\n  ray-efa-eks:gpuAvailabilityZone: {region}a\n"
        f"  ray-efa-eks:availabilityZones: [{region}a, {region}b]\n"
    )
    line = refused(capsys, [command, *STACK, "--project-dir", str(project)])
    assert "named after region us-west-2" in line and f"'{region}'" in line, line


@pytest.mark.parametrize(
    ("written", "meant"),
    [
        ("ray-efa-eks:region: us-west-2", "'aws:region'"),  # near 'rayVersion' in its own namespace
        ("ray-efa-eks:profile: dev", "'aws:profile'"),
        ("aws:gpuNodeCount: 2", "'ray-efa-eks:gpuNodeCount'"),
    ],
)
def test_a_key_in_the_wrong_namespace_is_pointed_to_the_right_one(capsys, here, project, written, meant):
    (project / "Pulumi.us-west-2.yaml").write_text(
        f"config:\n  aws:region: us-west-2\n  ray-efa-eks:gpuAvailabilityZone: us-west-2a\n  {written}\n"
    )
    line = refused(capsys, ["render", *STACK, "--project-dir", str(project)])
    assert f"did you mean {meant}?" in line, line


@pytest.mark.parametrize("given", ["./Pulumi.us-west-2.yaml", "us-west-2.yaml", "us-west-2.yml"])
def test_a_stack_given_as_its_file_is_told_its_name(capsys, here, given):
    line = refused(capsys, ["preflight", "--stack", given])
    assert "pass --stack us-west-2" in line, line


def test_a_stack_given_as_a_path_is_refused(capsys, here):
    line = refused(capsys, ["status", "--stack", "stacks/us-west-2"])
    assert "is a path, not a stack's name" in line, line


def test_a_port_in_use_is_refused_before_the_stack_is_opened(capsys, here):
    with socket.create_server(("127.0.0.1", 0)) as busy:
        port = busy.getsockname()[1]
        line = refused(capsys, ["dashboard", *STACK, "--port", str(port)])
    assert f"--port {port}" in line and "pick another port" in line, line


def test_waiting_for_zero_nodes_is_refused_not_ignored(capsys, here):
    line = refused(capsys, ["scale", *STACK, "--gpu-nodes", "0", "--wait"])
    assert "--wait" in line and "--gpu-nodes 0" in line, line


def test_probe_without_asking_needs_probe(capsys, here):
    line = refused(capsys, ["capacity", "--yes"])
    assert "--yes" in line and "--probe" in line, line


def test_a_kubeconfig_that_is_a_folder_is_refused_offline(capsys, here, tmp_path):
    line = refused(capsys, ["verify", *STACK, "--kubeconfig", str(tmp_path)])
    assert "is a folder" in line, line


def test_a_kubeconfig_without_clusters_is_refused_offline(capsys, here, tmp_path):
    kc = tmp_path / "kc.yaml"
    kc.write_text("apiVersion: v1\nkind: Config\nclusters: []\n")
    line = refused(capsys, ["logs", *STACK, "--kubeconfig", str(kc)])
    assert "has no clusters" in line, line


def test_a_bench_job_that_fits_on_one_node_is_refused_offline(capsys, here):
    # Pulumi.us-west-2.yaml: g6.12xlarge (4 GPUs per node, infra/data/instance_types.json), one GPU per worker
    line = refused(capsys, ["bench", *STACK, "--num-workers", "4"])
    assert "--num-workers 4" in line and "fit on one 4-GPU node" in line, line


def test_a_bench_job_of_eight_workers_crosses_nodes_and_is_not_refused_for_it(here):
    # the other side of the limit: 8 one-GPU workers (dividing the stack's global batch of 64) cannot fit on one
    # 4-GPU node, so nothing refuses them offline and the next thing bench does is build its clients
    with offline(), pytest.raises(ClientBuilt):
        cli.main(["bench", *STACK, "--num-workers", "8"])


def test_a_percent_encoded_file_uri_is_accepted_as_the_path_it_encodes(tmp_path):
    from workloads.data import list_data

    corpus = tmp_path / "my corpus"
    corpus.mkdir()
    (corpus / "a.txt").write_text("one document\n")
    space = list_data(f"file://{tmp_path.as_posix().replace(' ', '%20')}/my%20corpus").space()
    assert space.uris == (str(corpus / "a.txt"),), f"expected the folder 'my corpus' read, got {space.uris}"


# ---- the NCCL check judges one run, never several together ------------------------------------------------------
NCCL_FIXTURES = REPO / "tests" / "fixtures" / "nccl"


def _per_rank_logs(folder: Path, run: str, fixture: str) -> None:
    """A run's per-rank log as the training module names it (workloads/loop.py, route_nccl_log)."""
    (folder / run / "nccl").mkdir(parents=True)
    shutil.copy(NCCL_FIXTURES / fixture, folder / run / "nccl" / f"nccl.{run}.rank0.host-a.100.log")


def test_the_nccl_check_refuses_a_folder_of_two_runs_without_a_run_id(tmp_path, capsys):
    from workloads.nccl_check.__main__ import main

    # run-a fell back to sockets; run-b used EFA: together, run-b's lines would pass run-a
    _per_rank_logs(tmp_path, "run-a", "socket_cluster_nccl952.log")
    _per_rank_logs(tmp_path, "run-b", "efa_unprefixed_ofi1.20.log")
    code = main([str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 3 and "2 runs (run-a, run-b)" in out and "--run-id" in out, f"exit {code}:\n{out}"


def test_the_nccl_check_judges_the_one_run_a_folder_holds_and_names_it(tmp_path, capsys):
    from workloads.nccl_check.__main__ import main

    _per_rank_logs(tmp_path, "run-b", "efa_unprefixed_ofi1.20.log")
    code = main([str(tmp_path), "--json"])
    out = capsys.readouterr().out
    assert code == 0 and '"run_id": "run-b"' in out, f"exit {code}:\n{out[:400]}"


def test_the_nccl_check_judges_one_run_of_several_when_given_its_id(tmp_path, capsys):
    from workloads.nccl_check.__main__ import main

    _per_rank_logs(tmp_path, "run-a", "socket_cluster_nccl952.log")
    _per_rank_logs(tmp_path, "run-b", "efa_unprefixed_ofi1.20.log")
    code = main([str(tmp_path), "--run-id", "run-a"])
    out = capsys.readouterr().out
    assert code == 1, f"run-a fell back to sockets: expected fail (exit 1), got {code}:\n{out}"


def test_a_capture_folder_under_tilde_is_the_home_folder(tmp_path, monkeypatch):
    from automation.flags import output_folder

    monkeypatch.setenv("HOME", str(tmp_path))
    assert output_folder("~/capture") == tmp_path / "capture", "'~' was not expanded to $HOME"


def test_a_tilde_path_that_is_a_file_is_refused_as_a_file(capsys, here, tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "notes.txt").write_text("a file\n")
    line = refused(capsys, ["status", *STACK, "--capture", "~/notes.txt"])
    assert "'~/notes.txt' is a file" in line, line


# ---- an S3 storage path and no AWS credentials (issue 44 item 8): one line naming the flag or key, before anything
# starts. No credentials as botocore looks for them (its credential chain: the environment, the shared files, a
# container or instance role, https://docs.aws.amazon.com/sdkref/latest/guide/standardized-credentials.html):
# empty files, no variables, and instance metadata switched off (AWS_EC2_METADATA_DISABLED, botocore's
# InstanceMetadataFetcher), so nothing is asked of the network, which a tripwire on connect() proves.
S3_PATH = "s3://ray-efa-eks-runs/prefix"
AWS_CREDENTIAL_VARS = (
    *("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_DEFAULT_PROFILE"),
    *("AWS_ROLE_ARN", "AWS_WEB_IDENTITY_TOKEN_FILE"),
    *("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI"),
)


@pytest.fixture
def no_credentials(tmp_path, monkeypatch):
    for var in AWS_CREDENTIAL_VARS:
        monkeypatch.delenv(var, raising=False)
    for var, name in (("AWS_CONFIG_FILE", "config"), ("AWS_SHARED_CREDENTIALS_FILE", "credentials")):
        (tmp_path / name).write_text("")
        monkeypatch.setenv(var, str(tmp_path / name))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setattr(socket.socket, "connect", _tripwire("a network connection"))


@pytest.fixture
def stack_writing_to_s3(project) -> Path:
    with (project / "Pulumi.us-west-2.yaml").open("a") as f:
        f.write(f"  ray-efa-eks:train:\n    storage_path: {S3_PATH}\n")
    return project


LOCAL_WRITERS = ["run", "drill"]  # --storage-path: the local Ray Train workers write there with these credentials
STACK_WRITERS = ["run", "train", "bench", "drill"]  # the stack's train.storage_path: the job writes there


@pytest.mark.parametrize("command", LOCAL_WRITERS)
def test_a_local_s3_storage_path_without_credentials_is_one_line_naming_the_flag(capsys, here, no_credentials, command):
    line = refused(capsys, [command, "--storage-path", S3_PATH])
    assert f"--storage-path {S3_PATH}" in line and "aws configure" in line, line


@pytest.mark.parametrize("command", STACK_WRITERS)
def test_a_stacks_s3_storage_path_without_credentials_is_one_line_naming_the_key(
    capsys, here, no_credentials, stack_writing_to_s3, command
):
    line = refused(capsys, [command, *STACK, "--project-dir", str(stack_writing_to_s3)])
    assert f"ray-efa-eks:train.storage_path {S3_PATH}" in line and "aws configure" in line, line
