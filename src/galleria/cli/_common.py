"""Helpers shared by the command modules."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

__all__ = ["CliError", "add_command", "print_json"]


class CliError(Exception):
    """A user-facing command-line error: printed as one line, exit code 2."""


def add_command(
    subparsers: Any, name: str, *, help: str, description: str, examples: str
) -> argparse.ArgumentParser:
    """Register a sub-command whose ``--help`` ends with an Examples section."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        name,
        help=help,
        description=description,
        epilog=f"examples:\n{examples}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    return parser


def print_json(payload: Any) -> None:
    """Print ``payload`` as stable JSON (sorted keys, two-space indent) on stdout."""
    json.dump(payload, sys.stdout, indent=2, sort_keys=True)
    sys.stdout.write("\n")
