"""The command line's shared pieces: argparse types that refuse bad input with the fix, the parent parsers
(--json; --stack, with --kubeconfig or --target), which target a command runs on, and `not_in`, the modes a flag
has no meaning in. Every error is one line and exit status 2, before any cloud call or Ray start."""

from __future__ import annotations

import argparse
import re
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from automation.errors import DriverError
from infra.config import known_stacks
from workloads.config import _RUN_ID, TrainConfigError
from workloads.uri import parse_location

PROJECT_DIR = Path(__file__).resolve().parent.parent
LOCAL_COMMANDS = ("preflight", "run", "status", "clean", "drill", "dashboard")


# The parent parser of every command: --json, and the project directory tests point elsewhere.
COMMON_PARENT = argparse.ArgumentParser(add_help=False)
COMMON_PARENT.add_argument("--json", action="store_true", help="print one JSON document on stdout and nothing else")
COMMON_PARENT.add_argument("--project-dir", type=Path, default=PROJECT_DIR, help=argparse.SUPPRESS)


def stack_named_by_file(text: str) -> str | None:
    """The stack a stack file's name or path means (``Pulumi.us-west-2.yaml``, ``./us-west-2.yaml``: us-west-2),
    or None when ``text`` names no YAML file. A stack is named without its file's ``Pulumi.`` and ``.yaml``."""
    match = re.fullmatch(r"(?:Pulumi\.)?(.+?)\.ya?ml", Path(text).name)
    return match[1] if match else None


