"""Atomic file writing shared by the store, the reports and the dataset cache.

A file is written to a temporary file in the target's own folder and moved into place with
``os.replace``, so readers see the old file or the new one, never half of one. The temporary
file gets the permissions a plain ``open()`` would have given (``0o666`` less the umask), not
``mkstemp``'s private ``0o600``.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["atomic_path", "atomic_write_bytes", "default_mode"]


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
    handle, temporary = tempfile.mkstemp(
        prefix=f".{os.path.basename(destination)}.", suffix=".tmp", dir=os.path.dirname(destination)
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


def atomic_write_bytes(target: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``target`` atomically."""
    with atomic_path(target) as temporary, open(temporary, "wb") as stream:
        stream.write(data)
