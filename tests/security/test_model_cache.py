"""The model cache as an attacker leaves it (docs/security.md, "the model cache"): cached ONNX models whose
manifest entry was rewritten to match, naming files for their tensors' data; the manifest written by
processes at once; the checkpoint registry listing files that are no checkpoints.

Every model is tiny and built here with the ``onnx`` package: ``features = images · 0 (summed) + w``,
so the features are the bytes of the tensor ``w``, wherever it comes from.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="building the models needs the onnx extra")
ort = pytest.importorskip("onnxruntime", reason="the ONNX runtime path needs the onnx extra")

from onnx import TensorProto, helper  # noqa: E402

from galleria.embedders import _cache, _checkpoint, _runtime  # noqa: E402
from galleria.embedders._onnx import OnnxNetwork, _check_entry  # noqa: E402
from galleria.embedders._preprocess import Preprocess  # noqa: E402

SRC = str(Path(__file__).resolve().parents[2] / "src")
SECRET = b"SECRETSECRETSECR"  # 4 float32: the features would be these bytes
KEY = "ab" * 32


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "cache"
    folder.mkdir()
    monkeypatch.setenv("GALLERIA_MODEL_CACHE_DIR", str(folder))
    return folder


def _external(name: str, location: str, **extra: str) -> TensorProto:
    tensor = TensorProto(name=name, data_type=TensorProto.FLOAT, dims=[4])
    tensor.data_location = TensorProto.EXTERNAL
    for key, value in {"location": location, "length": "16", **extra}.items():
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value
    return tensor


def _inline(name: str) -> TensorProto:
    return helper.make_tensor(name, TensorProto.FLOAT, [4], [1.0, 2.0, 3.0, 4.0])


def _model(where: str, tensor: TensorProto) -> bytes:
    """A model whose features are ``w`` (4 floats), ``w`` being ``tensor`` placed at ``where``."""
    images = helper.make_tensor_value_info("images", TensorProto.FLOAT, ["n", 3, 2, 2])
    features = helper.make_tensor_value_info("features", TensorProto.FLOAT, ["n", 4])
    zero = helper.make_tensor("zero", TensorProto.FLOAT, [], [0.0])
    axes = helper.make_tensor("axes", TensorProto.INT64, [3], [1, 2, 3])
    nodes = [
        helper.make_node("Mul", ["images", "zero"], ["zeros"]),
        helper.make_node("ReduceSum", ["zeros", "axes"], ["column"], keepdims=0),
        helper.make_node("Unsqueeze", ["column", "one"], ["columns"]),
        helper.make_node("Add", ["columns", "w"], ["features"]),
    ]
    one = helper.make_tensor("one", TensorProto.INT64, [1], [1])
    initializers = [zero, axes, one]
    functions = []
    sparse: list[Any] = []
    if where == "initializer":
        initializers.append(tensor)
    elif where == "constant":
        nodes.insert(0, helper.make_node("Constant", [], ["w"], value=tensor))
    elif where == "subgraph":  # If(true) whose branches produce w
        then = helper.make_graph(
            [helper.make_node("Constant", [], ["w_then"], value=tensor)],
            "then",
            [],
            [helper.make_tensor_value_info("w_then", TensorProto.FLOAT, [4])],
        )
        other = helper.make_graph(
            [helper.make_node("Constant", [], ["w_else"], value=_inline("w_else_value"))],
            "else",
            [],
            [helper.make_tensor_value_info("w_else", TensorProto.FLOAT, [4])],
        )
        initializers.append(helper.make_tensor("yes", TensorProto.BOOL, [], [True]))
        nodes.insert(0, helper.make_node("If", ["yes"], ["w"], then_branch=then, else_branch=other))
    elif where == "function":
        body = [helper.make_node("Constant", [], ["out"], value=tensor)]
        functions.append(
            helper.make_function("local", "MakeW", [], ["out"], body, [helper.make_opsetid("", 17)])
        )
        nodes.insert(0, helper.make_node("MakeW", [], ["w"], domain="local"))
    elif where == "sparse":
        indices = helper.make_tensor("w_indices", TensorProto.INT64, [4], [0, 1, 2, 3])
        sparse.append(helper.make_sparse_tensor(tensor, indices, [4]))
    else:
        raise AssertionError(where)
    graph = helper.make_graph(nodes, "g", [images], [features], initializers)
    graph.sparse_initializer.extend(sparse)
    opsets = [helper.make_opsetid("", 17)] + ([helper.make_opsetid("local", 1)] if functions else [])
    model = helper.make_model(graph, opset_imports=opsets, functions=functions)
    model.ir_version = 8
    return model.SerializeToString()


def _cached(cache: Path, data: bytes, external: dict[str, Any] | None = None) -> dict[str, Any]:
    """Put ``data`` in the cache under KEY with a manifest entry rewritten to match it."""
    (cache / f"{KEY}.onnx").write_bytes(data)
    entry: dict[str, Any] = {
        "sha256": hashlib.sha256(data).hexdigest(),
        "size": len(data),
        "dim": 4,
        "preprocess": Preprocess(2, 2, "bilinear", (0.5, 0.5, 0.5), (0.5, 0.5, 0.5)).to_dict(),
    }
    if external is not None:
        entry["external"] = external
    (cache / "onnx-manifest.json").write_text(json.dumps({"format": 1, "models": {KEY: entry}}))
    return _check_entry(KEY, entry)


@pytest.fixture
def sessions(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    seen: list[object] = []
    real = ort.InferenceSession

    def spy(*args: object, **kwargs: object) -> object:
        seen.append(args[0])
        return real(*args, **kwargs)

    monkeypatch.setattr(ort, "InferenceSession", spy)
    return seen


def _features(network: OnnxNetwork) -> bytes:
    return network.run(np.zeros((1, 3, 2, 2), dtype=np.float32)).tobytes()


def test_the_model_builder_yields_w_as_features(cache: Path) -> None:
    for where in ("initializer", "constant", "subgraph", "function"):
        network = OnnxNetwork(KEY, _cached(cache, _model(where, _inline("w"))))
        assert np.frombuffer(_features(network), dtype=np.float32).tolist() == [1.0, 2.0, 3.0, 4.0], where


@pytest.mark.parametrize("where", ["initializer", "constant", "subgraph", "function", "sparse"])
@pytest.mark.parametrize("location", ["secret.txt", "./secret.txt", "*/_ORT_MEM_ADDR_/*", "/etc/hostname"])
def test_a_cached_model_naming_a_file_is_refused_before_onnxruntime_sees_it(
    cache: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    sessions: list[object],
    where: str,
    location: str,
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "secret.txt").write_bytes(SECRET)
    monkeypatch.chdir(work)  # ONNX Runtime resolves a relative location here for a model given as bytes
    entry = _cached(cache, _model(where, _external("w", location)))
    with pytest.raises(ValueError, match="keep their data in files it names") as caught:
        OnnxNetwork(KEY, entry)
    assert sessions == []
    assert len(str(caught.value)) < 600


def test_a_tensor_marked_external_without_a_location_is_refused(cache: Path, sessions: list[object]) -> None:
    tensor = _inline("w")
    tensor.data_location = TensorProto.EXTERNAL
    with pytest.raises(ValueError, match="files it names"):
        OnnxNetwork(KEY, _cached(cache, _model("constant", tensor)))
    assert sessions == []


@pytest.mark.parametrize("cut", [1, 7, 100])
def test_a_model_that_cannot_be_walked_is_refused(cache: Path, sessions: list[object], cut: int) -> None:
    data = _model("constant", _inline("w"))
    with pytest.raises(ValueError, match="cannot be checked"):
        OnnxNetwork(KEY, _cached(cache, data[:-cut]))
    assert sessions == []


def test_the_walk_finds_what_the_onnx_package_finds() -> None:
    from onnx import external_data_helper

    from galleria.embedders._onnx_files import external_tensors

    for where in ("initializer", "constant", "subgraph"):
        data = _model(where, _external("w", "weights.bin", offset="0"))
        model = onnx.ModelProto()
        model.ParseFromString(data)
        expected = [t.name for t in external_data_helper._get_all_tensors(model) if t.external_data]
        found = external_tensors(data)
        assert [record["name"] for record in found] == expected == ["w"]
        assert found[0]["location"] == "weights.bin" and found[0]["data_location"] == "1"
    assert external_tensors(_model("function", _external("w", "x")))[0]["location"] == "x"
    assert external_tensors(_model("constant", _inline("w"))) == []


def test_external_data_in_the_cache_folder_listed_with_its_digest_is_used(
    cache: Path, tmp_path: Path, sessions: list[object]
) -> None:
    from galleria.embedders._onnx_files import external_tensors

    name = f"{KEY}.weights"
    values = np.array([5.0, 6.0, 7.0, 8.0], dtype=np.float32).tobytes()
    (cache / name).write_bytes(b"\0" * 4 + values)
    listed = {name: {"sha256": hashlib.sha256(b"\0" * 4 + values).hexdigest(), "size": 20}}
    data = _model("initializer", _external("w", name, offset="4"))
    network = OnnxNetwork(KEY, _cached(cache, data, listed))
    assert _features(network) == values
    assert len(sessions) == 1 and isinstance(sessions[0], bytes) and not external_tensors(sessions[0])  # type: ignore[arg-type]
    # the same file with other bytes, a link to a matching file outside the folder, a file not listed
    (cache / name).write_bytes(b"\1" * 4 + values)
    with pytest.raises(ValueError, match="does not match the size and sha256"):
        OnnxNetwork(KEY, _cached(cache, data, listed))
    outside = tmp_path / "outside.bin"
    outside.write_bytes(b"\0" * 4 + values)
    (cache / name).unlink()
    (cache / name).symlink_to(outside)
    with pytest.raises(ValueError, match="outside the folder"):
        OnnxNetwork(KEY, _cached(cache, data, listed))
    other = _model("initializer", _external("w", f"{KEY}.other"))
    with pytest.raises(ValueError, match="files it names"):
        OnnxNetwork(KEY, _cached(cache, other, listed))
    for bad in ("../x", f"{KEY}/x", "other.weights", f"{KEY}.a/b"):
        with pytest.raises(ValueError, match="must be named"):
            _cached(cache, data, {bad: listed[name]})
    assert len(sessions) == 1


_ADD_ENTRIES = """
import os, sys, time
from galleria.embedders._cache import write_manifest_entry
open(sys.argv[3] + sys.argv[1], "w").close()  # ready
while not os.path.exists(sys.argv[3] + "go"):  # both start at once
    time.sleep(0.001)