def stack_name(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError(
            "an empty name is no stack: pass one (e.g. us-west-2, from Pulumi.us-west-2.yaml), "
            "or leave --stack out to run locally"
        )
    meant = stack_named_by_file(text)
    if meant is not None:
        raise argparse.ArgumentTypeError(
            f"{text!r} is a file, not a stack's name: pass --stack {meant} (the stack of Pulumi.{meant}.yaml)"
        )
    if "/" in text:
        raise argparse.ArgumentTypeError(
            f"{text!r} is a path, not a stack's name: pass the NAME of a Pulumi.NAME.yaml (e.g. us-west-2)"
        )
    return text


def _at_least(low: int, hint: str = ""):
    """An argparse type: a whole number of ``low`` or more (0 is never read as "the default")."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number: pass a whole number >= {low}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"{value} is below {low}: pass a whole number >= {low}{hint}")
        return value

    return parse


whole_number = _at_least(1, ", or leave the flag out")  # a count of 1 or more
count = _at_least(0)  # a count of 0 or more
hang_factor = _at_least(2, " (a step line may come later than the median without a hang)")
hang_floor = _at_least(60, " seconds (a checkpoint's save alone can take a minute)")


def port(text: str) -> int:
    """An argparse type: a TCP port, 0 (any free one) to 65535."""
    value = count(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"{value} is no TCP port: pass 1..65535, or 0 for any free one")
    return value


def output_folder(text: str) -> Path:
    """An argparse type: a folder to write into (made if missing), never an existing file; ``~`` expanded."""
    path = Path(text).expanduser()
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is a file: name a folder (it is made if missing)")
    return path


def run_id(text: str) -> str:
    """A run id the training module accepts (workloads/config.py, `_RUN_ID`): it names directories."""
    if not _RUN_ID.match(text):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a run id: use letters, digits, '.', '_' or '-' (at most 63, no '/'), "
            "starting with a letter or digit"
        )
    return text


def location(remote: bool = True):
    """An argparse type: a path in a form this project reads (workloads/uri.py), else its error."""

    def parse(text: str) -> str:
        try:
            parse_location("", text, remote=remote)
        except TrainConfigError as e:
            raise argparse.ArgumentTypeError(str(e).strip()) from None
        return text

    return parse


@dataclass(frozen=True)
class Mode:
    """A mode of a command its flags choose: `name` as a refusal names it, `chosen` by the parsed flags or not."""

    name: str
    chosen: Callable[[argparse.Namespace], bool]


def target_of(args: argparse.Namespace) -> str:
    """--target if given, else aws with a stack and local without (`resolve_target` refuses a bad pair)."""
    return getattr(args, "target", None) or ("aws" if getattr(args, "stack", None) else "local")


LOCAL = Mode("--target local", lambda args: target_of(args) == "local")
AWS = Mode("--target aws", lambda args: target_of(args) == "aws")
# The modes each flag has no meaning in, with why, declared beside the flag by `not_in`; automation/cli.py
# refuses a flag given in one of them.
NOT_IN: weakref.WeakKeyDictionary[argparse.Action, tuple[tuple[Mode, str], ...]] = weakref.WeakKeyDictionary()
Flags = TypeVar("Flags", bound=argparse.Action | tuple[argparse.Action, ...])


def not_in(flags: Flags, mode: Mode, why: str) -> Flags:
    """Declare that each flag (what `add_argument` returns, or a tuple of those) has no meaning in `mode`, `why`
    saying what happens there instead: given in that mode, it is refused with exit 2 before anything starts."""
    for action in (flags,) if isinstance(flags, argparse.Action) else flags:
        NOT_IN[action] = (*NOT_IN.get(action, ()), (mode, why))
    return flags


def command_parser(sub: Any, name: str, help: str, doc: str, parents: list) -> argparse.ArgumentParser:
    """The parser of a command whose --help shows `help` and its module's docstring after the first line."""
    description = help[0].upper() + help[1:] + ".\n\n" + doc.split("\n\n", 1)[1]
    formatter = argparse.RawDescriptionHelpFormatter
    return sub.add_parser(name, parents=parents, help=help, description=description, formatter_class=formatter)


# The one declaration of --stack, which every command that reads a stack takes through one of these parents:
# STACK_PARENT alone (scale, render), CLUSTER_PARENT with --kubeconfig (bench, drill, report, dashboard, logs),
# TARGET_PARENT with --target (the pipeline's commands and status). Each command declares its other flags itself.
STACK_PARENT = argparse.ArgumentParser(add_help=False)
STACK_PARENT.add_argument(
    "--stack", type=stack_name, help="Pulumi stack (one per region, e.g. us-west-2); implies --target aws"
)


def add_kubeconfig(p: argparse.ArgumentParser) -> None:
    """--kubeconfig, declared once: CLUSTER_PARENT's and that of each target command reaching a cluster."""
    help = "aws: use this kubeconfig instead of the stack's `kubeconfig` output"
    not_in(p.add_argument("--kubeconfig", type=Path, help=help), LOCAL, "the local target talks to its own Ray head")


CLUSTER_PARENT = argparse.ArgumentParser(add_help=False, parents=[STACK_PARENT])
add_kubeconfig(CLUSTER_PARENT)
TARGET_PARENT = argparse.ArgumentParser(add_help=False, parents=[STACK_PARENT])
TARGET_PARENT.add_argument(
    "--target", choices=("aws", "local"), help="where to run (default: local without --stack, aws with one)"
)


def need_stack(args: argparse.Namespace, what: str) -> str:
    """--stack, or bad input naming the known stacks when ``what`` (a command or mode that needs one) has none."""
    if not args.stack:
        known = ", ".join(known_stacks(args.project_dir)) or "(none)"
        raise DriverError(f"{what} needs --stack NAME: known stacks are {known}", exit_code=2)
    return args.stack


def resolve_target(args: argparse.Namespace) -> str:
    """`--target` if given, else aws with a stack and local without; aws without a stack is an error."""
    # A command without --target or --stack (clean) reads as not given, so it runs locally.
    stack, target = getattr(args, "stack", None), target_of(args)
    if target == "aws":
        need_stack(args, "--target aws")
    if target == "local" and stack:
        raise DriverError(f"--stack {stack} is an AWS stack: leave out --target local, or drop --stack", exit_code=2)
    if target == "local" and args.command not in LOCAL_COMMANDS:
        raise DriverError(
            f"`{args.command}` has no meaning for --target local (its Ray cluster lives only for one run): "
            f"use `python -m automation run --target local`, or pass --stack NAME for AWS",
            exit_code=2,
        )
    return target
