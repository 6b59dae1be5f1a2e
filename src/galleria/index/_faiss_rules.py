"""The checks of galleria's FAISS walker on plain arrays (:mod:`galleria.index._faiss_check`): ids,
HNSW graphs, IVF direct maps, linear transforms, and what FAISS may allocate at load. Each raises
ValueError; a loader that streams the bytes can call the same checks.

The walker validates

* HNSW graphs: neighbour ids in ``[-1, ntotal)``, offsets starting at 0, monotone, one node's
  slot count each and ending at the neighbour array's end, levels in ``[1, max level + 1]``, every
  upper-layer neighbour present on that layer, the entry point in range and on the top level, the
  search settings bounded;
* IVF: list ids unique and in range, direct-map entries pointing at an existing list slot that
  holds that id;
* ID maps: ids unique and in range (also inside pre-transforms), so every label maps to a row;
* PQ: the search type one FAISS knows;
* linear transforms: matrix of ``d_in × d_out``, a bias of ``d_out`` when declared, trained, and
  dimensions chained from the outer index to the inner one;
* memory: what FAISS allocates beyond the file's own bytes at load (the per-list bookkeeping of
  IVF) is at most :func:`allocation_budget` of the file's size.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "IVF_LIST_OVERHEAD",
    "MAX_HNSW_EF",
    "MAX_HNSW_LEVELS",
    "allocation_budget",
    "check_direct_map",
    "check_hnsw_graph",
    "check_linear_transform",
    "check_unique_ids",
    "precomputed_table_bytes",
]

#: HNSW: most layers a graph may have (FAISS's default level draw stops well below 64 layers).
MAX_HNSW_LEVELS = 64
#: HNSW: largest efConstruction / efSearch / upper_beam (galleria's own parameters stop there).
MAX_HNSW_EF = 1 << 16
#: Bytes of RAM FAISS spends per inverted list beyond its codes and ids (two vectors and their
#: bookkeeping; measured about 184 bytes with faiss 1.15, rounded up).
IVF_LIST_OVERHEAD = 256
#: Floor of :func:`allocation_budget`: small files may always allocate this much.
_BUDGET_FLOOR = 1 << 28
#: Multiple of the file's size an index may allocate beyond its bytes.
_BUDGET_FACTOR = 4


def allocation_budget(file_bytes: int) -> int:
    """Bytes FAISS may allocate at load beyond the file's own: ``max(256 MiB, 4 × file_bytes)``."""
    return max(_BUDGET_FLOOR, _BUDGET_FACTOR * int(file_bytes))


def precomputed_table_bytes(lists: int, subquantizers: int, bits: int) -> int:
    """Size of an L2 IVF-PQ's precomputed residual table (``nlist × M × 2**nbits`` floats)."""
    return 4 * int(lists) * int(subquantizers) * (1 << int(bits))


def check_unique_ids(ids: np.ndarray | list[np.ndarray], limit: int, what: str) -> None:
    """Raise ValueError unless every id lies in ``[0, limit)`` and none appears twice.

    ``ids`` is one array or several (an IVF's lists), checked without joining them: duplicates are
    found with one flag per possible id when that costs at most a byte per id given (the usual
    case: ``limit`` is the row count), else by sorting a joined copy.
    """
    parts = [ids] if isinstance(ids, np.ndarray) else [part for part in ids if part.size]
    count = sum(int(part.size) for part in parts)
    if count == 0:
        return
    for part in parts:
        low, high = int(part.min()), int(part.max())
        if low < 0 or high >= limit:
            raise ValueError(f"{what} holds id {low if low < 0 else high}, outside [0, {limit})")
    if limit <= 8 * count + (1 << 16):
        seen = np.zeros(limit, dtype=bool)
        for part in parts:
            seen[part] = True
        unique = int(np.count_nonzero(seen))
    else:
        unique = int(np.unique(np.concatenate(parts)).size)
    if unique != count:
        raise ValueError(f"{what} holds an id twice")


