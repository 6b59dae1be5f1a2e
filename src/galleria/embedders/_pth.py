"""Reading torch's checkpoint files (``.pth``) with numpy alone: a restricted unpickler, nothing executed.

A file written by ``torch.save`` is a pickle of tensor records whose bytes (the storages) lie beside it:
either in a zip archive (``ARCHIVE/data.pkl`` and ``ARCHIVE/data/KEY``, torch ≥ 1.6) or, in the older
"legacy" format, after the pickle in the same file (the EfficientNet-Lite0 weights package ships one).
:func:`read_pth` reads both without torch. Its unpickler accepts exactly these records and nothing else:

* ``torch._utils._rebuild_tensor_v2(storage, offset, size, stride, requires_grad, hooks[, metadata])``,
  rebuilt here as a numpy array once its shape and strides are checked against its storage, and
  ``torch._utils._rebuild_parameter(tensor, requires_grad, hooks)``, the same tensor saved as a parameter;
* torch's storage classes (``torch.FloatStorage`` …), which only name a dtype (little-endian) here;
* ``collections.OrderedDict`` (the state dict itself, and the empty hooks of each tensor);
* storages, through ``persistent_load``: ``("storage", CLASS, KEY, LOCATION, NUMEL)``.

Any other global — ``os.system``, ``builtins.eval``, a class to instantiate — is refused by
``find_class`` before it is even looked up, so nothing of the file is constructed or called but plain
containers, numbers and strings (pickle's own opcodes) and the records above. The allowed globals are
handed out as objects that refuse a state (pickle's ``BUILD``) and are not classes (``NEWOBJ``), so a file
cannot change them for the next one. A storage's size must match
the bytes the file holds for it, a tensor must lie inside its storage, a zip entry must be a stored
(uncompressed) regular entry no larger than the file, and every failure is one ``ValueError`` naming the
file.
"""

from __future__ import annotations

import io
import pickle
import re
import stat
import zipfile
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

import numpy as np

from galleria._files import read_regular_file

__all__ = ["MAX_CHECKPOINT_BYTES", "read_pth"]

#: The largest checkpoint file read without torch.
MAX_CHECKPOINT_BYTES = 1 << 30
_MAX_PICKLE_BYTES = 64 << 20
_MAX_RANK = 8
_MAX_TENSORS = 100_000
_LEGACY_MAGIC = 0x1950A86A20F9469CFC6C
_LEGACY_PROTOCOL = 1001
_KEY = re.compile(r"[0-9A-Za-z_]{1,64}")

#: torch's storage classes → the numpy dtype of their elements (little-endian; bfloat16 kept as its bits).
_STORAGE_DTYPES: dict[str, str] = {
    "FloatStorage": "<f4",
    "DoubleStorage": "<f8",
    "HalfStorage": "<f2",
    "BFloat16Storage": "<u2",
    "LongStorage": "<i8",
    "IntStorage": "<i4",
    "ShortStorage": "<i2",
    "CharStorage": "i1",
    "ByteStorage": "u1",
    "BoolStorage": "?",
}


class _Refused(Exception):
    """Raised inside the unpickler; :func:`read_pth` turns it into a ValueError naming the file."""


class _StorageType:
    """What ``torch.FloatStorage`` and its kin stand for here: a dtype, nothing callable, never changed."""

    __slots__ = ("dtype", "name")

    def __init__(self, name: str, dtype: str) -> None:
        self.name, self.dtype = name, dtype

    def __setstate__(self, state: Any) -> None:
        raise _Refused(f"it gives torch.{self.name} a state")

    def __repr__(self) -> str:
        return f"torch.{self.name}"


class _Global:
    """An allowed global as the unpickler hands it out: callable, without attributes a pickle could set
    (``BUILD`` on it is refused), and not a class (``NEWOBJ`` on it fails)."""

    __slots__ = ("function", "name")

    def __init__(self, name: str, function: Any) -> None:
        self.name, self.function = name, function

    def __call__(self, *args: Any) -> Any:
        return self.function(*args)

    def __setstate__(self, state: Any) -> None:
        raise _Refused(f"it gives {self.name} a state")


