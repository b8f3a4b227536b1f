"""The training module and the NCCL check. Imports torch, ray and transformers, never pulumi, infra or automation.

CONTRACT_MODULES are what the other packages may import from here: `TrainConfig` (the stack's `train:`
block is checked against its fields), the path parser, the shared error, the workers' environment, the
run summary (`RunSummary`, summary.json) and the throughput model the driver predicts with. They import
only the standard library and each other, so the Pulumi program's virtualenv (infra's dependencies only)
runs them; .ci/checks/contract_imports.py holds both rules.
"""

CONTRACT_MODULES = (
    "workloads.config",
    "workloads.errors",
    "workloads.uri",
    "workloads.env",
    "workloads.summary",
    "workloads.throughput_model",
)
