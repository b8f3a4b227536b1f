"""Stand-alone commands that are not pipeline steps, one module each exposing `run(args, ui) -> int`."""

import argparse
from typing import TypeAlias

# What each command's `add_parser(sub, parents)` is handed: argparse's subcommand action (a string, since the
# class is generic only to type checkers).
Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"
