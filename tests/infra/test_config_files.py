"""Stack files are read as the Pulumi engine reads them (infra/config_files.py): YAML 1.2, one value
per key, and each scalar under `config:` handed over as the text written.

The engine's rules, written out by hand below (each case's `engine` text), come from Pulumi's
`config.Value.UnmarshalYAML` (pulumi/pulumi, sdk/go/common/resource/config/value.go): a plain value
is unmarshalled into a Go string, so it keeps the text written (`1.30` stays "1.30", `~` and an empty
value are ""); a mapping or a list is kept as an object and passed to the program as JSON of its YAML
values (`3e-4` is the number 0.0003 in YAML 1.2, not the string PyYAML's 1.1 resolver made of it).
The program (infra.config.from_pulumi_config) validates those strings; offline, render and preflight
validate what read_stack_file gives. Both must land on the same StackConfig.
"""

from __future__ import annotations

import json
import shutil
import warnings

import pytest
from conftest import REPO

from infra.config import StackConfigError, load_stack, stack_config_values, validate

BASE = "config:\n  aws:region: us-west-2\n  ray-efa-eks:gpuAvailabilityZone: us-west-2a\n"
BASE_ENGINE = {"gpuAvailabilityZone": "us-west-2a"}

# (line under config:, key, what the engine passes for it). The version is a minor with a trailing zero, which YAML
# reads as a float: 1.40, not yet an EKS version, because 1.30 is past EKS extended support since 2026-07-23 and
# refused (infra/eks_facts.py), which is not what these cases test.
AGREE = {
    "version-plain": ("ray-efa-eks:kubernetesVersion: 1.40", "kubernetesVersion", "1.40"),
    "version-quoted": ("ray-efa-eks:kubernetesVersion: '1.40'", "kubernetesVersion", "1.40"),
    "integer": ("ray-efa-eks:gpuNodeCount: 2", "gpuNodeCount", "2"),
    "boolean-lower": ("ray-efa-eks:apiPublicAccess: false", "apiPublicAccess", "false"),
    "boolean-capital": ("ray-efa-eks:apiPublicAccess: False", "apiPublicAccess", "False"),
    "null-empty": ("ray-efa-eks:storageBucketName:", "storageBucketName", ""),
    "null-word": ("ray-efa-eks:storageBucketName: null", "storageBucketName", ""),
    "null-tilde": ("ray-efa-eks:storageBucketName: ~", "storageBucketName", ""),
    "exponent-in-object": ("ray-efa-eks:train: {lr: 3e-4}", "train", '{"lr":0.0003}'),
    "numbers-in-object": ("ray-efa-eks:train: {lr: 1.0e-3, steps: 12}", "train", '{"lr":0.001,"steps":12}'),
    "null-in-object": ("ray-efa-eks:train: {tokenizer: null}", "train", '{"tokenizer":null}'),
    "boolean-in-object": ("ray-efa-eks:train: {compile: false}", "train", '{"compile":false}'),
    "array": (
        "ray-efa-eks:availabilityZones: [us-west-2a, us-west-2b]",
        "availabilityZones",
        '["us-west-2a","us-west-2b"]',
    ),
    "version-like-string": ("ray-efa-eks:vpcCniVersion: v1.22.4-eksbuild.3", "vpcCniVersion", "v1.22.4-eksbuild.3"),
}


@pytest.fixture
def project(tmp_path):
    """A copy of the project's Pulumi.yaml; write_stack(text) adds Pulumi.s.yaml."""
    shutil.copy(REPO / "Pulumi.yaml", tmp_path / "Pulumi.yaml")
    return tmp_path


def _with(project, line: str) -> None:
    (project / "Pulumi.s.yaml").write_text(BASE + f"  {line}\n")


def _parsed(text: str):
    try:
        return json.loads(text)
    except ValueError:
        return text


@pytest.mark.parametrize("case", list(AGREE))
def test_the_offline_reader_passes_what_the_engine_passes(project, case):
    line, key, engine = AGREE[case]
    _with(project, line)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = stack_config_values("s", project)[f"ray-efa-eks:{key}"]
    assert _parsed(got) == _parsed(engine), f"{line!r}: the engine passes {engine!r}, the offline reader {got!r}"


@pytest.mark.parametrize("case", list(AGREE))
def test_render_and_the_program_build_the_same_config_from_one_file(project, case):
    line, key, engine = AGREE[case]
    _with(project, line)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        offline = load_stack("s", project)
        program = validate({**BASE_ENGINE, key: engine}, stack="s", region="us-west-2")
    assert offline == program, f"{line!r}: offline {offline} but the program {program}"


def test_a_version_written_1_40_stays_1_40(project):
    _with(project, "ray-efa-eks:kubernetesVersion: 1.40")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = load_stack("s", project).cluster.kubernetes_version
    assert got == "1.40", f"expected '1.40' (PyYAML made it 1.4), got {got!r}"


def test_yes_is_no_boolean_offline_as_for_the_engine(project):
    # YAML 1.2: `yes` is a string; the engine passes "yes" and a boolean key refuses it
    _with(project, "ray-efa-eks:apiPublicAccess: yes")
    with pytest.raises(StackConfigError, match="apiPublicAccess 'yes' is not a boolean"):
        load_stack("s", project)


@pytest.mark.parametrize(
    "text, where",
    [
        (BASE + "  ray-efa-eks:gpuNodeCount: 2\n  ray-efa-eks:gpuNodeCount: 3\n", "lines 4 and 5"),
        (BASE + "  ray-efa-eks:train:\n    steps: 5\n    steps: 50\n", "lines 5 and 6"),
        (BASE + "config:\n  aws:region: us-east-2\n", "lines 1 and 4"),
    ],
)
def test_a_key_set_twice_is_refused_naming_both_lines(project, text, where):
    (project / "Pulumi.s.yaml").write_text(text)
    with pytest.raises(StackConfigError, match=f"twice \\({where}\\)"):
        load_stack("s", project)


