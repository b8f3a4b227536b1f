"""`python -m automation <command>`: the user's one command for the whole pipeline.

    python -m automation run                                # local target: Ray on 127.0.0.1, no AWS
    python -m automation preflight --stack us-west-2        # read-only AWS checks, each with its fix
    python -m automation run --stack us-west-2 --plan       # preflight + preview, no change
    python -m automation run --stack us-west-2 --yes        # preflight, preview, up, verify, submit, train, check
    python -m automation run --stack us-west-2 --yes --detach  # submit the job, exit; it runs without the laptop
    python -m automation attach --stack us-west-2 [RUN]     # follow a submitted job, then check and report
    python -m automation destroy --stack us-west-2
    python -m automation render --stack us-west-2           # the resources the program declares, offline
    python -m automation clean --keep 3                     # delete local runs/ but the newest 3
    python -m automation report RUN [--compare RUN2]        # an HTML report of a run, with plots
    python -m automation logs --stack us-west-2 [--worker N] # follow a running job's logs
    python -m automation dashboard --stack us-west-2        # Ray's dashboard on 127.0.0.1 (a port-forward)
    python -m automation scale --stack us-west-2 --gpu-nodes 0  # GPU nodes by hand (`run` scales them itself)
    python -m automation capacity --instance-type g6.12xlarge --count 2  # where the GPU nodes can be had

`--target` defaults to `local` without `--stack` and to `aws` with one. Every error is one line
on stderr and a non-zero exit: 2 for bad input, 1 for a failed step, 130 when interrupted.

Each command is a module of automation/commands/ with `add_parser(sub, parents)` and `run(args, ui) -> int`,
named in COMMAND_MODULES; this module builds the parser from them and dispatches.
"""

from __future__ import annotations

import argparse
import importlib
import signal
import warnings
from collections.abc import Sequence

from automation import interrupts
from automation.errors import DriverError
from automation.flags import COMMON_PARENT, NOT_IN
from automation.ui import Ui
from workloads.config import TrainConfigError

PIPELINE_COMMANDS = "automation.commands.run_steps"
# Each command's module, in the order `--help` lists them; a module may hold several commands
# (run_steps: the steps, `run` and `attach`), and its add_parser adds them all.
COMMAND_MODULES = {
    **dict.fromkeys(
        ("preflight", "preview", "up", "verify", "train", "check", "destroy", "run", "attach"), PIPELINE_COMMANDS
    ),
    **{
        name: f"automation.commands.{name}"
        for name in ("status", "render", "clean", "report", "dashboard", "logs", "bench", "drill", "scale", "capacity")
    },
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m automation",
        description="Provision, verify and use an EKS cluster for Ray Train over EFA, or run the same job locally.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in dict.fromkeys(COMMAND_MODULES.values()):
        importlib.import_module(module).add_parser(sub, [COMMON_PARENT])
    return parser


def subcommand(parser: argparse.ArgumentParser, command: str) -> argparse.ArgumentParser:
    """The parser of `command`, one of `parser`'s subcommands."""
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))  # noqa: SLF001
    return commands.choices[command]


def parse(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """`parser.parse_args`, except that a flag the command does not take is named with the flags it does."""
    args, extra = parser.parse_known_args(argv)
    if extra:
        command_parser = subcommand(parser, args.command)
        takes = ", ".join(
            a.option_strings[0] if a.option_strings else str(a.metavar or a.dest)
            for a in command_parser._actions  # noqa: SLF001
            if a.help != argparse.SUPPRESS
        )
        command_parser.error(f"unrecognized arguments: {' '.join(extra)} (`{args.command}` takes {takes})")
    return args


def refuse_flags_out_of_mode(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """The one check of the modes each flag is declared `not_in` (automation/flags.py): a flag given, that is
    away from its default, in a mode where it has no meaning is bad input, refused before anything starts."""
    for action in subcommand(parser, args.command)._actions:  # noqa: SLF001
        given = getattr(args, action.dest, action.default) != action.default
        for mode, why in NOT_IN.get(action, ()) if given else ():
            if mode.chosen(args):
                flag = action.option_strings[0]
                raise DriverError(f"{flag} does not apply to {args.command} {mode.name} ({why}); drop it", exit_code=2)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parse(parser, argv)
    ui = Ui(json_mode=args.json)
    # SIGTERM takes the same path as Ctrl-C (Python's handler raises KeyboardInterrupt), so the finally blocks
    # stop what this run started. SIGINT gets Python's own handler back: a shell that starts the driver in the
    # background (CI, `cmd &` in a script) hands it SIGINT ignored, and Ctrl-C or `kill -INT` would then neither
    # stop the run nor the Ray processes it started. Both are counted (automation/interrupts.py).
    previous = signal.signal(signal.SIGTERM, interrupts.on_signal)
    previous_int = signal.signal(signal.SIGINT, interrupts.on_signal)
    try:
        with warnings.catch_warnings():
            # ConfigWarnings are shown as notes in the output, not as Python warnings.
            warnings.simplefilter("ignore")
            refuse_flags_out_of_mode(parser, args)
            return importlib.import_module(COMMAND_MODULES[args.command]).run(args, ui)
    except (DriverError, TrainConfigError) as e:  # a job the stack or the flags describe wrongly is bad input
        ui.error(str(e))
        if args.json:
            ui.emit_json({"ok": False, "error": str(e)})
        return e.exit_code if isinstance(e, DriverError) else 2
    except KeyboardInterrupt:  # a pipeline command reports its own step; this is before any began
        ui.error("interrupted before any step began: nothing was started")
        if ui.json_mode:
            ui.emit_json({"ok": False, "error": "interrupted before any step", "interrupted_step": None})
        return 130
    finally:
        ui.close()
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, previous_int)
