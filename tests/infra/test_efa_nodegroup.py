"""The GPU node group's scaling config and ignored properties (infra/efa_nodegroup.py ``driver_scaling``): the
live desired size the driver passes for one `up`, or none."""

from __future__ import annotations

import dataclasses

from conftest import quiet_stack

from infra.efa_nodegroup import driver_scaling


def gpu(node_count: int, live: int):
    return dataclasses.replace(quiet_stack("us-west-2").gpu_nodes, node_count=node_count, live_desired_size=live)


def test_without_a_live_size_the_desired_size_is_left_to_the_driver():
    scaling, ignored = driver_scaling(gpu(3, -1))
    assert (scaling["desired_size"], ignored) == (3, ["scalingConfig.desiredSize"]), (scaling, ignored)


def test_a_live_size_is_declared_and_nothing_is_ignored():
    assert driver_scaling(gpu(3, 0)) == ({"desired_size": 0, "min_size": 0, "max_size": 3}, [])


def test_a_live_size_above_a_lowered_node_count_is_held_to_the_new_maximum():
    assert driver_scaling(gpu(1, 2))[0]["desired_size"] == 1
