"""Embeddings of the Fashion-MNIST benchmark split, computed once in chunks and cached as ``.npy`` files.

The cache lives in ``<repo>/.cache/bench_real/<key>/`` (git-ignored); ``<key>`` names the embedder
config and the split, and each chunk of 1,000 images is written as soon as it is done, so an
interrupted run resumes where it stopped. Embedding 21,000 images with EfficientNet-Lite0 at
224×224 on a 2-core CPU takes the better part of an hour; the pixel embedder takes seconds.
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / ".cache" / "bench_real"
CHUNK = 1000


def cache_key(config: dict[str, Any], split: dict[str, Any]) -> str:
    text = json.dumps({"embedder": config, "split": split}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def embed_cached(embedder: Any, images: np.ndarray, key: str, part: str, *, log: bool = True) -> np.ndarray:
    """Embed ``images`` ((n, 28, 28, 3) uint8) chunk by chunk, reusing cached chunks."""
    folder = CACHE / key / part
    folder.mkdir(parents=True, exist_ok=True)
    chunks = []
    for number, start in enumerate(range(0, len(images), CHUNK)):
        path = folder / f"chunk_{number:04d}.npy"
        if path.is_file():
            chunks.append(np.load(path, allow_pickle=False))
            continue
        started = time.perf_counter()
        vectors = np.asarray(embedder.embed(images[start : start + CHUNK]), dtype=np.float32)
        temporary = path.with_suffix(".tmp.npy")
        np.save(temporary, vectors, allow_pickle=False)
        temporary.replace(path)
        chunks.append(vectors)
        if log:
            seconds = time.perf_counter() - started
            print(f"  {part} chunk {number}: {len(vectors)} images in {seconds:.1f} s", file=sys.stderr)
    return np.concatenate(chunks, axis=0)
