"""The faiss index of a clip-retrieval folder: read through galleria's FAISS checks, then its search knob
tuned to the recall galleria's IVF-PQ meets, measured on the folder's own vectors
(:mod:`galleria.store.clip_retrieval`)."""

from __future__ import annotations

import os
import struct
from collections.abc import Callable
from typing import Any

import numpy as np

from galleria._files import open_regular_file
from galleria.index import deserialize

__all__ = ["index_file", "read_index", "tune_index"]


def index_file(folder: str) -> str | None:
    for candidate in (os.path.join(folder, "image.index"), os.path.join(folder, "index", "image.index")):
        if os.path.lexists(candidate):
            return candidate
    return None


def read_index(path: str, rows: int, dim: int, messages: list[str]) -> Any:
    """The checked faiss index in ``path``; None (with a message) if galleria's checks refuse it."""
    with open_regular_file(path, "faiss index") as stream:
        size = os.fstat(stream.fileno()).st_size
        head = stream.read(16)
        if len(head) < 16:
            raise ValueError(f"faiss index {path!r} is too short to be an index")
        (ndim,), (ntotal,) = struct.unpack("<i", head[4:8]), struct.unpack("<q", head[8:16])
        if ntotal != rows or ndim != dim:
            raise ValueError(
                f"faiss index {path!r} holds {ntotal} vectors of dimension {ndim}, but the embeddings are "
                f"{rows} of dimension {dim}; refused"
            )
        limit = rows * (dim * 4 + 1024) + (64 << 20)
        if size > limit:
            raise ValueError(f"faiss index {path!r} is {size} bytes, more than {limit} for {rows} vectors")
        data = np.empty(size, dtype=np.uint8)
        stream.seek(0)
        if stream.readinto(data.data) != size:  # type: ignore[attr-defined]
            raise ValueError(f"faiss index {path!r} changed while it was read")
    try:
        index = deserialize(data, f"faiss index {path!r}", id_limit=rows)
    except ValueError as error:
        messages.append(f"{error}; the index is rebuilt from the .npy files")
        return None
    if index.ntotal != rows or index.d != dim:  # pragma: no cover - the header said so already
        raise ValueError(f"faiss index {path!r} does not hold the {rows} embeddings; refused")
    return index


#: The largest HNSW ``efSearch`` tried when tuning an imported HNSW index.
_MAX_EF_SEARCH = 4096


def tune_index(index: Any, vectors: np.ndarray, say: Callable[[str], None]) -> str | None:
    """Tune the search knob of the imported faiss ``index`` (IVF ``nprobe``, HNSW ``efSearch``) to the
    recall@10 galleria's IVF-PQ meets by default, measured on a sample of the folder's own vectors
    against exact search; the label the store keeps (what was done and measured), or None when the
    index cannot be tuned to it (the caller rebuilds)."""
    import faiss

    from galleria.index import (
        DEFAULT_RECALL_TARGET,
        MIN_MEASURED_ROWS,
        SAMPLE_QUERIES,
        measure_recall,
        tune_probes,
    )

    target = DEFAULT_RECALL_TARGET
    space = "ip" if int(index.metric_type) == faiss.METRIC_INNER_PRODUCT else "l2"
    count = vectors.shape[0]
    sample = min(count, SAMPLE_QUERIES)
    inner = faiss.downcast_index(index.index) if isinstance(index, faiss.IndexPreTransform) else index
    ivf = None
    try:
        ivf = faiss.extract_index_ivf(index)
    except RuntimeError:
        ivf = None
    hnsw = inner if isinstance(inner, faiss.IndexHNSW) else None
    if isinstance(inner, faiss.IndexFlat) or count < MIN_MEASURED_ROWS:
        if ivf is not None:
            ivf.nprobe = ivf.nlist  # a tiny gallery: probe every list, as galleria's IVF-PQ does
        if hnsw is not None:
            hnsw.hnsw.efSearch = max(int(hnsw.hnsw.efSearch), min(count, _MAX_EF_SEARCH))
        kind = "exact" if isinstance(inner, faiss.IndexFlat) else f"{count} vectors, every one reached"
        say(f"the folder's index ({type(inner).__name__}) is reused as it is ({kind})")
        return f"autofaiss {type(inner).__name__}"

    def search_with(setting: Callable[[int], None]) -> Callable[[np.ndarray, int, int], np.ndarray]:
        def search(queries: np.ndarray, k: int, knob: int) -> np.ndarray:
            setting(knob)
            return np.asarray(index.search(np.ascontiguousarray(queries, dtype=np.float32), k)[1])

        return search

    if ivf is not None:
        before = int(ivf.nprobe)
        recall = measure_recall(search_with(lambda knob: setattr(ivf, "nprobe", knob)), vectors, 0, space, 0)
        found = recall(before)
        probes, measured = (before, found) if found >= target else tune_probes(recall, int(ivf.nlist), target)
        ivf.nprobe = probes
        knob, old, new = "nprobe", before, probes
    elif hnsw is not None:
        before = int(hnsw.hnsw.efSearch)
        recall = measure_recall(
            search_with(lambda knob: setattr(hnsw.hnsw, "efSearch", knob)), vectors, 0, space, 0
        )
        measured, new = recall(before), before
        ef = max(16, before)
        while measured < target and ef < _MAX_EF_SEARCH:
            ef *= 2
            measured, new = recall(ef), ef
        hnsw.hnsw.efSearch = new
        knob, old = "efSearch", before
    else:
        recall = measure_recall(search_with(lambda knob: None), vectors, 0, space, 0)
        measured, knob, old, new = recall(0), "", 0, 0
    if measured < target:
        what = f" at {knob}={new}" if knob else ""
        say(
            f"the folder's index ({type(inner).__name__}) reaches recall@10 {measured:.3f} on {sample} "
            f"sampled vectors{what}, below {target}: it is rebuilt from the vectors"
        )
        return None
    change = (
        f"{knob} {old} -> {new}" if knob and new != old else (f"{knob} {new} kept" if knob else "no knob")
    )
    say(
        f"the folder's index ({type(inner).__name__}) is reused: recall@10 {measured:.3f} on {sample} "
        f"sampled vectors against exact search ({change}; target {target})"
    )
    return f"autofaiss {type(inner).__name__}, recall@10 {measured:.3f} at {change} (measured on import)"
