"""`destroy` and the repositories the stack's ECR pull-through cache created outside Pulumi (infra/image_cache.py):
listed with their size, deleted when the user agrees (or passes --yes), named in the kept-resources line when not,
and no repository outside the stack's prefix is touched.

The world is moto's ECR (moto 5.2.5 models repositories, images and DeleteRepository's force; it has no pull-through
cache rules, so the repositories the cache would have made are created directly, named `<prefix>/<upstream path>` as
the ECR user guide's pull-through-cache page describes). The stack is tests/support/_driver_helpers.py's FakeStack.
"""

from __future__ import annotations

import json

import _driver_helpers as helpers  # tests/support is on pytest's pythonpath
import boto3
import pytest
from _shared_env import MOTO_REGION

from automation.errors import DriverError
from automation.pipeline import RunState
from automation.steps.stack_steps import run_destroy
from automation.targets.aws import AwsDeps, AwsRun, AwsTarget
from infra.manifests import image_cache_prefix

CFG = helpers.stack_config()
PREFIX = image_cache_prefix(CFG.cluster.name, CFG.stack)
CACHED = f"{PREFIX}/deep-learning-containers/ray"  # the Ray image's path on public.ecr.aws under the prefix
LAYERS = (9_000_000_000, 4_000_000_000)  # about the ~13 GB of the DLC image (docs/cost-and-capacity.md)
# Beside the prefix, not under it: a repository of another stack whose prefix merely starts the same way, and one
# of nobody's stack.
OUTSIDE = (f"{PREFIX}-old/deep-learning-containers/ray", "team/app")


def put_image(ecr, repository: str, layers: tuple[int, ...]) -> None:
    """One image of `layers` bytes. ECR's imageSizeInBytes is the image's (compressed) size in the repository
    (botocore ecr 2015-09-21 ImageDetail); moto reports the manifest's config.size as it (moto/ecr/models.py
    get_image_size_in_bytes), so the config carries the layers' sum and both read the same number."""
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
        "config": {"mediaType": "application/vnd.docker.container.image.v1+json", "size": sum(layers)},
        "layers": [{"size": n, "digest": f"sha256:{i:064x}"} for i, n in enumerate(layers, 1)],
    }
    ecr.put_image(repositoryName=repository, imageManifest=json.dumps(manifest), imageTag="train-ml-cuda-v1.1.0")


@pytest.fixture
def ecr(moto_aws):
    client = boto3.client("ecr", region_name=MOTO_REGION)
    for name in (CACHED, *OUTSIDE):
        client.create_repository(repositoryName=name)
        put_image(client, name, LAYERS)
    return client


def destroy_with(answers: dict[str, bool], yes: bool = False) -> tuple[str, list[str]]:
    """run_destroy with the terminal answering each question by the first key it contains; its summary and the
    questions asked."""
    asked: list[str] = []

    def confirm(question: str) -> bool:
        asked.append(question)
        return next(v for k, v in answers.items() if k in question)

    deps = AwsDeps(
        client=lambda name: boto3.client(name, region_name=MOTO_REGION),
        stack=lambda: helpers.FakeStack(CFG.stack, changes={"delete": 42}),
        kube=helpers.no_kube,
        confirm=confirm,
    )
    return run_destroy(AwsTarget(AwsRun(CFG, "r1", yes=yes), deps), RunState()).summary, asked


def repositories(ecr) -> set[str]:
    return {r["repositoryName"] for r in ecr.describe_repositories()["repositories"]}


def test_destroy_asks_naming_each_cached_repository_with_its_size(ecr):
    _, asked = destroy_with({"destroy every": True, "image cache": False})
    assert any(f"{CACHED} (13.0 GB)" in q for q in asked), f"expected a question naming {CACHED} (13.0 GB): {asked}"


def test_yes_deletes_the_cached_repositories_and_nothing_outside_the_prefix(ecr):
    destroy_with({"destroy every": True, "image cache": True})
    left = repositories(ecr)
    assert left == set(OUTSIDE), f"expected only {OUTSIDE} left, got {left}"


def test_no_keeps_them_and_names_them_with_their_size_in_the_kept_line(ecr):
    summary, _ = destroy_with({"destroy every": True, "image cache": False})
    named = f"kept the image cache's ECR repositories {CACHED} (13.0 GB)"
    said = (CACHED in repositories(ecr), named in summary)
    assert said == (True, True), f"expected {CACHED} kept and named with its size, got {said}: {summary}"


def test_pass_yes_deletes_them_without_asking(ecr):
    summary, asked = destroy_with({}, yes=True)
    said = (asked, CACHED in repositories(ecr), f"deleted ECR repositories {CACHED} (13.0 GB)" in summary)
    assert said == ([], False, True), f"expected no question, {CACHED} deleted and said: {said}, {summary}"


def test_without_a_terminal_destroy_asks_nothing_and_deletes_nothing(ecr):
    def no_terminal(question: str) -> bool:  # automation/ui.py tty_confirm off a terminal
        raise DriverError(f"{question} — no terminal to ask on: pass --yes to go ahead", exit_code=2)

    deps = AwsDeps(
        client=lambda name: boto3.client(name, region_name=MOTO_REGION),
        stack=lambda: helpers.FakeStack(CFG.stack),
        kube=helpers.no_kube,
        confirm=no_terminal,
    )
    with pytest.raises(DriverError) as e:
        run_destroy(AwsTarget(AwsRun(CFG, "r1"), deps), RunState())
    said = (e.value.exit_code, repositories(ecr) == {CACHED, *OUTSIDE})
    assert said == (2, True), f"expected exit 2 and every repository kept, got {said}"


def test_a_stack_without_cached_repositories_asks_nothing_about_them(moto_aws):
    summary, asked = destroy_with({"destroy every": True})
    assert len(asked) == 1 and "ECR" not in summary, f"expected the destroy question alone: {asked}, {summary}"
