"""Shared helpers for the store tests: small generated images, fake embedders, state snapshots."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from PIL import Image

from galleria import InMemoryImageEmbeddingStore, PixelEmbedder


def make_images(folder: Path, count: int, *, size: int = 12, fmt: str = "png", seed: int = 0) -> list[str]:
    """Write ``count`` distinct random RGB images into ``folder``; return their paths as str."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(count):
        base = rng.integers(0, 256, size=3)
        noise = rng.integers(-60, 60, size=(size, size, 3))
        pixels = np.clip(base + noise, 0, 255).astype(np.uint8)
        path = folder / f"img_{i:03d}.{fmt}"
        Image.fromarray(pixels).save(path)
        paths.append(str(path))
    return paths


def write_corrupt(path: Path) -> str:
    """A file with an image extension that is not an image."""
    path.write_bytes(b"\x89PNG\r\n\x1a\n this is not really a png")
    return str(path)


def pixel_embedder() -> PixelEmbedder:
    return PixelEmbedder(size=8)


class BatchedEmbedder:
    """Wraps an embedder, fixing its batch size and recording every batch it receives."""

    def __init__(self, inner: Any, batch_size: int) -> None:
        self.inner = inner
        self.batch_size = batch_size
        self.batches: list[int] = []

    def embed(self, images: Sequence[Any]) -> np.ndarray:
        self.batches.append(len(images))
        return np.asarray(self.inner.embed(images))


class FakeEmbedder:
    """Returns fixed-dimension vectors derived from the mean colour; can be told to misbehave.

    ``mode``: "ok", "nan", "wrong_rows", "one_d", "wrong_dim" (dimension ``dim + 1``), "strings".
    """

    def __init__(self, dim: int = 6, mode: str = "ok") -> None:
        self.dim = dim
        self.mode = mode
        self.batch_size = 4

    def embed(self, images: Sequence[Any]) -> np.ndarray:
        means = np.array([np.asarray(image, dtype=np.float32).mean(axis=(0, 1)) for image in images])
        out = np.concatenate([means, np.ones((len(images), self.dim - 3), dtype=np.float32)], axis=1)
        out = out.astype(np.float32)
        if self.mode == "nan":
            out[0, 0] = np.nan
        elif self.mode == "wrong_rows":
            out = out[:-1] if len(out) > 1 else np.concatenate([out, out])
        elif self.mode == "one_d":
            out = out.ravel()
        elif self.mode == "wrong_dim":
            out = np.concatenate([out, np.ones((len(out), 1), dtype=np.float32)], axis=1)
        elif self.mode == "strings":
            return np.array([["x"] * self.dim] * len(images))
        return out


class TextFakeEmbedder(FakeEmbedder):
    """A FakeEmbedder with a text side: a text's vector is the mean-colour vector of the word's colour."""

    COLOURS: ClassVar[dict[str, tuple[int, int, int]]] = {
        "red": (255, 0, 0),
        "green": (0, 255, 0),
        "blue": (0, 0, 255),
    }

    def embed_text(self, texts: Sequence[str]) -> np.ndarray:
        images = [np.full((2, 2, 3), self.COLOURS[text], dtype=np.uint8) for text in texts]
        return FakeEmbedder.embed(self, images)


def snapshot(store: InMemoryImageEmbeddingStore) -> dict[str, Any]:
    """Everything observable about a store, to compare before and after a failing call."""
    state: dict[str, Any] = {
        "built": store.is_built,
        "paths": store.paths,
        "skipped": store.skipped,
        "len": len(store),
        "index_len": len(store.search_index),
        "dim": store.dim,
        "space": store.space,
    }
    if store.is_built and len(store):
        try:
            state["embeddings"] = store.embeddings.tobytes()
        except RuntimeError:
            state["embeddings"] = None
        vector = np.ones(store.dim or 1, dtype=np.float32)
        state["results"] = [(c.path, c.score) for c in store.retrieve_by_vector(vector, k=len(store))[0]]
    return state


def stored_paths(tensors: dict[str, np.ndarray]) -> list[str]:
    """The gallery paths a store file (format version 3) holds in its path tensors, decoded by hand."""
    data, offsets = tensors["path_bytes"].tobytes(), tensors["path_offsets"].tolist()
    return [data[begin:end].decode("utf-8") for begin, end in itertools.pairwise(offsets)]


def as_old_format(
    header: dict[str, Any], tensors: dict[str, np.ndarray], version: int = 2
) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """A version-3 store file's header and tensors rewritten the way versions 1 and 2 held them: the
    paths listed in the header, no path tensors (what galleria wrote before issue 18)."""
    old = {key: value for key, value in header.items() if key != "rows"}
    old["paths"] = stored_paths(tensors)
    old["format_version"] = version
    kept = {key: value for key, value in tensors.items() if key not in ("path_bytes", "path_offsets")}
    if "tensors" in old:
        old["tensors"] = {key: value for key, value in old["tensors"].items() if key in kept}
    return old, kept


def store_with_records(file: Path) -> InMemoryImageEmbeddingStore:
    """A store holding galleria's three records (DBA augmentation, the offline decoupled diffusion and
    the gallery statistics), saved to ``file``."""
    from galleria.rerank.dba import augment_store
    from galleria.rerank.decoupled import prepare_offline_diffusion
    from galleria.store._snapshot import store_statistics

    vectors = np.random.default_rng(0).normal(size=(20, 8))
    plain = InMemoryImageEmbeddingStore.from_embeddings([f"/g/{i}" for i in range(20)], vectors)
    store = augment_store(plain, neighbors=2, alpha=1.5)
    prepare_offline_diffusion(store, k=3, truncation=5)
    store_statistics(store)
    store.save_to_disk(file)
    return store