class _Storage:
    """A storage the pickle refers to: its key, element type and length (its bytes are read later)."""

    __slots__ = ("dtype", "key", "numel")

    def __init__(self, key: str, dtype: str, numel: int) -> None:
        self.key, self.dtype, self.numel = key, dtype, numel

    def __setstate__(self, state: Any) -> None:
        raise _Refused("a storage record cannot be given a state")


class _Tensor:
    """A tensor record: a view (offset, shape, strides, in elements) of one storage."""

    __slots__ = ("offset", "shape", "storage", "strides")

    def __init__(
        self, storage: _Storage, offset: int, shape: tuple[int, ...], strides: tuple[int, ...]
    ) -> None:
        self.storage, self.offset, self.shape, self.strides = storage, offset, shape, strides

    def __setstate__(self, state: Any) -> None:
        raise _Refused("a tensor record cannot be given a state")


def _ints(value: Any, what: str) -> tuple[int, ...]:
    if not isinstance(value, tuple) or len(value) > _MAX_RANK:
        raise _Refused(f"a tensor's {what} must be a tuple of at most {_MAX_RANK} ints, got {value!r:.80}")
    if not all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v < (1 << 40) for v in value):
        raise _Refused(f"a tensor's {what} must hold non-negative ints, got {value!r:.80}")
    return value


def _rebuild_tensor_v2(
    storage: Any,
    offset: Any,
    size: Any,
    stride: Any,
    requires_grad: Any = False,
    hooks: Any = None,
    metadata: Any = None,
) -> _Tensor:
    """torch's tensor record, checked: a view of a storage, no hooks, no metadata."""
    if not isinstance(storage, _Storage):
        raise _Refused(f"a tensor record must refer to a storage, got {type(storage).__name__}")
    if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
        raise _Refused(f"a tensor's storage offset must be a non-negative int, got {offset!r:.80}")
    shape, strides = _ints(size, "size"), _ints(stride, "stride")
    if len(shape) != len(strides):
        raise _Refused(f"a tensor's size {shape} and stride {strides} differ in length")
    if not isinstance(requires_grad, bool) or (hooks is not None and (not isinstance(hooks, dict) or hooks)):
        raise _Refused("a tensor record holds gradient hooks")
    if metadata is not None and (not isinstance(metadata, dict) or metadata):
        raise _Refused("a tensor record holds metadata (a tensor subclass)")
    count = int(np.prod(shape, dtype=np.int64)) if shape else 1
    if count:
        last = offset + sum((n - 1) * s for n, s in zip(shape, strides, strict=True))
        if last >= storage.numel:
            raise _Refused(
                f"a tensor of size {shape} (stride {strides}, offset {offset}) reaches element {last} "
                f"of a storage of {storage.numel}"
            )
    if count > storage.numel:
        raise _Refused(f"a tensor of size {shape} is larger than its storage of {storage.numel} elements")
    return _Tensor(storage, offset, shape, strides)


def _rebuild_parameter(data: Any, requires_grad: Any = False, hooks: Any = None) -> _Tensor:
    """torch's parameter record: the tensor it wraps (no hooks)."""
    if not isinstance(data, _Tensor) or not isinstance(requires_grad, bool):
        raise _Refused("a parameter record must wrap a tensor record")
    if hooks is not None and (not isinstance(hooks, dict) or hooks):
        raise _Refused("a parameter record holds gradient hooks")
    return data


_ALLOWED: dict[tuple[str, str], Any] = {
    ("torch._utils", "_rebuild_parameter"): _Global("torch._utils._rebuild_parameter", _rebuild_parameter),
    ("collections", "OrderedDict"): _Global("collections.OrderedDict", OrderedDict),
    ("torch._utils", "_rebuild_tensor_v2"): _Global("torch._utils._rebuild_tensor_v2", _rebuild_tensor_v2),
    **{("torch", name): _StorageType(name, dtype) for name, dtype in _STORAGE_DTYPES.items()},
}


