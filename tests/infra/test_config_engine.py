"""infra.config.from_pulumi_config: the Pulumi program's way in reads the stack, `aws:region` and every
`ray-efa-eks:*` key the engine hands it, and validates them as `load_stack` does.

In process, without a render: the engine's config is set with `pulumi.runtime.set_all_config` (the map the
language host fills from the stack), the stack's name with `pulumi.runtime.set_mocks`, each in a fresh
contextvars Context so nothing leaks to other tests (both live in context variables in the pulumi SDK,
pulumi/runtime/config.py and settings.py). Values are strings, as the engine passes them."""

from __future__ import annotations

import contextvars
import json
import warnings
from pathlib import Path

import pulumi
import pytest
from conftest import REPO

from infra.config import PROJECT, ConfigError, ConfigWarning, from_pulumi_config, validate
from infra.mock_render import RenderMocks

ADDRESS = '["203.0.113.7/32"]'  # TEST-NET-3 (RFC 5737)
BASE = {"aws:region": "us-west-2", f"{PROJECT}:apiPublicAccessCidrs": ADDRESS}


def in_program(values: dict[str, str], project_dir: Path | None = None, stack: str = "dev"):
    def run():
        pulumi.runtime.set_all_config(values, [])
        pulumi.runtime.set_mocks(RenderMocks(), project=PROJECT, stack=stack, preview=False)
        return from_pulumi_config(project_dir)

    return contextvars.Context().run(run)


def test_the_engines_values_become_the_config_load_stack_would_give():
    got = in_program({**BASE, f"{PROJECT}:gpuNodeCount": "3", f"{PROJECT}:clusterName": "train"})
    want = validate(
        {"gpuNodeCount": 3, "clusterName": "train", "apiPublicAccessCidrs": ["203.0.113.7/32"]},
        stack="dev",
        region="us-west-2",
    )
    assert got == want, f"expected stack dev in us-west-2 with 3 GPU nodes named train, got {got}"


def test_an_engine_without_aws_region_is_refused_naming_the_key():
    with pytest.raises(ConfigError, match="aws:region is not set for stack 'dev'"):
        in_program({f"{PROJECT}:apiPublicAccessCidrs": ADDRESS})


def test_a_key_no_declaration_knows_is_refused_with_its_close_match():
    with pytest.raises(ConfigError, match=f"unknown config key {PROJECT}:gpuNodeCont: did you mean 'gpuNodeCount'"):
        in_program({**BASE, f"{PROJECT}:gpuNodeCont": "3"})


def test_a_key_passed_only_through_pulumi_config_in_the_environment_is_refused_too(monkeypatch):
    # The language host may pass the config as the PULUMI_CONFIG environment variable (pulumi/runtime/config.py).
    monkeypatch.setenv("PULUMI_CONFIG", json.dumps({f"{PROJECT}:rayWorkerGpu": "4"}))
    with pytest.raises(ConfigError, match="rayWorkerGpu: did you mean 'rayWorkerGpus'"):
        in_program(BASE)


def test_a_doubtful_setting_is_kept_in_the_config_not_raised_as_a_python_warning():
    with warnings.catch_warnings(record=True) as raised:
        warnings.simplefilter("always")
        got = in_program({**BASE, f"{PROJECT}:gpuNodeCount": "1"})
    kinds = [w.category for w in raised if issubclass(w.category, ConfigWarning)]
    assert (kinds, any("prove EFA" in w for w in got.warnings)) == ([], True), (
        f"expected the one-node note in the config only, got warnings {kinds} and config notes {got.warnings}"
    )


def test_an_empty_allow_list_is_refused_naming_the_stack():
    with pytest.raises(ConfigError, match=r"apiPublicAccessCidrs is empty in stack dev: .* --stack dev"):
        in_program({**BASE, f"{PROJECT}:apiPublicAccessCidrs": "[]"})


def test_the_project_file_is_checked_when_its_folder_is_given(tmp_path):
    text = (REPO / "Pulumi.yaml").read_text()
    (tmp_path / "Pulumi.yaml").write_text(text.replace("\n  gpuNodeCount:", "\n  gpuNodes:", 1))
    with pytest.raises(ConfigError, match="Pulumi.yaml's config: block differs from the schema"):
        in_program(BASE, project_dir=tmp_path)


def test_without_a_folder_the_project_file_is_the_engines_business():
    got = in_program(BASE, project_dir=None)
    assert got.stack == "dev", f"expected stack dev, got {got.stack}"
