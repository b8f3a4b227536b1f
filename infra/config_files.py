"""Reading ``Pulumi.yaml`` and ``Pulumi.<stack>.yaml`` once each, with one clear error per broken file,
and writing ``Pulumi.yaml``'s ``config:`` block from the keys the typed config declares.

A file that is missing, not UTF-8, not YAML or not shaped like a Pulumi file raises StackConfigError
naming the file, where it broke and the fix; a stack key in an unknown namespace, a provider key
Pulumi does not know, or a key without a namespace is refused with the closest known name. The
keys (``infra.config.KEYS``) come in as an argument: that module reads the files through this one.
"""

from __future__ import annotations

import copy
import json
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache, lru_cache
from pathlib import Path
from typing import Any

from infra.config_schema import PROJECT, Key, StackConfigError, close_match, coerce

REGIONS_FILE = Path(__file__).parent / "data" / "regions.json"

# Configuration keys of the pulumi-aws provider
# (https://www.pulumi.com/registry/packages/aws/installation-configuration/#configuration-options).
AWS_PROVIDER_KEYS = (
    "accessKey allowedAccountIds assumeRole assumeRoleWithWebIdentity assumeRoles customCaBundle defaultTags "
    "ec2MetadataServiceEndpoint ec2MetadataServiceEndpointMode endpoints forbiddenAccountIds httpProxy httpsProxy "
    "ignoreTags insecure maxRetries noProxy profile region retryMode s3UsePathStyle secretKey sharedConfigFiles "
    "sharedCredentialsFiles skipCredentialsValidation skipMetadataApiCheck skipRegionValidation "
    "skipRequestingAccountId stsRegion token tokenBucketRateLimiterCapacity useDualstackEndpoint useFipsEndpoint"
).split()
# Namespaces of the providers this program uses; keys of eks: and kubernetes: pass unchecked.
NAMESPACES = (PROJECT, "aws", "eks", "kubernetes", "pulumi")


@dataclass(frozen=True)
class StackFile:
    """What one ``Pulumi.<stack>.yaml`` sets: our keys (unprefixed) and ``aws:region``."""

    path: Path
    values: dict[str, Any]
    region: str | None
    raw: dict[str, Any]  # every key as written, provider keys included


def read_yaml(path: Path, fix: str, config_as_text: bool = False) -> Any:
    """The YAML 1.2 document at ``path``, read as the Pulumi engine reads it; StackConfigError for a missing,
    non-UTF-8 or malformed file, or a mapping that sets one key twice.

    YAML 1.2 (ruamel.yaml), not PyYAML's 1.1: ``3e-4`` is a number and ``yes`` a string, as for the
    engine. ``config_as_text``: the scalars directly under ``config:`` come back as the text written
    (null as ""), because the engine hands a stack key to the program as that text (``1.30`` stays
    "1.30"), and the key's declared type reads it; nested values (the train: block, arrays) are typed.
    """
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise StackConfigError(f"{path} does not exist: {fix}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise StackConfigError(
            f"{path.name} is not UTF-8 text (byte 0x{data[e.start]:02x} at offset {e.start}): save it as UTF-8"
        ) from None
    return copy.deepcopy(_parse_yaml(path.name, text, config_as_text))


# One command reads Pulumi.yaml several times (the project check, each stack's defaults), and ruamel's pure
# parser takes about 0.1 s over it: a parse is kept by the file's name and text, and each caller gets a copy.
@lru_cache(maxsize=32)
def _parse_yaml(name: str, text: str, config_as_text: bool) -> Any:
    from ruamel.yaml import YAML
    from ruamel.yaml.error import YAMLError

    yaml = YAML(typ="safe", pure=True)
    try:
        node = yaml.compose(text)
        if node is None:
            return None
        refuse_duplicate_keys(name, node)
        return _engine_document(yaml, node) if config_as_text else yaml.constructor.construct_document(node)
    except YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "somewhere"
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise StackConfigError(f"{name} is not valid YAML ({where}: {problem}): fix the syntax there") from None


def refuse_duplicate_keys(file: str, node: Any) -> None:
    """StackConfigError for a mapping anywhere in ``node`` that sets a key twice (PyYAML kept the last)."""
    from ruamel.yaml.nodes import MappingNode, SequenceNode

    if isinstance(node, MappingNode):
        seen: dict[str, int] = {}
        for key, value in node.value:
            name = str(key.value)
            line = key.start_mark.line + 1
            if name in seen:
                raise StackConfigError(
                    f"{file} sets {name!r} twice (lines {seen[name]} and {line}): keep one; Pulumi refuses the file"
                )
            seen[name] = line
            refuse_duplicate_keys(file, value)
    elif isinstance(node, SequenceNode):
        for item in node.value:
            refuse_duplicate_keys(file, item)


