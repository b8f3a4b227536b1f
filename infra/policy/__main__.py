"""Entry point the pulumi CLI runs for `pulumi preview --policy-pack infra/policy`.

Constructing the PolicyPack starts the policy server and blocks, so the tests import
``policies.POLICIES`` instead (tests/pulumi/test_policy_pack.py).
"""

import sys
from pathlib import Path

from pulumi_policy import EnforcementLevel, PolicyPack

# The CLI runs this file, not the package: the pack's directory for `policies`, the repository root for
# `infra.names` (the names the cluster and the policies must spell alike; policies.py says why it may).
sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[2])]
from policies import POLICIES  # noqa: E402

PolicyPack(name="ray-efa-eks", enforcement_level=EnforcementLevel.MANDATORY, policies=POLICIES)
