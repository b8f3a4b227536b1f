"""The run bucket and the Ray pods' Pod Identity under Pulumi's mock engine (preview=False): every
setting as the engine receives it, and every IAM statement no wider than the stack's prefix."""

from __future__ import annotations

import json
import warnings

import kubernetes_validate
import pytest
from conftest import REPO, quiet_stack

from infra import manifests as m
from infra.config import PROJECT, ConfigWarning, StackConfigError, load_stack, stack_config_values
from infra.manifests import RAY_SERVICE_ACCOUNT
from infra.mock_render import Render, run_program

STACK = "us-west-2"


def render(**overrides) -> Render:
    values = stack_config_values(STACK, REPO)
    values.update({f"{PROJECT}:{k}": v for k, v in overrides.items()})
    return run_program(STACK, REPO, config=values)


def one(r: Render, typ: str, name_part: str = ""):
    found = [x for x in r.records if x.type == typ and name_part in x.name]
    assert len(found) == 1, f"expected one {typ} named *{name_part}*, got {[x.name for x in found]}"
    return found[0]


@pytest.fixture(scope="module")
def west() -> Render:
    return render()


@pytest.fixture(scope="module")
def bucket_arn(west) -> str:
    return f"arn:aws:s3:::{west.outputs['bucket_name']}"


def _statements(record) -> dict[str, dict]:
    return {s["Sid"]: s for s in json.loads(record.inputs["policy"])["Statement"]}


# --------------------------------------------------------------------------- bucket


def test_bucket_is_named_from_cluster_and_stack_and_kept_on_destroy_by_default(west):
    bucket = one(west, "aws:s3/bucket:Bucket").inputs
    got = (bucket.get("bucketPrefix"), bucket.get("forceDestroy"))
    assert got == (f"ray-efa-eks-{STACK}-", False), f"expected (prefix, forceDestroy=False), got {got}"


def test_force_destroy_follows_the_stack_key():
    bucket = one(render(storageForceDestroy="true"), "aws:s3/bucket:Bucket").inputs
    assert bucket.get("forceDestroy") is True, (
        f"storageForceDestroy true gave forceDestroy {bucket.get('forceDestroy')}"
    )


def test_a_set_bucket_name_is_used_verbatim():
    bucket = one(render(storageBucketName="my-runs-bucket"), "aws:s3/bucket:Bucket").inputs
    assert (bucket.get("bucket"), bucket.get("bucketPrefix")) == ("my-runs-bucket", None), bucket


def test_bucket_owner_owns_every_object(west):
    rule = one(west, "aws:s3/bucketOwnershipControls:BucketOwnershipControls").inputs["rule"]
    assert rule == {"objectOwnership": "BucketOwnerEnforced"}, rule


