"""What a command the driver execs in a Ray pod asks for, parsed once from its argv into a `PodRequest`.

A fake pod answers the request, not a substring of a command line: each kind is recognised by rebuilding the
driver's own command from the parsed arguments (automation/steps/verify_checks.py `FI_INFO_COMMAND`,
automation/ray_head.py, automation/storage.py `marker_probe_command`, automation/steps/gate.py,
automation/collectives_pods.py, automation/run_files.py,
workloads/nccl_check/counters.py `read_script`), so rewording a script changes no test that is not about it,
and a command the driver no longer sends is an unknown request, not a silent match. `ray job` commands are
tests/support/_ray_jobs.py's `JobRequest`.
"""

from __future__ import annotations

import enum
import shlex
from dataclasses import dataclass

from _ray_jobs import JobRequest, parse_request

from automation import collectives_pods
from automation.ray_head import RAY_RESOURCES_SNIPPET, upload_command
from automation.run_files import (
    RAY_LOGS,
    attempts_command,
    collect_command,
    pack_command,
    ray_logs_command,
    set_aside_command,
)
from automation.steps.gate import NVIDIA_SMI_COMMAND
from automation.steps.verify_checks import FI_INFO_COMMAND
from automation.storage import marker_probe_command
from automation.targets.aws import READER_SYSFS_ROOT
from workloads.nccl_check.counters import SYSFS_ROOT, read_script


class PodAction(enum.Enum):
    FI_INFO = "verify's libfabric check in a worker pod"
    RAY_RESOURCES = "what Ray advertises, read in the head pod"
    S3_MARKER = "write, read back and delete a marker in the run bucket"
    EFA_COUNTERS = "the EFA port counters of the pod's node"
    UPLOAD = "unpack the job's source from stdin"
    READ_FILE = "cat one file"
    COLLECT_LOGS = "the NCCL logs of a pod as a base64 tar"
    PACK_FILES = "named files of a run directory as a base64 tar"
    JOB = "a `ray job` command or the job list"
    SET_ASIDE = "move an ended attempt's NCCL logs aside"
    NVIDIA_SMI = "the gate's nvidia-smi query of the pod's GPUs"
    COLLECTIVES = "torchrun of workloads/collectives_bench.py (the gate's or bench's sweep)"
    ATTEMPT_LOGS = "every attempt's NCCL logs of a run as a base64 tar"
    RAY_LOGS = "the Ray worker and raylet logs of the last minutes as a base64 tar"


@dataclass(frozen=True)
class PodRequest:
    action: PodAction
    arg: str = ""  # the marker's URI, the upload's or the logs' directory, the file read, the sysfs root read
    job: JobRequest | None = None
    names: tuple[str, ...] = ()  # the files a PACK_FILES request names


def pod_request(argv: list[str]) -> PodRequest | None:
    """The request `argv` makes, or None when it is none the driver sends."""
    if argv == FI_INFO_COMMAND:
        return PodRequest(PodAction.FI_INFO)
    if argv == NVIDIA_SMI_COMMAND:
        return PodRequest(PodAction.NVIDIA_SMI)
    if argv == ["python", "-c", RAY_RESOURCES_SNIPPET]:
        return PodRequest(PodAction.RAY_RESOURCES)
    if (job := parse_request(argv)) is not None:
        return PodRequest(PodAction.JOB, job=job)
    if len(argv) == 2 and argv[0] == "cat":
        return PodRequest(PodAction.READ_FILE, argv[1])
    if argv[:2] != ["sh", "-c"] or len(argv) != 3:
        return None
    return _shell_request(argv)


def _shell_request(argv: list[str]) -> PodRequest | None:
    for root in (SYSFS_ROOT, READER_SYSFS_ROOT):  # a Ray pod's own sysfs (the old read), the reader's host view
        if argv[2] == read_script(root):
            return PodRequest(PodAction.EFA_COUNTERS, root)
    words = shlex.split(argv[2])
    if words[:2] == ["python", "-c"] and argv == marker_probe_command(words[-1]):
        return PodRequest(PodAction.S3_MARKER, words[-1])
    if words[:2] == ["rm", "-rf"] and "head" in words:
        dest, length = words[2], words[words.index("head") + 2]
        if length.isdigit() and argv == upload_command(dest, int(length)):
            return PodRequest(PodAction.UPLOAD, dest)
    if words[:1] == ["cd"] and argv == collect_command(words[1]):
        return PodRequest(PodAction.COLLECT_LOGS, words[1])
    if words[:1] == ["["] and "mv" in words and argv == set_aside_command(words[2], int(words[-3].rsplit("-", 1)[1])):
        return PodRequest(PodAction.SET_ASIDE, words[2])
    if words[:3] == ["cd", collectives_pods.SRC, "&&"] and "workloads.collectives_bench" in words:
        return PodRequest(PodAction.COLLECTIVES, words[words.index("--out") + 1])  # arg: the document it writes
    if words[:1] == ["cd"] and argv == attempts_command(words[1]):
        return PodRequest(PodAction.ATTEMPT_LOGS, words[1])
    if words[:2] == ["cd", RAY_LOGS] and argv == ray_logs_command(int(words[words.index("-mmin") + 1][1:])):
        return PodRequest(PodAction.RAY_LOGS, RAY_LOGS)
    if words[:1] == ["cd"] and "ls" in words:
        start = words.index("ls") + 1
        names = tuple(words[start : words.index("2>/dev/null", start)])
        if argv == pack_command(words[1], names):
            return PodRequest(PodAction.PACK_FILES, words[1], names=names)
    return None


def asks(argv: list[str], action: PodAction) -> bool:
    """Whether `argv` is a request of kind `action`."""
    request = pod_request(argv)
    return request is not None and request.action is action
