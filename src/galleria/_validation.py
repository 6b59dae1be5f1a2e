"""Argument checks shared by every public entry point.

Each check names the argument and the offending value. TypeError is raised for the wrong *kind*
of value (a float or bool where an int belongs), ValueError for the right kind with a wrong value.
Inner functions trust their inputs; only public boundaries call these.
"""

from __future__ import annotations

import math
import numbers
import os
from collections.abc import Iterable
from typing import Any

import numpy as np

__all__ = [
    "MAX_COUNT",
    "MAX_VECTOR_DIM",
    "check_bool",
    "check_callback",
    "check_choice",
    "check_fraction",
    "check_labels_root",
    "check_nonnegative_float",
    "check_path_list",
    "check_positive_int",
    "is_int",
]


#: Largest vector dimension galleria stores (a store file, an index and an embedder all stop here).
MAX_VECTOR_DIM = 1 << 16
#: Largest count any setting may hold (numpy's int64): larger ones would overflow in the numeric cores.
MAX_COUNT = (1 << 63) - 1


def is_int(value: Any) -> bool:
    """Return True for Python and numpy integers, False for bools and everything else."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def check_bool(name: str, value: Any) -> bool:
    """Return ``value`` if it is a ``bool`` (numpy bools included), else raise TypeError naming ``name``.

    Examples
    --------
    >>> check_bool("progress", False)
    False
    """
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be a bool, got {value!r} ({type(value).__name__})")
    return bool(value)


def check_positive_int(name: str, value: Any) -> int:
    """Return ``value`` as an ``int`` if it is an integer ≥ 1, else raise naming ``name``."""
    if not is_int(value):
        raise TypeError(f"{name} must be a positive integer, got {value!r} ({type(value).__name__})")
    if value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    if value > MAX_COUNT:
        raise ValueError(f"{name} must be at most 2**63 - 1, got {value!r}")
    return int(value)


def check_nonnegative_float(name: str, value: Any) -> float:
    """Return ``value`` as a finite ``float`` ≥ 0, else raise naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a non-negative real number, got {value!r} ({type(value).__name__})")
    result = float(value)
    if not math.isfinite(result) or result < 0:
        raise ValueError(f"{name} must be a finite non-negative number, got {value!r}")
    return result


def check_fraction(name: str, value: Any) -> float:
    """Return ``value`` as a ``float`` in [0, 1], else raise naming ``name``."""
    result = check_nonnegative_float(name, value)
    if result > 1:
        raise ValueError(f"{name} must lie in [0, 1], got {value!r}")
    return result


def check_choice(name: str, value: Any, choices: Iterable[str]) -> str:
    """Return ``value`` if it is one of ``choices``, else raise naming ``name`` and the choices."""
    options = tuple(choices)
    if not isinstance(value, str):
        raise TypeError(f"{name} must be one of {options}, got {value!r} ({type(value).__name__})")
    if value not in options:
        raise ValueError(f"{name} must be one of {options}, got {value!r}")
    return value


def check_path_list(name: str, value: Any, *, allow_empty: bool = False) -> list[str]:
    """Return a list of ``str`` paths from a sequence of ``str`` / ``os.PathLike``.

    A single string is rejected (it is almost always a mistake for a list of paths).
    """
    if isinstance(value, (str, bytes, os.PathLike)) or not isinstance(value, Iterable):
        raise TypeError(f"{name} must be a list of str or os.PathLike paths, got {type(value).__name__}")
    paths = list(value)
    if not all(type(item) is str and item for item in paths):  # the common case, checked fast
        for position, item in enumerate(paths):
            if isinstance(item, os.PathLike):
                item = paths[position] = os.fspath(item)
            if not isinstance(item, str):
                kind = type(item).__name__
                raise TypeError(
                    f"{name}[{position}] must be a str or os.PathLike path, got {item!r} ({kind})"
                )
            if not item:
                raise ValueError(f"{name}[{position}] is an empty path")
    if not paths and not allow_empty:
        raise ValueError(f"{name} must not be empty")
    return paths


#: The most characters a recorded folder path may have (a store header value, untrusted on load).
MAX_FOLDER_CHARS = 4096


def check_labels_root(name: str, value: Any) -> str:
    """An absolute folder path as a ``str``: ``value`` (a str or os.PathLike) made absolute at the
    caller, here checked to be absolute, at most :data:`MAX_FOLDER_CHARS` long and free of control
    characters (it is shown in messages and reports).

    Examples
    --------
    >>> check_labels_root("labels_root", "/data/animals")
    '/data/animals'
    """
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str or os.PathLike folder, got {value!r} ({type(value).__name__})")
    if not os.path.isabs(value) or len(value) > MAX_FOLDER_CHARS:
        raise ValueError(
            f"{name} must be an absolute folder path of at most {MAX_FOLDER_CHARS} characters, "
            f"got {value[:200]!r}"
        )
    if any(ord(char) < 32 or ord(char) == 127 for char in value):
        raise ValueError(f"{name} must not contain control characters, got {value[:200]!r}")
    return os.path.normpath(value)


def check_callback(name: str, value: Any) -> None:
    """Raise TypeError naming ``name`` unless ``value`` is None or callable.

    Examples
    --------
    >>> check_callback("on_progress", print)
    >>> check_callback("on_progress", 3)
    Traceback (most recent call last):
    ...
    TypeError: on_progress must be callable or None, got 3 (int)
    """
    if value is not None and not callable(value):
        raise TypeError(f"{name} must be callable or None, got {value!r} ({type(value).__name__})")
