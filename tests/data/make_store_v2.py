"""Write the version-2 store files in this folder (run once with galleria before format version 3).

    PYTHONPATH=/path/to/old/galleria/src python tests/data/make_store_v2.py

Each store holds 40 seeded 8-dimensional vectors under paths with non-ASCII characters; the paths
are listed in the JSON header, as galleria wrote them up to format version 2.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from galleria import InMemoryImageEmbeddingStore

HERE = Path(__file__).resolve().parent
ROWS, DIM = 40, 8
PATHS = [f"/gallery/café/ü{i:02d}-画像.png" for i in range(ROWS)]
KINDS = {
    "exact": ("cosine", {}),
    "hnsw": ("l2", {}),
    "ivfpq": ("ip", {"lists": 4, "bits": 4, "keep_vectors": True}),
}


def vectors() -> np.ndarray:
    return np.random.default_rng(18).normal(size=(ROWS, DIM)).astype(np.float32)


def main() -> None:
    for kind, (space, params) in KINDS.items():
        store = InMemoryImageEmbeddingStore.from_embeddings(
            PATHS, vectors(), search_index=kind, space=space, index_params=params
        )
        store.remove_images([PATHS[3]])  # a removed row: masked ids in the index
        store.save_to_disk(HERE / f"store_v2_{kind}.safetensors")


if __name__ == "__main__":
    main()