class _Unpickler(pickle.Unpickler):
    """Only the records of :data:`_ALLOWED`; storages through ``persistent_load``."""

    def __init__(self, stream: Any, legacy: bool) -> None:
        super().__init__(stream)
        self.legacy = legacy
        self.storages: dict[str, _Storage] = {}

    def find_class(self, module: str, name: str) -> Any:
        allowed = _ALLOWED.get((module, name))
        if allowed is None:
            raise _Refused(f"it names {module}.{name}, which is not a tensor or storage record")
        return allowed

    def persistent_load(self, pid: Any) -> Any:
        if not isinstance(pid, tuple) or not pid or pid[0] != "storage":
            raise _Refused(f"it refers to {str(pid)[:80]!r}, which is not a storage")
        expected = 6 if self.legacy else 5
        if len(pid) != expected:
            raise _Refused(f"a storage reference must hold {expected} fields, got {len(pid)}")
        kind, key, location, numel = pid[1:5]
        if not isinstance(kind, _StorageType):
            raise _Refused(f"a storage's type must be one of torch's storage classes, got {kind!r:.80}")
        if not isinstance(key, str) or not _KEY.fullmatch(key):
            raise _Refused(f"a storage's key must be letters and digits, got {key!r:.80}")
        if not isinstance(location, str) or not isinstance(numel, int) or isinstance(numel, bool):
            raise _Refused("a storage reference's location or size is malformed")
        if not 0 <= numel <= MAX_CHECKPOINT_BYTES:
            raise _Refused(f"storage {key} claims {numel} elements")
        if self.legacy and pid[5] is not None:
            raise _Refused("storage views (an old torch feature) are not read")
        known = self.storages.get(key)
        if known is None:
            if len(self.storages) >= _MAX_TENSORS:
                raise _Refused(f"it holds more than {_MAX_TENSORS} storages")
            known = self.storages[key] = _Storage(key, kind.dtype, numel)
        elif (known.dtype, known.numel) != (kind.dtype, numel):
            raise _Refused(f"storage {key} is named twice with different types or sizes")
        return known


def _unpickle(data: bytes, legacy: bool, stream: Any = None) -> tuple[Any, dict[str, _Storage]]:
    unpickler = _Unpickler(stream if stream is not None else io.BytesIO(data), legacy)
    return unpickler.load(), unpickler.storages


def _zip_storages(archive: zipfile.ZipFile, size: int) -> tuple[bytes, str]:
    """The pickle of a torch zip checkpoint and the folder its entries lie in, every entry checked."""
    pickles = []
    for info in archive.infolist():
        mode = info.external_attr >> 16
        if stat.S_ISLNK(mode) or info.is_dir():
            raise _Refused(f"its entry {info.filename!r} is a link or a folder")
        if info.compress_type != zipfile.ZIP_STORED:
            raise _Refused(f"its entry {info.filename!r} is compressed (torch stores entries as they are)")
        if info.file_size > size:
            raise _Refused(f"its entry {info.filename!r} claims {info.file_size} bytes, more than the file")
        if info.filename.endswith("/data.pkl") and info.filename.count("/") == 1:
            pickles.append(info)
    if len(pickles) != 1:
        raise _Refused(f"it holds {len(pickles)} ARCHIVE/data.pkl entries, not one")
    if pickles[0].file_size > _MAX_PICKLE_BYTES:
        raise _Refused(f"its pickle is larger than {_MAX_PICKLE_BYTES} bytes")
    folder = pickles[0].filename[: -len("data.pkl")]
    names = set(archive.namelist())
    if folder + "byteorder" in names and archive.read(folder + "byteorder") != b"little":
        raise _Refused("its byte order is not little-endian")
    return archive.read(pickles[0]), folder


def _from_zip(data: bytes) -> tuple[Any, dict[str, np.ndarray]]:
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        pickled, folder = _zip_storages(archive, len(data))
        state, storages = _unpickle(pickled, legacy=False)
        arrays = {}
        for key, storage in storages.items():
            name = f"{folder}data/{key}"
            try:
                info = archive.getinfo(name)
            except KeyError:
                raise _Refused(f"storage {key} has no entry {name!r}") from None
            itemsize = np.dtype(storage.dtype).itemsize
            if info.file_size != storage.numel * itemsize:
                raise _Refused(
                    f"storage {key} claims {storage.numel} elements ({storage.numel * itemsize} bytes), "
                    f"but its entry holds {info.file_size} bytes"
                )
            arrays[key] = np.frombuffer(archive.read(info), dtype=storage.dtype)
    return state, arrays


