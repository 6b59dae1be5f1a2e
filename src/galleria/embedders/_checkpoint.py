"""Local model checkpoints: recorded in a store by file name and SHA-256, never opened from a stored path.

A store file is untrusted input, so it must never make galleria load a model file that the file names.
An embedder built from a local checkpoint writes :func:`checkpoint_record` into its config (the file's
base name and digest); rebuilding it from a config needs the user to pass the checkpoint again, and
:func:`verify_checkpoint` checks that the file given is the one recorded.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
from collections.abc import Mapping
from typing import Any

from galleria._files import open_regular_file, short

__all__ = [
    "CHECKPOINT_KEYS",
    "MAX_CHECKPOINT_BYTES",
    "check_record",
    "checkpoint_record",
    "file_sha256",
    "verify_checkpoint",
]

#: The config keys under which an embedder records its local checkpoint.
CHECKPOINT_KEYS = ("checkpoint_name", "checkpoint_sha256")

_SHA256 = re.compile(r"[0-9a-f]{64}")
_CHUNK = 1 << 20
#: The largest file hashed as a checkpoint (a registry entry may name any file: it is not read past this).
MAX_CHECKPOINT_BYTES = 64 << 30


def _regular_file(path: Any, what: str) -> str:
    if isinstance(path, os.PathLike):
        path = os.fspath(path)
    if not isinstance(path, str):
        raise TypeError(f"{what} must be a str or os.PathLike, got {type(path).__name__}")
    try:
        mode = os.stat(path).st_mode
    except OSError as error:
        raise ValueError(f"{what} {path!r} cannot be read: {error.strerror or error}") from error
    if not stat.S_ISREG(mode):
        raise ValueError(f"{what} {path!r} is not a regular file")
    return path


def file_sha256(path: str | os.PathLike[str]) -> str:
    """Return the hex SHA-256 of a regular file of at most :data:`MAX_CHECKPOINT_BYTES`, read in chunks.

    The file is opened as :func:`galleria._files.open_regular_file` opens it (a FIFO or a device is
    refused on the open descriptor, never read), and one larger than the bound is refused (ValueError)
    before a byte is hashed.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> file = pathlib.Path(tempfile.mkdtemp()) / "w.bin"
    >>> _ = file.write_bytes(b"abc")
    >>> file_sha256(file)[:12]
    'ba7816bf8f01'
    """
    name = _regular_file(path, "checkpoint")
    digest = hashlib.sha256()
    limit = MAX_CHECKPOINT_BYTES
    with open_regular_file(name, "checkpoint") as stream:
        size = os.fstat(stream.fileno()).st_size
        if size > limit:
            raise ValueError(
                f"checkpoint {short(name)} is larger than the {limit} bytes allowed ({size} bytes)"
            )
        read = 0
        for chunk in iter(lambda: stream.read(_CHUNK), b""):
            read += len(chunk)
            if read > limit:  # it grew since fstat
                raise ValueError(f"checkpoint {short(name)} is larger than the {limit} bytes allowed")
            digest.update(chunk)
    return digest.hexdigest()


def checkpoint_record(path: str | os.PathLike[str]) -> dict[str, str]:
    """Return ``{"checkpoint_name": base name, "checkpoint_sha256": digest}`` for a local checkpoint."""
    name = _regular_file(path, "checkpoint")
    return {"checkpoint_name": os.path.basename(name), "checkpoint_sha256": file_sha256(name)}


def check_record(config: Mapping[str, Any], where: str) -> tuple[str, str] | None:
    """Return the (name, sha256) a config records, None if it records none; ValueError if malformed."""
    name, digest = config.get("checkpoint_name"), config.get("checkpoint_sha256")
    if name is None and digest is None:
        return None
    if not isinstance(name, str) or not name or os.path.basename(name) != name:
        raise ValueError(f"{where}: checkpoint_name must be a plain file name, got {name!r}")
    if not isinstance(digest, str) or not _SHA256.fullmatch(digest):
        raise ValueError(f"{where}: checkpoint_sha256 must be 64 lower-case hex digits, got {digest!r}")
    return name, digest


def verify_checkpoint(config: Mapping[str, Any], checkpoint: Any, where: str = "embedder config") -> str:
    """Return ``checkpoint`` as a str once its SHA-256 matches the one ``config`` records.

    Raises ValueError when the config records no checkpoint, when none is given (saying how to pass
    it), or when the digests differ; TypeError for a checkpoint that is not a path.
    """
    record = check_record(config, where)
    if record is None:
        raise ValueError(f"{where} records no local checkpoint, but checkpoint={checkpoint!r} was given")
    name, digest = record
    if checkpoint is None:
        raise ValueError(
            f"{where} was built from the local checkpoint {name!r} (sha256 {digest[:12]}…); a store file "
            "never chooses which file is loaded: pass it yourself, checkpoint='/path/to/" + name + "' in "
            "Python or --checkpoint PATH on the command line"
        )
    path = _regular_file(checkpoint, "checkpoint")
    actual = file_sha256(path)
    if actual != digest:
        raise ValueError(
            f"checkpoint {path!r} has sha256 {actual[:12]}…, but {where} records {name!r} with "
            f"sha256 {digest[:12]}…"
        )
    return path
