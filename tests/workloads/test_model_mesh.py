"""--mesh: the device-mesh shape FSDP2 shards over, and the refusal of a shard size that does not divide."""

from __future__ import annotations

import pytest

from workloads.config import ConfigError, TrainConfig, validate
from workloads.model import mesh_shape


def test_fsdp_shards_over_every_rank():
    assert mesh_shape("fsdp", 8, 0, 4) == (8,), "expected one dimension of all 8 ranks"


def test_hsdp_shards_inside_a_node_and_replicates_across_nodes():
    got = mesh_shape("hsdp", 8, 0, 4)
    assert got == (2, 4), f"expected (replicas, shard) = (2, 4) on 2 nodes of 4, got {got}"


def test_hsdp_shard_size_overrides_the_node():
    got = mesh_shape("hsdp", 4, 2, 4)
    assert got == (2, 2), f"expected (2, 2) with --shard-size 2 on 4 ranks, got {got}"


def test_hsdp_shard_size_that_does_not_divide_the_world_is_refused_by_flag():
    with pytest.raises(ConfigError, match=r"--shard-size 3 does not divide 8 workers"):
        mesh_shape("hsdp", 8, 3, 4)


def test_validate_refuses_a_shard_size_that_does_not_divide_the_workers():
    cfg = TrainConfig(preset="tiny", mesh="hsdp", shard_size=3, num_workers=4)
    with pytest.raises(ConfigError, match=r"--shard-size 3 does not divide --num-workers 4"):
        validate(cfg)


def test_validate_refuses_an_unknown_mesh_by_flag():
    with pytest.raises(ConfigError, match=r"--mesh 'ddp' is unknown: choose one of fsdp, hsdp"):
        validate(TrainConfig(preset="tiny", mesh="ddp"))
