"""from_pulumi_config: the program reads every ray-efa-eks key the engine passes, so a key that no
declaration knows (a leftover or a typo) fails the program instead of being ignored."""

from __future__ import annotations

import contextvars

import pulumi
import pytest
from conftest import REPO

from infra.config import MOCK_DEPLOYER_CIDR, PROJECT, ConfigError, from_pulumi_config, stack_config_values
from infra.mock_render import RenderMocks


def _in_program(values: dict[str, str]):
    def run():
        pulumi.runtime.set_all_config(values, [])
        pulumi.runtime.set_mocks(RenderMocks(), project=PROJECT, stack="us-east-2", preview=False)
        return from_pulumi_config(REPO)

    return contextvars.Context().run(run)


def test_program_refuses_an_undeclared_key_with_the_close_match():
    values = {**stack_config_values("us-east-2", REPO), f"{PROJECT}:gpuNodeCont": "3"}
    with pytest.raises(ConfigError, match="gpuNodeCont: did you mean 'gpuNodeCount'"):
        _in_program(values)


def test_program_reads_the_train_block_from_json():
    values = {**stack_config_values("us-east-2", REPO), f"{PROJECT}:train": '{"steps": 5}'}
    got = _in_program(values).train
    assert got == {"steps": 5}, f"expected the block as JSON-decoded, got {got}"


def test_program_refuses_an_empty_api_allow_list_instead_of_opening_it():
    # What a plain `pulumi preview` passes for a shipped stack the driver has not filled: the key's default, [].
    values = {**stack_config_values("us-east-2", REPO), f"{PROJECT}:apiPublicAccessCidrs": "[]"}
    with pytest.raises(ConfigError, match=r"apiPublicAccessCidrs is empty .*python -m automation up --stack us-east-2"):
        _in_program(values)


def test_mocks_run_with_a_documentation_address_for_the_deployer():
    got = _in_program(stack_config_values("us-east-2", REPO)).cluster.public_access_cidrs
    assert got == (MOCK_DEPLOYER_CIDR,), f"expected the mock's TEST-NET-3 address, got {got}"
