"""Parsing command-line values: integers, floats, existing files and folders, deprecated aliases."""

from __future__ import annotations

import argparse
import math
import os
import stat
import sys
from typing import Any

from galleria._validation import MAX_COUNT
from galleria.cli._common import CliError
from galleria.viewer.text import shorten_middle

#: The values of ``--rerank-method``: every declared method (built-in and plugins), the default first.


class _DeprecatedAlias(argparse.Action):
    """An old spelling of an option: stores into the new option's destination and prints one warning."""

    def __init__(self, option_strings: list[str], dest: str, *, replacement: str, **kwargs: Any) -> None:
        self.replacement = replacement
        super().__init__(option_strings, dest, **kwargs)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        print(
            f"{parser.prog}: warning: {option_string} is deprecated; use {self.replacement}",
            file=sys.stderr,
        )
        setattr(namespace, self.dest, True if self.nargs == 0 else values)


def add_deprecated_alias(group: Any, old: str, *, dest: str, replacement: str, **kwargs: Any) -> None:
    """Register ``old`` as a hidden, warning spelling of the option that stores into ``dest``.

    ``replacement`` is the spelling the warning points to (e.g. ``"--n-queries N"``).
    """
    group.add_argument(
        old,
        dest=dest,
        action=_DeprecatedAlias,
        replacement=replacement,
        default=argparse.SUPPRESS,
        help=argparse.SUPPRESS,
        **kwargs,
    )


#: ``--embedder``'s help: every declared embedder's spelling (plugins included).
def parse_int(option: str, text: Any, *, minimum: int = 1) -> int:
    """``text`` as an int ≥ ``minimum``, else a CliError naming ``option``."""
    try:
        value = int(str(text), 10)
    except ValueError:  # not a number, or more than 4300 digits
        raise CliError(f"{option} must be an integer, got {shorten_middle(str(text), 40)!r}") from None
    if value < minimum:
        raise CliError(f"{option} must be at least {minimum}, got {value}")
    if value > MAX_COUNT:  # numpy's int64: larger counts overflow in the numeric cores
        raise CliError(f"{option} must be at most 2**63 - 1, got {shorten_middle(str(text), 40)!r}")
    return value


def parse_float(option: str, text: Any, *, minimum: float = 0.0, maximum: float | None = None) -> float:
    """``text`` as a finite float in [minimum, maximum], else a CliError naming ``option``."""
    try:
        value = float(str(text))
    except ValueError:
        raise CliError(f"{option} must be a number, got {text!r}") from None
    if not math.isfinite(value):
        raise CliError(f"{option} must be a finite number, got {text!r}")
    if value < minimum or (maximum is not None and value > maximum):
        upper = f" and at most {maximum:g}" if maximum is not None else ""
        raise CliError(f"{option} must be at least {minimum:g}{upper}, got {text!r}")
    return value


def check_existing_folder(option: str, path: str) -> str:
    """``path`` if it is an existing folder, else a CliError naming ``option``."""
    if not os.path.exists(path):
        raise CliError(f"{option} {path!r} does not exist")
    if not os.path.isdir(path):
        raise CliError(f"{option} {path!r} is not a directory")
    return path


def check_existing_file(what: str, path: str) -> str:
    """``path`` if it is a regular file, else a CliError naming ``what`` (e.g. ``"store file"``).

    A folder, FIFO or device is refused at once: opening a FIFO would wait forever for a writer.
    """
    if not os.path.exists(path):
        raise CliError(f"{what} {path!r} does not exist")
    if os.path.isdir(path):
        raise CliError(f"{what} {path!r} is a directory")
    mode = os.stat(path).st_mode
    if not stat.S_ISREG(mode):
        kind = "FIFO" if stat.S_ISFIFO(mode) else "device or other special file"
        raise CliError(f"{what} {path!r} is a {kind}, not a regular file")
    return path
