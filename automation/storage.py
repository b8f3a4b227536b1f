"""The run bucket as the driver sees it: the durable job's flags, `--resume` of an earlier run, and
the verify probe that proves a worker pod can write, read and delete under the stack's prefix.

Where things live: Ray Train keeps run RUN_ID under ``<storage_uri>/RUN_ID/`` (``RunConfig(name=
run_id, storage_path=storage_uri)``); a new job with the same name and storage path continues from
that run's latest checkpoint (Ray Train V2 reloads its checkpoint manager's snapshot from there:
ray/train/v2/_internal/execution/checkpoint/checkpoint_manager.py, ``_maybe_load_state_from_storage``).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from automation.aws_clients import S3
from automation.errors import DriverError
from automation.job import CLUSTER_ROOT, stack_label
from automation.kube import PodExec
from automation.pipeline import StepResult
from infra.config import StorageConfig

# Young/Daly's interval sqrt(2 x C x MTBF) (Young 1974; Daly 2006) in steps of the cluster job, from the inputs
# bench/goodput.py's CLUSTER states with their sources: MTBF 6,335 h (Llama 3's 419 interruptions in 54 days on
# 16,384 GPUs, scaled to 8), C 72 s (9.2 GB a node at gp3's 125 MiB/s, then S3 at 40 Gbps; estimated, not measured),
# a step of 5.03 s (the throughput model's slower EFA prediction): 57,400 s, about 16 h. A default-length run
# (100 steps) therefore saves only its final checkpoint; a user who wants more sets train: checkpoint_every.
# tests/bench/test_goodput.py fails when this and the formula's output differ; docs/long-runs.md tells the story.
CHECKPOINT_EVERY = 11_417
# Recoveries Ray Train attempts before the job fails: more than one reclaimed node or lost pod per
# run, but a crash that repeats at every restart stops after three tries instead of looping.
MAX_FAILURES = 3

_S3 = re.compile(r"^s3://([^/]+)/(.+?)/*$")


def require_credentials(writes: str, uri: str | None) -> None:
    """Before anything starts: DriverError (exit 2) naming ``writes`` (the flag or key) when ``uri`` is s3:// and
    botocore's credential chain finds none here (environment, the shared files, SSO, a container or instance role;
    IMDS not asked when AWS_EC2_METADATA_DISABLED=true; no call to AWS itself): Ray Train would fail later, with a
    traceback."""
    if not (uri and uri.startswith("s3://")):
        return
    import botocore.session
    from botocore.exceptions import BotoCoreError

    try:
        found = botocore.session.get_session().get_credentials() is not None
    except BotoCoreError:  # a profile that names a missing source, an SSO cache that cannot be read
        found = False
    if not found:  # the fix: AWS CLI v2 user guide, cli-configure-quickstart, cli-configure-sso, cli-configure-envvars
        raise DriverError(
            f"{writes} {uri}: no AWS credentials on this machine to write there: run `aws configure` (or `aws sso "
            "login`), or export AWS_PROFILE, or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY",
            exit_code=2,
        )


def split_s3_uri(uri: str) -> tuple[str, str]:
    """(bucket, key prefix without slashes at the ends) of ``s3://bucket/prefix``."""
    if not (m := _S3.match(uri or "")):
        raise DriverError(
            f"storage_uri {uri!r} is not s3://<bucket>/<prefix>: run `python -m automation up` so the stack "
            "exports its bucket (stack output storage_uri)",
            exit_code=2,
        )
    return m.group(1), m.group(2).strip("/")


@dataclass(frozen=True)
class Durability:
    """The job settings that let a run outlive its workers: DEFAULTS, one layer of the job below the stack's train:
    block, which may override each of them (automation/job.py states the order; it takes them as ``vars()``)."""

    storage_path: str | None = None  # None: not known yet (the stack's run bucket before `up`)
    checkpoint_every: int = CHECKPOINT_EVERY
    max_failures: int = MAX_FAILURES


def outside_run_bucket(storage_path: str, run_bucket: str) -> str | None:
    """A note when the job's storage path is not under the stack's run bucket prefix, which is all the
    pods' role may write (infra/pod_identity.py, ``RunObjects``); None when it is under it."""
    if f"{storage_path.rstrip('/')}/".startswith(f"{run_bucket.rstrip('/')}/"):
        return None
    return (
        f"{stack_label('storage_path')} {storage_path} is outside the stack's run bucket {run_bucket}: the job "
        "keeps its checkpoints there as set, but the pods' role may write only under the run bucket (and verify "
        "probed that, not this path), so Ray Train fails at its first checkpoint unless the role may write it "
        "too; grant it, or remove the key to use the run bucket"
    )


def run_locations(storage_uri: str, run_id: str) -> tuple[str, ...]:
    """Report lines: where the run's checkpoints and NCCL logs are."""
    return (
        f"checkpoints of run {run_id}: {storage_uri.rstrip('/')}/{run_id}/ "
        f"(continue it: python -m automation run --stack <stack> --resume {run_id})",
        f"NCCL logs of run {run_id}: {CLUSTER_ROOT}/runs/{run_id}/nccl/ in each worker pod (collected by `check`, "
        f"kept at the run's end under {storage_uri.rstrip('/')}/{run_id}/logs/)",
    )


