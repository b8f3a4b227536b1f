"""The expensive set-ups the integration tests share, started once per session (as Ray's own test suite
shares `ray_start_regular_shared`, python/ray/tests/conftest.py): one real local `automation run`, one
moto S3 server, one in-process Ray cluster. A test reads what it needs from them and must not change
them; a test that needs a run of its own arguments starts its own."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator

import pytest
from _shared_env import MOTO_CLUSTER, MOTO_NODEGROUP, MOTO_REGION, S3_BUCKET, STALE_RAY_ADDRESS, driver_env


@pytest.fixture(scope="session")
def local_run(tmp_path_factory) -> tuple[subprocess.CompletedProcess, object]:
    """One `python -m automation run --target local --json` (the README's embedded default, as JSON),
    run from a shell that left a stale RAY_ADDRESS behind: (the finished process, its cwd)."""
    cwd = tmp_path_factory.mktemp("local-run")
    proc = subprocess.run(
        [sys.executable, "-m", "automation", "run", "--target", "local", "--json"],
        cwd=cwd,
        env=dict(driver_env(), RAY_ADDRESS=STALE_RAY_ADDRESS),
        capture_output=True,
        text=True,
        timeout=300,
    )
    return proc, cwd


@pytest.fixture(scope="session")
def local_run_doc(local_run) -> dict:
    """The JSON document of the shared local run (--json: stdout is one document and nothing else)."""
    proc, _ = local_run
    assert proc.returncode == 0, f"expected exit 0, got {proc.returncode}; stderr tail: {proc.stderr[-2000:]}"
    return json.loads(proc.stdout)


@pytest.fixture(scope="session")
def s3_env() -> Iterator[dict[str, str]]:
    """A moto S3 server on 127.0.0.1 with one bucket, `S3_BUCKET`: the environment that points an S3
    client at it (AWS_ENDPOINT_URL_S3, honoured by boto3 and pyarrow:
    https://docs.aws.amazon.com/sdkref/latest/guide/feature-ss-endpoints.html). Only the tests that use
    S3 set it in this process (`s3` in test_train_s3.py); the shared Ray cluster's workers get it."""
    import boto3
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    env = {
        "AWS_ENDPOINT_URL_S3": f"http://{host}:{port}",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_REGION": "us-east-1",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    client = boto3.client(
        "s3",
        endpoint_url=env["AWS_ENDPOINT_URL_S3"],
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        region_name="us-east-1",
    )
    client.create_bucket(Bucket=S3_BUCKET)
    yield env
    server.stop()


@pytest.fixture(scope="session")
def ray_cluster(s3_env):
    """One in-process Ray cluster for the session: 2 CPUs for 2 training workers, 2 more so Ray Data
    can read and tokenise while they train. Every Ray worker has `s3_env` (the job's runtime_env), so a
    run may store on, or read from, the moto server; the pytest process itself does not."""
    import ray

    ray.init(
        num_cpus=4,
        include_dashboard=False,
        log_to_driver=False,
        runtime_env={"env_vars": dict(s3_env)},
    )
    yield ray
    ray.shutdown()


@pytest.fixture
def moto_aws(monkeypatch):
    """moto's in-process AWS for one test, with moto's fake credentials and `MOTO_REGION` as the default
    region, so no client the test makes can reach a real account."""
    from moto import mock_aws

    for k, v in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": MOTO_REGION,
    }.items():
        monkeypatch.setenv(k, v)
    with mock_aws():
        yield


@pytest.fixture
def moto_eks(moto_aws):
    """An EKS client of `moto_aws` whose cluster `MOTO_CLUSTER` has the GPU node group `MOTO_NODEGROUP` at
    the sizes infra/manifests.py's gpu_scaling_config gives a 2-node stack."""
    import boto3

    client = boto3.client("eks", region_name=MOTO_REGION)
    client.create_cluster(
        name=MOTO_CLUSTER,
        roleArn="arn:aws:iam::123456789012:role/eks",
        resourcesVpcConfig={"subnetIds": ["subnet-1"]},
    )
    client.create_nodegroup(
        clusterName=MOTO_CLUSTER,
        nodegroupName=MOTO_NODEGROUP,
        nodeRole="arn:aws:iam::123456789012:role/node",
        subnets=["subnet-1"],
        scalingConfig={"desiredSize": 2, "minSize": 0, "maxSize": 2},
    )
    return client
