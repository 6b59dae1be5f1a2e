"""Atomic file writing shared by the store, the reports and the dataset cache.

A file is written to a temporary file in the target's own folder and moved into place with
``os.replace``, so readers see the old file or the new one, never half of one. The temporary
file gets the permissions a plain ``open()`` would have given (``0o666`` less the umask), not
``mkstemp``'s private ``0o600``.

A temporary file is named ``.TARGET.PID.RANDOM.tmp``. A process killed mid-write leaves its own
behind; the next write to the same target removes those whose process no longer runs (never one
that another live process or thread is still writing).
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, BinaryIO

__all__ = [
    "atomic_path",
    "atomic_write_bytes",
    "default_mode",
    "load_json",
    "open_regular_file",
    "read_regular_file",
    "remove_stale_temporaries",
]


def default_mode(*, folder: bool = False) -> int:
    """The permissions ``open()`` (or ``mkdir()`` with ``folder=True``) gives under the current umask."""
    mask = os.umask(0)
    os.umask(mask)
    return (0o777 if folder else 0o666) & ~mask


@contextmanager
def atomic_path(target: str | os.PathLike[str]) -> Iterator[str]:
    """Yield a temporary path beside ``target``; on success it replaces ``target``, on error it is removed.

    Examples
    --------
    >>> import pathlib, tempfile
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> with atomic_path(folder / "a.txt") as temporary:
    ...     _ = pathlib.Path(temporary).write_text("done")
    >>> (folder / "a.txt").read_text()
    'done'
    """
    destination = os.path.abspath(os.fspath(target))
    remove_stale_temporaries(destination)
    handle, temporary = tempfile.mkstemp(
        prefix=f".{os.path.basename(destination)}.{os.getpid()}.",
        suffix=".tmp",
        dir=os.path.dirname(destination),
    )
    os.close(handle)
    try:
        yield temporary
        os.chmod(temporary, default_mode())
        with open(temporary, "rb+") as stream:
            os.fsync(stream.fileno())
        os.replace(temporary, destination)
    except BaseException:
        if os.path.exists(temporary):
            os.remove(temporary)
        raise


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # it exists, but belongs to someone else
        return True
    return True


def remove_stale_temporaries(destination: str) -> list[str]:
    """Remove temporary files that killed writes to ``destination`` left; return the names removed."""
    folder, base = os.path.split(destination)
    pattern = re.compile(re.escape(f".{base}.") + r"(\d+)\.[^.]+\.tmp")
    removed: list[str] = []
    try:
        names = os.listdir(folder or ".")
    except OSError:
        return removed
    for entry in names:
        match = pattern.fullmatch(entry)
        if match is None or _running(int(match.group(1))):
            continue
        with contextlib.suppress(FileNotFoundError):
            os.remove(os.path.join(folder, entry))
            removed.append(entry)
    return removed


def atomic_write_bytes(target: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``target`` atomically."""
    with atomic_path(target) as temporary, open(temporary, "wb") as stream:
        stream.write(data)


def open_regular_file(path: str | os.PathLike[str], what: str) -> BinaryIO:
    """Open ``path`` for reading once it is a regular file; ValueError naming ``what`` otherwise.

    A side file (a manifest, a settings file, a shard) is untrusted: a FIFO would block the read
    forever and ``/dev/zero`` never ends, so anything but a regular file is refused before a byte
    is read. The file is opened without blocking and checked on the open descriptor, so swapping
    it between a check and the open changes nothing. OSError (missing, unreadable) passes through.
    """
    name = os.fspath(path)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    descriptor = os.open(name, flags)
    try:
        mode = os.fstat(descriptor).st_mode
        if not stat.S_ISREG(mode):
            kind = "folder" if stat.S_ISDIR(mode) else "FIFO" if stat.S_ISFIFO(mode) else "device"
            raise ValueError(f"{what} {name!r} is a {kind}, not a regular file")
        if hasattr(os, "set_blocking"):
            os.set_blocking(descriptor, True)
        return os.fdopen(descriptor, "rb")
    except BaseException:
        os.close(descriptor)
        raise


def read_regular_file(path: str | os.PathLike[str], what: str, limit: int) -> bytes:
    """The bytes of the regular file ``path`` (:func:`open_regular_file`), at most ``limit`` of them.

    A file larger than ``limit`` is refused (ValueError naming ``what``) before it is read.
    """
    name = os.fspath(path)
    with open_regular_file(name, what) as stream:
        size = os.fstat(stream.fileno()).st_size
        if size > limit:
            raise ValueError(f"{what} {name!r} is larger than the {limit} bytes allowed ({size} bytes)")
        data = stream.read(size + 1)  # not read(limit + 1): that allocates the whole bound first
        if len(data) > size:  # it grew since fstat
            data += stream.read(limit + 1 - len(data))
    if len(data) > limit:
        raise ValueError(f"{what} {name!r} is larger than the {limit} bytes allowed")
    return data


def load_json(data: bytes, what: str) -> Any:
    """Parse untrusted JSON bytes; every failure (bad UTF-8 or JSON, nesting, huge integers, a
    document whose objects would take over 3 times its size: :mod:`galleria._jsoncost`) is a
    ValueError naming ``what``."""
    from galleria._jsoncost import load_bounded_json

    return load_bounded_json(data, what)