def upload_tree(s3: S3, bucket: str, prefix: str, src: Path) -> int:
    """Every file under ``src`` put at ``s3://bucket/prefix<its path under src>``; the count."""
    files = sorted(p for p in src.rglob("*") if p.is_file())
    for path in files:
        s3.put_object(Bucket=bucket, Key=f"{prefix}{path.relative_to(src).as_posix()}", Body=path.read_bytes())
    return len(files)


def download_tree(s3: S3, bucket: str, prefix: str, dest: Path) -> list[Path]:
    """Every object under ``s3://bucket/prefix`` written to ``dest/<its key after prefix>``; the files."""
    files = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for obj in page.get("Contents", []):
            path = dest.joinpath(*PurePosixPath(obj["Key"][len(prefix) :]).parts)
            if ".." in path.relative_to(dest).parts:  # a key is no path of ours to write outside dest
                continue
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(s3.get_object(Bucket=bucket, Key=obj["Key"])["Body"].read())
            files.append(path)
    return files


def kept_bucket_line(outputs: dict, force_destroy: bool) -> str | None:
    """What ``destroy`` left behind: the run bucket, unless storageForceDestroy deleted it."""
    bucket = outputs.get("bucket_name")
    if force_destroy or not bucket:
        return None
    return (
        f"kept bucket {bucket} and its runs ({outputs.get('storage_uri')}) because "
        f"{StorageConfig.keyname('force_destroy')} is false; "
        f"delete it yourself with: aws s3 rb s3://{bucket} --force"
    )


def require_run(s3: S3, storage_uri: str, run_id: str) -> None:
    """DriverError (exit 2) before any training when ``run_id`` has nothing under ``storage_uri``, naming runs there."""
    from botocore.exceptions import ClientError

    bucket, prefix = split_s3_uri(storage_uri)
    try:
        found = s3.list_objects_v2(Bucket=bucket, Prefix=f"{prefix}/{run_id}/", MaxKeys=1)
    except ClientError as e:
        raise DriverError(
            f"--resume {run_id!r}: cannot list {storage_uri} ({e.response['Error'].get('Code', e)}): check that the "
            "stack is up and that your AWS credentials may list the run bucket",
            exit_code=2,
        ) from None
    if found.get("KeyCount", 0):
        return
    listing = s3.list_objects_v2(Bucket=bucket, Prefix=f"{prefix}/", Delimiter="/", MaxKeys=20)
    known = [p["Prefix"][len(prefix) + 1 :].strip("/") for p in listing.get("CommonPrefixes", [])]
    raise DriverError(
        f"--resume {run_id!r}: no run under {storage_uri.rstrip('/')}/{run_id}/ — "
        f"known runs: {', '.join(known) or '(none)'}; pass one of them or drop --resume to start a new run",
        exit_code=2,
    )


# Runs in a pod with the pod's own credentials, through the client Ray Train writes with: Ray Train
# opens its storage_path with pyarrow.fs.FileSystem.from_uri, which gives an S3FileSystem for s3://.
# It first prints the pod's pyarrow version and which credentials EKS injected (Pod Identity sets
# AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE, IRSA sets AWS_WEB_IDENTITY_TOKEN_FILE), so a failure can be
# told apart by its cause.
_PROBE = """
import os, sys, pyarrow, pyarrow.fs as pafs
creds = "pod-identity" if os.environ.get("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE") else (
    "irsa" if os.environ.get("AWS_WEB_IDENTITY_TOKEN_FILE") else "none")
print("PYARROW", pyarrow.__version__, "CREDENTIALS", creds)
body = b"ray-efa-eks verify"
try:
    fs, path = pafs.FileSystem.from_uri(sys.argv[1])
    print("FILESYSTEM", type(fs).__name__)
    with fs.open_output_stream(path) as f:
        f.write(body)
    with fs.open_input_stream(path) as f:
        assert f.read() == body, "read back different bytes"
    fs.delete_file(path)
except Exception as e:
    print(f"{type(e).__name__}: {e}", file=sys.stderr)
    sys.exit(1)
print("ok")
"""
# EKS Pod Identity needs the AWS SDK for C++ >= 1.11.263 (EKS user guide, pod-id-minimum-sdk); pyarrow's
# S3 filesystem asks the SDK's DefaultAWSCredentialsProviderChain (arrow cpp/src/arrow/filesystem/s3fs.cc).
# The Linux and macOS wheels take the SDK from the vcpkg release in apache/arrow's .env (VCPKG=):
# pyarrow 16.0.0 builds with vcpkg 2023.11.20, whose aws-sdk-cpp is 1.11.201 (apache/arrow#42154), too old:
# no credentials, unsigned requests, AccessDenied (apache/arrow#45603); pyarrow 17.0.0 builds with vcpkg
# 2024.04.26, whose aws-sdk-cpp is 1.11.285 (microsoft/vcpkg ports/aws-sdk-cpp/vcpkg.json at 943c5ef),
# the first new enough. A pyarrow from elsewhere (conda-forge) links its own SDK and may differ.
LAST_PYARROW_WITHOUT_POD_IDENTITY = 16


