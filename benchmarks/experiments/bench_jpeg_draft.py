"""How much the JPEG draft scale moves EfficientNet-Lite0 vectors and retrieval, on ≤ 2-Mpx photos.

Run ``.venv/bin/python benchmarks/experiments/bench_jpeg_draft.py`` (``--images 160``). The photos are
``bench_onnx.py``'s (1600×1200 JPEGs, quality 90, random crops of five scikit-image photos; the label of
a photo is its source). Each photo is embedded (ONNX Runtime) after three decodes: full size; drafted to
keep twice the network's input (448 × 448: 800×600, the rule before 0.2.0); drafted to keep the resize
before the crop (256 × 256: 400×300, what a store does now). Printed: the cosine distance of each to the
full-size vectors (mean, max), and Recall@1 / mAP over the photos (each one a query against the rest).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_onnx


def retrieval(vectors: np.ndarray, labels: np.ndarray) -> tuple[float, float]:
    """Recall@1 and mAP (all ranks) of every photo against the others."""
    similarity = vectors @ vectors.T
    np.fill_diagonal(similarity, -np.inf)
    order = np.argsort(-similarity, axis=1)[:, :-1]
    relevant = labels[order] == labels[:, None]
    ranks = np.arange(1, relevant.shape[1] + 1)
    precision = np.cumsum(relevant, axis=1) / ranks
    average = (precision * relevant).sum(axis=1) / np.maximum(relevant.sum(axis=1), 1)
    return float(relevant[:, 0].mean()), float(average.mean())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--images", type=int, default=160)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as temporary:
        os.environ.setdefault("GALLERIA_MODEL_CACHE_DIR", str(Path(temporary) / "models"))
        from galleria.embedders import TimmEmbedder
        from galleria.images.reading import draft_size_for, read_rgb

        embedder = TimmEmbedder(runtime="onnx", **bench_onnx.SPEC)
        paths = bench_onnx.photos(args.images, Path(temporary) / "photos")
        labels = np.arange(len(paths)) % 5
        drafts = {"full size": None, "2× input (448)": (448, 448), "resize (now)": draft_size_for(embedder)}
        vectors = {
            name: embedder.embed([read_rgb(path, min_size=size) for path in paths])
            for name, size in drafts.items()
        }
        print(f"{len(paths)} photos 1600×1200, EfficientNet-Lite0 (ONNX Runtime)\n")
        print("| decode | decoded size | cosine distance to full size: mean / max | Recall@1 | mAP |")
        print("|---|---|---|---|---|")
        for name, size in drafts.items():
            shape = read_rgb(paths[0], min_size=size).shape
            distance = 1.0 - np.sum(vectors[name].astype(np.float64) * vectors["full size"], axis=1)
            recall, average = retrieval(vectors[name], labels)
            print(
                f"| {name} | {shape[1]}×{shape[0]} | {distance.mean():.5f} / {distance.max():.5f} | "
                f"{recall:.4f} | {average:.4f} |"
            )


if __name__ == "__main__":
    main()
