"""CLI: python -m workloads.nccl_check --require {efa,socket,any} [--run-id ID] [--json] PATH..."""

from __future__ import annotations

import argparse
import json
import sys

from .report import MAX_LOG_BYTES, check_logs
from .verdict import REQUIREMENTS

EPILOG = f"""exit codes:
  0  pass          the requirement is proven by inter-node channel connections
  1  fail          fallback or wrong transport (e.g. NET/Socket, NET/IB, a non-efa provider)
  2  inconclusive  no inter-node traffic (single node), the provider was not logged, or a
                   log in scope is empty (that rank wrote nothing): EFA not proven
  3  bad input     a path is missing or unreadable, a path in scope is not a regular file
                   (a FIFO, a device such as /dev/zero, a socket) or is larger than any log
                   ({MAX_LOG_BYTES >> 30} GiB), no NCCL_DEBUG=INFO output (of this run) was found, the
                   logs hold several runs and no --run-id picks one, or the command line is wrong

without --run-id the logs must be of one run: the run markers and the per-rank file names
(nccl.<run_id>.rank<R>...) they hold name it, and the report names it; logs naming several
runs are bad input, never judged together.

run scoping (--run-id ID): files under a folder named ID, or whose name contains ID, are read
whole; other files found in directories are skipped; other files named here are read as
combined logs from the line 'ray-efa-eks nccl-run run_id=ID' to the next marker of another run.
"""


def run_id(text: str) -> str:
    """An argparse type: a run id that scopes something (an unset shell variable gives "")."""
    if not text.strip() or text != text.strip():
        raise argparse.ArgumentTypeError(
            f"{text!r} is no run id (an unset shell variable?): pass the run's id, e.g. "
            "--run-id 20261204-170212-fa9897, or leave --run-id out to read every file given"
        )
    return text


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        # argparse exits 2 on a bad command line, which here means "inconclusive".
        self.print_usage(sys.stderr)
        self.exit(3, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="python -m workloads.nccl_check",
        description="Check NCCL_DEBUG=INFO logs of one run: did inter-node collectives go over EFA?",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("paths", nargs="+", metavar="PATH", help="log files or directories (read recursively)")
    p.add_argument(
        "--require",
        choices=REQUIREMENTS,
        default="efa",
        help="efa: aws-ofi-nccl with provider efa; socket: TCP sockets; any: any transport (default: efa)",
    )
    p.add_argument("--run-id", type=run_id, default=None, help="read only this run's content (not empty)")
    p.add_argument("--json", action="store_true", help="print the structured report as JSON")
    return p


def main(argv: list[str] | None = None) -> int:
    # a file name that is not UTF-8 must not end the report with an encoding traceback
    for out in (sys.stdout, sys.stderr):
        if hasattr(out, "reconfigure"):
            out.reconfigure(errors="backslashreplace")
    args = build_parser().parse_args(argv)
    report = check_logs(args.paths, require=args.require, run_id=args.run_id)
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        print(report.render())
    return report.exit_code


if __name__ == "__main__":
    sys.exit(main())