def test_a_default_edited_in_pulumi_yaml_is_refused_with_the_regenerate_command(project):
    text = (project / "Pulumi.yaml").read_text()
    (project / "Pulumi.yaml").write_text(text.replace("default: ray-efa-eks\n", "default: my-cluster\n", 1))
    _with(project, "ray-efa-eks:gpuNodeCount: 2")
    with pytest.raises(StackConfigError) as err:
        load_stack("s", project)
    msg = str(err.value)
    assert "clusterName has default 'my-cluster'" in msg and "--write-pulumi-yaml" in msg, msg


def test_the_shipped_pulumi_yaml_matches_the_schema():
    from infra.config import KEYS
    from infra.config_files import read_yaml, schema_drift

    drift = schema_drift(read_yaml(REPO / "Pulumi.yaml", "")["config"], KEYS)
    assert drift is None, f"expected no drift, got {drift}"


# ---- booleans and nulls as YAML 1.2 spells them -------------------------------------------------
# YAML 1.2.2, 10.3.2 "Tag Resolution" (core schema): a boolean is true|True|TRUE|false|False|FALSE and a null
# null|Null|NULL|~ or nothing. YAML 1.1 (yaml.org/type/bool.html) also read y|Y|yes|Yes|YES|n|N|no|No|NO|
# on|On|ON|off|Off|OFF as booleans; YAML 1.2, and so the engine, reads them as strings.
HUGEPAGES = "ray-efa-eks:rayWorkerHugepages"  # a boolean key whose default is true


def _hugepages(project, written: str) -> bool:
    _with(project, f"{HUGEPAGES}: {written}")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return load_stack("s", project).ray.worker.hugepages


@pytest.mark.parametrize(
    "written, value",
    [("true", True), ("True", True), ("TRUE", True), ("false", False), ("False", False), ("FALSE", False)],
)
def test_a_boolean_key_reads_each_yaml_1_2_spelling(project, written, value):
    assert _hugepages(project, written) is value, f"{written!r} should read as {value}"


@pytest.mark.parametrize(
    "written, meant",
    [
        ("yes", "true"),
        ("Yes", "true"),
        ("ON", "true"),
        ("y", "true"),
        ("no", "false"),
        ("off", "false"),
        ("N", "false"),
    ],
)
def test_a_yaml_1_1_only_boolean_is_refused_naming_what_it_meant_there(project, written, meant):
    with pytest.raises(
        StackConfigError,
        match=f"rayWorkerHugepages '{written}' is not a boolean in YAML 1.2.*set {HUGEPAGES} to {meant}$",
    ):
        _hugepages(project, written)


def test_a_boolean_in_neither_yaml_is_refused_as_no_boolean(project):
    with pytest.raises(StackConfigError, match="rayWorkerHugepages 'tRUE' is not a boolean: set"):
        _hugepages(project, "tRUE")


@pytest.mark.parametrize("written", ["", "~", "null", "Null", "NULL"])
def test_a_null_boolean_key_is_refused_with_the_way_to_keep_its_default(project, written):
    with pytest.raises(StackConfigError, match="rayWorkerHugepages is null .*remove the line to keep the default True"):
        _hugepages(project, written)


def test_the_program_refuses_a_yaml_1_1_boolean_as_the_offline_reader_does(project):
    # The engine hands the program the text written, "yes" (this file's docstring), and the program validates it.
    with pytest.raises(StackConfigError, match="rayWorkerHugepages 'yes' is not a boolean in YAML 1.2"):
        validate({**BASE_ENGINE, "rayWorkerHugepages": "yes"}, stack="s", region="us-west-2")


def test_a_yaml_1_1_boolean_in_the_train_block_is_refused_naming_the_field(project):
    # Inside an object YAML 1.2 types the value: `yes` stays the string "yes", which TrainConfig refuses when the
    # driver parses the block over the cluster's job (infra/config.py leaves the values to it).
    from automation.job import resolve_cluster_job
    from workloads.config import TrainConfigError

    _with(project, "ray-efa-eks:train: {compile: yes}")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = load_stack("s", project)
    with pytest.raises(TrainConfigError, match=r"ray-efa-eks:train\.compile 'yes' is not true or false"):
        resolve_cluster_job(cfg, "r1")


def test_a_file_read_twice_gives_fresh_values_and_a_changed_file_is_read_again(tmp_path):
    """read_yaml keeps a parse by the file's text: what a caller does to one answer never reaches the next,
    and a file rewritten with other text is parsed anew."""
    from infra.config_files import read_yaml

    path = tmp_path / "Pulumi.dev.yaml"
    path.write_text("config:\n  ray-efa-eks:gpuNodeCount: 2\n  ray-efa-eks:train:\n    steps: 5\n")
    first = read_yaml(path, "fix it")
    first["config"]["ray-efa-eks:train"]["steps"] = 99
    assert read_yaml(path, "fix it")["config"]["ray-efa-eks:train"] == {"steps": 5}
    path.write_text("config:\n  ray-efa-eks:gpuNodeCount: 3\n")
    assert read_yaml(path, "fix it") == {"config": {"ray-efa-eks:gpuNodeCount": 3}}
    path.write_text("config: [\n")
    with pytest.raises(StackConfigError, match=r"Pulumi\.dev\.yaml is not valid YAML \(line 2"):
        read_yaml(path, "fix it")
