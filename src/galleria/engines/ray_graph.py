"""The neighbour graph built on Ray tasks: the inverted-file graph's shards, computed anywhere.

Which step runs where: the driver plans the graph (:func:`galleria.index.ivf_graph.plan_ivf_graph`:
the k-means coarse quantiser on a seeded sample, each item's cell, each cell's probed cells, the
shards of about 65,536 items — fixed by the plan, never by the number of workers). The vectors are
put once in Ray's object store; each shard is one Ray task that compares its cells' items exactly
with their probed cells' items (:func:`galleria.index.ivf_graph.ivf_shard`); the driver writes each
shard's rows into the graph. A row's result depends only on its cell and its probed cells, so the
graph equals :func:`galleria.index.neighbor_graph.approximate_graph`'s (the one-process ``ivf``
build, the same shards one after the other) bit for bit, for any number of workers or nodes.

A task whose worker dies is retried (:data:`MAX_RETRIES`); past that the build raises
``RuntimeError`` naming the shard, and nothing is kept. :func:`ray_store_graph` builds a store's
graph from one snapshot of its vectors and keeps it (in memory, and in ``STORE.graph`` with a
``store_file``) only if the store still holds that state when the graph is done: a store changed
meanwhile is a ``RuntimeError``, never a graph that mixes two states. A cluster ``address`` that
does not answer is a ``ConnectionError`` naming it, within :data:`CONNECT_TIMEOUT` seconds (Ray
itself would retry for minutes).

Ray is an optional dependency: ``pip install -e '.[ray]'``.
"""

from __future__ import annotations

import os
import socket
from typing import Any

import numpy as np

from galleria._validation import check_positive_int
from galleria.index.ivf_graph import assemble, ivf_shard, plan_ivf_graph, shard_inputs
from galleria.index.neighbor_graph import CELL_SIZE, PROBES, check_graph_input, exact_graph
from galleria.store.graph_keeping import adopt_graph, graph_snapshot

__all__ = ["CONNECT_TIMEOUT", "MAX_RETRIES", "ray_ivf_graph", "ray_store_graph"]

#: Times a shard's task is retried after its worker died.
MAX_RETRIES = 2
#: Seconds to wait for a cluster address to accept a connection before Ray is asked to join it.
CONNECT_TIMEOUT = 5.0


def _ray() -> Any:
    try:
        import ray
    except ImportError as error:  # pragma: no cover - exercised only without the extra
        raise ImportError("building the neighbour graph on Ray needs Ray: pip install -e '.[ray]'") from error
    return ray


def _answers(address: str) -> None:
    """ConnectionError naming ``address`` unless its host accepts a connection on its port."""
    if address == "auto":
        return
    where = address.removeprefix("ray://")
    host, _, port = where.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"address must be 'auto', 'HOST:PORT' or 'ray://HOST:PORT', got {address!r}")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_TIMEOUT):
            pass
    except OSError as error:
        raise ConnectionError(
            f"the Ray cluster at address {address!r} does not answer ({error.strerror or error}); "
            "start it (`ray start --head`) or give another address"
        ) from None


def _connect(address: str | None) -> Any:
    ray = _ray()
    if not ray.is_initialized():
        if address is None:
            ray.init(include_dashboard=False)
        else:
            _answers(address)
            ray.init(address=address)
    return ray


def _shard(vectors: np.ndarray, work: list[tuple[np.ndarray, np.ndarray]], k: int, space: str) -> Any:
    """One task: a shard's rows, ids and distances (``vectors`` from the object store)."""
    return ivf_shard(vectors, work, k, space)


def ray_ivf_graph(
    vectors: Any,
    k: Any,
    space: str,
    *,
    cell_size: int = CELL_SIZE,
    probes: int = PROBES,
    seed: int = 0,
    address: str | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`galleria.index.neighbor_graph.approximate_graph` with its shards on Ray tasks (same bits).

    ``address`` joins a cluster (``"auto"``, ``"HOST:PORT"``, ``"ray://HOST:10001"``) when Ray is not
    running yet; None starts a local Ray. A running Ray is used as it is.

    Raises
    ------
    ConnectionError
        ``address`` does not answer.
    RuntimeError
        A shard's task failed after its retries (the message names the shard).
    """
    array, wanted = check_graph_input(vectors, k, space)
    size = array.shape[0]
    count = max(1, min(size // check_positive_int("cell_size", cell_size), 1 << 16))
    probed = min(count, check_positive_int("probes", probes))
    if wanted == 0 or count <= probed:  # as the one-process build: too few cells for an inverted file
        if not wanted:
            return np.empty((size, 0), dtype=np.int32), np.empty((size, 0), dtype=np.float32)
        return exact_graph(array, wanted, space)
    ray = _connect(address)
    plan = plan_ivf_graph(array, wanted, space, count, probed, seed)
    shared = ray.put(array)  # sent once; every task reads the same copy
    task = ray.remote(num_cpus=1, max_retries=MAX_RETRIES)(_shard)
    pending = [
        task.remote(shared, shard_inputs(plan, shard), wanted, space) for shard in range(plan.shard_count)
    ]
    parts = []
    try:
        for shard, reference in enumerate(pending):
            try:
                parts.append(ray.get(reference))
            except Exception as error:  # Ray wraps the task's error, or reports the lost worker
                raise RuntimeError(
                    f"neighbour graph shard {shard} of {plan.shard_count} failed on Ray: {error}"
                ) from error
    finally:
        for reference in pending[len(parts) :]:
            ray.cancel(reference)
    return assemble(size, wanted, parts)


def ray_store_graph(
    store: Any,
    k: Any,
    *,
    store_file: str | os.PathLike[str] | None = None,
    address: str | None = None,
    **settings: Any,
) -> tuple[np.ndarray, np.ndarray]:
    """The store's ``ivf`` neighbour graph built on Ray, kept as :func:`galleria.neighbor_graph` keeps one.

    ``settings``: ``cell_size``, ``probes``, ``seed`` of :func:`ray_ivf_graph`. Raises RuntimeError
    (nothing kept or written) when the store changed while the graph was built."""
    snapshot = graph_snapshot(store)
    ids, distances = ray_ivf_graph(snapshot.vectors, k, store.space, address=address, **settings)
    return adopt_graph(store, snapshot, ids, distances, "ivf", store_file=store_file)