for number in range(int(sys.argv[2])):
    write_manifest_entry(f"{int(sys.argv[1]):02x}" + f"{number:062x}", {"number": number})
"""


def test_processes_adding_manifest_entries_at_once_keep_every_entry(cache: Path) -> None:
    env = dict(os.environ, PYTHONPATH=SRC, GALLERIA_MODEL_CACHE_DIR=str(cache))
    flags = str(cache.parent / "flag-")
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", _ADD_ENTRIES, str(which), "150", flags], env=env, stderr=subprocess.PIPE
        )
        for which in (1, 2)
    ]
    deadline = time.monotonic() + 120
    while not all(os.path.exists(flags + str(which)) for which in (1, 2)) and time.monotonic() < deadline:
        time.sleep(0.01)
    Path(flags + "go").touch()
    for writer in writers:
        _, error = writer.communicate(timeout=300)
        assert writer.returncode == 0, error.decode()[-2000:]
    assert len(_cache.read_manifest()) == 300
    assert not (cache / "onnx-manifest.json.lock").exists()


def test_the_checkpoint_registry_hashes_only_regular_files_within_the_bound(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    digest = "cd" * 32
    fifo, folder, huge = tmp_path / "fifo.pt", tmp_path / "folder.pt", tmp_path / "huge.pt"
    os.mkfifo(fifo)
    folder.mkdir()
    with open(huge, "wb") as stream:  # sparse: 1 GiB claimed, nothing written
        stream.truncate(1 << 30)
    (cache / "checkpoints.json").write_text(json.dumps({digest: [str(fifo), str(folder), str(huge)]}))
    monkeypatch.setattr(_checkpoint, "MAX_CHECKPOINT_BYTES", 32 << 20, raising=False)
    hashed = [0]
    real = hashlib.sha256

    class Counting:
        def __init__(self) -> None:
            self._digest = real()

        def update(self, chunk: bytes) -> None:
            hashed[0] += len(chunk)
            assert hashed[0] <= 32 << 20, "a file over the bound is being hashed"
            self._digest.update(chunk)

        def hexdigest(self) -> str:
            return self._digest.hexdigest()

    monkeypatch.setattr(_checkpoint.hashlib, "sha256", Counting)
    monkeypatch.setattr(_runtime, "SHIPPED", {})
    found, looked = _runtime.find_checkpoint(digest)
    assert found is None and "3 for this digest" in looked[-1]
    assert hashed[0] == 0
    with pytest.raises(ValueError, match="larger than"):
        _checkpoint.file_sha256(huge)
    with pytest.raises(ValueError, match=r"FIFO|not a regular file"):
        _checkpoint.file_sha256(fifo)
