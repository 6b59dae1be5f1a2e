"""The settings file ``galleria tune`` writes and ``evaluate`` / ``search`` / ``serve`` read.

A settings file is JSON::

    {"format": "galleria-settings", "format_version": 1,
     "settings": {"query_expansion": true, "expansion_alpha": 1.0, "expansion_neighbors": 20,
                  "rerank": true, "rerank_method": "diffusion", "k": 30, ..., "pool": 200},
     "metric": "map@100", "beats_plain": true, "validation": {...}, "trials": [...], ...}

Only ``format``, ``format_version`` and ``settings`` are needed to use it; the rest records how it
was chosen. ``settings`` uses the keys of :meth:`galleria.evaluation.RetrievalConfig.settings`
(``rerank_method`` absent means k-reciprocal). A settings file is untrusted input: it is read only
up to :data:`MAX_BYTES`, every key and value is checked, and nothing in it names a file to open.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from galleria._files import atomic_write_bytes, load_json, read_regular_file
from galleria.retrieval import RetrievalConfig

__all__ = [
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "MAX_BYTES",
    "config_from_settings",
    "read_settings",
    "read_settings_file",
    "write_settings",
]

FORMAT_NAME = "galleria-settings"
FORMAT_VERSION = 1
#: Largest settings file read (a real one is a few kB, its trial history included).
MAX_BYTES = 4 << 20


def config_from_settings(settings: Any, name: str = "tuned", where: str = "settings") -> RetrievalConfig:
    """Turn a ``settings`` mapping (the keys of ``RetrievalConfig.settings()``) into a ``RetrievalConfig``.

    The same as :meth:`RetrievalConfig.from_settings`, the one place a settings mapping becomes a
    configuration.

    Raises
    ------
    TypeError, ValueError
        A non-mapping, an unknown key, a key of another method, or a bad value (named, prefixed
        with ``where``).

    Examples
    --------
    >>> config_from_settings({"rerank": True, "rerank_method": "gnn", "k1": 9}).title
    'GNN (k1=9, k2=7, λ=0.3, pool=200)'
    """
    return RetrievalConfig.from_settings(settings, name=name, where=where)


def read_settings_file(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read and check a settings file's JSON document (format, version, ``settings`` object).

    Raises
    ------
    OSError
        The file is missing or unreadable.
    ValueError
        It is not a regular file (a FIFO, a device), larger than :data:`MAX_BYTES`, not JSON, not a
        galleria settings file, or of a newer format version.
    """
    name = os.fspath(path)
    data = read_regular_file(name, "settings file", MAX_BYTES)
    document = load_json(data, f"settings file {name!r}")
    if not isinstance(document, dict) or document.get("format") != FORMAT_NAME:
        raise ValueError(f'{name!r} is not a galleria settings file (no "format": "{FORMAT_NAME}")')
    version = document.get("format_version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise ValueError(f"settings file {name!r} has an invalid format_version {version!r}")
    if version > FORMAT_VERSION:
        raise ValueError(
            f"settings file {name!r} has format version {version}, newer than this galleria reads "
            f"({FORMAT_VERSION}); upgrade galleria"
        )
    if not isinstance(document.get("settings"), dict):
        raise ValueError(f'settings file {name!r} has no "settings" object')
    return document


def read_settings(path: str | os.PathLike[str], name: str = "tuned") -> RetrievalConfig:
    """Read a settings file written by ``galleria tune`` and return its :class:`RetrievalConfig`.

    This is the one function ``evaluate``, ``search`` and ``serve`` call for ``--settings``.

    Raises
    ------
    OSError, ValueError
        As :func:`read_settings_file` and :func:`config_from_settings` (errors name the file and
        the key; a value of the wrong type is a ValueError here, as the file is at fault).

    Examples
    --------
    >>> import tempfile, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "tuned.json"
    >>> write_settings(path, RetrievalConfig("best", query_expansion=True, expansion_alpha=1.0))
    >>> read_settings(path).title
    'αQE (α=1, n=adaptive)'
    >>> write_settings(path, RetrievalConfig("best", True, 1.0, 4))
    >>> read_settings(path).title
    'αQE (α=1, n=4)'
    """
    document = read_settings_file(path)
    try:
        return config_from_settings(
            document["settings"], name=name, where=f"settings file {os.fspath(path)!r}"
        )
    except TypeError as error:  # a file's wrong value type is a bad file: one kind of error for it
        raise ValueError(str(error)) from None


def write_settings(
    path: str | os.PathLike[str], config: RetrievalConfig, record: Mapping[str, Any] | None = None
) -> None:
    """Write ``config`` (and the JSON-able ``record`` of how it was chosen) as a settings file, atomically."""
    document: dict[str, Any] = {"format": FORMAT_NAME, "format_version": FORMAT_VERSION}
    document["settings"] = config.settings()
    if record:
        reserved = {"format", "format_version", "settings"} & set(record)
        if reserved:
            raise ValueError(f"record must not use the keys {sorted(reserved)}")
        document.update(record)
    text = json.dumps(document, indent=2, ensure_ascii=False) + "\n"
    atomic_write_bytes(path, text.encode("utf-8"))