def _engine_document(yaml: Any, node: Any) -> Any:
    """A stack file's document with the scalars under ``config:`` as the engine passes them: their text."""
    from ruamel.yaml.nodes import MappingNode, ScalarNode

    build = yaml.constructor.construct_document
    if not isinstance(node, MappingNode):
        return build(node)
    doc: dict[Any, Any] = {}
    for key, value in node.value:
        name = build(key)
        if name == "config" and isinstance(value, MappingNode):
            doc[name] = {
                str(build(k)): ("" if (v.tag or "").endswith(":null") else v.value)
                if isinstance(v, ScalarNode)
                else build(v)
                for k, v in value.value
            }
        else:
            doc[name] = build(value)
    return doc


def check_project_file(project_dir: Path, keys: Sequence[Key]) -> None:
    """``Pulumi.yaml`` exists, parses, names this project and declares exactly ``keys``."""
    path = Path(project_dir) / "Pulumi.yaml"
    doc = read_yaml(path, f"run from the project directory (the one holding {PROJECT}'s Pulumi.yaml)")
    if not isinstance(doc, dict) or doc.get("name") != PROJECT:
        name = doc.get("name") if isinstance(doc, dict) else None
        raise StackConfigError(f"{path} names project {name!r}, not {PROJECT!r}: restore the project's Pulumi.yaml")
    drift = schema_drift(doc.get("config"), keys)
    if drift:
        raise StackConfigError(
            f"Pulumi.yaml's config: block differs from the schema in infra/config.py ({drift}): the Pulumi "
            "engine would apply Pulumi.yaml's defaults and render/preflight the schema's. Set a stack's own value in "
            f"Pulumi.<stack>.yaml, and regenerate Pulumi.yaml with `{REGENERATE}`"
        )


REGENERATE = "python -m infra.config --write-pulumi-yaml"


def schema_drift(block: Any, keys: Sequence[Key]) -> str | None:
    """What differs between Pulumi.yaml's ``config:`` block and ``keys`` (name, type, default), or None."""
    if not isinstance(block, dict):
        return "it is not a mapping of keys"
    for name in block:
        if str(name).removeprefix(f"{PROJECT}:") not in {k.name for k in keys}:
            return f"{name} is not in the schema"
    for key in keys:
        spec = block.get(key.name, block.get(f"{PROJECT}:{key.name}"))
        if not isinstance(spec, dict):
            return f"{key.name} is missing"
        if key.type == "object":
            continue  # Pulumi.yaml cannot type an object key: none is declared
        if spec.get("type") != key.type:
            return f"{key.name} has type {spec.get('type')!r}, the schema {key.type!r}"
        try:
            same = "default" in spec and coerce(key, spec["default"]) == coerce(key, key.default)
        except StackConfigError:
            same = False
        if not same:
            return f"{key.name} has default {spec.get('default')!r}, the schema {key.default!r}"
    return None


def known_stacks(project_dir: Path) -> tuple[str, ...]:
    """Stack names that have a ``Pulumi.<stack>.yaml`` in ``project_dir``."""
    return tuple(sorted(p.name[len("Pulumi.") : -len(".yaml")] for p in Path(project_dir).glob("Pulumi.*.yaml")))


def read_stack_file(stack: str, project_dir: Path, known: Mapping[str, Key]) -> StackFile:
    """Our keys and the region that ``Pulumi.<stack>.yaml`` sets, every key checked by name against ``known``."""
    path = Path(project_dir) / f"Pulumi.{stack}.yaml"
    if not path.is_file():
        raise StackConfigError(
            f"stack {stack!r} has no {path.name} in {project_dir}: known stacks are "
            f"{', '.join(known_stacks(project_dir)) or '(none)'}"
        )
    doc = read_yaml(path, "create it", config_as_text=True)
    config = doc.get("config") if isinstance(doc, dict) else None
    if doc is not None and (not isinstance(doc, dict) or not isinstance(config, (dict, type(None)))):
        raise StackConfigError(
            f"{path.name} is not a Pulumi stack file: write 'config:' followed by 'key: value' lines"
        )
    values: dict[str, Any] = {}
    region = None
    for full_key, value in (config or {}).items():
        namespace, key = split_key(path.name, str(full_key), known)
        if namespace == PROJECT:
            values[key] = value
        elif namespace == "aws" and key == "region":
            region = value
    return StackFile(path, values, region, dict(config or {}))


def split_key(file: str, full_key: str, known: Mapping[str, Key]) -> tuple[str, str]:
    """(namespace, key) of a stack key; StackConfigError for a name Pulumi or this program would not read."""
    namespace, colon, key = full_key.partition(":")
    if not colon:
        suggestion = f"{PROJECT}:{full_key}" if full_key in known else f"{PROJECT}:<key>"
        raise StackConfigError(f"{file} sets {full_key!r} without a namespace: write it as {suggestion}")
    if namespace not in NAMESPACES:
        raise StackConfigError(
            f"{file} sets {full_key} in unknown namespace {namespace!r}: {close_match(namespace, NAMESPACES)}"
        )
    # A key the other namespace declares is the obvious reading (ray-efa-eks:region is aws:region), ahead of
    # any near spelling inside the namespace written.
    if namespace == PROJECT and key not in known:
        hint = f"did you mean 'aws:{key}'?" if key in AWS_PROVIDER_KEYS else close_match(key, list(known))
        raise StackConfigError(f"{file} sets {full_key} which {PROJECT} does not declare: {hint}")
    if namespace == "aws" and key not in AWS_PROVIDER_KEYS:
        hint = f"did you mean '{PROJECT}:{key}'?" if key in known else close_match(key, AWS_PROVIDER_KEYS)
        raise StackConfigError(f"{file} sets {full_key}, not a key of the aws provider: {hint}")
    return namespace, key


