"""The pinned torchao a float8 job needs, shipped with the job as Ray `py_modules` directories.

Why not Ray's `pip` field: the cluster image's interpreter is the `/opt/venv` virtualenv, and for a `pip` runtime
env Ray 2.58 first copies the running interpreter's whole environment on each node when that interpreter is a
virtualenv (ray/_private/runtime_env/pip.py:264 `create_or_get_virtualenv`; virtualenv_utils.py:13-20
`is_in_virtualenv`, :61-75 runs `_clonevirtualenv.py <sys.prefix> <target>/virtualenv`), inside the 600 s
runtime-env setup budget (ray/runtime_env/runtime_env.py:41), and then asks a package index.
Why not `py_modules` with the .whl itself: Ray installs a wheel entry with the `pip` found on the agent's PATH
(ray/_private/runtime_env/py_modules.py:216-221 -> packaging.py:1317-1322, `pip install <wheel> --target=<dir>`),
so it depends on that `pip` and the wheel's tag matching its interpreter. A directory entry needs nothing on the
node: the submitting CLI zips it (py_modules.py:103-126, the directory itself kept as the archive's top folder),
each node unpacks it once per content hash and puts the unpacked folder first on the workers' PYTHONPATH
(py_modules.py:225-242, working_dir.py:153 `set_pythonpath_in_context`). So the driver downloads the wheel once
into this user's cache, checks its sha256 and unpacks `torchao/` and its `.dist-info/` (which
`importlib.metadata.version("torchao")` reads) into two such directories; the wheel's top-level `test/` package is
left out. torchao's compiled extensions are optional: its `__init__` loads each `_C*.so` in a try and only logs a
failure, and the float8 training path is Python over `torch._scaled_mm` (torchao 0.17.0 `torchao/__init__.py`).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from automation.errors import DriverError
from workloads.config import TrainConfig


@dataclass(frozen=True)
class Wheel:
    """A wheel file by its name (PEP 427: `{name}-{version}-{tags}.whl`) and sha256 (the digest `pip hash` gives)."""

    filename: str
    sha256: str

    @property
    def pin(self) -> str:
        name, version = self.filename.split("-")[:2]
        return f"{name}=={version}"


# torchao 0.17.0's one Linux x86_64 wheel (cp310-abi3: any CPython >= 3.10, so the image's 3.13), no runtime
# requirements in its METADATA; its digest as `pip download torchao==0.17.0` then `pip hash` give it.
TORCHAO_WHEEL = Wheel(
    "torchao-0.17.0-cp310-abi3-manylinux_2_24_x86_64.manylinux_2_28_x86_64.whl",
    "87a418ce0ec064a821ceab83c921b501acef0ce9a6ccd1be358fcd16c3ae8c58",
)


def pip_download(wheel: Wheel, dest: Path) -> None:
    """`pip download` of ``wheel``'s pin into ``dest``, for the cluster's platform whatever this machine is, through
    the index and proxy this user's pip is set up with; DriverError when pip fails."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--quiet"]
    cmd += ["--platform", "manylinux_2_28_x86_64", "--python-version", "3.13", "--implementation", "cp"]
    run = subprocess.run([*cmd, "-d", str(dest), wheel.pin], capture_output=True, text=True, timeout=600)
    if run.returncode != 0:
        raise DriverError(f"`pip download {wheel.pin}` failed (rc {run.returncode}): {run.stderr.strip()[-300:]}")


def _sha256(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def fetch(wheel: Wheel, cache: Path, download: Callable[[Wheel, Path], None] = pip_download) -> Path:
    """The wheel file in ``cache``, downloaded if absent; DriverError when it cannot be had or its sha256 differs."""
    path = cache / "wheels" / wheel.filename
    if path.is_file() and _sha256(path) == wheel.sha256:
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    fix = "set float8: off in the stack's train: block to run the job in bf16 without it"
    with tempfile.TemporaryDirectory(dir=path.parent) as tmp:
        try:
            download(wheel, Path(tmp))
        except (DriverError, OSError, subprocess.SubprocessError) as e:
            raise DriverError(f"could not download {wheel.filename} ({e}): {fix}") from None
        got_file = Path(tmp) / wheel.filename
        if not got_file.is_file():
            raise DriverError(f"the download of {wheel.pin} gave no {wheel.filename}: {fix}")
        got = _sha256(got_file)
        if got != wheel.sha256:
            raise DriverError(f"{wheel.filename} has sha256 {got}, expected {wheel.sha256}: {fix}")
        return got_file.replace(path)


def unpack(wheel_file: Path, dest: Path, package: str) -> list[Path]:
    """``package``'s folder and its `.dist-info` folder from ``wheel_file``, unpacked under ``dest`` (once)."""
    with zipfile.ZipFile(wheel_file) as z:
        names = z.namelist()
        info = next((n.split("/")[0] for n in names if n.split("/")[0].endswith(".dist-info")), None)
        if info is None or not any(n.startswith(f"{package}/") for n in names):
            raise DriverError(f"{wheel_file} holds no {package}/ and .dist-info/ folder: not a wheel of {package}")
        folders = [dest / package, dest / info]
        if not all(f.is_dir() for f in folders):
            shutil.rmtree(dest, ignore_errors=True)
            z.extractall(dest, [n for n in names if n.split("/")[0] in (package, info)])
    return folders


def job_modules(job: TrainConfig, cache: Path | None = None) -> list[Path]:
    """The local folders to ship as the job's `py_modules`: torchao's two for a float8 job, else none."""
    if job.float8 == "off":
        return []
    # Fetched wheels and their unpacked folders: $XDG_CACHE_HOME/ray-efa-eks, else ~/.cache/ray-efa-eks.
    cache = cache or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "ray-efa-eks"
    wheel_file = fetch(TORCHAO_WHEEL, cache)
    return unpack(wheel_file, cache / "unpacked" / wheel_file.stem, "torchao")