def test_bucket_policy_denies_requests_without_tls(west, bucket_arn):
    deny = _statements(one(west, "aws:s3/bucketPolicy:BucketPolicy"))["DenyInsecureTransport"]
    assert (deny["Effect"], deny["Principal"], deny["Action"]) == ("Deny", "*", "s3:*"), deny
    assert deny["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}, deny["Condition"]
    assert sorted(deny["Resource"]) == [bucket_arn, f"{bucket_arn}/*"], deny["Resource"]


def test_lifecycle_aborts_incomplete_multipart_uploads_and_expires_runs_after_retention(west):
    rules = {
        r["id"]: r
        for r in one(west, "aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration").inputs["rules"]
    }
    abort = rules["abort-incomplete-multipart-uploads"]
    assert abort["abortIncompleteMultipartUpload"] == {"daysAfterInitiation": 1.0} and abort["filter"] == {}, abort
    expire = rules["expire-runs"]
    assert (expire["filter"], expire["expiration"]) == ({"prefix": f"{STACK}/"}, {"days": 30.0}), expire


def test_retention_zero_keeps_runs_forever():
    rules = one(render(storageRetentionDays="0"), "aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration")
    ids = [r["id"] for r in rules.inputs["rules"]]
    assert ids == ["abort-incomplete-multipart-uploads"], f"retention 0 must expire nothing, got rules {ids}"


def test_stack_outputs_name_the_bucket_and_the_storage_uri(west):
    name = west.outputs["bucket_name"]
    assert west.outputs["storage_uri"] == f"s3://{name}/{STACK}/runs", west.outputs["storage_uri"]


# --------------------------------------------------------------------------- pod identity


def test_pod_identity_agent_addon_is_installed(west):
    addon = one(west, "aws:eks/addon:Addon", "pod-identity").inputs
    assert (addon["addonName"], addon["clusterName"]) == ("eks-pod-identity-agent", "ray-efa-eks"), addon


def test_role_trusts_only_eks_pod_identity_for_the_ray_service_account(west):
    role = one(west, "aws:iam/role:Role", "pod-identity")
    (stmt,) = json.loads(role.inputs["assumeRolePolicy"])["Statement"]
    assert stmt["Principal"] == {"Service": "pods.eks.amazonaws.com"}, stmt["Principal"]
    assert sorted(stmt["Action"]) == ["sts:AssumeRole", "sts:TagSession"], stmt["Action"]
    assert stmt["Condition"]["StringEquals"] == {
        "aws:RequestTag/eks-cluster-name": "ray-efa-eks",
        "aws:RequestTag/kubernetes-namespace": "ray",
        "aws:RequestTag/kubernetes-service-account": RAY_SERVICE_ACCOUNT,
    }, stmt["Condition"]


def test_role_may_touch_objects_only_under_the_stack_prefix(west, bucket_arn):
    objects = _statements(one(west, "aws:iam/rolePolicy:RolePolicy", "pod-identity"))["RunObjects"]
    assert objects["Resource"] == [f"{bucket_arn}/{STACK}/*"], objects["Resource"]
    assert sorted(objects["Action"]) == sorted(
        ["s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload"]
    ), objects["Action"]


def test_role_may_list_only_the_stack_prefix(west, bucket_arn):
    listing = _statements(one(west, "aws:iam/rolePolicy:RolePolicy", "pod-identity"))["ListRunPrefix"]
    assert (listing["Action"], listing["Resource"]) == (["s3:ListBucket"], [bucket_arn]), listing
    assert listing["Condition"] == {"StringLikeIfExists": {"s3:prefix": [STACK, f"{STACK}/*"]}}, listing["Condition"]


def test_no_statement_grants_a_wildcard_action_or_resource(west):
    stmts = json.loads(one(west, "aws:iam/rolePolicy:RolePolicy", "pod-identity").inputs["policy"])["Statement"]
    wide = [
        s["Sid"]
        for s in stmts
        if any(a == "*" or a.endswith(":*") for a in s["Action"])
        or any(r in ("*", "arn:aws:s3:::*") for r in s["Resource"])
    ]
    assert not wide, f"statements wider than the prefix: {wide}"


def test_association_maps_the_ray_service_account_to_the_role(west):
    assoc = one(west, "aws:eks/podIdentityAssociation:PodIdentityAssociation", "pod-identity").inputs
    role_arn = west.outputs["pod_role_arn"]
    got = (assoc["clusterName"], assoc["namespace"], assoc["serviceAccount"], assoc["roleArn"])
    assert got == ("ray-efa-eks", "ray", RAY_SERVICE_ACCOUNT, role_arn), got


def test_service_account_exists_in_the_ray_namespace(west):
    account = one(west, "kubernetes:core/v1:ServiceAccount", "ray-service-account").inputs["metadata"]
    assert (account["name"], account["namespace"]) == (RAY_SERVICE_ACCOUNT, "ray"), account


def test_head_and_worker_pods_run_as_the_service_account(west):
    spec = one(west, "kubernetes:ray.io/v1:RayCluster").inputs["spec"]
    names = [spec["headGroupSpec"]["template"]["spec"].get("serviceAccountName")] + [
        g["template"]["spec"].get("serviceAccountName") for g in spec["workerGroupSpecs"]
    ]
    assert names == [RAY_SERVICE_ACCOUNT] * len(names), f"pod serviceAccountName: {names}"


def test_raycluster_waits_for_the_association_and_the_service_account(west):
    deps = one(west, "kubernetes:ray.io/v1:RayCluster").depends_on
    missing = [
        d
        for d in ("pod-identity-association", "pod-identity-agent", "service-account")
        if not any(d in x for x in deps)
    ]
    assert not missing, f"RayCluster does not depend on {missing}; depends on {deps}"


# --------------------------------------------------------------------------- config


@pytest.mark.parametrize(
    "key,value,fix",
    [
        ("storageBucketName", "Bad_Name", "is not a valid S3 bucket name"),
        ("storageBucketName", "has.dots.bucket", "is not a valid S3 bucket name"),
        ("storageRetentionDays", "-1", "0 keeps objects forever"),
        ("clusterName", "a-very-long-cluster-name-for-a-bucket", "set ray-efa-eks:storageBucketName"),
    ],
)
def test_bad_storage_config_is_refused_naming_key_and_fix(tmp_path, key, value, fix):
    (tmp_path / "Pulumi.yaml").write_text((REPO / "Pulumi.yaml").read_text())
    (tmp_path / f"Pulumi.{STACK}.yaml").write_text(
        (REPO / f"Pulumi.{STACK}.yaml").read_text() + f"  {PROJECT}:{key}: {value!r}\n"
    )
    with warnings.catch_warnings(), pytest.raises(StackConfigError) as err:
        warnings.simplefilter("ignore", ConfigWarning)
        load_stack(STACK, tmp_path)
    assert fix in str(err.value), f"expected {fix!r} in the error, got: {err.value}"


# --------------------------------------------------------------------------- IRSA fallback (podIdentityMode: irsa)


@pytest.fixture(scope="module")
def irsa() -> Render:
    return render(podIdentityMode="irsa")


def test_irsa_role_trusts_only_the_cluster_oidc_provider_for_the_ray_service_account(irsa):
    (stmt,) = json.loads(one(irsa, "aws:iam/role:Role", "pod-identity").inputs["assumeRolePolicy"])["Statement"]
    issuer = "oidc.eks.render.amazonaws.com/id/ray-efa-eks-eks"
    expected = (
        {"Federated": f"arn:aws:iam::123456789012:oidc-provider/{issuer}"},
        "sts:AssumeRoleWithWebIdentity",
        {
            "StringEquals": {
                f"{issuer}:sub": f"system:serviceaccount:ray:{RAY_SERVICE_ACCOUNT}",
                f"{issuer}:aud": "sts.amazonaws.com",
            }
        },
    )
    got = (stmt["Principal"], stmt["Action"], stmt["Condition"])
    assert got == expected, f"expected {expected}, got {got}"


def test_irsa_creates_no_pod_identity_association_or_agent(irsa):
    found = [
        x.name
        for x in irsa.records
        if x.type == "aws:eks/podIdentityAssociation:PodIdentityAssociation"
        or (x.type == "aws:eks/addon:Addon" and x.inputs.get("addonName") == "eks-pod-identity-agent")
    ]
    assert found == [], f"expected no Pod Identity resources under irsa, got {found}"


def test_irsa_annotates_the_ray_service_account_with_the_role(irsa):
    account = one(irsa, "kubernetes:core/v1:ServiceAccount", "ray-service-account").inputs["metadata"]
    role_arn = f"arn:aws:render::123456789012:{one(irsa, 'aws:iam/role:Role', 'pod-identity').name}"
    got = (account["name"], account.get("annotations"))
    assert got == (RAY_SERVICE_ACCOUNT, {"eks.amazonaws.com/role-arn": role_arn}), f"got {got}"


def test_pod_identity_mode_leaves_the_service_account_unannotated(west):
    account = one(west, "kubernetes:core/v1:ServiceAccount", "ray-service-account").inputs["metadata"]
    assert "annotations" not in account, f"expected no annotations under pod-identity, got {account}"


def test_both_modes_attach_the_same_s3_policy_document(west, irsa):
    docs = [one(r, "aws:iam/rolePolicy:RolePolicy", "pod-identity").inputs["policy"] for r in (west, irsa)]
    assert docs[0] == docs[1], f"S3 permissions differ between modes:\n{docs[0]}\n{docs[1]}"


def test_unknown_pod_identity_mode_is_refused_with_the_close_match():
    with pytest.raises(StackConfigError, match=r"podIdentityMode 'irs' is not one of \['pod-identity', 'irsa'\]"):
        render(podIdentityMode="irs")


# ---- The Ray pods' ServiceAccount is a valid core object, and both pod templates run as it.


def _cfg():
    return quiet_stack("us-west-2")


def test_service_account_is_a_valid_core_object_in_the_ray_namespace():
    cfg = _cfg()
    sa = m.service_account_manifest(cfg.ray.namespace)
    kubernetes_validate.validate(sa, f"{cfg.cluster.kubernetes_version}.0", strict=True)
    assert sa["metadata"] == {"name": m.RAY_SERVICE_ACCOUNT, "namespace": cfg.ray.namespace}, sa["metadata"]


def test_head_and_worker_templates_run_as_the_service_account():
    ray = _cfg().ray
    got = [
        m.ray_head_template(ray)["spec"]["serviceAccountName"],
        m.ray_worker_template(ray)["spec"]["serviceAccountName"],
    ]
    assert got == [m.RAY_SERVICE_ACCOUNT] * 2, f"head and worker serviceAccountName: {got}"
