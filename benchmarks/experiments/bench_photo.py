"""A torch-free photo install against the torch route: build speed and equal vectors, side by side.

Run from a clone (the main venv has torch, timm, onnx and onnxruntime)::

    python -m venv /tmp/photo-venv && /tmp/photo-venv/bin/pip install '.[photo]'
    .venv/bin/python benchmarks/experiments/bench_photo.py --photo-python /tmp/photo-venv/bin/python

Same folder (``--images``, half Tux Paint clip art, half 1600×1200 JPEG photos made from scikit-image's
photos, as ``bench_onnx.py`` makes them), same command, ``galleria build FOLDER --embedder
timm:tf_efficientnet_lite0:imagenet``, each in its own process and its own model cache, rounds interleaved:

* **photo, onnx**: the photo venv (no torch installed), ``--runtime onnx``, its ONNX file written from the
  package's weights without torch (``galleria models export-onnx``, before timing);
* **main venv, photo's file, onnx**: this venv, ``--runtime onnx``, the photo venv's ONNX file (the
  graph apart from the environment);
* **torch export, onnx**: this venv, ``--runtime onnx``, its ONNX file exported with ``torch.onnx.export``
  (before timing);
* **torch**: this venv, ``--runtime torch``.

The table gives each one's median images/s (wall clock of the whole command, start-up included) and the
largest 1 − cosine between its vectors and the photo build's and the torch build's, over the images
(``--torch-rounds``: the torch build, 6× slower, runs in the first rounds only). Also printed: the size of the
photo venv (``du -sb``).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
SRC = str(HERE.parents[1] / "src")
SPEC = "timm:tf_efficientnet_lite0:imagenet"
CLI = "from galleria.cli import main; raise SystemExit(main())"
TORCH_EXPORT = """
import sys, torch, timm
from galleria.embedders._cache import model_key
from galleria.embedders._checkpoint import file_sha256
from galleria.embedders._lite0 import lite0_preprocess
from galleria.embedders._onnx import export_network
from galleria.embedders._timm_load import load_network
from galleria.embedders._weights import lite0_package_file
path = lite0_package_file()
model = load_network(torch, timm, "tf_efficientnet_lite0", None, path).eval()
key = model_key("timm", "tf_efficientnet_lite0", file_sha256(path))
export_network(torch, model, key, lite0_preprocess(), 1280)
"""


def folder(count: int, work: Path) -> Path:
    sys.path.insert(0, str(HERE))
    from bench_onnx import clip_art, photos

    target = work / "images"
    target.mkdir()
    for number, path in enumerate(clip_art(count // 2, None) + photos(count - count // 2, work / "made")):
        shutil.copyfile(path, target / f"{number:04d}{Path(path).suffix}")
    return target


def run(python: str, cache: Path, args: list[str], code: str = CLI) -> float:
    env = dict(os.environ, PYTHONPATH=SRC, GALLERIA_MODEL_CACHE_DIR=str(cache), HF_HUB_OFFLINE="1")
    start = time.perf_counter()
    result = subprocess.run([python, "-c", code, *args], env=env, capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"{python} {args}: {result.stderr[-1500:]}")
    return time.perf_counter() - start


def vectors(path: Path) -> tuple[list[str], np.ndarray]:
    from galleria.store import InMemoryImageEmbeddingStore

    store = InMemoryImageEmbeddingStore.load_from_disk(path, runtime="onnx")
    return list(store.paths), np.asarray(store.embeddings, dtype=np.float64)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--photo-python", default="/tmp/photo-venv/bin/python")
    parser.add_argument("--images", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--torch-rounds", type=int, default=1, help="rounds of the (slow) torch build")
    args = parser.parse_args()
    venv = Path(args.photo_python).absolute().parents[1]
    probe = subprocess.run([args.photo_python, "-c", "import torch"], capture_output=True)
    if probe.returncode == 0:
        raise SystemExit(f"{args.photo_python} has torch: not a photo install")
    size = int(subprocess.run(["du", "-sb", str(venv)], capture_output=True, text=True).stdout.split()[0])
    with tempfile.TemporaryDirectory() as name:
        work = Path(name)
        images = folder(args.images, work)
        modes = {
            "photo, onnx": (args.photo_python, work / "cache-photo", ["--runtime", "onnx"]),
            "main venv, photo's file, onnx": (sys.executable, work / "cache-photo", ["--runtime", "onnx"]),
            "torch export, onnx": (sys.executable, work / "cache-torch", ["--runtime", "onnx"]),
            "torch": (sys.executable, work / "cache-torch", ["--runtime", "torch"]),
        }
        run(args.photo_python, work / "cache-photo", ["models", "export-onnx", SPEC])
        run(sys.executable, work / "cache-torch", [], TORCH_EXPORT)
        times: dict[str, list[float]] = {mode: [] for mode in modes}
        for round_ in range(max(args.rounds, args.torch_rounds)):
            for mode, (python, cache, extra) in modes.items():
                if mode == "torch" and round_ >= args.torch_rounds:
                    continue
                out = work / f"{mode.replace(' ', '-').replace(',', '')}.safetensors"
                build = ["build", str(images), "--out", str(out), "--embedder", SPEC, *extra, "--overwrite"]
                times[mode].append(run(python, cache, build))
            print(
                f"# round {round_ + 1}: "
                + ", ".join(f"{m} {args.images / t[-1]:.1f} img/s" for m, t in times.items())
            )
        os.environ["GALLERIA_MODEL_CACHE_DIR"] = str(work / "cache-torch")  # loading: never the user's cache
        found = {
            mode: vectors(work / f"{mode.replace(' ', '-').replace(',', '')}.safetensors") for mode in modes
        }
    reference_paths = found["photo, onnx"][0]
    print(f"photo venv: {venv} {size / 1e6:.0f} MB (du -sb); {args.images} images, {args.rounds} rounds\n")
    print("| build | images/s (median) | max 1 − cosine to photo | max 1 − cosine to torch |")
    print("|---|---:|---:|---:|")
    for mode in modes:
        paths, matrix = found[mode]
        assert paths == reference_paths, "the stores hold the images in another order"
        cosines = []
        for other in ("photo, onnx", "torch"):
            a, b = matrix, found[other][1]
            cosine = np.sum(a * b, 1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
            cosines.append(float(np.max(1.0 - cosine)))
        rate = args.images / float(np.median(times[mode]))
        print(f"| {mode} | {rate:.1f} | {cosines[0]:.1e} | {cosines[1]:.1e} |")


if __name__ == "__main__":
    main()
