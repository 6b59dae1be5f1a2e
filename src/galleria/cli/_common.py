"""Helpers shared by the command modules."""

from __future__ import annotations

import argparse
import contextlib
import sys
import warnings
from collections.abc import Iterator
from typing import Any, TextIO

from galleria._warnings import SkippedImageWarning

__all__ = ["CliError", "add_command", "print_json", "report_skipped_images"]


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
    """Print ``payload`` as stable JSON (sorted keys, two-space indent) on stdout: strict JSON, a
    non-finite number printed as ``null`` (never ``NaN`` or ``Infinity``)."""
    from galleria._json import dumps

    sys.stdout.write(dumps(payload, indent=2, sort_keys=True) + "\n")


@contextlib.contextmanager
def report_skipped_images() -> Iterator[None]:
    """Print each :class:`~galleria.SkippedImageWarning` as one ``skipped PATH: reason`` line on stderr.

    Other warnings are shown as Python shows them. Every skipped file is reported, repeats included.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("always", SkippedImageWarning)
        show = warnings.showwarning

        def show_one(
            message: Warning | str,
            category: type[Warning],
            filename: str,
            lineno: int,
            file: TextIO | None = None,
            line: str | None = None,
        ) -> None:
            if isinstance(message, SkippedImageWarning):
                from galleria.viewer.text import printable

                print(printable(message), file=sys.stderr)
            else:
                show(message, category, filename, lineno, file, line)

        warnings.showwarning = show_one
        yield
