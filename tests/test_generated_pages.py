"""Generated pages checked against known-good generator output kept in tests/fixtures/generated/ (issue 48): each
generator, given a small fixed input, must reproduce the fixture byte for byte, so a bug regenerated into both a page
and today's generator still fails here. The real pages are then compared with today's generator (docs/configuration.md
in test_config.py, docs/aws-first-run.md's IAM section below), and the IAM values pinned where they are written.

The fixtures were written by the generators at the commit that added them and read line by line: a Markdown table per
section, defaults in YAML flow style, `|` escaped in cells, the policy's actions sorted and unique."""

from __future__ import annotations

import json

import pytest
from conftest import REPO

from infra import deploy_permissions as dp
from infra.config_files import config_docs
from infra.config_schema import Key
from infra.manifests import image_cache_node_policy

FIXTURES = REPO / "tests" / "fixtures" / "generated"

# One key per value kind the docs generator renders, in two sections, with a `|` and a newline in a description.
KEYS = (
    Key("name", "string", "ray", "A plain string.", "Cluster", None, ("cluster", "name")),
    Key("empty", "string", "", "Empty | means the driver's.", "Cluster", None, ("cluster", "empty")),
    Key("cidrs", "array", ("10.0.0.0/8", "192.0.2.1/32"), "A list\nover two lines.", "Cluster", None, ("c",)),
    Key("none", "array", (), "An empty list.", "Cluster", None, ("c",)),
    Key("count", "integer", 2, "A number.", "GPU nodes", None, ("g",)),
    Key("spot", "boolean", False, "A boolean.", "GPU nodes", None, ("g",)),
    Key("labels", "object", {"role": "gpu", "a": 1}, "A map.", "GPU nodes", None, ("g",)),
)
PERMISSIONS = {
    "aws:s3/bucket:Bucket": ("s3:CreateBucket", "s3:ListBucket"),
    "aws:ec2/vpc:Vpc": ("ec2:CreateVpc", "ec2:CreateTags", "s3:ListBucket"),
}


def test_the_config_docs_generator_reproduces_its_known_good_output():
    assert config_docs(KEYS) == (FIXTURES / "config_docs.md").read_text()


def test_the_iam_section_generator_reproduces_its_known_good_output(monkeypatch):
    monkeypatch.setattr(dp, "PERMISSIONS", PERMISSIONS)
    assert dp.section() + "\n" == (FIXTURES / "iam_section.md").read_text()


def test_the_iam_section_replaces_only_the_marked_part_of_a_page(monkeypatch):
    monkeypatch.setattr(dp, "PERMISSIONS", PERMISSIONS)
    page = f"# Title\n\nbefore\n{dp.BEGIN}\nstale | table\n{dp.END}\nafter, with $1 and \\1\n"
    want = "# Title\n\nbefore\n" + (FIXTURES / "iam_section.md").read_text() + "after, with $1 and \\1\n"
    assert dp.page_with_section(page) == want


def test_the_first_run_page_shows_what_the_iam_generator_writes():
    text = dp.DOC.read_text()
    assert text.count(dp.BEGIN) == 1 and text.count(dp.END) == 1, "the page lost its IAM markers"
    assert dp.page_with_section(text) == text, "run `python -m infra.deploy_permissions --write`"


def test_the_deploy_policy_allows_every_listed_action_once_sorted_on_any_resource():
    doc = dp.policy_document()
    actions = sorted({a for acts in dp.PERMISSIONS.values() for a in acts})
    assert doc == {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": actions, "Resource": "*"}]}
    assert json.loads(dp.section().split("```json\n")[1].split("\n```")[0]) == doc


def test_every_listed_action_names_a_service_and_an_action():
    bad = [
        a for acts in dp.PERMISSIONS.values() for a in acts if a.count(":") != 1 or not a.split(":")[1][:1].isupper()
    ]
    assert bad == [], bad


@pytest.mark.parametrize(
    ("types", "want"),
    [
        (["aws:s3/bucket:Bucket", "kubernetes:core/v1:Namespace", "pulumi:providers:aws", "ray-efa-eks:x:Y"], []),
        (
            ["aws:sqs/queue:Queue", "aws:sqs/queue:Queue", "aws:a/b:B", "kubernetesx:a:B"],
            ["aws:a/b:B", "aws:sqs/queue:Queue", "kubernetesx:a:B"],
        ),
    ],
    ids=["covered", "uncovered-sorted-unique"],
)
def test_uncovered_lists_each_type_with_no_actions_and_no_exemption(types, want):
    assert dp.uncovered(types) == want


def test_the_node_roles_cache_policy_allows_only_the_first_pull_under_the_stacks_prefix():
    got = image_cache_node_policy("us-west-2", "123456789012", "ray-efa-eks-dev")
    assert got == {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "PullThroughCacheFirstPull",
                "Effect": "Allow",
                "Action": ["ecr:CreateRepository", "ecr:BatchImportUpstreamImage"],
                "Resource": "arn:aws:ecr:us-west-2:123456789012:repository/ray-efa-eks-dev/*",
            }
        ],
    }
