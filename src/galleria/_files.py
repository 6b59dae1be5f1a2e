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
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, BinaryIO

__all__ = [
    "StoreLockedError",
    "atomic_path",
    "atomic_stream",
    "atomic_write_bytes",
    "check_output_path",
    "default_mode",
    "load_json",
    "lock_path",
    "open_regular_file",
    "read_regular_file",
    "remove_stale_temporaries",
    "resolve_inside",
    "short",
    "writer_lock",
]

#: Characters of an untrusted value (a path, a caption) an error message shows at most.
SHORT_LIMIT = 160


def short(value: object, limit: int = SHORT_LIMIT) -> str:
    """``repr(value)``, cut to about ``limit`` characters with an ellipsis and the full length.

    An error message names the value it refuses, but an untrusted value may be 64 MB long: the
    message shows its start and says how long it was.

    Examples
    --------
    >>> short("a" * 1000, 20)
    "'aaaaaaaaaaaaaaaaaa…' (1000 characters)"
    >>> short("photo.jpg")
    "'photo.jpg'"
    """
    if isinstance(value, (str, bytes)) and len(value) > limit:
        unit = "characters" if isinstance(value, str) else "bytes"
        head = repr(value[: max(1, limit - 2)])
        return f"{head[:-1]}…{head[-1]} ({len(value)} {unit})"
    text = repr(value)
    return text if len(text) <= limit else text[: max(1, limit - 1)] + "…"


def resolve_inside(path: str | os.PathLike[str], folder: str | os.PathLike[str], what: str) -> str:
    """The real path of ``path`` once it lies inside the real path of ``folder``; ValueError otherwise.

    An artefact's part (a shard of an import, a cached model's data file) belongs to the folder the
    user named: a symbolic link leading out of it could pull any file of the user's into the result.
    """
    real = os.path.realpath(os.fspath(path))
    base = os.path.realpath(os.fspath(folder))
    if os.path.commonpath([real, base]) != base:
        raise ValueError(
            f"{what} {short(os.fspath(path))} resolves to {short(real)}, outside the folder {short(base)}"
        )
    return real


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
    check_output_path(destination, "output file")
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


@contextmanager
def atomic_stream(target: str | os.PathLike[str], mode: str = "wb", **options: Any) -> Iterator[Any]:
    """A stream (``open(temporary, mode, **options)``) whose file replaces ``target`` once the block
    ends without an error (:func:`atomic_path`); on an error nothing is replaced."""
    with atomic_path(target) as temporary, open(temporary, mode, **options) as stream:
        yield stream


