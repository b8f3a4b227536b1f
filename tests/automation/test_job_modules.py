"""torchao reaches a Ray worker as the cluster job ships it (automation/job_modules.py: the pinned wheel, fetched
and hash-checked into this user's cache, unpacked into `py_modules` folders), on a Ray whose interpreter is a
virtualenv, as the cluster image's /opt/venv is, and without the virtualenv clone Ray's `pip` field makes there
(ray 2.58 _private/runtime_env/virtualenv_utils.py `create_or_get_virtualenv`). A local Ray in a process of its
own, started by this venv's python (the project's venv, like CI's, is a virtualenv). Slow: it starts Ray and
imports torch in a worker; the first run fetches the 3.2 MB wheel with `pip download` into the cache."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import io
import json
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import REPO, quiet_stack

from automation.errors import DriverError
from automation.job import CLUSTER_ROOT, resolve_cluster_job
from automation.job_modules import TORCHAO_WHEEL, Wheel, fetch, job_modules, unpack
from automation.kube import ExecResult
from automation.ray_head import HeadJobs
from workloads.config import TORCHAO_PIN, TrainConfig

# Runs in its own process: ray.init with the job's py_modules, one task that imports torchao, then what the
# session's runtime_resources folder holds (Ray's per-node cache of runtime envs: pip/, uv/, py_modules_files/).
SCRIPT = """
import json, os, sys
import ray
ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False, runtime_env={"py_modules": sys.argv[1:]})

@ray.remote
def probe():
    import torchao
    return {"version": torchao.__version__, "file": torchao.__file__, "venv": sys.prefix != sys.base_prefix}

seen = ray.get(probe.remote())
root = os.path.join(ray._private.worker._global_node.get_session_dir_path(), "runtime_resources")
seen["resources"] = sorted(os.path.relpath(os.path.join(d, n), root) for d, ns, _ in os.walk(root) for n in ns)
ray.shutdown()
print("PROBE " + json.dumps(seen))
"""


@pytest.fixture(scope="module")
def probe() -> dict:
    folders = job_modules(dataclasses.replace(TrainConfig(use_gpu=True), float8="tensorwise"))
    run = subprocess.run(
        [sys.executable, "-c", SCRIPT, *map(str, folders)], capture_output=True, text=True, timeout=300
    )
    line = next((x for x in run.stdout.splitlines() if x.startswith("PROBE ")), None)
    assert line, f"the Ray job printed no probe (rc {run.returncode}): {run.stderr[-2000:]}"
    return json.loads(line[len("PROBE ") :])


@pytest.mark.slow
def test_the_pinned_torchao_imports_in_a_worker_of_a_virtualenv_ray(probe):
    got = (probe["venv"], probe["version"], "py_modules_files" in probe["file"])
    assert got == (True, "0.17.0", True), f"expected torchao 0.17.0 from py_modules in a virtualenv worker: {probe}"


@pytest.mark.slow
def test_no_virtualenv_is_cloned_for_the_job(probe):
    # Ray's agent makes each plugin's folder empty at start; a `pip` or `uv` env fills <plugin>/<hash>/virtualenv.
    cloned = [p for p in probe["resources"] if "virtualenv" in p.split("/") or p.startswith(("pip/", "uv/"))]
    assert probe["resources"] and not cloned, f"expected nothing under pip/ or uv/, got {cloned or probe}"


# ---- `--float8` on the cluster: the driver fetches the pinned torchao wheel once (hash-checked, into this user's
# cache),
# unpacks torchao and its .dist-info, and ships them as the job's Ray `py_modules` folders, never through Ray's `pip`
# field (which clones the image's /opt/venv virtualenv on each node: automation/job_modules.py says where in Ray).

NAME = "torchao-0.17.0-cp310-abi3-manylinux_2_24_x86_64.manylinux_2_28_x86_64.whl"


def stand_in_wheel(path: Path) -> Path:
    """A wheel laid out as PEP 427 says and as torchao 0.17.0's is (its top level: torchao/, test/ and
    torchao-0.17.0.dist-info/), with a one-line package instead of torchao's code."""
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("torchao/__init__.py", "__version__ = '0.17.0'\n")
        z.writestr("torchao/float8/__init__.py", "")
        z.writestr("test/__init__.py", "")
        z.writestr("torchao-0.17.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: torchao\nVersion: 0.17.0\n")
        z.writestr("torchao-0.17.0.dist-info/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: false\n")
    return path


class Index:
    """`pip download` against an index serving ``body`` as any wheel asked for, counting the downloads."""

    def __init__(self, body: bytes):
        self.body, self.calls = body, 0

    def __call__(self, wheel, dest):
        self.calls += 1
        (dest / wheel.filename).write_bytes(self.body)


