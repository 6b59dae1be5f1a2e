"""An IVF-PQ index's file: its parts written (:func:`pack_ivfpq`), and read back (:func:`read_ivfpq`)
with checks of the faiss index, the kept copy and the build report against the header that
describes them (ValueError for anything that does not match)."""

from __future__ import annotations

import math
from typing import Any

import faiss as _faiss
import numpy as np

from galleria.index import _serial
from galleria.index._checks import all_finite, check_magnitude
from galleria.index._faiss import FaissPart, LiveRows, deserialize, restore_precomputed_table
from galleria.index._ivfpq_params import IVFPQ_PARAMETERS
from galleria.index.base import SPACES

faiss: Any = _faiss  # its bundled stubs miss much of the SWIG API

__all__ = ["check_loaded", "check_report", "checked_kept", "pack_ivfpq", "read_ivfpq"]

#: What the build report of an index holds (JSON types), checked when a saved one is read back.
_REPORT_KEYS: dict[str, type | tuple[type, ...]] = {
    "chosen": list,
    "recall_at_10": (float, type(None)),
    "sample_queries": int,
    "probe_lists": int,
    "recall_target": (float, type(None)),
}


def check_loaded(loaded: Any, dim: int, live: np.ndarray, params: dict[str, Any], metric: int) -> None:
    """Check that a deserialised faiss index has the type, shape and ids this index's header says."""
    if params["opq"]:
        # The OPQ rotation comes back as a LinearTransform (OPQMatrix is one): a square rotation.
        rotation = (
            faiss.downcast_VectorTransform(loaded.chain.at(0))
            if isinstance(loaded, faiss.IndexPreTransform) and loaded.chain.size() == 1
            else None
        )
        ok = (
            isinstance(rotation, faiss.LinearTransform)
            and rotation.d_in == dim
            and rotation.d_out == dim
            and bool(rotation.is_trained)
        )
        inner = faiss.downcast_index(loaded.index) if ok else None
    else:
        ok, inner = True, loaded
    if not ok or not isinstance(inner, faiss.IndexIVFPQ):
        raise ValueError("serialised ivfpq index holds a faiss index of the wrong type")
    if (
        int(loaded.metric_type) != metric
        or loaded.d != dim
        or not loaded.is_trained
        or inner.nlist != params["lists"]
        or inner.pq.nbits != params["bits"]
        or (params["subquantizers"] is not None and inner.pq.M != params["subquantizers"])
    ):
        raise ValueError("serialised ivfpq index header does not match its faiss index")
    if inner.ntotal != live.size or not _lists_hold_exactly(inner, live):
        raise ValueError("serialised ivfpq index: the ids in its inverted lists do not match its live rows")


def _lists_hold_exactly(ivf: Any, live: np.ndarray) -> bool:
    """Whether the inverted lists of ``ivf`` hold each id of ``live`` (strictly rising) exactly once,
    and nothing else: one flag per id, each list read in place (no joined or sorted copy)."""
    waiting = np.zeros(int(live[-1]) + 1 if live.size else 0, dtype=bool)
    waiting[live] = True
    lists = ivf.invlists
    for number in range(ivf.nlist):
        size = lists.list_size(number)
        if size:
            ids = faiss.rev_swig_ptr(lists.get_ids(number), size)
            if int(ids.min()) < 0 or int(ids.max()) >= waiting.size or not waiting[ids].all():
                return False
            waiting[ids] = False
    return not waiting.any()


def checked_kept(kept: np.ndarray | None, dim: int, count: int, vector_dtype: str) -> np.ndarray:
    """The kept exact copy read back: ``count`` finite rows of ``dim`` in ``vector_dtype``."""
    dtype = np.dtype(vector_dtype)
    if kept is not None and dtype == np.float16 and kept.dtype == np.uint8 and kept.ndim == 2:
        kept = kept.view("<f2") if kept.shape[1] == 2 * dim else None
    if kept is None or kept.dtype != dtype or kept.shape != (count, dim):
        raise ValueError(f"serialised ivfpq index lacks its kept ({count}, {dim}) {dtype} vectors")
    if not all_finite(kept):
        raise ValueError("serialised ivfpq index holds non-finite kept vectors")
    check_magnitude("serialised ivfpq index: kept vectors", kept)
    return np.ascontiguousarray(kept)


