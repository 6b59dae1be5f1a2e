"""Reading a saved IVF-PQ index back: checks of the faiss index, the kept copy and the build report
against the header that describes them (ValueError for anything that does not match)."""

from __future__ import annotations

import math
from typing import Any

import faiss as _faiss
import numpy as np

from galleria.index._checks import all_finite, check_magnitude
from galleria.index._ivfpq_params import IVFPQ_PARAMETERS

faiss: Any = _faiss  # its bundled stubs miss much of the SWIG API

__all__ = ["check_loaded", "check_report", "checked_kept"]

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
