"""The CLI's AWS commands that need no AWS account: `status` against a recorded cluster, `render` offline."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import _driver_helpers as helpers  # tests/support is on pytest's pythonpath
import yaml

from automation import cli
from automation.capture import REDACTED_ACCOUNT
from automation.job import PENDING_RUN_BUCKET
from automation.kube import KubeApi
from automation.pipeline import Expectations
from automation.steps.verify import verify_cluster


def test_status_reads_nodes_and_raycluster_through_the_kubeconfig(tmp_path, capsys):
    with helpers.FakeKubeApi() as api:
        path = tmp_path / "kubeconfig"
        path.write_text(yaml.safe_dump(api.kubeconfig()))
        rc = cli.main(["status", "--stack", "us-west-2", "--kubeconfig", str(path), "--json"])
    doc = json.loads(capsys.readouterr().out)
    expected = {"gpu_nodes_ready": 2, "gpu_nodes": 2, "raycluster": "ray/ray-efa", "raycluster_state": "ready"}
    assert (rc, doc["cluster"]) == (0, expected), f"expected 0 and {expected}, got {rc} and {doc.get('cluster')}"


def capture(tmp_path, objects=None) -> tuple[int, dict, object]:
    with helpers.FakeKubeApi(objects) as api:
        path = tmp_path / "kubeconfig"
        path.write_text(yaml.safe_dump(api.kubeconfig()))
        rc = cli.main(["status", "--stack", "us-west-2", "--kubeconfig", str(path), "--capture", str(tmp_path / "cap")])
    return rc, {p.name: p.read_text() for p in sorted((tmp_path / "cap").glob("*"))}, tmp_path / "cap"


def test_status_capture_writes_the_fixture_layout_with_account_ids_redacted(tmp_path):
    rc, files, _ = capture(tmp_path)
    expected = ["daemonsets.json", "deployments.json", "events.json", "nodes.json", "pods.json", "raycluster.json"]
    leaked = [name for name, text in files.items() if "602401143452" in text]
    assert (rc, sorted(files), leaked) == (0, expected, []), f"got rc {rc}, files {sorted(files)}, leaked in {leaked}"
    assert f"{REDACTED_ACCOUNT}.dkr.ecr.us-west-2.amazonaws.com" in files["daemonsets.json"], "expected the ECR image"


def test_a_capture_replaces_the_recorded_fixtures_and_verify_reads_it(tmp_path):
    _, _, directory = capture(tmp_path)
    exp = Expectations(2, "us-west-2a", 4, 1, "ray", "ray-efa", 2)
    with helpers.FakeKubeApi(helpers.load_k8s(directory)) as api:
        result = verify_cluster(KubeApi(api.kubeconfig()), exp, None, node_wait_s=0, pod_wait_s=0, sleep=lambda s: None)
    assert result.status == "pass", f"expected verify to pass on the capture, got {result.summary}"


def test_render_lists_the_declared_resources_offline():
    proc = subprocess.run(
        [sys.executable, "-m", "automation", "render", "--stack", "us-west-2", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=helpers.REPO,
        env=dict(os.environ, PATH="/usr/bin:/bin"),  # no pulumi CLI on the path, whatever the machine has
    )
    assert proc.returncode == 0, f"expected exit 0, got {proc.returncode}: {proc.stderr[-1000:]}"
    types = {r["type"] for r in json.loads(proc.stdout)["resources"]}
    assert "aws:eks/nodeGroup:NodeGroup" in types, f"expected an EKS node group among {sorted(types)}"


def test_render_of_a_stack_without_gpu_az_is_one_clear_line(tmp_path, capsys):
    for name in ("Pulumi.yaml", "__main__.py"):
        (tmp_path / name).write_text((helpers.REPO / name).read_text())
    (tmp_path / "Pulumi.no-az.yaml").write_text(
        yaml.safe_dump(
            {
                "config": {
                    "aws:region": "us-east-2",
                    "ray-efa-eks:availabilityZones": ["us-east-2a", "us-east-2b"],
                }
            }
        )
    )
    rc = cli.main(["render", "--stack", "no-az", "--project-dir", str(tmp_path)])
    err = " ".join(capsys.readouterr().err.split())
    assert rc == 2, f"expected exit 2, got {rc}: {err}"
    assert "python -m automation preflight --stack no-az" in err and "Traceback" not in err, err


def _project_with_train_block(tmp_path, train: dict) -> str:
    """A copy of the project whose one stack, `mine`, is us-west-2's with ``train`` as its train: block."""
    for name in ("Pulumi.yaml", "__main__.py"):
        (tmp_path / name).write_text((helpers.REPO / name).read_text())
    config = yaml.safe_load((helpers.REPO / "Pulumi.us-west-2.yaml").read_text())["config"]
    (tmp_path / "Pulumi.mine.yaml").write_text(yaml.safe_dump({"config": {**config, "ray-efa-eks:train": train}}))
    return str(tmp_path)


def test_render_shows_each_job_value_and_the_layer_it_came_from(tmp_path, capsys, monkeypatch):
    project = _project_with_train_block(tmp_path, {"checkpoint_every": 50})
    # The resources are test_render_lists_the_declared_resources_offline's subject; here only the job (saves 4 s).
    monkeypatch.setattr("automation.commands.render.render_stack", lambda stack, project_dir: [])
    rc = cli.main(["render", "--stack", "mine", "--project-dir", project, "--json"])
    job = json.loads(capsys.readouterr().out)["job"]
    got = {k: job[k] for k in ("preset", "checkpoint_every", "max_failures", "storage_path")}
    want = {
        "preset": {"value": "qwen2.5-1.5b", "source": "cluster default"},
        "checkpoint_every": {"value": 50, "source": "stack train: block"},
        "max_failures": {"value": 3, "source": "durability default"},
        "storage_path": {"value": PENDING_RUN_BUCKET, "source": "durability default"},
    }
    assert (rc, got) == (0, want), f"expected exit 0 and {want}, got {rc} and {got}"


def test_render_refuses_a_local_storage_path_naming_the_key(tmp_path, capsys):
    project = _project_with_train_block(tmp_path, {"storage_path": "/mnt/ckpt"})
    rc = cli.main(["render", "--stack", "mine", "--project-dir", project])
    err = " ".join(capsys.readouterr().err.split())
    assert rc == 2 and "ray-efa-eks:train.storage_path '/mnt/ckpt' is a local path" in err, f"got {rc}: {err}"
