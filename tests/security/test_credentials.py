"""Credentials go only where the user sends them: GALLERIA_MILVUS_TOKEN never reaches a server that
only the store file names (a local listener records every connection)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from _support.extras import need
from _support.store_files import read_parts, write_sealed
from galleria import InMemoryImageEmbeddingStore
from galleria.index import _serial
from galleria.index._milvus_settings import check_token_destination


class Listener:
    """A TCP server on localhost that records whatever any client sends it."""

    def __init__(self) -> None:
        self.server = socket.socket()
        self.server.bind(("127.0.0.1", 0))
        self.server.listen(8)
        self.server.settimeout(0.2)
        self.port = self.server.getsockname()[1]
        self.received: list[bytes] = []
        self.connections = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self.server.accept()
            except OSError:
                continue
            self.connections += 1
            client.settimeout(0.5)
            try:
                while chunk := client.recv(65536):
                    self.received.append(chunk)
            except OSError:
                pass
            finally:
                client.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.server.close()


@pytest.fixture
def listener() -> Iterator[Listener]:
    server = Listener()
    yield server
    server.close()


def milvus_store(tmp_path: Path, uri: str) -> Path:
    """A store file (valid digests) whose index says it lives in a Milvus server at ``uri``."""
    good = tmp_path / "good.safetensors"
    InMemoryImageEmbeddingStore.from_embeddings(["/a", "/b"], np.eye(2)).save_to_disk(good)
    header, tensors = read_parts(good)
    params = {"uri": uri, "collection": "photos", "index_type": "FLAT", "index_params": {}}
    meta = {"space": "cosine", "dim": 2, "params": params, "total": 2}
    blob = _serial.pack("milvus", meta, {"live": np.arange(2, dtype=np.int64)})
    tensors = {
        **{key: tensors[key] for key in ("path_bytes", "path_offsets")},  # the paths, kept
        "index": np.frombuffer(blob, dtype=np.uint8),
        "vectors": np.eye(2, dtype=np.float32),
    }
    header["index"] = {"name": "milvus", "params": params}
    return write_sealed(tmp_path / "crafted.safetensors", header, tensors)


def test_token_is_not_sent_to_the_uri_the_file_records(
    tmp_path: Path, listener: Listener, monkeypatch: pytest.MonkeyPatch
) -> None:
    uri = f"http://127.0.0.1:{listener.port}"
    file = milvus_store(tmp_path, uri)
    monkeypatch.setenv("GALLERIA_MILVUS_TOKEN", "root:SECRET-TOKEN")
    monkeypatch.delenv("GALLERIA_MILVUS_URI", raising=False)
    with pytest.raises(ValueError, match=r"GALLERIA_MILVUS_TOKEN is set, but no Milvus server is named"):
        InMemoryImageEmbeddingStore.load_from_disk(file, connect=True)
    monkeypatch.setenv("GALLERIA_MILVUS_URI", "http://milvus.internal:19530")
    with pytest.raises(ValueError, match=r"records the Milvus server .*127\.0\.0\.1.* GALLERIA_MILVUS_URI"):
        InMemoryImageEmbeddingStore.load_from_disk(file, connect=True)
    assert listener.connections == 0 and not listener.received


def test_without_a_token_a_named_uri_must_still_match(
    tmp_path: Path, listener: Listener, monkeypatch: pytest.MonkeyPatch
) -> None:
    file = milvus_store(tmp_path, f"http://127.0.0.1:{listener.port}")
    monkeypatch.delenv("GALLERIA_MILVUS_TOKEN", raising=False)
    monkeypatch.setenv("GALLERIA_MILVUS_URI", "http://elsewhere:19530")
    with pytest.raises(ValueError, match=r"only to the server you named"):
        InMemoryImageEmbeddingStore.load_from_disk(file, connect=True)
    assert listener.connections == 0


def test_the_named_server_gets_the_token(
    tmp_path: Path, listener: Listener, monkeypatch: pytest.MonkeyPatch
) -> None:
    need("pymilvus")
    uri = f"http://127.0.0.1:{listener.port}"
    file = milvus_store(tmp_path, uri)
    monkeypatch.setenv("GALLERIA_MILVUS_TOKEN", "root:SECRET-TOKEN")
    monkeypatch.setenv("GALLERIA_MILVUS_URI", uri + "/")
    with pytest.raises(ValueError):  # the listener is no Milvus server: connecting fails, cleanly
        InMemoryImageEmbeddingStore.load_from_disk(file, connect=True)
    assert listener.connections >= 1  # it went where the user said


def test_check_token_destination_rules() -> None:
    assert check_token_destination("http://a:1", "HTTP://A:1/", "t") == "t"
    assert check_token_destination("http://a:1", None, None) is None
    assert check_token_destination("local.db", None, "t") is None  # a local file gets no token
    with pytest.raises(ValueError, match="no Milvus server is named"):
        check_token_destination("https://a:1", None, "t")
    with pytest.raises(ValueError, match="only to the server you named"):
        check_token_destination("https://a:1", "https://b:1", "t")
    with pytest.raises(ValueError, match="invalid uri"):
        check_token_destination(5, None, "t")
