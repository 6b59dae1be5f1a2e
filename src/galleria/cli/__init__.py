"""The ``galleria`` command line: one module per command, each a thin shell over the library.

Every command module defines ``add_parser(subparsers)`` (registering its arguments and help) and
``run(args) -> int``. Errors a user can cause are raised as :class:`CliError` (or the library's
TypeError / ValueError / KeyError / OSError / RuntimeError, or the ImportError of a missing extra) and
printed as one line with exit code 2.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import warnings
from collections.abc import Sequence
from typing import Any, NoReturn

from galleria._version import __version__
from galleria.cli._common import CliError, report_skipped_images

__all__ = ["CliError", "main"]

#: Command name → module under ``galleria.cli``, in the order ``--help`` lists them.
COMMANDS: dict[str, str] = {
    "demo": "demo",
    "build": "build",
    "search": "search",
    "evaluate": "evaluate",
    "evaluate-scores": "evaluate_scores",
    "info": "info",
    "graph": "graph",
    "duplicates": "duplicates",
    "map": "map_",
    "import": "import_",
    "export": "export",
    "add": "add",
    "remove": "remove",
    "sync": "sync",
    "check": "check",
    "serve": "serve",
    "tune": "tune",
    "models": "models",
    "methods": "methods",
}


class _Parser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line on stderr (exit code 2), like every other error.

    Sub-parsers are made of the same class, so ``galleria build`` without ``--out`` reads
    ``galleria build: error: the following arguments are required: --out (see 'galleria build --help')``.
    """

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with every command's sub-parser."""
    parser = _Parser(
        prog="galleria",
        description="Search, re-rank and evaluate image galleries.",
    )
    parser.add_argument("--version", action="version", version=f"galleria {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module_name in COMMANDS.values():
        module = importlib.import_module(f"galleria.cli.{module_name}")
        module.add_parser(subparsers)
    return parser


def _one_line_warnings(command: str) -> Any:
    """A ``warnings.showwarning`` that prints ``galleria COMMAND: warning: <message>`` on stderr."""
    prefix = f"galleria {command}" if command else "galleria"

    def show(
        message: Any, category: Any, filename: Any, lineno: Any, file: Any = None, line: Any = None
    ) -> None:
        print(f"{prefix}: warning: {message}", file=sys.stderr)

    return show


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the process exit code."""
    given = sys.argv[1:] if argv is None else list(argv)
    named = next((word for word in given if not word.startswith("-")), "")
    with warnings.catch_warnings():
        # Building the parser lists the declared components, plugins included: a plugin refused
        # there is one warning line too.
        warnings.showwarning = _one_line_warnings(named if named in COMMANDS else "")
        try:  # building the parser imports every command module (and the plugins): Ctrl-C may land there
            parser = build_parser()
        except KeyboardInterrupt:
            print("galleria: interrupted", file=sys.stderr)
            return 130
        args = parser.parse_args(argv)
        warnings.showwarning = _one_line_warnings(args.command)
        return _dispatch(args)


def _dispatch(args: argparse.Namespace) -> int:
    try:
        with report_skipped_images():
            code: int = args.run(args)
        sys.stdout.flush()  # inside the try, so that a closed pipe is handled below
    except BrokenPipeError:
        # The reader of our output went away (``galleria ... | head``): not an error of ours.
        # Point stdout at devnull so that the interpreter's final flush stays quiet.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except (
        CliError,
        TypeError,
        ValueError,
        KeyError,
        OSError,
        RuntimeError,
        ImportError,
        OverflowError,
        MemoryError,
    ) as error:
        from galleria.viewer.text import printable

        message = error.args[0] if isinstance(error, KeyError) and error.args else error
        if isinstance(error, MemoryError):
            message = f"out of memory ({error or 'an allocation failed'})"
        # One line, whatever the message held; a stored path's control characters escaped.
        text = printable(" ".join(str(message).split()))
        print(f"galleria {args.command}: error: {text}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("galleria: interrupted", file=sys.stderr)
        return 130
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
