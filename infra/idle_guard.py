"""IdleGuard component: a CronJob on the system node that scales the GPU node group to gpuIdleNodes once no
Ray job has run for gpuIdleMinutes (the logic: infra/idle_guard_script.py, shipped in a ConfigMap).

Its AWS permissions come through EKS Pod Identity (or IRSA, as podIdentityMode says, like the Ray pods':
infra/pod_identity.py) and allow eks:DescribeNodegroup and eks:UpdateNodegroupConfig on the one node group's
ARN, and s3:PutObject under ``<bucket>/<stack>/idle-guard/`` of the run bucket (where it writes the decisions
that acted or failed), nothing else; both EKS actions take the ``nodegroup`` resource type
(https://docs.aws.amazon.com/service-authorization/latest/reference/list_amazonelastickubernetesservice.html),
and PutObject the ``object`` type, an ARN of ``bucket/key`` that may end in a wildcard
(https://docs.aws.amazon.com/service-authorization/latest/reference/list_amazons3.html). The guard never
reads, lists or deletes there. The policy pack's ``idle-guard-least-privilege`` holds this. In Kubernetes it
may create Events in its namespace and read and patch its one record ConfigMap.

The guard runs the Ray image by the reference the Ray pods use (through the stack's pull-through cache when
imageCache is on: the rule serves all of public.ecr.aws, where rayImage must then be): the head already pulled it
onto the system node, so the guard adds no image pull and no second image to pin. It reaches the Ray head's job
server through the head Service, a ClusterIP Service (8265 never leaves the cluster: infra/manifests.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s

from infra.config import IRSA, GpuNodesConfig, RayConfig
from infra.names import IDLE_GUARD, IDLE_GUARD_RECORD, ROLE_LABEL, SYSTEM_ROLE
from infra.pod_identity import IRSA_ROLE_ANNOTATION, irsa_trust_policy, trust_policy

SCRIPT = Path(__file__).parent / "idle_guard_script.py"
SCRIPT_DIR = "/idle-guard"
GUARD_ACTIONS = ("eks:DescribeNodegroup", "eks:UpdateNodegroupConfig")
GUARD_S3_ACTIONS = ("s3:PutObject",)
SCHEDULE = "*/5 * * * *"  # a decision every 5 minutes: the guard acts at most 5 minutes after gpuIdleMinutes
RAY_JOB_PORT = 8265  # the head's dashboard and job server (infra/manifests.py RAY_PORTS)


def guard_policy(nodegroup_arn: str, bucket_arn: str, records_prefix: str) -> dict[str, Any]:
    """The guard's only permissions: read and resize the one GPU node group, and put its records under
    ``records_prefix`` (no slashes at the ends) of the run bucket."""
    scale = {"Sid": "ScaleTheGpuNodeGroup", "Effect": "Allow", "Action": list(GUARD_ACTIONS)}
    write = {"Sid": "WriteGuardRecords", "Effect": "Allow", "Action": list(GUARD_S3_ACTIONS)}
    return {
        "Version": "2012-10-17",
        "Statement": [
            {**scale, "Resource": [nodegroup_arn]},
            {**write, "Resource": [f"{bucket_arn}/{records_prefix}/*"]},
        ],
    }


def guard_rbac_rules() -> list[dict[str, Any]]:
    """Create Events (what it did) and read and patch its record ConfigMap, in its own namespace only."""
    return [
        {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]},
        {
            "apiGroups": [""],
            "resources": ["configmaps"],
            "resourceNames": [IDLE_GUARD_RECORD],
            "verbs": ["get", "patch"],
        },
    ]


def guard_env(gpu: GpuNodesConfig, ray: RayConfig, region: str, records_prefix: str) -> list[dict[str, Any]]:
    """The script's settings (CLUSTER_NAME, NODEGROUP_NAME and RECORD_BUCKET are added from the stack's outputs)."""
    url = f"http://{ray.head_service_name}.{ray.namespace}.svc:{RAY_JOB_PORT}/api/jobs/"
    plain = {
        "IDLE_MINUTES": str(gpu.idle_minutes),
        "IDLE_NODES": str(gpu.idle_nodes),
        "RAY_JOBS_URL": url,
        "NAMESPACE": ray.namespace,
        "RECORD_NAME": IDLE_GUARD_RECORD,
        "RECORD_PREFIX": records_prefix,
        "AWS_REGION": region,
    }
    pod_name = {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}
    return [*({"name": k, "value": v} for k, v in plain.items()), pod_name]


def guard_job_spec(image: pulumi.Input[str], env: list[dict[str, Any]]) -> dict[str, Any]:
    """The CronJob's spec: one pod at a time on the system node, never retried within a run (backoffLimit 0)."""
    container = {
        "name": IDLE_GUARD,
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["python", f"{SCRIPT_DIR}/{SCRIPT.name}"],
        "env": env,
        "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "256Mi"}},
        "volumeMounts": [{"name": "script", "mountPath": SCRIPT_DIR, "readOnly": True}],
    }
    pod = {
        "serviceAccountName": IDLE_GUARD,
        "restartPolicy": "Never",
        "nodeSelector": {ROLE_LABEL: SYSTEM_ROLE},
        "containers": [container],
        "volumes": [{"name": "script", "configMap": {"name": IDLE_GUARD}}],
    }
    return {
        "schedule": SCHEDULE,
        "concurrencyPolicy": "Forbid",
        "successfulJobsHistoryLimit": 1,
        "failedJobsHistoryLimit": 3,
        "jobTemplate": {"spec": {"backoffLimit": 0, "activeDeadlineSeconds": 240, "template": {"spec": pod}}},
    }