def marker_probe_command(marker_uri: str) -> list[str]:
    """Write, read back and delete ``marker_uri`` from inside a pod."""
    return ["sh", "-c", f"python -c {shlex.quote(_PROBE)} {shlex.quote(marker_uri)}"]


@dataclass(frozen=True)
class Identity:
    """What gives the pods their AWS credentials, named in every storage error."""

    role_arn: str
    association_id: str
    service_account: str
    namespace: str


@dataclass(frozen=True)
class ProbeFacts:
    """What the probe printed about the pod: its pyarrow version and which credentials EKS injected."""

    pyarrow: str = "?"
    credentials: str = "?"

    @classmethod
    def parse(cls, stdout: str) -> ProbeFacts:
        m = re.search(r"^PYARROW (\S+) CREDENTIALS (\S+)$", stdout, re.M)
        return cls(m.group(1), m.group(2)) if m else cls()


def irsa_switch_command(stack: str) -> str:
    """The one shell line that moves ``stack`` from Pod Identity to IRSA: the key in Pulumi.<stack>.yaml, then `up`
    (which replaces the Pod Identity association with the OIDC-trusting role and the ServiceAccount annotation)."""
    key = StorageConfig.keyname("pod_identity_mode", prefixed=True)
    return f"pulumi config set --stack {stack} {key} irsa && python -m automation up --stack {stack}"


def storage_cause(why: str, facts: ProbeFacts, identity: Identity, stack_hint: str = "<stack>") -> str:
    """The cause of a failed probe and its fix: the SDK's age, missing credentials, or the role; under Pod Identity
    always with the command that switches the stack to IRSA."""
    denied = "ACCESS_DENIED" in why or "AccessDenied" in why
    irsa = f"run `{irsa_switch_command(stack_hint)}`"
    major = facts.pyarrow.split(".")[0]
    too_old = major.isdigit() and int(major) <= LAST_PYARROW_WITHOUT_POD_IDENTITY
    if denied and facts.credentials == "pod-identity" and too_old:
        return (
            f"pyarrow {facts.pyarrow} in the pod bundles an AWS SDK for C++ older than 1.11.263, which cannot use "
            "EKS Pod Identity credentials, so its requests go unsigned and S3 denies them (EKS user guide "
            "pod-id-minimum-sdk; pyarrow wheels bundle 1.11.285 from 17.0.0 on, 1.11.201 in 16; apache/arrow#42154, "
            "#45603) — fix: "
            f"{irsa} (IRSA through the cluster's OIDC provider, which that SDK reads), or use an image whose "
            "pyarrow bundles SDK >= 1.11.263"
        )
    if facts.credentials == "none":
        return (
            f"the pod has no AWS credentials (no Pod Identity or IRSA variables): it must run as service account "
            f"{identity.namespace}/{identity.service_account}, and pods created before the association "
            f"{identity.association_id} have none: delete them so KubeRay recreates them"
        )
    role = (
        f"check IAM role {identity.role_arn} (its policy must allow the prefix), pod identity association "
        f"{identity.association_id} and service account {identity.namespace}/{identity.service_account} (the pod "
        f"must run as it; pods created before the association have no credentials: delete them so KubeRay "
        f"recreates them)"
    )
    if facts.credentials == "pod-identity":
        return f"{role}; if they are right, the pod's SDK may not read Pod Identity credentials: {irsa} to use IRSA"
    return role


def verify_storage(
    pod_exec: PodExec, pod: str, identity: Identity, storage_uri: str, tag: str, stack: str = "<stack>"
) -> StepResult:
    """Prove from inside ``pod``, through pyarrow's S3 filesystem, that it can write, read and delete a marker under
    the job's storage path; on failure say whether the SDK's age, missing credentials or the role is the cause."""
    marker = f"{storage_uri.rstrip('/')}/.verify/{pod}-{tag}"
    res = pod_exec(pod, identity.namespace, marker_probe_command(marker), timeout_s=120)
    facts = ProbeFacts.parse(res.stdout)
    if res.rc == 0 and res.stdout.strip().endswith("ok"):
        return StepResult(
            "verify", "pass", f"{identity.namespace}/{pod} wrote, read and deleted {marker} (pyarrow {facts.pyarrow})"
        )
    why = (res.stderr or res.stdout).strip().splitlines()[-1:] or ["no output"]
    return StepResult(
        "verify",
        "fail",
        f"{identity.namespace}/{pod} (pyarrow {facts.pyarrow}, credentials {facts.credentials}) cannot write, "
        f"read and delete {marker}: {why[0]} — {storage_cause(why[0], facts, identity, stack)}",
    )