def check_hnsw_graph(
    *,
    probabilities: np.ndarray,
    cumulative: np.ndarray,
    levels: np.ndarray,
    offsets: np.ndarray,
    neighbours: np.ndarray,
    entry_point: int,
    max_level: int,
    total: int,
) -> None:
    """Raise ValueError unless an HNSW graph of ``total`` nodes is one FAISS can search safely.

    ``levels[i]`` is node i's layer count (its top layer + 1), ``cumulative[l]`` the neighbour
    slots of layers below l, ``offsets[i]`` where node i's slots start in ``neighbours``.
    """
    layers = cumulative.size - 1
    if not 1 <= layers <= MAX_HNSW_LEVELS or probabilities.size != layers:
        raise ValueError(
            f"HNSW declares {layers} layers and {probabilities.size} level probabilities "
            f"(at most {MAX_HNSW_LEVELS} layers, one probability each)"
        )
    if not (np.isfinite(probabilities).all() and (probabilities >= 0).all() and (probabilities <= 1).all()):
        raise ValueError("HNSW level probabilities must be finite and in [0, 1]")
    steps = np.diff(cumulative.astype(np.int64))
    if int(cumulative[0]) != 0 or (steps < 0).any() or int(cumulative[-1]) > MAX_HNSW_EF:
        raise ValueError("HNSW neighbours per level must start at 0 and grow (at most 65536 slots)")
    if levels.size != total or offsets.size != total + 1:
        raise ValueError(
            f"HNSW has {levels.size} levels and {offsets.size} offsets for {total} nodes "
            f"(expected {total} and {total + 1})"
        )
    if total == 0:
        if entry_point != -1 or max_level != -1 or neighbours.size or int(offsets[0]) != 0:
            raise ValueError("an empty HNSW graph must have entry point -1, max level -1 and no neighbours")
        return
    node_levels = levels.astype(np.int64)
    if int(node_levels.min()) < 1 or int(node_levels.max()) > layers:
        raise ValueError(f"HNSW node levels must lie in [1, {layers}]")
    if max_level != int(node_levels.max()) - 1:
        raise ValueError(f"HNSW max level {max_level} does not match its nodes' levels")
    if not 0 <= entry_point < total or int(node_levels[entry_point]) - 1 != max_level:
        raise ValueError(f"HNSW entry point {entry_point} is not a node on the top level")
    # offsets are size_t: read as unsigned, so a "negative" one is a huge one.
    if int(offsets[0]) != 0 or int(offsets[-1]) != neighbours.size:
        raise ValueError("HNSW offsets must start at 0 and end at the neighbour array's end")
    slots = np.diff(offsets.astype(np.uint64)).astype(np.int64)
    if not np.array_equal(slots, cumulative.astype(np.int64)[node_levels]):
        raise ValueError("HNSW offsets do not give every node the slots of its levels")
    if neighbours.size and (int(neighbours.min()) < -1 or int(neighbours.max()) >= total):
        raise ValueError(f"HNSW neighbour ids must lie in [-1, {total})")
    starts = offsets[:-1].astype(np.int64)
    for layer in range(1, layers):
        nodes = np.flatnonzero(node_levels > layer)
        width = int(cumulative[layer + 1]) - int(cumulative[layer])
        if nodes.size == 0 or width == 0:
            continue
        where = starts[nodes][:, None] + int(cumulative[layer]) + np.arange(width)
        found = neighbours[where]
        found = found[found >= 0]
        if found.size and int(node_levels[found].min()) <= layer:
            raise ValueError(f"HNSW lists a neighbour on layer {layer} that does not reach that layer")


def check_direct_map(map_type: int, entries: np.ndarray, list_ids: list[np.ndarray], total: int) -> None:
    """Raise ValueError unless an IVF direct map points only at list slots holding its ids.

    ``map_type`` 0 has no entries; 1 (array) maps id → ``list << 32 | offset`` (or -1); 2 (hash
    table) holds ``(id, list << 32 | offset)`` pairs.
    """
    if map_type == 0:
        if entries.size:
            raise ValueError("IVF without a direct map lists direct-map entries")
        return
    if map_type == 1:
        if entries.size > total:
            raise ValueError(f"IVF direct map has {entries.size} entries for {total} rows")
        keys, values = np.flatnonzero(entries != -1), entries[entries != -1]
    elif map_type == 2:
        pairs = entries.reshape(-1, 2)
        keys, values = pairs[:, 0], pairs[:, 1]
        if np.unique(keys).size != keys.size:
            raise ValueError("IVF direct map lists an id twice")
    else:
        raise ValueError(f"unknown IVF direct map type {map_type}")
    if values.size == 0:
        return
    lists, slots = values >> 32, values & 0xFFFFFFFF
    sizes = np.array([ids.size for ids in list_ids], dtype=np.int64)
    if int(lists.min()) < 0 or int(lists.max()) >= sizes.size:
        raise ValueError("IVF direct map names an inverted list that does not exist")
    if (slots >= sizes[lists]).any():
        raise ValueError("IVF direct map points past the end of an inverted list")
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    every_id = np.concatenate(list_ids) if list_ids else np.zeros(0, dtype=np.int64)
    if not np.array_equal(every_id[starts[lists] + slots], keys):
        raise ValueError("IVF direct map points at list slots that hold other ids")


def check_linear_transform(
    matrix_size: int, bias_size: int, have_bias: bool, d_in: int, d_out: int, trained: bool
) -> None:
    """Raise ValueError unless a linear transform's matrix and bias fit its ``d_in → d_out``."""
    if not (0 < d_in <= 1 << 16 and 0 < d_out <= 1 << 16):
        raise ValueError(f"vector transform has invalid dimensions {d_in} → {d_out}")
    if matrix_size != d_in * d_out:
        raise ValueError(f"vector transform matrix has {matrix_size} entries for {d_in} → {d_out}")
    allowed = (d_out,) if have_bias else (0, d_out)  # without a bias, FAISS ignores a kept one
    if bias_size not in allowed:
        raise ValueError(f"vector transform bias has {bias_size} entries for d_out {d_out}")
    if not trained:
        raise ValueError("vector transform is not trained")
