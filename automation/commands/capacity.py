"""`python -m automation capacity`: where an EFA GPU type can be had now, ranked (automation/capacity_finder.py).

    python -m automation capacity --instance-type g6.12xlarge --count 2                 # the stacks' regions
    python -m automation capacity --instance-type g6.12xlarge --count 2 --regions us-east-1 us-east-2
    python -m automation capacity --instance-type g6.12xlarge --count 2 --all-regions --json
    python -m automation capacity --instance-type g6.12xlarge --count 2 --probe         # asks first
    python -m automation capacity --instance-type g6.12xlarge --count 2 --write-stack east1  # Pulumi.east1.yaml
    python -m automation capacity --cleanup       # cancel probe reservations a killed --probe left, every region

Without --regions or --all-regions it looks in the regions of the project's Pulumi.<stack>.yaml files.
Every flag is checked before any AWS call; no credentials is one line and exit 2, as for the other commands.
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
from rich.table import Column, Table

from automation.aws_clients import Session
from automation.capacity_finder import RegionClients, Zone, ranking_lines, spot_types, stack_file_text, survey
from automation.capacity_probe import cleanup, probe
from automation.ec2 import offered_azs, spot_quota_for
from automation.errors import DriverError
from automation.flags import Mode, not_in, stack_named_by_file
from automation.targets.aws import check_aws_files
from automation.ui import Ui, tty_confirm
from infra.config import GpuNodesConfig, StackConfigError, SystemNodesConfig, read_stack_file
from infra.config_files import known_regions, known_stacks
from infra.config_schema import close_match
from infra.eks_facts import CAPACITY_BLOCKS_GUIDE, capacity_block_eligible

HELP = "rank regions and AZs by how likely N instances of an EFA GPU type are to be had (offer, quota, signals)"
_SPOT_CAP = {True: " capped", False: "", None: " quota?"}  # None: the Spot quota was not read
# The table after its "#": each column's header and a zone's cell.
COLUMNS: tuple[tuple[str, Callable[[Zone], str]], ...] = (
    ("region", lambda z: z.region),
    ("AZ", lambda z: z.az or "-"),
    ("offered", lambda z: "yes" if z.offered else "no"),
    ("EFA", lambda z: {True: "yes", False: "no", None: "?"}[z.efa]),
    ("vCPU free/need", lambda z: "?" if z.vcpus_free is None else f"{z.vcpus_free:g}/{z.vcpus_needed}"),
    ("spot (family)", lambda z: "-" if z.spot_score is None else f"{z.spot_score}{_SPOT_CAP[z.spot_capped]}"),
    ("reservations", lambda z: ", ".join(z.reservations) or "-"),
    (
        "blocks",
        lambda z: ", ".join(f"{b['start']} {b['hours']}h {b['upfront_fee']} {b['currency']}" for b in z.blocks) or "-",
    ),
    ("$/h", lambda z: "?" if z.usd_per_hour is None else f"{z.usd_per_hour:.4f}"),
    ("probe", lambda z: z.probe or "-"),
)


def add_parser(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("capacity", parents=parents, help=HELP, description=HELP)
    cleanup = Mode("--cleanup", lambda args: args.cleanup)
    instance_type = p.add_argument(
        "--instance-type",
        default=GpuNodesConfig.instance_type,
        help="an instance type of infra/data/instance_types.json "
        f"(default: {GpuNodesConfig.keyname('instance_type')}'s default)",
    )
    count = p.add_argument("--count", type=int, default=GpuNodesConfig.node_count, help="instances needed in one AZ")
    for flag in (instance_type, count):
        not_in(flag, cleanup, "it cancels every probe reservation this tool left, of any type and size")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--regions", nargs="+", metavar="REGION", help="regions to look in (space or comma separated)")
    where.add_argument("--all-regions", action="store_true", help="every region the account has enabled")
    probe = p.add_argument(
        "--probe", action="store_true", help="create and cancel at once a targeted reservation per AZ"
    )
    not_in(probe, cleanup, "it only cancels probe reservations: probe in a command of its own")
    yes = p.add_argument("--yes", action="store_true", help="--probe without asking")
    not_in(yes, Mode("without --probe", lambda args: not args.probe), "it answers --probe's question")
    p.add_argument(
        "--cleanup",
        action="store_true",
        help="cancel the probe reservations an interrupted --probe left (every enabled region unless --regions)",
    )
    write = p.add_argument("--write-stack", metavar="NAME", help="write Pulumi.NAME.yaml for the best-ranked usable AZ")
    not_in(write, cleanup, "it only cancels probe reservations: write a stack in a command of its own")


def check_args(args: argparse.Namespace) -> list[str] | None:
    """Bad input as one-line errors (exit 2) before any AWS call; the regions asked for (None: all enabled)."""
    # The flags share the stack keys' own checks (gpuInstanceType, gpuNodeCount), so they say the same.
    gpu = GpuNodesConfig.__dataclass_fields__
    try:
        gpu["instance_type"].metadata["check"]("--instance-type", args.instance_type)
        gpu["node_count"].metadata["check"]("--count", args.count)
    except StackConfigError as e:
        raise _bad(str(e)) from None
    if args.write_stack is not None:
        meant = stack_named_by_file(args.write_stack)
        if meant is not None:
            raise _bad(
                f"--write-stack {args.write_stack!r} is a file name: pass the stack's name, --write-stack {meant} "
                f"(it writes Pulumi.{meant}.yaml in the project)"
            )
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}", args.write_stack):
            raise _bad(f"--write-stack {args.write_stack!r} is no stack name: use letters, digits, . _ -")
        if (Path(args.project_dir) / f"Pulumi.{args.write_stack}.yaml").exists():
            raise _bad(f"--write-stack {args.write_stack}: Pulumi.{args.write_stack}.yaml exists; pick another name")
    if args.all_regions or (args.cleanup and not args.regions):
        return None  # --cleanup looks in every enabled region: a probe may have run with any --regions
    regions = [r for item in (args.regions or []) for r in item.split(",") if r]
    if not regions:
        return default_regions(Path(args.project_dir))
    for r in regions:
        if r not in known_regions():
            raise _bad(f"--regions {r!r} is not an AWS region: {close_match(r, known_regions())}")
    return list(dict.fromkeys(regions))


def _bad(message: str) -> DriverError:
    return DriverError(message, exit_code=2)  # bad input: exit 2 before any AWS call


def default_regions(project_dir: Path) -> list[str]:
    """The regions of the project's stacks (aws:region of each Pulumi.<stack>.yaml)."""
    regions = []
    for stack in known_stacks(project_dir):
        try:
            regions.append(read_stack_file(stack, project_dir).region)
        except StackConfigError as e:
            raise _bad(f"{e} (or pass --regions REGION ... to look elsewhere)") from None
    found = list(dict.fromkeys(r for r in regions if r))
    if not found:
        raise _bad("no stack names a region: pass --regions REGION ... or --all-regions")
    return found