def check_report(report: Any) -> dict[str, Any] | None:
    """A saved build report, checked key by key (ValueError if it is not one this index writes)."""
    if report is None:
        return None
    if (
        not isinstance(report, dict)
        or not set(report) <= set(_REPORT_KEYS)
        or "chosen" not in report
        or not all(isinstance(report[key], _REPORT_KEYS[key]) for key in report)
        or not all(name in IVFPQ_PARAMETERS for name in report["chosen"])
        or isinstance(report.get("sample_queries"), bool)
        or any(
            isinstance(report.get(key), float) and not (math.isfinite(report[key]) and 0 <= report[key] <= 1)
            for key in ("recall_at_10", "recall_target")
        )
    ):
        raise ValueError("serialised ivfpq index has an invalid build report")
    return dict(report)


def pack_ivfpq(index: Any) -> _serial.Packed:
    """An :class:`~galleria.index.ivfpq.IvfPqIndex` as the parts of its file: the faiss index
    (streamed, without the lookup table built for reconstruct), the live rows, the kept copy."""
    arrays: dict[str, np.ndarray | _serial.Streamed] = {"live": index._rows.internal}
    if index._index is not None:
        saved = index._index
        if index._ivf.direct_map.type != faiss.DirectMap.NoMap:
            # The lookup table built for reconstruct is rebuilt on demand: write the index without it.
            saved = faiss.clone_index(index._index)
            faiss.extract_index_ivf(saved).set_direct_map_type(faiss.DirectMap.NoMap)
        arrays["faiss"] = FaissPart(saved)
    if index._params["keep_vectors"] and index._dim is not None:
        kept = np.ascontiguousarray(index._kept[: index._kept_size])
        arrays["kept"] = kept if kept.dtype == np.float32 else kept.view(np.uint8)
    meta = {
        "space": index._space,
        "dim": index._dim,
        "params": index.params(),
        "total": index._rows.total,
        "report": index._report,
    }
    return _serial.pack_parts("ivfpq", meta, arrays)


def read_ivfpq(cls: Any, data: bytes | _serial.Unpacked) -> Any:
    """An index of class ``cls`` rebuilt from its file's bytes (ValueError on corrupt or mismatched data)."""
    meta, arrays = _serial.unpack(data, "ivfpq")
    space, dim, params, total = meta.get("space"), meta.get("dim"), meta.get("params"), meta.get("total")
    if space not in SPACES or not isinstance(params, dict) or not isinstance(total, int) or total < 0:
        raise ValueError("serialised ivfpq index has a corrupt header")
    try:
        index = cls(space, **params)
    except (TypeError, ValueError) as error:
        raise ValueError(f"serialised ivfpq index has invalid parameters: {error}") from error
    live = arrays.get("live")
    if live is None or live.dtype != np.int64 or live.ndim != 1:
        raise ValueError("serialised ivfpq index lacks its 'live' row array")
    if "faiss" not in arrays:
        if dim is not None or total != 0 or live.size or "kept" in arrays:
            raise ValueError("serialised ivfpq index lacks its faiss index")
        return index
    if not isinstance(dim, int) or isinstance(dim, bool) or dim < 1:
        raise ValueError(f"serialised ivfpq index has an invalid dimension {dim!r}")
    if live.size and (live[0] < 0 or live[-1] >= total or (np.diff(live) <= 0).any()):
        raise ValueError("serialised ivfpq index has an invalid 'live' row array")
    loaded = deserialize(arrays["faiss"], "ivfpq index", id_limit=total)
    check_loaded(loaded, int(dim), live, index._params, index._metric())
    index._index, index._ivf, index._dim = (
        loaded,
        faiss.downcast_index(faiss.extract_index_ivf(loaded)),
        int(dim),
    )
    restore_precomputed_table(loaded, len(data))
    if cls.training_budget.transposed_codebooks:
        index._ivf.pq.sync_transposed_centroids()  # later adds encode at the trained speed
    index._rows = LiveRows(live, int(total))
    index._report = check_report(meta.get("report"))
    if index._params["keep_vectors"]:
        index._kept = checked_kept(arrays.get("kept"), int(dim), live.size, index._params["vector_dtype"])
        index._kept_size = live.size
    elif "kept" in arrays:
        raise ValueError("serialised ivfpq index holds kept vectors but keep_vectors is False")
    return index
