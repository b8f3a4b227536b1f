"""How the typed stack config declares its keys, and the checks of one key's own value.

A section of ``infra/config.py`` is a frozen dataclass whose fields are declared with ``key(...)``:
the field carries its Pulumi key name, default, description and check, and its annotation gives
the Pulumi type. ``keys_of(StackConfig)`` walks the tree into the list of ``Key``s from which
``Pulumi.yaml``'s ``config:`` block, the unknown-key check, coercion and the per-key checks all
derive; ``Section.keyname(field)`` gives a message the key's name. Checks that need two keys are
methods of the sections in ``infra/config.py``.
"""

from __future__ import annotations

import dataclasses
import difflib
import ipaddress
import json
import re
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from infra.catalog import instance_spec, known_instance_types

PROJECT = "ray-efa-eks"
CONTROL_PLANE_LOG_TYPES = ("api", "audit", "authenticator", "controllerManager", "scheduler")
FLOATING_TAGS = frozenset({"latest", "stable", "nightly", "edge", "main", "master", "dev"})

# EKS service quotas, default values: "Nodes per managed node group: 450" and "Public endpoint
# access CIDR ranges per cluster: 40" (https://docs.aws.amazon.com/eks/latest/userguide/service-quotas.html).
MAX_NODES_PER_MANAGED_NODE_GROUP = 450
MAX_PUBLIC_ACCESS_CIDRS = 40
# gp3 volumes hold 1 GiB to 16 TiB (https://docs.aws.amazon.com/ebs/latest/userguide/general-purpose.html).
MAX_GP3_GIB = 16384