@pytest.fixture
def wheel_bytes(tmp_path) -> bytes:
    return stand_in_wheel(tmp_path / NAME).read_bytes()


def default_job():
    return resolve_cluster_job(quiet_stack("us-west-2"), "r1").config


def test_pyproject_gpu_extra_pins_the_torchao_the_cluster_job_ships():
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert extras["gpu"] == [TORCHAO_PIN], f"pyproject's gpu extra {extras['gpu']} differs from {TORCHAO_PIN!r}"
    assert TORCHAO_WHEEL.pin == TORCHAO_PIN, f"the shipped wheel {TORCHAO_WHEEL.filename} is not {TORCHAO_PIN}"


def test_a_wheel_whose_sha256_differs_is_refused_naming_the_bf16_key(tmp_path, wheel_bytes):
    wheel = Wheel(NAME, sha256="0" * 64)
    with pytest.raises(DriverError) as e:
        fetch(wheel, tmp_path / "cache", Index(wheel_bytes))
    left = list((tmp_path / "cache" / "wheels").iterdir())
    assert "expected " + "0" * 64 in str(e.value) and "float8: off" in str(e.value) and not left, f"{e.value}; {left}"


def test_a_cached_wheel_is_not_downloaded_again(tmp_path, wheel_bytes):
    wheel = Wheel(NAME, sha256=hashlib.sha256(wheel_bytes).hexdigest())
    index = Index(wheel_bytes)
    first, second = fetch(wheel, tmp_path, index), fetch(wheel, tmp_path, index)
    assert (first == second, index.calls) == (True, 1), f"expected one download into the cache, got {index.calls}"


def test_unpacking_keeps_the_package_and_its_dist_info_not_its_tests(tmp_path):
    folders = unpack(stand_in_wheel(tmp_path / NAME), tmp_path / "out", "torchao")
    got = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert [f.name for f in folders] == got == ["torchao", "torchao-0.17.0.dist-info"], f"got {got}"


def test_a_bf16_job_fetches_and_ships_nothing(tmp_path):
    job = dataclasses.replace(default_job(), float8="off")
    assert job_modules(job, tmp_path) == [] and not list(tmp_path.iterdir()), "a bf16 job needs no torchao"


def submitted(tmp_path) -> tuple[dict, dict[str, list[str]]]:
    """Submit the default (float8) job with torchao's two folders through HeadJobs over a scripted exec: the
    runtime env of `ray job submit` and the top-level names of each upload, by destination."""
    folders = unpack(stand_in_wheel(tmp_path / NAME), tmp_path / "out", "torchao")
    calls: list[tuple[list[str], str | None]] = []

    def pod_exec(  # a PodExec (automation/kube.py)
        pod: str,
        namespace: str,
        command: list[str],
        *,
        stdin: str | None = None,
        on_line: Callable[[str], None] | None = None,
        timeout_s: float = 600,
    ) -> ExecResult:
        calls.append((command, stdin))
        submitted = command[:3] == ["ray", "job", "submit"]
        return ExecResult(0, "Job 'r1' submitted successfully\n" if submitted else "", "")

    HeadJobs(pod_exec, "head", "ray").submit(default_job(), {"NCCL_DEBUG": "INFO"}, "r1", folders)
    uploads = {}
    for cmd, stdin in calls:
        if stdin is not None:
            with tarfile.open(fileobj=io.BytesIO(base64.b64decode(stdin))) as tar:
                uploads[cmd[2].split()[2]] = sorted({n.split("/")[0] for n in tar.getnames()})
    submit = next(cmd for cmd, _ in calls if cmd[:3] == ["ray", "job", "submit"])
    return json.loads(submit[submit.index("--runtime-env-json") + 1]), uploads


def test_the_float8_job_ships_torchao_as_py_modules_folders_without_pip(tmp_path):
    env, _ = submitted(tmp_path)
    deps = f"{CLUSTER_ROOT}/deps/r1"
    expected = [f"{deps}/torchao", f"{deps}/torchao-0.17.0.dist-info"]
    assert (env.get("py_modules"), "pip" in env) == (expected, False), f"expected py_modules {expected}, got {env}"


def test_the_head_pod_receives_the_folders_its_py_modules_name(tmp_path):
    _, uploads = submitted(tmp_path)
    expected = {
        f"{CLUSTER_ROOT}/src/r1": ["workloads"],
        f"{CLUSTER_ROOT}/deps/r1": ["torchao", "torchao-0.17.0.dist-info"],
    }
    assert uploads == expected, f"expected the source and torchao's folders in the head pod, got {uploads}"
