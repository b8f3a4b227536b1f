"""Prove from NCCL_DEBUG=INFO logs that EFA carried a run's inter-node collectives, or fail with
the evidence. Standard library only: it runs in the training container and in the driver.

    from workloads.nccl_check import check_logs
    report = check_logs(["runs/<run_id>/nccl"], require="efa", run_id="<run_id>")
    print(report.render()); raise SystemExit(report.exit_code)

CLI: ``python -m workloads.nccl_check --require efa [--run-id ID] [--json] PATH...``
"""

from .parser import RUN_MARKER, ScanState, classify_transport, run_marker
from .records import Connection, Evidence, FileStatus, ProcessInfo, Transport
from .report import EXIT_CODES, Report, check_logs
from .verdict import REQUIREMENTS

__all__ = [
    "EXIT_CODES",
    "REQUIREMENTS",
    "RUN_MARKER",
    "Connection",
    "Evidence",
    "FileStatus",
    "ProcessInfo",
    "Report",
    "ScanState",
    "Transport",
    "check_logs",
    "classify_transport",
    "run_marker",
]
