"""What issue 34's checks cost: importing a clip-retrieval folder and reading (verifying) a ``STORE.graph``.

Run it once per code version, each in its own process, on the same files, e.g. before and after::

    PYTHONPATH=OLD/src python benchmarks/experiments/bench_trust_checks.py --rows 100000 --work /tmp/b
    PYTHONPATH=src     python benchmarks/experiments/bench_trust_checks.py --rows 100000 --work /tmp/b

The first run writes the folder (``--rows`` float16 vectors of ``--dim`` in one part, a parquet of
paths and captions) and the store with its graph (k=30, built exactly: timed as "graph build");
later runs reuse them. Each measurement is the median of ``--repeat`` runs: the import (no index
file: galleria's exact index), the graph file's read with its verification
(``read_graph_file``), and, where the code has it, the verification alone
(``verify_graph_rows`` on 64 rows). Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import numpy as np


def _folder(root: Path, rows: int, dim: int) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    if (root / "metadata" / "metadata_0.parquet").exists():
        return
    (root / "img_emb").mkdir(parents=True)
    (root / "metadata").mkdir()
    rng = np.random.default_rng(0)
    centres = rng.normal(size=(200, dim))
    vectors = centres[rng.integers(0, 200, rows)] + rng.normal(0, 0.5, (rows, dim))
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    np.save(root / "img_emb" / "img_emb_0.npy", vectors.astype(np.float16))
    table = pa.table(
        {
            "image_path": [f"/data/images/{row:09d}.jpg" for row in range(rows)],
            "caption": [
                f"a photo of item {row} from a crawl, with a caption of ordinary length"
                for row in range(rows)
            ],
        }
    )
    pq.write_table(table, root / "metadata" / "metadata_0.parquet")


def _median(function: object, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        function()  # type: ignore[operator]
        times.append(time.perf_counter() - start)
    return round(statistics.median(times), 3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--k", type=int, default=30)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--work", required=True)
    args = parser.parse_args()

    import galleria
    from galleria import InMemoryImageEmbeddingStore
    from galleria.store import graph as graph_module
    from galleria.store.clip_retrieval import import_clip_retrieval

    work = Path(args.work)
    folder = work / "folder"
    _folder(folder, args.rows, args.dim)
    figures: dict[str, object] = {
        "galleria": os.path.dirname(galleria.__file__),
        "rows": args.rows,
        "dim": args.dim,
    }
    outs = iter(range(1_000_000))

    def run_import() -> None:
        import_clip_retrieval(folder, work / f"import-{next(outs)}.safetensors", say=lambda _: None)

    figures["import_s"] = _median(run_import, args.repeat)
    for name in os.listdir(work):
        if name.startswith("import-"):
            os.remove(work / name)
    store_file = work / "store.safetensors"
    if not store_file.exists():
        import_clip_retrieval(folder, store_file, say=lambda _: None)
    store = InMemoryImageEmbeddingStore.load_from_disk(store_file)
    side = Path(graph_module.graph_file_for(store_file))
    if not side.exists():
        start = time.perf_counter()
        graph_module.neighbor_graph(store, args.k, store_file=store_file)
        figures["graph_build_s"] = round(time.perf_counter() - start, 3)
    figures["graph_read_s"] = _median(lambda: graph_module.read_graph_file(side, store), args.repeat)
    verify = getattr(graph_module, "verify_graph_rows", None)
    if verify is not None:
        graph = graph_module.read_graph_file(side, store)
        vectors = store.embeddings
        rows = np.sort(np.random.default_rng(1).choice(len(store), size=64, replace=False))
        figures["graph_verify_64_rows_s"] = _median(
            lambda: verify(graph.ids, graph.distances, vectors, store.space, graph.method, "g", rows),
            args.repeat,
        )
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
