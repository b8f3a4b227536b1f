"""Names the cluster defines and the code that talks to it must spell the same way.

Each name is defined here once and imported: by infra's builders (manifests.py), by the driver
(`automation` imports `infra`), and by the policy pack (infra/policy/policies.py, which runs in
its own virtualenv and adds the repository root to its path for this module only). This module
and ``infra/__init__.py`` import nothing, so any of them can import it without the Pulumi SDKs.

What the training workers must agree on with the cluster's pods (the NCCL debug level) lives in
``workloads/env.py``, which imports nothing: ``infra`` imports it from there (workloads may not
import infra). Where each shared name lives is listed in CONTRIBUTING.md, with the greps that check it.
"""

from __future__ import annotations

# Node labels: the node groups set them, pods select on them, verify and status list nodes by them.
ROLE_LABEL = "role"
SYSTEM_ROLE = "system"
GPU_ROLE = "gpu-worker"
GPU_NODE_SELECTOR = f"{ROLE_LABEL}={GPU_ROLE}"  # Kubernetes label-selector spelling

# Extended resources the device plugins advertise on a node and the worker pods request
# (https://github.com/NVIDIA/k8s-device-plugin; https://docs.aws.amazon.com/eks/latest/userguide/node-efa.html).
GPU_RESOURCE = "nvidia.com/gpu"
EFA_RESOURCE = "vpc.amazonaws.com/efa"

# Mounted (an emptyDir) in every Ray pod: runs live under RUN_ROOT/runs/<run-id>, the job's code
# under RUN_ROOT/src/<run-id>.
RUN_ROOT = "/tmp/ray-efa-eks"

# The idle guard (infra/idle_guard.py): its CronJob, ServiceAccount and Role share IDLE_GUARD; the ConfigMap
# IDLE_GUARD_RECORD holds its last decision, which `python -m automation status` reads.
IDLE_GUARD = "idle-guard"
IDLE_GUARD_RECORD = "idle-guard-record"
# The key folder, under the stack's prefix of the run bucket, where the guard writes the decisions that acted or
# failed; its role may put objects there and nowhere else (the policy pack's idle-guard-least-privilege).
IDLE_GUARD_S3_FOLDER = IDLE_GUARD

# The EKS node monitoring agent: the EKS add-on's name, which is also its DaemonSet's name in kube-system and its
# pods' app.kubernetes.io/name label (the chart's nameOverride and fullnameOverride, charts/eks-node-monitoring-agent/
# values.yaml; the DaemonSet and label the agent's own e2e test reads, e2e/suites/basic/deployment.go; both in
# aws/eks-node-monitoring-agent at tag v1.7.0). The stack installs it, the policy pack requires it, verify finds it.
NODE_MONITORING_AGENT = "eks-node-monitoring-agent"
NODE_MONITORING_NAMESPACE = "kube-system"

# The EFA counter reader (infra/manifests.py `efa_counter_reader_daemonset`): one pod per GPU node, beside the device
# plugins, with the host's sysfs mounted read-only at HOST_SYS_MOUNT. The kernel gives a pod of its own network
# namespace no per-port hw_counters (docs/efa-witnesses.md, "Where the counters are read"), so the driver reads them
# there; the policy pack allows that one hostPath and no other. Its pods carry APP_LABEL=EFA_COUNTER_READER.
EFA_COUNTER_READER = "efa-counter-reader"
EFA_COUNTER_READER_NAMESPACE = "kube-system"
APP_LABEL = "app.kubernetes.io/name"
HOST_SYS = "/sys"
HOST_SYS_MOUNT = "/host/sys"
