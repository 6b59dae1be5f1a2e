"""Benchmark peak memory of saving and loading store files: each tensor held once (issue 18 §2).

Run ``.venv/bin/python benchmarks/experiments/bench_load.py`` (defaults: an exact 1M × 512 store, IVF-PQ
300k × 128 and 1M × 128 stores with a float16 copy, an HNSW 50k × 128 store and an exact 1M × 8
store whose paths are most of the file; about 15 minutes and 5 GB on 2 cores) or ``--quick`` for a
small run; ``--before /path/to/other/src`` builds and loads every store with that checkout too and
prints both side by side. Each store is built and saved in one fresh process and loaded in another
(plain, then ``mmap=True`` for a wide exact one), so every peak belongs to that step alone. Peak
RSS is the process's ``VmHWM`` (reset with ``/proc/self/clear_refs`` before a save) minus its RSS
just before the step: ``ru_maxrss`` is not used, since Linux carries a parent's
RSS at fork time into a child's ``ru_maxrss`` across exec.

Figures are printed side by side as a markdown table (load peak / file size is the target,
≤ 1.15).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]


def status_bytes(key: str) -> int:
    with open("/proc/self/status") as handle:
        return next(int(line.split()[1]) * 1024 for line in handle if line.startswith(key + ":"))


def clustered(count: int, dim: int, seed: int = 0, chunk: int = 100_000) -> np.ndarray:
    """Unit vectors around 1,000 centres (seeded), generated in chunks into one float32 array."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(1_000, dim)).astype(np.float32)
    out = np.empty((count, dim), dtype=np.float32)
    for start in range(0, count, chunk):
        stop = min(count, start + chunk)
        labels = rng.integers(0, centres.shape[0], stop - start)
        block = centres[labels] + 0.6 * rng.standard_normal((stop - start, dim), dtype=np.float32)
        block /= np.linalg.norm(block, axis=1, keepdims=True)
        out[start:stop] = block
    return out


def stage_build(args: dict[str, Any]) -> dict[str, Any]:
    from galleria import InMemoryImageEmbeddingStore
    from galleria.index import create_index

    vectors = clustered(args["rows"], args["dim"])
    index = create_index(args["index"], "ip", args["params"])
    started = time.perf_counter()
    store = InMemoryImageEmbeddingStore.from_embeddings(
        [f"gallery/{i:08d}.jpg" for i in range(args["rows"])], vectors, search_index=index, space="ip"
    )
    del vectors
    build = time.perf_counter() - started
    with open("/proc/self/clear_refs", "w") as handle:
        handle.write("5")
    before = status_bytes("VmRSS")
    started = time.perf_counter()
    store.save_to_disk(args["file"])
    return {
        "build_s": build,
        "save_s": time.perf_counter() - started,
        "save_extra": status_bytes("VmHWM") - before,
        "held": before,
    }


def stage_load(args: dict[str, Any]) -> dict[str, Any]:
    from galleria import InMemoryImageEmbeddingStore

    before = status_bytes("VmRSS")
    started = time.perf_counter()
    store = InMemoryImageEmbeddingStore.load_from_disk(args["file"], mmap=args["mmap"])
    seconds = time.perf_counter() - started
    peak = status_bytes("VmHWM") - before
    query = np.ones((1, store.search_index.dim or 1), dtype=np.float32)
    store.search_index.search(query, 10)
    return {"load_s": seconds, "load_peak": peak, "rows": len(store)}


def run_stage(stage: str, args: dict[str, Any], src: Path) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=str(src), OMP_NUM_THREADS="2")
    command = [sys.executable, __file__, "--stage", stage, json.dumps(args)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if done.returncode:
        raise RuntimeError(f"{stage} failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


#: index:rows:dim of the default run: the issue-18 table's three stores, a 1M-row IVF-PQ store and
#: a 1M-row exact store of 8 dimensions (what its paths cost is most of what it holds).
DEFAULT_CONFIGS = "exact:1000000:512,ivfpq:300000:128,hnsw:50000:128,ivfpq:1000000:128,exact:1000000:8"
QUICK_CONFIGS = "exact:50000:512,ivfpq:50000:128,hnsw:20000:128,exact:200000:8"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help=f"small stores ({QUICK_CONFIGS})")
    parser.add_argument("--stage")
    parser.add_argument("payload", nargs="?")
    parser.add_argument(
        "--configs", default=None, help=f"comma-separated index:rows:dim (default {DEFAULT_CONFIGS})"
    )
    parser.add_argument(
        "--before",
        type=Path,
        default=None,
        help="the src/ folder of another checkout (e.g. main's): every store is also built and "
        "loaded with it, and both rows are printed side by side",
    )
    options = parser.parse_args()
    if options.stage:
        stage = {"build": stage_build, "load": stage_load}[options.stage]
        print(json.dumps(stage(json.loads(options.payload))))
        return
    chosen = options.configs or (QUICK_CONFIGS if options.quick else DEFAULT_CONFIGS)
    configs: list[tuple[str, int, int, dict[str, Any]]] = []
    for item in chosen.split(","):
        name, count, dim = item.split(":")
        # The shape does not change what loading holds; a small one keeps the build short.
        extra = {"keep_vectors": True, "lists": 256, "subquantizers": 32, "probe_lists": 8}
        configs.append((name, int(count), int(dim), extra if name == "ivfpq" else {}))
    trees = [("this tree", ROOT / "src")]
    if options.before is not None:
        trees.insert(0, ("before", options.before.resolve()))
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-load-") as folder:
        for name, count, dim, params in configs:
            for label, src in trees:
                file = str(Path(folder) / f"{name}.safetensors")
                payload = {"index": name, "rows": count, "dim": dim, "params": params, "file": file}
                built = run_stage("build", payload, src)
                size = os.path.getsize(file)
                for mapped in (False, True) if name == "exact" and dim >= 64 else (False,):
                    loaded = run_stage("load", {"file": file, "mmap": mapped}, src)
                    shown = name + (" (mmap=True)" if mapped else "")
                    rows.append((label, shown, count, dim, size, built, loaded))
                    print(rows[-1], file=sys.stderr, flush=True)
                os.remove(file)
    print(f"load average: {os.getloadavg()}")
    print(
        "| code | index | rows × dim | file (MiB) | load peak (MiB) | load peak / file | load (s) | "
        "save extra (MiB) | save (s) |"
    )
    print("|---|---|---|---:|---:|---:|---:|---:|---:|")
    mb = 2.0**20
    for label, name, count, dim, size, built, loaded in rows:
        print(
            f"| {label} | {name} | {count:,} × {dim} | {size / mb:,.1f} | {loaded['load_peak'] / mb:,.1f} | "
            f"{loaded['load_peak'] / size:.2f} | {loaded['load_s']:.1f} | {built['save_extra'] / mb:,.1f} | "
            f"{built['save_s']:.1f} |"
        )


if __name__ == "__main__":
    main()