@dataclass(frozen=True)
class IdleGuardArgs:
    gpu: GpuNodesConfig
    ray: RayConfig
    region: str
    mode: str  # POD_IDENTITY or IRSA (podIdentityMode)
    cluster_name: pulumi.Input[str]
    nodegroup_name: pulumi.Input[str]
    nodegroup_arn: pulumi.Input[str]
    bucket_name: pulumi.Input[str]  # the run bucket (infra/storage.py)
    bucket_arn: pulumi.Input[str]
    records_prefix: str  # where in it the guard writes (infra/storage.py idle_guard_prefix)
    image: pulumi.Input[str]  # the Ray pods' image reference (through the image cache when imageCache is on)
    namespace: pulumi.Input[str]  # the Ray namespace, once it exists
    provider: k8s.Provider
    oidc_provider_arn: pulumi.Input[str] | None = None  # IRSA
    oidc_issuer: pulumi.Input[str] | None = None  # IRSA
    depends_on: tuple[pulumi.Resource, ...] = ()  # the Pod Identity agent add-on


class IdleGuard(pulumi.ComponentResource):
    """Public outputs: ``role_arn``, ``cronjob_name``."""

    def __init__(self, name: str, args: IdleGuardArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("ray-efa-eks:infra:IdleGuard", name, None, opts)
        role = self._role(name, args)
        kube = pulumi.ResourceOptions(parent=self, provider=args.provider)
        meta = {"name": IDLE_GUARD, "namespace": args.namespace}
        annotations = {IRSA_ROLE_ANNOTATION: role.arn} if args.mode == IRSA else {}
        account = k8s.core.v1.ServiceAccount(f"{name}-sa", metadata={**meta, "annotations": annotations}, opts=kube)
        k8s.rbac.v1.Role(f"{name}-rbac-role", metadata=meta, rules=guard_rbac_rules(), opts=kube)
        k8s.rbac.v1.RoleBinding(
            f"{name}-rbac-binding",
            metadata=meta,
            role_ref={"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": IDLE_GUARD},
            subjects=[{"kind": "ServiceAccount", "name": IDLE_GUARD, "namespace": args.namespace}],
            opts=kube,
        )
        script = k8s.core.v1.ConfigMap(
            f"{name}-script", metadata=meta, data={SCRIPT.name: SCRIPT.read_text()}, opts=kube
        )
        # The guard writes its record; `up` must not wipe it.
        k8s.core.v1.ConfigMap(
            f"{name}-record",
            metadata={**meta, "name": IDLE_GUARD_RECORD},
            data={"last": json.dumps({"action": "none yet", "reason": "the guard has not run"})},
            opts=pulumi.ResourceOptions(parent=self, provider=args.provider, ignore_changes=["data"]),
        )
        env = guard_env(args.gpu, args.ray, args.region, args.records_prefix)
        names = [
            {"name": "CLUSTER_NAME", "value": args.cluster_name},
            {"name": "NODEGROUP_NAME", "value": args.nodegroup_name},
            {"name": "RECORD_BUCKET", "value": args.bucket_name},
        ]
        cronjob = k8s.batch.v1.CronJob(
            f"{name}-cronjob",
            metadata=meta,
            spec=_with_env(guard_job_spec(args.image, env), names),
            opts=pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=[account, script]),
        )
        self.role_arn: pulumi.Output[str] = role.arn
        self.cronjob_name: pulumi.Output[str] = cronjob.metadata["name"]
        self.register_outputs({"role_arn": self.role_arn, "cronjob_name": self.cronjob_name})

    def _role(self, name: str, args: IdleGuardArgs) -> aws.iam.Role:
        """The IAM role, its one policy, and (Pod Identity) the association with the guard's ServiceAccount."""
        child = pulumi.ResourceOptions(parent=self)
        if args.mode == IRSA:
            trust = pulumi.Output.all(args.oidc_provider_arn, args.oidc_issuer).apply(
                lambda v: json.dumps(irsa_trust_policy(v[0], v[1], args.ray.namespace, IDLE_GUARD))
            )
        else:
            trust = pulumi.Output.from_input(args.cluster_name).apply(
                lambda c: json.dumps(trust_policy(c, args.ray.namespace, IDLE_GUARD))
            )
        role = aws.iam.Role(
            f"{name}-role",
            assume_role_policy=trust,
            description="Idle guard: scale the GPU node group, write its records to the run bucket",
            opts=child,
        )
        aws.iam.RolePolicy(
            f"{name}-scale",
            role=role.id,
            policy=pulumi.Output.all(args.nodegroup_arn, args.bucket_arn).apply(
                lambda v: json.dumps(guard_policy(v[0], v[1], args.records_prefix))
            ),
            opts=child,
        )
        if args.mode != IRSA:
            aws.eks.PodIdentityAssociation(
                f"{name}-association",
                cluster_name=args.cluster_name,
                namespace=args.ray.namespace,
                service_account=IDLE_GUARD,
                role_arn=role.arn,
                opts=pulumi.ResourceOptions(parent=self, depends_on=list(args.depends_on)),
            )
        return role


def _with_env(spec: dict[str, Any], extra: list[dict[str, Any]]) -> dict[str, Any]:
    """``spec`` with ``extra`` env entries (values that are stack outputs) added to the guard's container."""
    pod = spec["jobTemplate"]["spec"]["template"]["spec"]
    container = {**pod["containers"][0], "env": [*extra, *pod["containers"][0]["env"]]}
    pod = {**pod, "containers": [container]}
    job = {**spec["jobTemplate"]["spec"], "template": {"spec": pod}}
    return {**spec, "jobTemplate": {"spec": job}}
