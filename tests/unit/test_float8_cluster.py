"""`--float8` on the cluster: the Ray job installs the torchao that pyproject's `gpu` extra pins, and only then."""

from __future__ import annotations

import dataclasses
import json
import tomllib

import pytest
from conftest import REPO, quiet_stack

from automation.job import resolve_cluster_job
from automation.ray_head import submit_command
from workloads.config import TORCHAO_PIN


def runtime_env(cmd: list[str]) -> dict:
    return json.loads(cmd[cmd.index("--runtime-env-json") + 1])


def default_job():
    return resolve_cluster_job(quiet_stack("us-west-2"), "r1").config


def test_pyproject_gpu_extra_pins_the_torchao_the_cluster_job_installs():
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert extras["gpu"] == [TORCHAO_PIN], f"pyproject's gpu extra {extras['gpu']} differs from {TORCHAO_PIN!r}"


@pytest.mark.parametrize("recipe", ["tensorwise", "rowwise"])
def test_float8_job_installs_the_pinned_torchao_through_its_runtime_env(recipe):
    job = dataclasses.replace(default_job(), float8=recipe)
    env = runtime_env(submit_command(job, "/src", {"NCCL_DEBUG": "INFO"}))
    assert env.get("pip") == [TORCHAO_PIN], f"expected pip [{TORCHAO_PIN!r}] for --float8 {recipe}, got {env}"


def test_float8_job_keeps_its_env_vars_beside_the_packages():
    job = dataclasses.replace(default_job(), float8="tensorwise")
    env = runtime_env(submit_command(job, "/src", {"NCCL_DEBUG": "INFO"}))
    assert env["env_vars"] == {"NCCL_DEBUG": "INFO"}, f"got {env}"


def test_default_cluster_job_installs_nothing():
    # float8 stays off on the cluster until it wins there (issue 37): its runtime env carries no pip field.
    env = runtime_env(submit_command(default_job(), "/src"))
    assert "pip" not in env, f"the default cluster job should install no package, got {env}"
