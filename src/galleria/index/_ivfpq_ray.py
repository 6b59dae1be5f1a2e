"""Encoding an IVF-PQ batch in Ray tasks (``build_engine="ray"``), which may run on other machines.

The driver trains the index as in one process (:func:`galleria.index._ivfpq_train.train_ivfpq`),
then sends the trained, empty index once to Ray's object store. Each task encodes one shard of
:data:`SHARD_ROWS` rows (fixed, never derived from the number of workers) with the code the local
worker processes run (:func:`galleria.index._ivfpq_build._add_shard`: one OpenMP thread, ids from
the shard's first row) and returns the shard's serialised index. Once **every** shard is back, the
driver merges their inverted lists, in row order, into the index's own in-memory array lists
(``ArrayInvertedLists``: galleria's FAISS checks refuse on-disk lists, which name other files).
PQ encoding is a pure function of a vector and the codebooks, and each list is filled in row order,
so codes and ids per list equal the one-process build's, whatever the number of workers.

A task whose worker dies is retried by Ray (:data:`MAX_RETRIES`); when the retries run out the add
raises ``RuntimeError`` naming the rows and Ray's message, and the index is left as it was before
the add (nothing is merged until every shard succeeded).

With Ray not yet running in this process, ``ray.init()`` is called, which joins the cluster named by
the ``RAY_ADDRESS`` environment variable or else starts a local Ray; to use a given cluster call
``ray.init(address=...)`` first, or :func:`galleria.engines.build_ivfpq_with_ray`.
Ray is an optional dependency: ``pip install -e '.[ray]'``.
"""

from __future__ import annotations

from typing import Any

import faiss as _faiss
import numpy as np

from galleria.index._ivfpq_build import _add_shard

faiss: Any = _faiss  # its bundled stubs miss much of the SWIG API

__all__ = ["MAX_RETRIES", "SHARD_ROWS", "add_on_ray", "ray_module"]

#: Rows each Ray task encodes (the last shard of a batch may hold fewer).
SHARD_ROWS = 100_000
#: Times a shard's task is retried after its worker died.
MAX_RETRIES = 2


def ray_module() -> Any:
    """``ray``, imported on first use (an ImportError names the extra)."""
    try:
        import ray
    except ImportError as error:  # pragma: no cover - exercised only without the extra
        raise ImportError("build_engine='ray' needs Ray: pip install -e '.[ray]'") from error
    return ray


def _encode(trained: bytes, vectors: np.ndarray, first_id: int) -> bytes:
    """Ray task: the local workers' encoding of one shard (ids from ``first_id``); its index's bytes."""
    return _add_shard(trained, np.ascontiguousarray(vectors, dtype=np.float32), first_id)


def _gather(ray: Any, pending: list[tuple[int, int, Any]]) -> list[bytes]:
    """Every shard's bytes in row order, or RuntimeError naming the first shard that failed."""
    shards: list[bytes] = []
    try:
        for start, stop, reference in pending:
            try:
                shards.append(ray.get(reference))
            except Exception as error:  # Ray wraps the task's error, or reports the lost worker
                raise RuntimeError(
                    f"encoding rows {start}:{stop} of the ivfpq index failed on Ray: {error}"
                ) from error
    except BaseException:
        for _, _, reference in pending[len(shards) :]:
            ray.cancel(reference)
        raise
    return shards


def add_on_ray(index: Any, ivf: Any, array: np.ndarray, first: int) -> int:
    """Encode ``array`` (ids from ``first``) in Ray tasks of :data:`SHARD_ROWS` rows into the trained
    faiss ``index`` (whose IVF part is ``ivf``); returns the number of tasks. On failure nothing is merged."""
    ray = ray_module()
    shard_rows = SHARD_ROWS
    if not ray.is_initialized():
        ray.init(include_dashboard=False)
    empty = faiss.clone_index(index)
    empty.reset()
    trained = ray.put(bytes(faiss.serialize_index(empty)))  # sent once; every task reads this copy
    del empty
    task = ray.remote(num_cpus=1, max_retries=MAX_RETRIES)(_encode)
    count = array.shape[0]
    pending = []
    for start in range(0, count, shard_rows):
        stop = min(start + shard_rows, count)
        pending.append((start, stop, task.remote(trained, array[start:stop], start)))
    shards = _gather(ray, pending)
    if ivf.direct_map.type != faiss.DirectMap.NoMap:
        ivf.set_direct_map_type(faiss.DirectMap.NoMap)  # faiss merges only without one
    for data in shards:
        shard = faiss.deserialize_index(np.frombuffer(data, dtype=np.uint8).copy())
        # The shard's ids count from the start of the batch; merge_from shifts them to the index's ids.
        ivf.merge_from(faiss.extract_index_ivf(shard), first)
        del shard
    index.ntotal = ivf.ntotal  # an OPQ wrapper counts its rows itself (merge_from fills the IVF part)
    return len(pending)
