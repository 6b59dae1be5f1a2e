"""Power normalisation and centring of the vectors a diffusion runs on (a derived, read-only store).

A gallery of non-negative features — pixels, or a CNN's pooled activations after a ReLU — has all
its cosines positive and dominated by what every item shares. Two classic corrections make the
differences between items count:

* **power normalisation** (the signed square root of Perronnin et al., generalised): every component
  ``x`` becomes ``sign(x)·|x|^p`` with ``0 < p ≤ 1``, then the vector is L2-normalised — large
  components (bursts) weigh less;
* **centring**: the mean ``μ`` of the gallery's (powered, normalised) vectors is subtracted from
  every gallery vector *and every query*, then each is L2-normalised again.

:func:`normalised_store` makes a new cosine store over the gallery's normalised vectors that applies
the same transform, with the gallery's ``μ``, to every query it is asked (``retrieve_by_vector``,
``retrieve_top_k_similar``, ``retrieve_by_text``). Query vectors handed to it are in the space of the
original store. It is a read-only view: adding or removing images, or saving it, raises; change
and save the original. The diffusions take it as their ``vector_power`` / ``centre`` parameters
(:mod:`galleria.rerank.registry`), and DBA, when asked too, augments the normalised vectors.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Any

import numpy as np

from galleria._params import Param, Space
from galleria._validation import check_bool
from galleria.rerank.base import check_store
from galleria.store import take_snapshot
from galleria.store.store import InMemoryImageEmbeddingStore

__all__ = [
    "PREPARATION_PARAMS",
    "QueryTransform",
    "check_vector_power",
    "normalise_vectors",
    "normalised_store",
    "preparation_constraint",
]


def check_vector_power(value: Any) -> float:
    """``vector_power``: a real number in (0, 1] (1: no power normalisation)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError(
            f"vector_power must be a real number in (0, 1], got {value!r} ({type(value).__name__})"
        )
    power = float(value)
    if not 0.0 < power <= 1.0:
        raise ValueError(f"vector_power must lie in (0, 1], got {value!r}")
    return power


def _unit(rows: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    unit: np.ndarray = np.divide(rows, norms, out=np.zeros_like(rows), where=norms > 0)
    return unit


def normalise_vectors(vectors: Any, power: float, mean: np.ndarray | None = None) -> np.ndarray:
    """``sign(x)·|x|^power`` per component, L2-normalised; minus ``mean`` and normalised again if given.

    Zero rows stay zero. Returns float32 rows.

    Examples
    --------
    >>> [round(float(x), 4) for x in normalise_vectors(np.array([[4.0, 0.0, 1.0]]), 0.5)[0]]
    [0.8944, 0.0, 0.4472]
    >>> centred = normalise_vectors(np.array([[1.0, 1.0], [1.0, 0.0]]), 1.0, mean=np.array([0.5, 0.5]))
    >>> centred.astype(float).round(3).tolist()
    [[0.707, 0.707], [0.707, -0.707]]
    """
    rows = np.asarray(vectors, dtype=np.float64)
    powered = rows if power == 1.0 else np.sign(rows) * np.abs(rows) ** power
    result = _unit(powered)
    if mean is not None:
        result = _unit(result - np.asarray(mean, dtype=np.float64))
    return result.astype(np.float32)


@dataclass(frozen=True)
class QueryTransform:
    """The transform a normalised store applies to its queries: the gallery's power and mean."""

    power: float
    mean: np.ndarray | None

    def __call__(self, queries: np.ndarray) -> np.ndarray:
        return normalise_vectors(queries, self.power, self.mean)

    def record(self) -> dict[str, Any]:
        """What it is, in a settings file's words."""
        return {"vector_power": self.power, "centre": self.mean is not None}


def normalised_store(
    store: InMemoryImageEmbeddingStore, *, vector_power: float = 1.0, centre: bool = False
) -> InMemoryImageEmbeddingStore:
    """A read-only cosine store over ``store``'s power-normalised (and centred) vectors; see the module.

    Raises
    ------
    TypeError, ValueError
        Bad ``vector_power`` / ``centre``; a store that is not in the cosine space, is on an
        ``ExternalSearchIndex``, is augmented (normalise the original store, then augment) or is
        itself normalised.
    RuntimeError
        The store is not built.

    Examples
    --------
    >>> original = InMemoryImageEmbeddingStore.from_embeddings(
    ...     ["a", "b", "c"], np.array([[1.0, 0.1], [0.9, 0.3], [0.2, 1.0]])
    ... )
    >>> view = normalised_store(original, vector_power=0.5, centre=True)
    >>> view.vector_transform
    {'vector_power': 0.5, 'centre': True}
    >>> [c.path for c in view.retrieve_by_vector([1.0, 0.2], k=3)[0]]
    ['a', 'b', 'c']
    """
    check_store(store, "power normalisation and centring")
    power = check_vector_power(vector_power)
    centred = check_bool("centre", centre)
    if store.space != "cosine":
        raise ValueError(f"power normalisation and centring need a cosine store, got space {store.space!r}")
    if store.augmentation is not None:
        raise ValueError(
            f"store is augmented ({store.augmentation}); normalise the original store, then augment it"
        )
    if store.vector_transform is not None:
        raise ValueError(f"store is already normalised ({store.vector_transform}); use the original store")
    if not store.is_built:
        raise RuntimeError("the store is not built yet; call build_store() first")
    snapshot = take_snapshot(store)  # paths and vectors of one gallery state
    powered = normalise_vectors(snapshot.vectors, power)
    mean = powered.astype(np.float64).mean(axis=0) if centred else None
    index = store.search_index
    result = InMemoryImageEmbeddingStore.from_embeddings(
        list(snapshot.paths),
        normalise_vectors(powered, 1.0, mean),
        store.embedder,
        index.name,
        space="cosine",
        index_params=index.params() or None,
    )
    result._query_transform = QueryTransform(power, mean)
    return result


#: The gallery-preparation parameters every ``prepared`` re-ranker takes (declared once, here):
#: power normalisation and centring, then DBA before the method. Each is left out at its no-op
#: default, so that settings without them read as before; ``dba_alpha`` only counts with
#: ``dba_neighbors`` > 0.
PREPARATION_PARAMS: tuple[Param, ...] = (
    Param(
        "vector_power",
        float,
        1.0,
        0.0,
        1.0,
        low_open=True,
        omit_default=True,
        space=Space("categorical", choices=(1.0, 0.5)),
        help="power normalisation of the vectors before re-ranking (1: none; 0.5: signed square root)",
    ),
    Param(
        "centre",
        bool,
        False,
        omit_default=True,
        space=Space("categorical", choices=(False, True)),
        help="centre the vectors on the gallery's mean before re-ranking",
    ),
    Param(
        "dba_neighbors",
        int,
        0,
        0,
        10_000,
        omit_default=True,
        cost=False,
        space=Space("categorical", choices=(2, 5, 10)),
        help="neighbors averaged into each gallery vector before re-ranking (0: no DBA)",
    ),
    Param(
        "dba_alpha",
        float,
        3.0,
        0.0,
        1000.0,
        space=Space("categorical", choices=(1.0, 3.0)),
        help="exponent of that augmentation's weights",
    ),
)


def preparation_constraint(params: dict[str, Any]) -> dict[str, Any]:
    """``dba_alpha`` is kept only with ``dba_neighbors`` > 0 (it means nothing without)."""
    if params.get("dba_neighbors", 0) > 0:
        return params
    return {key: value for key, value in params.items() if key != "dba_alpha"}