def atomic_write_bytes(target: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``target`` atomically."""
    with atomic_stream(target) as stream:
        stream.write(data)


def open_regular_file(
    path: str | os.PathLike[str], what: str, *, inside: str | os.PathLike[str] | None = None
) -> BinaryIO:
    """Open ``path`` for reading once it is a regular file; ValueError naming ``what`` otherwise.

    A side file (a manifest, a settings file, a shard) is untrusted: a FIFO would block the read
    forever and ``/dev/zero`` never ends, so anything but a regular file is refused before a byte
    is read. The file is opened without blocking and checked on the open descriptor, so swapping
    it between a check and the open changes nothing. OSError (missing, unreadable) passes through.
    With ``inside``, a path resolving outside that folder (a symbolic link leaving it) is refused
    (:func:`resolve_inside`) and the file opened is the one the check resolved.
    """
    name = os.fspath(path)
    if inside is not None:
        name = resolve_inside(name, inside, what)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    descriptor = os.open(name, flags)
    try:
        mode = os.fstat(descriptor).st_mode
        if not stat.S_ISREG(mode):
            kind = "folder" if stat.S_ISDIR(mode) else "FIFO" if stat.S_ISFIFO(mode) else "device"
            raise ValueError(f"{what} {short(name)} is a {kind}, not a regular file")
        if hasattr(os, "set_blocking"):
            os.set_blocking(descriptor, True)
        return os.fdopen(descriptor, "rb")
    except BaseException:
        os.close(descriptor)
        raise


def read_regular_file(
    path: str | os.PathLike[str], what: str, limit: int, *, inside: str | os.PathLike[str] | None = None
) -> bytes:
    """The bytes of the regular file ``path`` (:func:`open_regular_file`), at most ``limit`` of them.

    A file larger than ``limit`` is refused (ValueError naming ``what``) before it is read.
    """
    name = os.fspath(path)
    with open_regular_file(name, what, inside=inside) as stream:
        size = os.fstat(stream.fileno()).st_size
        if size > limit:
            raise ValueError(f"{what} {short(name)} is larger than the {limit} bytes allowed ({size} bytes)")
        data = stream.read(size + 1)  # not read(limit + 1): that allocates the whole bound first
        if len(data) > size:  # it grew since fstat
            data += stream.read(limit + 1 - len(data))
    if len(data) > limit:
        raise ValueError(f"{what} {short(name)} is larger than the {limit} bytes allowed")
    return data


def load_json(data: bytes, what: str) -> Any:
    """Parse untrusted JSON bytes; every failure (bad UTF-8 or JSON, nesting, huge integers, a
    document whose objects would take over 3 times its size: :mod:`galleria._jsoncost`) is a
    ValueError naming ``what``."""
    from galleria._jsoncost import load_bounded_json

    return load_bounded_json(data, what)


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "symbolic link"
    if stat.S_ISDIR(mode):
        return "folder"
    if stat.S_ISFIFO(mode):
        return "FIFO"
    if stat.S_ISSOCK(mode):
        return "socket"
    if stat.S_ISCHR(mode):
        return "character device"
    if stat.S_ISBLK(mode):
        return "block device"
    return "special file"


def check_output_path(path: str | os.PathLike[str], what: str) -> str:
    """``path`` as a string, once it names nothing or a regular file; ValueError naming ``what`` otherwise.

    Every file galleria writes is moved into place with ``os.replace``, which would replace whatever
    the name held: a device node (``/dev/null``, as root), a FIFO, a socket, or a symbolic link
    (the link itself, not its target). All of them are refused here, as is a folder, so an output
    the user names can only create a file or replace a regular one. Whether an existing regular file
    may be replaced is each command's own rule.

    Examples
    --------
    >>> check_output_path("/dev/null", "--out")
    Traceback (most recent call last):
    ...
    ValueError: --out '/dev/null' is a character device, not a regular file; give a file name
    """
    name = os.fspath(path)
    try:
        mode = os.lstat(name).st_mode
    except FileNotFoundError:
        return name
    except OSError as error:
        raise ValueError(f"{what} {name!r} cannot be checked: {error.strerror or error}") from None
    if stat.S_ISREG(mode):
        return name
    if not stat.S_ISLNK(mode):
        raise ValueError(f"{what} {name!r} is a {_kind(mode)}, not a regular file; give a file name")
    kind = "symbolic link" if os.path.exists(name) else "dangling symbolic link"
    raise ValueError(f"{what} {name!r} is a {kind}, not a regular file; remove it or give another name")


# ---------------------------------------------------------------------------- one writer per store

#: Suffix of the lock file beside a store that a writer holds while it changes the store.
LOCK_SUFFIX = ".lock"


class StoreLockedError(OSError):
    """Another process holds the writer lock of a store file."""


def lock_path(store: str | os.PathLike[str]) -> str:
    """The lock file of the store file ``store``."""
    return os.fspath(store) + LOCK_SUFFIX


def _try_lock(name: str) -> int | None:
    """An open descriptor of ``name`` holding an exclusive lock, or None if another holds it."""
    import fcntl

    flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    flags |= getattr(os, "O_NONBLOCK", 0)
    try:
        descriptor = os.open(name, flags, default_mode())
    except OSError as error:
        raise OSError(f"cannot open the lock file {name!r}: {error.strerror or error}") from None
    try:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            raise ValueError(f"the lock file {name!r} is not a regular file; remove it")
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(descriptor)
            return None
        # A holder that finished may have unlinked the name after we opened it: lock the file the
        # name holds now, or try again.
        try:
            same = os.path.samestat(os.fstat(descriptor), os.stat(name, follow_symlinks=False))
        except FileNotFoundError:
            same = False
        if not same:
            os.close(descriptor)
            return _try_lock(name)
        return descriptor
    except BaseException:
        with contextlib.suppress(OSError):
            os.close(descriptor)
        raise


@contextmanager
def writer_lock(store: str | os.PathLike[str], wait: float = 0.0, what: str = "store") -> Iterator[str]:
    """Hold the writer lock of the store file ``store`` (an ``flock`` on ``STORE.lock``) inside the block.

    One process at a time changes a store: the lock is taken before the store is read, so the next
    writer reads what the previous one saved. Another holder makes this wait up to ``wait`` seconds,
    then raise :class:`StoreLockedError` (an OSError) naming the store. The lock dies with its
    process (the kernel releases it), so a killed writer never leaves a store locked; the lock file
    is removed on release. Network file systems are not supported (their locks may not be honoured).
    """
    name = lock_path(os.path.abspath(os.fspath(store)))
    deadline = time.monotonic() + max(0.0, wait)
    pause = 0.02
    while (descriptor := _try_lock(name)) is None:
        if time.monotonic() >= deadline:
            waited = f" after waiting {wait:g} s" if wait > 0 else ""
            raise StoreLockedError(
                f"{what} {os.fspath(store)!r} is being changed by another galleria process (lock "
                f"{name!r} held){waited}; try again when it is done, or pass --wait SECONDS"
            )
        time.sleep(min(pause, max(0.0, deadline - time.monotonic())))
        pause = min(0.2, pause * 2)
    try:
        yield name
    finally:
        with contextlib.suppress(OSError):
            os.remove(name)
        os.close(descriptor)
