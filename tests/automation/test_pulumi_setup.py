"""preflight's pulumi rows (automation/pulumi_setup.py) in a fake environment: an env mapping, a home directory and
a project directory under tmp_path. The files' shapes are the pulumi CLI's: ``credentials.json`` with ``current``
and ``accessTokens`` as `pulumi login` writes it, a stack file's ``secretsprovider`` and ``encryptionsalt`` keys
(https://www.pulumi.com/docs/iac/concepts/secrets/)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from botocore.exceptions import NoCredentialsError

from automation.pulumi_setup import LOGIN_FIX, PASSPHRASE_FIX, check_pulumi_cli, pulumi_rows
from automation.steps.preflight import AwsClients, run_preflight

STACK = "us-west-2"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    d = tmp_path / "project"
    d.mkdir()
    (d / "Pulumi.yaml").write_text("name: ray-efa-eks\nruntime: python\n")
    (d / f"Pulumi.{STACK}.yaml").write_text("encryptionsalt: v1:abc\nconfig:\n  aws:region: us-west-2\n")
    return d


def logged_in(home: Path, url: str, token: str | None = None) -> None:
    (home / ".pulumi").mkdir(parents=True, exist_ok=True)
    doc = {"current": url, "accessTokens": {url: token} if token else {}}
    (home / ".pulumi" / "credentials.json").write_text(json.dumps(doc))


def rows(env: dict, home: Path, project: Path) -> dict:
    found = pulumi_rows(env, home, project, STACK, which=lambda name: f"/usr/local/bin/{name}")
    return {r.check: r for r in found}


def test_no_pulumi_cli_fails_with_the_install_command():
    row = check_pulumi_cli(lambda name: None)
    assert (row.status, "get.pulumi.com" in row.fix) == ("fail", True), row


def test_no_backend_fails_with_the_login_choices(tmp_path, project):
    row = rows({}, tmp_path, project)["Pulumi backend"]
    assert (row.status, row.fix) == ("fail", LOGIN_FIX), row


def test_an_s3_backend_without_a_passphrase_fails_with_the_passphrase_file_fix(tmp_path, project):
    row = rows({"PULUMI_BACKEND_URL": "s3://state-bucket"}, tmp_path, project)["Pulumi secrets passphrase"]
    assert (row.status, row.fix) == ("fail", PASSPHRASE_FIX), row


def test_a_passphrase_file_that_exists_passes(tmp_path, project):
    secret = tmp_path / "passphrase"
    secret.write_text("correct horse")
    env = {"PULUMI_BACKEND_URL": "s3://state-bucket", "PULUMI_CONFIG_PASSPHRASE_FILE": str(secret)}
    assert rows(env, tmp_path, project)["Pulumi secrets passphrase"].status == "pass"


def test_a_passphrase_file_that_is_missing_fails(tmp_path, project):
    env = {"PULUMI_BACKEND_URL": "file://~", "PULUMI_CONFIG_PASSPHRASE_FILE": str(tmp_path / "nowhere")}
    row = rows(env, tmp_path, project)["Pulumi secrets passphrase"]
    assert (row.status, "is no file" in row.detail) == ("fail", True), row


def test_a_stack_with_a_kms_secrets_provider_needs_no_passphrase(tmp_path, project):
    (project / f"Pulumi.{STACK}.yaml").write_text("secretsprovider: awskms://alias/pulumi\nconfig: {}\n")
    assert rows({"PULUMI_BACKEND_URL": "s3://b"}, tmp_path, project)["Pulumi secrets passphrase"].status == "pass"


def test_pulumi_cloud_logged_in_passes_and_needs_no_passphrase(tmp_path, project):
    logged_in(tmp_path, "https://api.pulumi.com", token="pul-0123")
    found = rows({}, tmp_path, project)
    got = (found["Pulumi backend"].status, found["Pulumi secrets passphrase"].status)
    assert got == ("pass", "skip"), found


def test_pulumi_cloud_without_a_token_fails_with_login(tmp_path, project):
    logged_in(tmp_path, "https://api.pulumi.com")
    row = rows({}, tmp_path, project)["Pulumi backend"]
    assert (row.status, row.fix.startswith("pulumi login https://api.pulumi.com")) == ("fail", True), row


def test_the_environment_backend_wins_over_the_last_login(tmp_path, project):
    logged_in(tmp_path, "https://api.pulumi.com", token="pul-0123")
    row = rows({"PULUMI_BACKEND_URL": "s3://state-bucket"}, tmp_path, project)["Pulumi backend"]
    assert row.detail == "s3://state-bucket (from PULUMI_BACKEND_URL)", row


def test_preflight_fails_on_a_pulumi_row_and_shows_it_beside_the_aws_cli():
    class NoCredentials:
        def get_caller_identity(self):
            raise NoCredentialsError()

    missing = check_pulumi_cli(lambda name: None)
    result = run_preflight(
        SimpleNamespace(gpu_nodes=None), AwsClients(NoCredentials(), None, None), lambda n: None, machine=[missing]
    )
    assert (result.status, result.findings[1]) == ("fail", missing), result.findings
