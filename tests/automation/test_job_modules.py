"""torchao reaches a Ray worker as the cluster job ships it (automation/job_modules.py: the pinned wheel, fetched
and hash-checked into this user's cache, unpacked into `py_modules` folders), on a Ray whose interpreter is a
virtualenv, as the cluster image's /opt/venv is, and without the virtualenv clone Ray's `pip` field makes there
(ray 2.58 _private/runtime_env/virtualenv_utils.py `create_or_get_virtualenv`). A local Ray in a process of its
own, started by this venv's python (the project's venv, like CI's, is a virtualenv). Slow: it starts Ray and
imports torch in a worker; the first run fetches the 3.2 MB wheel with `pip download` into the cache."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import pytest

from automation.job_modules import job_modules
from workloads.config import TrainConfig

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
