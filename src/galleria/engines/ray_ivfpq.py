"""An IVF-PQ index built on Ray: trained here on a sample, its shards encoded in Ray tasks.

:func:`build_ivfpq_with_ray` joins (``address``) or starts a Ray, then builds an
:class:`~galleria.index.IvfPqIndex` with ``build_engine="ray"``: the driver trains as one process
does, Ray tasks encode fixed-size shards with the local workers' code, and their inverted lists are
merged into in-memory array lists (:mod:`galleria.index._ivfpq_ray`). Codes and ids per list
equal the one-process build's, except for rare vectors tied between two lists at scale (1 in 10⁶
measured; see that module). A store builds the same index with
``index_params={"build_engine": "ray"}`` once Ray runs in the process.

Ray is an optional dependency: ``pip install -e '.[ray]'``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from galleria._validation import check_positive_int
from galleria.index import IvfPqIndex, ray_module

__all__ = ["build_ivfpq_with_ray"]


def build_ivfpq_with_ray(
    vectors: np.ndarray,
    space: str = "cosine",
    *,
    address: str | None = None,
    num_cpus: int | None = None,
    **params: Any,
) -> IvfPqIndex:
    """Build an IVF-PQ index of ``vectors`` with its encoding on Ray.

    Parameters
    ----------
    vectors : (n, dim) float array
        The gallery, rows 0 .. n - 1 of the index.
    space : {"cosine", "ip", "l2"}
        As for :class:`~galleria.index.IvfPqIndex`.
    address : str, optional
        A Ray cluster to join (``"auto"``, ``"ray://head:10001"``) when Ray is not running yet;
        None starts a local Ray with ``num_cpus`` CPUs (None: all). A running Ray is used as it is.
    **params
        Parameters of :class:`~galleria.index.IvfPqIndex` (``build_engine`` is ``"ray"``).

    Raises
    ------
    TypeError, ValueError
        Bad parameters or vectors (before Ray is started).
    RuntimeError
        A shard's task failed after its retries (its message names the rows); nothing is returned.
    """
    if num_cpus is not None:
        num_cpus = check_positive_int("num_cpus", num_cpus)
    if params.get("build_engine", "ray") != "ray":
        raise ValueError(f"build_engine must be 'ray' here, got {params['build_engine']!r}")
    index = IvfPqIndex(space, **{**params, "build_engine": "ray"})
    ray = ray_module()
    if not ray.is_initialized():
        if address is None:
            ray.init(num_cpus=num_cpus, include_dashboard=False)
        else:  # a cluster's own settings apply
            ray.init(address=address)
    index.add(vectors)
    return index
