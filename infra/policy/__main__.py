"""Entry point the pulumi CLI runs for `pulumi preview --policy-pack infra/policy`.

Constructing the PolicyPack starts the policy server and blocks, so the tests import
``policies.POLICIES`` instead (tests/infra/policy/test_policies.py).

The CLI runs this file through ``python -m pulumi.policy ENGINE_ADDRESS PACK_DIR`` (pulumi's
pulumi/policy/__main__.py, which ``runpy.run_path``s it). Run any other way (``python -m
infra.policy``) the server would print a bare port number and wait forever, so this says what the
pack is for and exits 2 instead.
"""

import sys
from pathlib import Path

USAGE = (
    "infra/policy is a CrossGuard policy pack: the pulumi CLI runs it, it is not a command. Check a stack "
    "against it with `pulumi preview --stack us-west-2 --policy-pack infra/policy`; offline, "
    "`python -m pytest tests/infra/policy/test_policies.py` runs the same policies over the mock render"
)


def ran_by_pulumi(spec, argv: list[str]) -> bool:
    """Whether the pulumi CLI's policy host runs this file: it passes the engine address and the pack's
    directory, and runs the file by path (no module spec of ours)."""
    ours = spec is not None and spec.name.startswith("infra.policy")
    return not ours and len(argv) >= 3


if __name__ == "__main__" and not ran_by_pulumi(__spec__, sys.argv):
    print(f"error: {USAGE}", file=sys.stderr)
    sys.exit(2)

from pulumi_policy import EnforcementLevel, PolicyPack  # noqa: E402

# The CLI runs this file, not the package: the pack's directory for `policies`, the repository root for
# `infra.names` (the names the cluster and the policies must spell alike; policies.py says why it may).
sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[2])]
from policies import POLICIES  # noqa: E402

PolicyPack(name="ray-efa-eks", enforcement_level=EnforcementLevel.MANDATORY, policies=POLICIES)