def aws_session() -> Session:
    """A boto3 session with credentials; DriverError (exit 2) naming the fix when there are none."""
    import boto3

    check_aws_files(os.environ)
    session = boto3.Session()
    if session.get_credentials() is None:
        raise _bad(
            "no AWS credentials: run `aws configure` (or `aws sso login`), or set AWS_PROFILE; "
            "the capacity finder reads EC2 and Service Quotas in each region"
        )
    return session


def run(
    args: argparse.Namespace, ui: Ui, session: Session | None = None, confirm: Callable[[str], bool] = tty_confirm
) -> int:
    regions = check_args(args)
    session = session or aws_session()
    if regions is None:
        answer = session.client("ec2", region_name="us-east-1").describe_regions()
        regions = sorted(r["RegionName"] for r in answer["Regions"])
    if args.cleanup:
        return _cleanup(ui, session, regions, args.json)
    pricing = session.client("pricing", region_name="us-east-1")  # the Pricing API's endpoint

    def clients_for(region: str) -> RegionClients:
        ec2 = session.client("ec2", region_name=region)
        return RegionClients(ec2, session.client("service-quotas", region_name=region))

    # The survey, regions in parallel, with a bar of regions done (on stderr under --json).
    bar = Progress(
        TextColumn("[bold]capacity[/] regions"), MofNCompleteColumn(), BarColumn(), console=ui.console, transient=True
    )
    task = bar.add_task("regions", total=len(regions))
    with bar:
        zones = survey(
            regions, clients_for, pricing, args.instance_type, args.count, on_region=lambda r: bar.advance(task)
        )
    if args.probe:
        zones = _probe(ui, zones, session, args, confirm)
    written = _write_stack(args, zones, session)
    _show(ui, args, zones, written)
    return 0