@cache
def known_regions() -> tuple[str, ...]:
    """AWS region codes, from infra/data/regions.json (its $comment names the source)."""
    return tuple(json.loads(REGIONS_FILE.read_text())["regions"])


def check_region(stack: str, region: Any) -> str:
    """``region`` if it is a known AWS region; StackConfigError naming the missing key or the closest region."""
    if not region:
        raise StackConfigError(
            f"aws:region is not set for stack {stack!r}: add 'aws:region: <region>' to Pulumi.{stack}.yaml"
        )
    if region not in known_regions():
        raise StackConfigError(
            f"aws:region {region!r} is not an AWS region: {close_match(str(region), known_regions())} "
            f"(the list is {REGIONS_FILE.name}; add a new region there)"
        )
    if stack in known_regions() and region != stack:
        # A stack named after a region is read as that region everywhere a user looks (status lines,
        # the capacity finder's stacks, the README's examples); deploying it elsewhere would be a surprise.
        raise StackConfigError(
            f"stack {stack!r} is named after region {stack} but Pulumi.{stack}.yaml sets aws:region {region!r}: "
            f"set 'aws:region: {stack}', or name the stack after its region (Pulumi.{region}.yaml)"
        )
    return str(region)


def pulumi_yaml_config(keys: Sequence[Key]) -> str:
    """Pulumi.yaml's ``config:`` block, rendered from ``keys`` (sections as comments)."""
    import yaml

    def scalar(value: Any) -> str:
        value = list(value) if isinstance(value, tuple) else value
        return yaml.safe_dump(value, default_flow_style=True, width=1000).removesuffix("\n...\n").strip()

    lines = ["config:"]
    section = None
    for key in keys:
        if key.section != section:
            section = key.section
            lines.append(f"  # --- {section} ---")
        lines.append(f"  {key.name}:")
        if key.type != "object":  # Pulumi.yaml cannot type an object key: none is declared
            lines.append(f"    type: {key.type}")
            if key.type == "array":
                lines += ["    items:", "      type: string"]
            lines.append(f"    default: {scalar(key.default)}")
        lines.append("    description: >-")
        lines += ["      " + line for line in textwrap.wrap(key.description, 100, break_on_hyphens=False)]
    return "\n".join(lines) + "\n"


CONFIG_DOCS_HEAD = """# Configuration reference

<!-- Generated from the typed schema in infra/config.py by `python -m infra.config --write-docs`;
tests/infra/test_config.py fails when this page and the schema differ. Edit the schema. -->

Every stack key, by section, with its type, its default and what it sets. Set one per
stack with `pulumi config set ray-efa-eks:<key> <value> --stack <stack>` (or edit
`Pulumi.<stack>.yaml`); `python -m automation render --stack <stack>` validates a stack without AWS.
A key this page does not list is refused, with the nearest known key named. The `train` key holds the
training job's flags (`python -m workloads.train --help` lists them)."""


def config_docs(keys: Sequence[Key]) -> str:
    """docs/configuration.md: one table per section of ``keys``, generated like Pulumi.yaml's block."""
    import yaml

    def cell(text: str) -> str:
        return text.replace("|", "\\|").replace("\n", " ")

    def default(value: Any) -> str:
        value = list(value) if isinstance(value, tuple) else value
        if value in ("", [], {}, None):
            return "(empty)"
        dumped = yaml.safe_dump(value, default_flow_style=True, width=1000).removesuffix("\n...\n").strip()
        return f"`{dumped}`"

    out = [CONFIG_DOCS_HEAD]
    section = None
    for key in keys:
        if key.section != section:
            section = key.section
            out += ["", f"## {section}", "", "| key | type | default | what it sets |", "| --- | --- | --- | --- |"]
        out.append(f"| `{key.name}` | {key.type} | {cell(default(key.default))} | {cell(key.description)} |")
    return "\n".join(out) + "\n"


def write_config_docs(path: Path, keys: Sequence[Key]) -> bool:
    """Write ``config_docs(keys)`` to ``path``; True if it changed."""
    new = config_docs(keys)
    old = path.read_text(encoding="utf-8") if path.exists() else None
    if new != old:
        path.write_text(new, encoding="utf-8")
    return new != old


def write_pulumi_yaml(path: Path, keys: Sequence[Key]) -> bool:
    """Replace the ``config:`` block at the end of ``path`` with the rendered one; True if it changed."""
    text = path.read_text(encoding="utf-8")
    head = text[: text.index("\nconfig:\n") + 1]
    new = head + pulumi_yaml_config(keys)
    if new != text:
        path.write_text(new, encoding="utf-8")
    return new != text