_EXACT_SEMVER = re.compile(r"^v?\d+\.\d+\.\d+$")
_K8S_VERSION = re.compile(r"^1\.\d+$")
# An EKS add-on version: major.minor.patch-eksbuild.build
# (https://docs.aws.amazon.com/eks/latest/userguide/managing-vpc-cni.html, "Considerations").
_ADDON_VERSION = re.compile(r"^v\d+\.\d+\.\d+-eksbuild\.\d+$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_CAPACITY_RESERVATION = re.compile(r"^cr-[0-9a-f]{8,17}$")
# https://docs.aws.amazon.com/AmazonS3/latest/userguide/bucketnamingrules.html (no dots: TLS to
# virtual-hosted names with dots fails certificate checks).
_BUCKET_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{1,61}[a-z0-9]$")
_PLACEMENT_GROUP = re.compile(r"^[A-Za-z0-9._-]{1,255}$")
_ROLE_ARN = re.compile(r"^arn:aws[a-z-]*:iam::\d{12}:role/[\w+=,.@/-]+$")
_QUANTITY = re.compile(r"^(\d+(?:\.\d+)?)(m|Ki|Mi|Gi|Ti|k|M|G|T)?$")
_MEMORY_UNIT = re.compile(r"(Ki|Mi|Gi|Ti|k|M|G|T)$")


class StackConfigError(ValueError):
    """A stack configuration that cannot work; the message names key, value and fix."""


class ConfigWarning(UserWarning):
    """A stack configuration that works but probably not as the user hopes."""


Check = Callable[[str, Any], None]

# A field's annotation -> its Pulumi.yaml type (object: a mapping passed through as is).
PULUMI_TYPES = {"str": "string", "int": "integer", "bool": "boolean", "tuple[str, ...]": "array"}
PULUMI_TYPES["Mapping[str, Any]"] = "object"


def key(name: str, default: Any, description: str, check: Check | None = None) -> Any:
    """A section field that is the stack key ``ray-efa-eks:<name>``: its default, its description
    (Pulumi.yaml's) and the check of its own value, ``check(name, value)`` raising StackConfigError."""
    meta = {"key": name, "default": default, "description": description, "check": check}
    if isinstance(default, dict):
        return dataclasses.field(default_factory=lambda: dict(default), metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


class Section:
    """Base of the config's frozen dataclasses; ``title`` heads the section's keys in Pulumi.yaml."""

    title: typing.ClassVar[str] = ""
    # Every section is a dataclass (the decorator sets this): what dataclasses.fields takes.
    __dataclass_fields__: typing.ClassVar[dict[str, dataclasses.Field[Any]]]

    @classmethod
    def keyname(cls, field: str, prefixed: bool = False) -> str:
        """The stack key of ``field`` (``ray-efa-eks:<key>`` with ``prefixed``); KeyError for a field
        that is no key, so a message cannot name a key that does not exist."""
        name = {f.name: f.metadata["key"] for f in dataclasses.fields(cls) if "key" in f.metadata}[field]
        return f"{PROJECT}:{name}" if prefixed else name


@dataclass(frozen=True)
class Key:
    """One stack key (``ray-efa-eks:<name>``), as a field of the typed tree declares it."""

    name: str
    type: str  # string | integer | boolean | array | object
    default: Any
    description: str
    section: str
    check: Check | None
    path: tuple[str, ...]  # the attributes from StackConfig to the value


def keys_of(cls: type[Section], path: tuple[str, ...] = ()) -> tuple[Key, ...]:
    """Every key of the tree under ``cls``, in declaration order (nested sections in place)."""
    hints = typing.get_type_hints(cls)
    found: list[Key] = []
    for f in dataclasses.fields(cls):
        if "key" in f.metadata:
            m = f.metadata
            kind = PULUMI_TYPES[str(f.type)]
            found.append(Key(m["key"], kind, m["default"], m["description"], cls.title, m["check"], (*path, f.name)))
        elif _is_section(hints[f.name]):
            found += keys_of(hints[f.name], (*path, f.name))
    return tuple(found)


def _is_section(hint: Any) -> bool:
    # tuple[str, ...] passes isinstance(_, type) but not issubclass: a section is a plain class
    return isinstance(hint, type) and typing.get_origin(hint) is None and issubclass(hint, Section)


def build(cls: type, values: dict[str, Any], **derived: Any) -> Any:
    """An instance of section ``cls`` from ``values`` (key name -> coerced value); fields that are
    neither keys nor sections come from ``derived`` or keep their defaults."""
    hints = typing.get_type_hints(cls)
    kwargs = dict(derived)
    for f in dataclasses.fields(cls):
        if "key" in f.metadata:
            kwargs[f.name] = values[f.metadata["key"]]
        elif _is_section(hints[f.name]):
            kwargs[f.name] = build(hints[f.name], values)
    return cls(**kwargs)


def close_match(word: str, known: Sequence[str]) -> str:
    """' (did you mean X?)' for the closest of ``known``, or the list of them when none is close."""
    near = difflib.get_close_matches(word, list(known), n=1, cutoff=0.6)
    return f"did you mean {near[0]!r}?" if near else f"known: {', '.join(known)}"


# --------------------------------------------------------------------------- value checks


def between(low: int, high: int, fix: str = "") -> Check:
    def check(key: str, value: int) -> None:
        if not low <= value <= high:
            why = f": {fix}" if fix else ""
            raise StackConfigError(f"{key} {value} is outside {low}..{high}{why}; set {key} within {low}..{high}")

    return check


def exact_version(key: str, value: str) -> None:
    if not _EXACT_SEMVER.fullmatch(value):
        raise StackConfigError(
            f"{key} {value!r} is not an exact chart version: pin one such as 1.5.2 (no ranges, no latest)"
        )


def dns_label(limit: int) -> Check:
    def check(key: str, value: str) -> None:
        if not _DNS_LABEL.fullmatch(value) or len(value) > limit:
            raise StackConfigError(
                f"{key} {value!r} is not a DNS-1123 label of at most {limit} characters: "
                "use lowercase letters, digits and '-'"
            )

    return check


def ipv4_cidr(key: str, value: str) -> None:
    try:
        ipaddress.IPv4Network(value)
    except ValueError:
        raise StackConfigError(f"{key} entry {value!r} is not an IPv4 CIDR: use e.g. 203.0.113.7/32") from None


def optional_cidr(key: str, value: str) -> None:
    if value:
        ipv4_cidr(key, value)


def vpc_cidr(key: str, value: str) -> None:
    try:
        net = ipaddress.IPv4Network(value)
    except ValueError:
        raise StackConfigError(f"{key} {value!r} is not an IPv4 network: use e.g. 10.0.0.0/16") from None
    if not 16 <= net.prefixlen <= 22:
        raise StackConfigError(f"{key} {value!r} has prefix /{net.prefixlen}: use a /16 to /22")


def two_or_three_azs(key: str, value: tuple[str, ...]) -> None:
    if len(set(value)) != len(value) or not 2 <= len(value) <= 3:
        raise StackConfigError(
            f"{key} {list(value)!r} must be 2 or 3 distinct AZs: the EKS control plane needs two; "
            "set e.g. [us-west-2a, us-west-2b]"
        )


def public_cidrs(key: str, value: tuple[str, ...]) -> None:
    if len(value) > MAX_PUBLIC_ACCESS_CIDRS:
        raise StackConfigError(
            f"{key} lists {len(value)} CIDRs but EKS accepts at most {MAX_PUBLIC_ACCESS_CIDRS}: merge them"
        )
    for cidr in value:
        ipv4_cidr(key, cidr)


def log_types(key: str, value: tuple[str, ...]) -> None:
    bad = [t for t in value if t not in CONTROL_PLANE_LOG_TYPES]
    if bad:
        raise StackConfigError(f"{key} {bad!r} unknown: use some of {list(CONTROL_PLANE_LOG_TYPES)}")


# CloudWatch Logs accepts only these retention periods (PutRetentionPolicy's retentionInDays, botocore's logs model).
LOG_RETENTION_DAYS: tuple[int, ...] = (1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827)
LOG_RETENTION_DAYS += (2192, 2557, 2922, 3288, 3653)


def log_retention_days(key: str, value: int) -> None:
    if value not in LOG_RETENTION_DAYS:
        raise StackConfigError(
            f"{key} {value} is not a CloudWatch Logs retention period: use one of {LOG_RETENTION_DAYS}"
        )


def kubernetes_version(key: str, value: str) -> None:
    if not _K8S_VERSION.fullmatch(value) or int(value.split(".")[1]) < 30:
        raise StackConfigError(
            f"{key} {value!r} is not an EKS version 1.30 or newer (the AL2023 NVIDIA AMI needs it): set e.g. '1.36'"
        )


def addon_version(key: str, value: str) -> None:
    if not _ADDON_VERSION.fullmatch(value):
        raise StackConfigError(
            f"{key} {value!r} is not an EKS add-on version (vMAJOR.MINOR.PATCH-eksbuild.N): list the versions for "
            "your cluster with `aws eks describe-addon-versions --addon-name <vpc-cni|kube-proxy|coredns> "
            "--kubernetes-version 1.36 --query 'addons[].addonVersions[].addonVersion'`"
        )


def known_instance(key: str, value: str):
    """The catalog's facts of instance type ``value``; StackConfigError with the closest known type."""
    try:
        return instance_spec(value)
    except KeyError:
        raise StackConfigError(
            f"{key} {value!r} is not in infra/data/instance_types.json: "
            f"{close_match(value, known_instance_types())} (or add its facts there)"
        ) from None


def efa_gpu_instance(key: str, value: str) -> None:
    spec = known_instance(key, value)
    efa_types = [t for t in known_instance_types() if instance_spec(t).efa_supported and instance_spec(t).gpus]
    if spec.gpus == 0:
        raise StackConfigError(f"{key} {value!r} has no GPU: use one of {efa_types}")
    if not spec.efa_supported:
        raise StackConfigError(f"{key} {value!r} does not support EFA: use one of {efa_types}")


POD_IDENTITY, IRSA = "pod-identity", "irsa"
POD_IDENTITY_MODES = (POD_IDENTITY, IRSA)


def pod_identity_mode(key: str, value: str) -> None:
    if value not in POD_IDENTITY_MODES:
        raise StackConfigError(
            f"{key} {value!r} is not one of {list(POD_IDENTITY_MODES)}: {close_match(value, POD_IDENTITY_MODES)}"
        )


def reservation_id(key: str, value: str) -> None:
    if value and not _CAPACITY_RESERVATION.fullmatch(value):
        raise StackConfigError(f"{key} {value!r} is not a capacity reservation id: use cr-xxxxxxxxxxxxxxxxx or ''")


def is_floating_image(image: str) -> bool:
    """True if ``image`` has no digest and no tag, or a tag that moves (latest, stable, ...)."""
    if "@sha256:" in image:
        return False
    last = image.rsplit("/", 1)[-1]
    if ":" not in last:
        return True
    tag = last.rsplit(":", 1)[1]
    return tag.lower() in FLOATING_TAGS or tag.lower().endswith("-latest")


def pinned_image(key: str, value: str) -> None:
    if is_floating_image(value):
        raise StackConfigError(
            f"{key} {value!r} has a floating or missing tag: pin a version tag or a digest, e.g. "
            "public.ecr.aws/deep-learning-containers/ray:train-ml-cuda-v1.1.0"
        )


def placement_group(key: str, value: str) -> None:
    if value and not _PLACEMENT_GROUP.fullmatch(value):
        raise StackConfigError(
            f"{key} {value!r} is not a placement group name: use letters, digits, '.', '_' and '-' (at most 255), "
            "or '' to let the stack create one"
        )


def role_arns(key: str, value: tuple[str, ...]) -> None:
    for arn in value:
        if not _ROLE_ARN.fullmatch(arn):
            raise StackConfigError(
                f"{key} entry {arn!r} is not an IAM role ARN: use arn:aws:iam::<account-id>:role/<name>"
            )


def bucket_name(key: str, value: str) -> None:
    if value and (not _BUCKET_NAME.fullmatch(value) or "--" in value):
        raise StackConfigError(
            f"{key} {value!r} is not a valid S3 bucket name: use 3-63 lowercase letters, digits and '-' "
            "(no dots), or '' to let Pulumi name it"
        )


def ray_version(key: str, value: str) -> None:
    if not _EXACT_SEMVER.fullmatch(value) or value.startswith("v"):
        raise StackConfigError(f"{key} {value!r} is not an exact Ray version: set e.g. 2.58.0")


def parse_quantity(key: str, value: str) -> float:
    """A Kubernetes CPU or memory quantity in cores or GiB. StackConfigError if malformed."""
    m = _QUANTITY.fullmatch(str(value).strip())
    if not m:
        raise StackConfigError(f"{key} {value!r} is not a Kubernetes quantity: use e.g. '40', '500m', '160Gi'")
    factors = {"": 1.0, "m": 1e-3, "Ki": 1 / 1024**2, "Mi": 1 / 1024, "Gi": 1.0, "Ti": 1024.0}
    factors |= {"k": 1e3 / 1024**3, "M": 1e6 / 1024**3, "G": 1e9 / 1024**3, "T": 1e12 / 1024**3}
    return float(m.group(1)) * factors[m.group(2) or ""]


def memory_gib(key: str, value: str) -> float:
    if not _MEMORY_UNIT.search(str(value).strip()):
        raise StackConfigError(f"{key} {value!r} has no unit: write memory as e.g. '160Gi'")
    return parse_quantity(key, value)


def cpu_cores(key: str, value: str) -> float:
    if _MEMORY_UNIT.search(str(value).strip()):
        raise StackConfigError(f"{key} {value!r} is a memory unit: write CPU as cores ('40') or millicores ('500m')")
    cores = parse_quantity(key, value)
    if cores <= 0:
        raise StackConfigError(f"{key} {value!r} is no CPU at all: set e.g. '2'")
    return cores


def memory_quantity(key: str, value: str) -> None:
    if memory_gib(key, value) <= 0:
        raise StackConfigError(f"{key} {value!r} is no memory at all: set e.g. '8Gi'")


def cpu_quantity(key: str, value: str) -> None:
    cpu_cores(key, value)


# A boolean's spellings in YAML 1.2's core schema (yaml.org/spec/1.2.2, 10.3.2 "Tag Resolution"), which the Pulumi
# engine's YAML follows; YAML 1.1 (yaml.org/type/bool.html) also read these others as booleans, YAML 1.2 as strings.
YAML12_BOOLEANS = {"true": True, "True": True, "TRUE": True, "false": False, "False": False, "FALSE": False}
YAML11_ONLY_BOOLEANS = {
    **dict.fromkeys(("y", "Y", "yes", "Yes", "YES", "on", "On", "ON"), True),
    **dict.fromkeys(("n", "N", "no", "No", "NO", "off", "Off", "OFF"), False),
}


def coerce(key: Key, value: Any) -> Any:
    """``value`` as ``key``'s declared type; accepts the strings the Pulumi engine passes (a null, ``~`` or
    nothing after the colon, arrives as ""). A boolean is one of YAML 1.2's spellings (YAML12_BOOLEANS); YAML
    1.1's others (``yes``, ``off``) are refused naming the value they meant there."""
    kind = key.type
    article = "an" if kind[0] in "aeiou" else "a"
    bad = StackConfigError(
        f"{key.name} {value!r} is not {article} {kind}: set {PROJECT}:{key.name} to {article} {kind}"
    )
    if kind != "string" and value in ("", None):
        raise StackConfigError(
            f"{key.name} is null (empty, ~ or null in the stack file), which is not {article} {kind}: set "
            f"{PROJECT}:{key.name} to {article} {kind}, or remove the line to keep the default {key.default!r}"
        )
    if kind in ("array", "object") and isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            raise bad from None
    if kind == "string" and not isinstance(value, (dict, list, tuple, bool)):
        return "" if value is None else str(value)
    if kind == "integer" and not isinstance(value, bool):
        if isinstance(value, int) or (isinstance(value, float) and value.is_integer()):
            return int(value)
        if isinstance(value, str) and re.fullmatch(r"-?\d+", value.strip()):
            return int(value)
    if kind == "boolean":
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value in YAML12_BOOLEANS:
            return YAML12_BOOLEANS[value]
        if isinstance(value, str) and value in YAML11_ONLY_BOOLEANS:
            meant = str(YAML11_ONLY_BOOLEANS[value]).lower()
            raise StackConfigError(
                f"{key.name} {value!r} is not a boolean in YAML 1.2, which the Pulumi engine reads (only YAML 1.1 "
                f"read it as {meant}): set {PROJECT}:{key.name} to {meant}"
            )
    if kind == "array" and isinstance(value, (list, tuple)):
        return tuple(str(v) for v in value)
    if kind == "object" and isinstance(value, dict):
        return dict(value)
    raise bad
