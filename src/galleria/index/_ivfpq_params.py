"""The parameters of :class:`~galleria.index.ivfpq.IvfPqIndex`: their checks, and the shape of the
index (lists, sub-quantizers, bits) chosen from the gallery's size, dimension and a memory budget.

Left unset, ``lists`` is about ``4·sqrt(n)`` (at most one list per 39 training vectors, faiss's
rule of thumb for k-means), ``subquantizers`` the dimension itself (one byte per dimension at 8
bits), or its largest divisor that fits ``memory_budget`` (codes plus ids), ``bits`` 8 (fewer for
a gallery too small to train 256 centroids per sub-quantizer), and ``probe_lists`` the smallest
power of two whose recall@10 on a sample of the gallery reaches ``recall_target``
(:mod:`galleria.index._ivfpq_build`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from galleria._params import Param
from galleria._validation import check_choice, is_int

__all__ = [
    "DEFAULT_RECALL_TARGET",
    "IVFPQ_PARAMETERS",
    "IvfPqParameter",
    "IvfPqShape",
    "choose_shape",
    "declared_params",
    "default_subquantizers",
    "validate_ivfpq_params",
]

#: The recall@10 that automatic ``probe_lists`` aims for when ``recall_target`` is not given.
DEFAULT_RECALL_TARGET = 0.9
#: Bytes each row costs besides its code: its int64 id in the inverted lists.
ID_BYTES = 8

_VECTOR_DTYPES = ("float16", "float32")


@dataclass(frozen=True)
class IvfPqParameter:
    """One tunable of :class:`IvfPqIndex`: its default, kind, allowed range or choices, and meaning."""

    default: Any
    kind: str  # "int", "float", "bool" or "choice"
    meaning: str
    minimum: float = 0
    maximum: float = 0
    optional: bool = False
    choices: tuple[str, ...] = ()

    def check(self, name: str, value: Any) -> Any:
        """Return ``value`` checked (an int in range, a bool or a choice), else raise naming ``name``."""
        if value is None and self.optional:
            return None
        if self.kind == "bool":
            if not isinstance(value, (bool, np.bool_)):
                raise TypeError(f"index parameter {name!r} must be True or False, got {value!r}")
            return bool(value)
        if self.kind == "choice":
            if not isinstance(value, str):
                raise TypeError(
                    f"index parameter {name!r} must be one of {list(self.choices)}, got {value!r}"
                )
            return check_choice(name, value, self.choices)
        if self.kind == "float":
            if isinstance(value, (bool, np.bool_)) or not isinstance(
                value, (int, float, np.floating, np.integer)
            ):
                raise TypeError(
                    f"index parameter {name!r} must be a number, got {value!r} ({type(value).__name__})"
                )
            number = float(value)
            if not (math.isfinite(number) and self.minimum <= number <= self.maximum):
                raise ValueError(
                    f"index parameter {name!r} must lie in [{self.minimum}, {self.maximum}], got {value!r}"
                )
            return number
        if not is_int(value):
            allowed = "an integer" + (" or None" if self.optional else "")
            raise TypeError(
                f"index parameter {name!r} must be {allowed}, got {value!r} ({type(value).__name__})"
            )
        if not self.minimum <= value <= self.maximum:
            raise ValueError(
                f"index parameter {name!r} must lie in [{self.minimum}, {self.maximum}], got {value!r}"
            )
        return int(value)


#: The parameters of :class:`IvfPqIndex` (name → default, kind, range, meaning); nothing else is accepted.
IVFPQ_PARAMETERS: dict[str, IvfPqParameter] = {
    "lists": IvfPqParameter(
        None,
        "int",
        "inverted lists (k-means clusters, faiss nlist). None: about 4·sqrt(n), at most n_train / 39",
        1,
        1 << 20,
        optional=True,
    ),
    "subquantizers": IvfPqParameter(
        None,
        "int",
        "PQ sub-vectors per code (faiss M); must divide dim. None: dim (one byte per dimension at 8 "
        "bits), or the largest divisor of dim whose codes fit memory_budget",
        1,
        4096,
        optional=True,
    ),
    "bits": IvfPqParameter(
        None,
        "int",
        "bits per sub-vector code (faiss nbits): 2**bits centroids each. None: 8 (fewer for tiny galleries)",
        1,
        16,
        optional=True,
    ),
    "probe_lists": IvfPqParameter(
        None,
        "int",
        "lists visited per query (faiss nprobe): higher recall, slower. None: the smallest power of two "
        "meeting recall_target on a sample of the gallery, measured at build time",
        1,
        1 << 20,
        optional=True,
    ),
    "recall_target": IvfPqParameter(
        None,
        "float",
        f"recall@10 the build measures on a sample of the gallery (exact neighbours of up to 300 of its "
        f"vectors) and tunes probe_lists for; a warning says when it is not reached. None: "
        f"{DEFAULT_RECALL_TARGET} when probe_lists is chosen, else not measured",
        0.0,
        1.0,
        optional=True,
    ),
    "memory_budget": IvfPqParameter(
        None,
        "int",
        "bytes the codes and ids of the first batch may take; sets subquantizers when it is None",
        1,
        1 << 50,
        optional=True,
    ),
    "train_size": IvfPqParameter(
        100_000,
        "int",
        "vectors (a seeded sample of the first batch) used to train lists and codebooks",
        1,
        1 << 40,
    ),
    "opq": IvfPqParameter(
        False, "bool", "learn an OPQ rotation before quantising (better codes, slower training)"
    ),
    "keep_vectors": IvfPqParameter(
        False, "bool", "keep a separate exact copy of the vectors for reconstruct (αQE, re-ranking)"
    ),
    "vector_dtype": IvfPqParameter(
        "float16", "choice", "dtype of the kept copy (keep_vectors=True)", choices=_VECTOR_DTYPES
    ),
    "rerank_candidates": IvfPqParameter(
        0,
        "int",
        "re-score this many PQ candidates with the kept exact vectors (0: off; needs keep_vectors)",
        0,
        1 << 16,
    ),
    "seed": IvfPqParameter(0, "int", "seed of the training sample and of k-means", 0, (1 << 31) - 1),
    "build_workers": IvfPqParameter(
        1,
        "int",
        "worker processes that encode shards of a large add in parallel (1: in this process)",
        1,
        256,
    ),
    "num_threads": IvfPqParameter(
        None,
        "int",
        "OpenMP threads faiss uses while training, adding and searching (None: default)",
        1,
        4096,
        True,
    ),
    "build_engine": IvfPqParameter(
        "processes",
        "choice",
        "who encodes a large add: worker processes here, or Ray tasks of fixed-size shards (the ray extra)",
        choices=("processes", "ray"),
    ),
}


def validate_ivfpq_params(params: Mapping[str, Any] | None) -> dict[str, Any]:
    """Check IVF-PQ parameters against :data:`IVFPQ_PARAMETERS`; return all of them, defaults filled in.

    Examples
    --------
    >>> validate_ivfpq_params({"lists": 64})["lists"]
    64
    >>> validate_ivfpq_params({"rerank_candidates": 100})
    Traceback (most recent call last):
    ...
    ValueError: index parameter 'rerank_candidates' needs keep_vectors=True (exact vectors to re-score with)
    """
    if params is None:
        params = {}
    if not isinstance(params, Mapping):
        raise TypeError(f"index_params must be a mapping of names to values, got {type(params).__name__}")
    unknown = sorted(str(key) for key in params if key not in IVFPQ_PARAMETERS)
    if unknown:
        raise ValueError(
            f"unknown ivfpq index parameter(s) {unknown}; valid names are {sorted(IVFPQ_PARAMETERS)}"
        )
    checked = {
        name: spec.check(name, params[name]) if name in params else spec.default
        for name, spec in IVFPQ_PARAMETERS.items()
    }
    if checked["rerank_candidates"] and not checked["keep_vectors"]:
        raise ValueError(
            "index parameter 'rerank_candidates' needs keep_vectors=True (exact vectors to re-score with)"
        )
    return checked


@dataclass(frozen=True)
class IvfPqShape:
    """The faiss shape of an IVF-PQ index: lists, sub-quantizers and bits per code."""

    lists: int
    subquantizers: int
    bits: int


def choose_shape(count: int, dim: int, params: Mapping[str, Any]) -> IvfPqShape:
    """The lists, sub-quantizers and bits for a first batch of ``count`` vectors of ``dim``; given
    values are kept as they are (see the module docstring for the rules).

    Examples
    --------
    >>> choose_shape(200_000, 128, validate_ivfpq_params(None))
    IvfPqShape(lists=1789, subquantizers=128, bits=8)
    >>> choose_shape(1_000_000, 512, validate_ivfpq_params({"memory_budget": 80_000_000}))
    IvfPqShape(lists=2564, subquantizers=64, bits=8)
    """
    sample = min(count, params["train_size"])
    bits = params["bits"]
    if bits is None:
        bits = int(min(8, max(1, math.floor(math.log2(max(2, sample // 16))))))
    lists = params["lists"]
    if lists is None:
        lists = int(max(1, min(round(4 * math.sqrt(count)), sample // 39)))
    subquantizers = params["subquantizers"]
    if subquantizers is None:
        budget = params["memory_budget"]
        per_row = None if budget is None else budget / max(1, count) - ID_BYTES
        subquantizers = default_subquantizers(dim, bits, per_row)
        if not subquantizers:
            raise ValueError(
                f"index parameter 'memory_budget' ({budget} bytes) cannot hold {count} codes: each "
                f"needs at least {math.ceil(bits / 8) + ID_BYTES} bytes (code and id)"
            )
    return IvfPqShape(int(lists), int(subquantizers), int(bits))


def default_subquantizers(dim: int, bits: int = 8, row_bytes: float | None = None) -> int:
    """The largest divisor of ``dim`` (one sub-quantizer per dimension without a limit: codes a
    quarter of float32 at 8 bits) whose code of ``bits`` bits each fits ``row_bytes``.

    Examples
    --------
    >>> default_subquantizers(512), default_subquantizers(100), default_subquantizers(3)
    (512, 100, 3)
    >>> default_subquantizers(512, row_bytes=72)
    64
    """
    divisors = [m for m in range(1, dim + 1) if dim % m == 0]
    if row_bytes is not None:
        divisors = [m for m in divisors if math.ceil(m * bits / 8) <= row_bytes] or [0]
    return max(divisors)


def _declared(name: str, spec: IvfPqParameter) -> Param:
    """One entry of :data:`IVFPQ_PARAMETERS` as a declared parameter."""
    kind = {"int": int, "float": float, "bool": bool, "choice": str}[spec.kind]
    low, high = (spec.minimum, spec.maximum) if kind in (int, float) else (None, None)
    return Param(
        name,
        kind,
        spec.default,
        low,
        high,
        choices=tuple(spec.choices),
        optional=spec.optional,
        help=spec.meaning,
    )


def declared_params() -> tuple[Param, ...]:
    """:data:`IVFPQ_PARAMETERS` as declared parameters (the IVF-PQ index's ``COMPONENT``)."""
    return tuple(_declared(name, spec) for name, spec in IVFPQ_PARAMETERS.items())