def _cleanup(ui: Ui, session: Session, regions: list[str], as_json: bool) -> int:
    said: list[str] = []

    def say(line: str) -> None:
        said.append(line)
        ui.note(line)

    cleanup(regions, lambda region: session.client("ec2", region_name=region), say)
    if as_json:
        ui.emit_json({"regions": regions, "said": said})
    else:
        ui.note(f"no probe reservation is left in {len(regions)} region(s)")
    return 0


def _probe(
    ui: Ui, zones: list[Zone], session: Session, args: argparse.Namespace, confirm: Callable[[str], bool]
) -> list[Zone]:
    usable = [z for z in zones if z.usable]
    if not usable:
        ui.note("--probe: no usable AZ (offered, with EFA, within the quota) to probe")
        return zones
    question = (
        f"--probe creates a targeted On-Demand Capacity Reservation of {args.count} x {args.instance_type} in each of "
        f"{len(usable)} AZ(s) ({', '.join(z.az for z in usable)}) and cancels it at once; a reservation is billed at "
        "the On-Demand rate while it exists. Go ahead?"
    )
    if not (args.yes or confirm(question)):
        raise DriverError("--probe not confirmed: no reservation was made (pass --yes to skip the question)")
    return probe(
        zones, lambda region: session.client("ec2", region_name=region), args.instance_type, args.count, say=ui.note
    )


def _write_stack(args: argparse.Namespace, zones: list[Zone], session: Session) -> Path | None:
    """Pulumi.NAME.yaml for the best usable AZ, its second AZ one that offers the system node type (the system node
    group spans both AZs' private subnets)."""
    if args.write_stack is None:
        return None
    best = next((z for z in zones if z.usable), None)
    if best is None:
        raise DriverError(f"--write-stack {args.write_stack}: no usable AZ was found, so no stack was written")
    system = SystemNodesConfig.instance_type
    system_azs = offered_azs(session.client("ec2", region_name=best.region), system)
    text = stack_file_text(args.write_stack, best, args.instance_type, args.count, system_azs)
    if text is None:
        raise DriverError(
            f"--write-stack {args.write_stack}: no AZ of {best.region} but {best.az} offers the system node type "
            f"{system} ({SystemNodesConfig.keyname('instance_type')}), and the control plane needs two AZs; "
            "try another region with --regions"
        )
    path = Path(args.project_dir) / f"Pulumi.{args.write_stack}.yaml"
    path.write_text(text)
    return path


def _show(ui: Ui, args: argparse.Namespace, zones: list[Zone], written: Path | None) -> None:
    fixes, types = sorted({z.quota_fix for z in zones if z.quota_fix}), spot_types(args.instance_type)
    blocks_note = (
        ""
        if capacity_block_eligible(args.instance_type)
        else f"{args.instance_type} has no Capacity Blocks ({CAPACITY_BLOCKS_GUIDE})"
    )
    if args.json:
        ui.emit_json(
            {
                "instance_type": args.instance_type,
                "count": args.count,
                "zones": [z.to_dict() for z in zones],
                "quota_increase": fixes,
                "capacity_blocks": blocks_note or "eligible",
                "spot_types": list(types),
                "ranking": ranking_lines(zones),
                "written": str(written) if written else None,
            }
        )
        return
    table = Table(*(Column(h, overflow="fold") for h in ("#", *dict(COLUMNS))), header_style="bold")
    for i, z in enumerate(zones, 1):
        table.add_row(str(i), *(escape(cell(z)) for _, cell in COLUMNS))
    ui.console.print(table)
    for z in zones:
        for note in z.notes:
            ui.note(f"{z.region} {z.az}: {note}".replace("  ", " "))
    for fix in fixes:
        ui.note(f"quota short: {fix}")
    if blocks_note:
        ui.note(blocks_note)
    quota = spot_quota_for(args.instance_type)
    ui.note(
        f"spot (family): EC2's Spot placement score for any of {', '.join(types)} "
        "(at least three types, as EC2 asks), one AZ each; 'capped': the "
        + (f"'{quota[1]}' quota ({quota[0]})" if quota else "Spot vCPU quota")
        + " is below the vCPUs asked"
    )
    for line in ranking_lines(zones):
        ui.note(line)
    if written:
        ui.note(f"wrote {written}: `python -m automation preflight --stack {args.write_stack}` checks it")
