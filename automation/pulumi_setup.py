"""What the pulumi CLI needs on this machine before `preview` or `up`, read offline: the CLI on PATH, a state backend
to keep the stack in, and, where the stack's secrets are encrypted with a passphrase, a way to give it.

Each comes with the command that fixes it. Where Pulumi reads them (https://www.pulumi.com/docs/iac/cli/
environment-variables/, https://www.pulumi.com/docs/iac/concepts/state-and-backends/, read 2026-12-06):
- the backend: PULUMI_BACKEND_URL, else the project's ``backend.url`` in Pulumi.yaml, else the one ``pulumi login``
  last chose (``current`` in ``$PULUMI_HOME/credentials.json``, ``~/.pulumi`` by default); Pulumi Cloud
  (https://api.pulumi.com) needs an access token there or in PULUMI_ACCESS_TOKEN;
- the passphrase: a self-managed backend (s3://, file://, gs://, azblob://) encrypts a stack's secrets with the
  passphrase provider unless the stack file names another ``secretsprovider``; the CLI reads the passphrase from
  PULUMI_CONFIG_PASSPHRASE or the file PULUMI_CONFIG_PASSPHRASE_FILE names, and otherwise asks on a terminal,
  which the Automation API (``automation/pulumi_stack.py``) does not have.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import yaml

from automation.pipeline import Finding

INSTALL = "curl -fsSL https://get.pulumi.com | sh  (https://www.pulumi.com/docs/install/)"
LOGIN_FIX = (
    "pulumi login  (Pulumi Cloud, free for one user), or keep the state in your own bucket: "
    "pulumi login s3://<bucket>  (or export PULUMI_BACKEND_URL=s3://<bucket>); `pulumi login --local` keeps it in "
    "~/.pulumi on this machine only"
)
PASSPHRASE_FIX = (
    "keep a passphrase in a file only you can read and point Pulumi at it: "
    "umask 077 && openssl rand -base64 24 > ~/.pulumi-passphrase && "
    "export PULUMI_CONFIG_PASSPHRASE_FILE=~/.pulumi-passphrase  (lose it and the stack's secrets are lost)"
)


def _mapping(path: Path, parse: Callable[[str], Any]) -> dict:
    """The file parsed; {} when it cannot be read or parsed."""
    try:
        return parse(path.read_text()) or {}
    except (OSError, ValueError, yaml.YAMLError):
        return {}


def check_pulumi_cli(which: Callable[[str], str | None]) -> Finding:
    path = which("pulumi")
    if path is None:
        return Finding("pulumi CLI", "fail", "`pulumi` is not on PATH; preview, up and destroy run it", INSTALL)
    return Finding("pulumi CLI", "pass", path)


def check_backend(env: Mapping[str, str], home: Path, project_dir: Path) -> tuple[Finding, str]:
    """The state backend, read in the CLI's order, is chosen (and, for Pulumi Cloud, logged in to); the row and the
    backend URL."""
    credentials = _mapping(home / "credentials.json", json.loads)
    url, source = env.get("PULUMI_BACKEND_URL", ""), "PULUMI_BACKEND_URL"
    if not url:
        url = (_mapping(project_dir / "Pulumi.yaml", yaml.safe_load).get("backend") or {}).get("url", "")
        source = "Pulumi.yaml backend.url"
    if not url:
        url, source = credentials.get("current", ""), f"{home / 'credentials.json'} (pulumi login)"
    if not url:
        detail = "no state backend is chosen: `pulumi login` was never run"
        return Finding("Pulumi backend", "fail", detail, LOGIN_FIX), ""
    token = env.get("PULUMI_ACCESS_TOKEN") or credentials.get("accessTokens", {}).get(url)
    if url.startswith("https://") and not token:
        fix = f"pulumi login {url}  (or export PULUMI_ACCESS_TOKEN)"
        return Finding("Pulumi backend", "fail", f"{url} (from {source}) has no access token", fix), url
    return Finding("Pulumi backend", "pass", f"{url} (from {source})"), url


def check_passphrase(env: Mapping[str, str], backend: str, stack_file: Path) -> Finding:
    """A self-managed backend's passphrase can be read without a terminal."""
    check = "Pulumi secrets passphrase"
    if not backend or backend.startswith("https://"):
        return Finding(check, "skip", f"{backend or 'no backend'}: the backend encrypts the stack's secrets")
    provider = _mapping(stack_file, yaml.safe_load).get("secretsprovider", "passphrase")
    if not provider.startswith("passphrase"):
        return Finding(check, "pass", f"{stack_file.name} encrypts secrets with {provider}")
    if "PULUMI_CONFIG_PASSPHRASE" in env:
        return Finding(check, "pass", "PULUMI_CONFIG_PASSPHRASE is set")
    named = env.get("PULUMI_CONFIG_PASSPHRASE_FILE", "")
    if named and Path(named).expanduser().is_file():
        return Finding(check, "pass", f"PULUMI_CONFIG_PASSPHRASE_FILE={named}")
    detail = (
        f"PULUMI_CONFIG_PASSPHRASE_FILE={named} is no file" if named else "neither PULUMI_CONFIG_PASSPHRASE nor _FILE"
    )
    return Finding(check, "fail", f"{backend} keeps secrets under a passphrase: {detail}", PASSPHRASE_FIX)


def pulumi_rows(
    env: Mapping[str, str], user_home: Path, project_dir: Path, stack: str, which: Callable[[str], str | None]
) -> list[Finding]:
    """preflight's rows for the pulumi CLI, its backend and the passphrase source."""
    home = Path(env["PULUMI_HOME"]) if env.get("PULUMI_HOME") else user_home / ".pulumi"
    backend_row, url = check_backend(env, home, project_dir)
    return [check_pulumi_cli(which), backend_row, check_passphrase(env, url, project_dir / f"Pulumi.{stack}.yaml")]