def _from_legacy(data: bytes) -> tuple[Any, dict[str, np.ndarray]]:
    stream = io.BytesIO(data)
    header = [_Unpickler(stream, legacy=True).load() for _ in range(3)]
    if header[0] != _LEGACY_MAGIC or header[1] != _LEGACY_PROTOCOL:
        raise _Refused("it is neither a zip archive nor torch's legacy format")
    info = header[2]
    if not isinstance(info, dict) or info.get("little_endian") is not True:
        raise _Refused("its storages are not little-endian")
    unpickler = _Unpickler(stream, legacy=True)
    state = unpickler.load()
    storages = unpickler.storages
    keys = _Unpickler(stream, legacy=True).load()
    if not isinstance(keys, list) or sorted(keys) != sorted(storages) or len(set(keys)) != len(keys):
        raise _Refused("its list of storages does not match the storages its tensors refer to")
    arrays = {}
    for key in keys:
        storage = storages[key]
        head = stream.read(8)
        itemsize = np.dtype(storage.dtype).itemsize
        if len(head) != 8 or int.from_bytes(head, "little") != storage.numel:
            raise _Refused(f"storage {key} claims {storage.numel} elements, but its data says otherwise")
        raw = stream.read(storage.numel * itemsize)
        if len(raw) != storage.numel * itemsize:
            raise _Refused(
                f"storage {key} claims {storage.numel} elements ({storage.numel * itemsize} bytes), "
                f"but the file holds only {len(raw)} more"
            )
        arrays[key] = np.frombuffer(raw, dtype=storage.dtype)
    if stream.read(1):
        raise _Refused("it holds bytes after its last storage")
    return state, arrays


def _materialise(record: _Tensor, storages: Mapping[str, np.ndarray]) -> np.ndarray:
    flat = storages[record.storage.key]
    itemsize = flat.dtype.itemsize
    view = np.lib.stride_tricks.as_strided(
        flat[record.offset :],
        shape=record.shape,
        strides=tuple(s * itemsize for s in record.strides),
        writeable=False,
    )
    array = np.array(view, dtype=flat.dtype.newbyteorder("="), copy=True)
    if record.storage.dtype == "<u2":  # bfloat16: its bits are the top half of a float32's
        array = (array.astype(np.uint32) << 16).view(np.float32)
    return array


def read_pth(path: str) -> dict[str, np.ndarray]:
    """The named tensors of a torch checkpoint as numpy arrays, read without torch and without running code.

    The checkpoint must be a state dict (a mapping of names to tensors), optionally wrapped as
    ``{"state_dict": …}`` or ``{"model": …}`` beside at most two other plain entries.

    Raises
    ------
    ValueError
        One line naming the file: not a torch checkpoint, a global other than a tensor or storage
        record, a storage or tensor whose size does not fit its data, a zip entry that is a link or
        compressed or larger than the file, or a file larger than :data:`MAX_CHECKPOINT_BYTES`.
    """
    data = read_regular_file(path, "checkpoint", MAX_CHECKPOINT_BYTES)
    try:
        if data[:4] == b"PK\x03\x04":
            state, storages = _from_zip(data)
        else:
            state, storages = _from_legacy(data)
        if isinstance(state, Mapping) and len(state) <= 3:
            for key in ("state_dict", "model"):
                if isinstance(state.get(key), Mapping):
                    state = state[key]
                    break
        if not isinstance(state, Mapping) or not all(
            isinstance(key, str) and isinstance(value, _Tensor) for key, value in state.items()
        ):
            raise _Refused("it does not hold a state dict of named tensors")
        return {key: _materialise(value, storages) for key, value in state.items()}
    except _Refused as error:
        raise ValueError(f"checkpoint {path!r} is refused: {error}") from None
    except (pickle.UnpicklingError, zipfile.BadZipFile, EOFError, TypeError, AttributeError) as error:
        reason = (str(error).strip().splitlines() or [type(error).__name__])[0][:160]
        raise ValueError(f"checkpoint {path!r} cannot be read as a torch checkpoint: {reason}") from None
    except (ValueError, IndexError, KeyError, OverflowError, MemoryError, RecursionError) as error:
        reason = (str(error).strip().splitlines() or [type(error).__name__])[0][:160]
        raise ValueError(f"checkpoint {path!r} cannot be read as a torch checkpoint: {reason}") from None
