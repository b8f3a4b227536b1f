"""The one parser of every path a user hands over: flags (`--data`, `--storage-path`, `--summary-json`,
`--out`) and the stack's `train:` keys that name a place.

Accepted forms: a local path (`data/corpus.jsonl`, `/abs/dir`, `~/x`, `./s3:odd-name`), `file:///abs/path`
(the same local path, as Ray and pyarrow spell it), and `s3://bucket/prefix` with a bucket name as S3
allows it (https://docs.aws.amazon.com/AmazonS3/latest/userguide/bucketnamingrules.html). Anything
else is refused before anything starts, naming the flag, the value and these forms: another scheme
(`gs://`, `http://`, `hdfs://`), a malformed S3 form (`s3:/bucket`, `s3:bucket`, `s3://`,
`s3:///key`, `S3://Bucket`), a path with a NUL byte. A local path that merely looks like a scheme
(`s3:bucket`) was once written to a folder named `s3:`; write `./s3:bucket` if that is meant.

Standard library only: both `workloads/` and `automation/` use it (workloads imports neither
automation nor infra), and it touches neither the filesystem nor the network.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar
from urllib.parse import unquote

from workloads.errors import TrainConfigError

ACCEPTED = "a local path, file:///absolute/path or s3://bucket/prefix"
# A bucket name: 3-63 of a-z 0-9 . -, starting and ending with a letter or digit (S3's rules).
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
# What reads as a URI scheme: letters, then letters, digits, + . - and a colon ("c:" is no scheme
# on Linux either, but a one-letter scheme is rarer than a drive-like folder name, so two or more).
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+):")
NETWORK_TIMEOUT_S = 60.0

T = TypeVar("T")


@dataclass(frozen=True)
class Location:
    """Where a flag points: ``kind`` is "local" (``path`` holds it, ~ expanded) or "s3"
    (``bucket`` and ``key``; ``uri`` is ``s3://bucket/key``)."""

    kind: str
    uri: str
    path: str = ""
    bucket: str = ""
    key: str = ""

    @property
    def remote(self) -> bool:
        return self.kind == "s3"


def parse_location(flag: str, text: str, *, remote: bool = True) -> Location:
    """``text`` as a Location, or TrainConfigError naming ``flag``, the value and the accepted forms.

    ``remote=False`` refuses s3:// too (a file this machine writes, such as --summary-json).
    """
    accepted = ACCEPTED if remote else "a local path (or file:///absolute/path)"
    if not text.strip():
        raise TrainConfigError(f"{flag} {text!r} is empty: pass {accepted}")
    if "\0" in text:
        raise TrainConfigError(f"{flag} {text!r} holds a NUL byte: pass {accepted}")
    match = _SCHEME.match(text)
    if match is None:
        return Location("local", text, path=str(Path(text).expanduser()))
    scheme, rest = match.group(1), text[match.end() :]
    if scheme == "file" and rest.startswith("///"):
        # A file URI's path is percent-encoded (RFC 8089 over RFC 3986's path): file:///a%20b is "/a b".
        return Location("local", text, path=unquote(rest[2:]))
    if scheme != "s3" or not rest.startswith("//"):
        hint = "write s3://bucket/prefix (two slashes)" if scheme.lower() == "s3" else f"{scheme}: is not read here"
        raise TrainConfigError(
            f"{flag} {text!r} is not a path this project reads ({hint}): pass {accepted}; "
            f"for a local folder of that name write ./{text}"
        )
    if not remote:
        raise TrainConfigError(f"{flag} {text!r} is remote but this file is written on this machine: pass {accepted}")
    bucket, _, key = rest[2:].partition("/")
    if not _BUCKET.match(bucket):
        why = "names no bucket" if not bucket else f"has no valid bucket name ({bucket!r}: 3-63 of a-z 0-9 . -)"
        raise TrainConfigError(f"{flag} {text!r} {why}: pass {accepted}")
    return Location("s3", f"s3://{bucket}/{key}", bucket=bucket, key=key)


def within(seconds: float, what: str, call: Callable[[], T]) -> T:
    """``call()``'s result, or TrainConfigError when it has not answered in ``seconds`` (a network path that
    hangs: no route, a firewall that drops packets). The call goes on in a daemon thread, which the
    process's exit does not wait for."""
    box: dict = {}

    def run() -> None:
        try:
            box["value"] = call()
        except BaseException as e:  # noqa: BLE001 - handed to the caller's thread as it is
            box["error"] = e

    worker = threading.Thread(target=run, name=f"within-{what}", daemon=True)
    worker.start()
    worker.join(seconds)
    if worker.is_alive():
        raise TrainConfigError(
            f"{what} did not answer within {seconds:g} s: check the network, the AWS region and credentials "
            "(aws s3 ls on the same URI), then retry"
        )
    if "error" in box:
        raise box["error"]
    return box["value"]
