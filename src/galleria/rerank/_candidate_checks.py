"""Checks of the candidate lists a re-ranker receives: types, finite scores in range, no path twice."""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import Any

import numpy as np

from galleria.store.candidate import Candidate

__all__ = ["MAX_SCORE", "check_candidate_lists", "check_candidates"]

#: Largest score magnitude accepted: a store's distances are float32, so anything beyond is not one.
MAX_SCORE = float(np.finfo(np.float32).max)


def _fits(score: float) -> bool:
    return -MAX_SCORE <= score <= MAX_SCORE  # False for NaN and ±inf as well


def _plainly_valid(pool: list[Any], store_id: str) -> bool:
    """True when every entry is a ``Candidate`` of this store (or made by hand) with a float score in
    the float32 range and no path repeats: the common case, checked a column at a time."""
    if not all(type(candidate) is Candidate for candidate in pool):
        return False
    scores = [candidate.score for candidate in pool]
    if not all(type(score) is float for score in scores):
        return False
    if not {candidate._store_id for candidate in pool} <= {None, store_id}:
        return False
    if not bool(np.all(np.abs(np.array(scores)) <= MAX_SCORE)):  # False for NaN and ±inf as well
        return False
    return len({candidate.path for candidate in pool}) == len(pool)


def _check_candidate_lists(candidate_lists: Any, store_id: str) -> list[list[Candidate]]:
    """Validate the argument of ``rerank_batch``: a sequence of candidate lists, each checked."""
    if isinstance(candidate_lists, (str, bytes)) or not isinstance(candidate_lists, Sequence):
        raise TypeError(
            f"candidate_lists must be a sequence of candidate lists, got {type(candidate_lists).__name__}"
        )
    return [
        _check_candidates(f"candidate_lists[{i}]", pool, store_id) for i, pool in enumerate(candidate_lists)
    ]


def _check_candidates(name: str, candidates: Any, store_id: str) -> list[Candidate]:
    """Validate one candidate list: non-empty, all ``Candidate`` scored by this store (or by hand),
    finite float32-range scores, no repeated path."""
    if isinstance(candidates, (str, bytes)) or not isinstance(candidates, Sequence):
        raise TypeError(f"{name} must be a sequence of Candidate, got {type(candidates).__name__}")
    if len(candidates) == 0:
        raise ValueError(f"{name} must not be empty")
    pool = list(candidates)
    if _plainly_valid(pool, store_id):
        return pool  # the common case, checked fast
    seen: set[str] = set()
    for position, candidate in enumerate(pool):
        if not isinstance(candidate, Candidate):
            raise TypeError(f"{name}[{position}] must be a Candidate, got {type(candidate).__name__}")
        score = candidate.score
        if isinstance(score, bool) or not isinstance(score, numbers.Real):
            raise TypeError(f"{name}[{position}].score must be a real number, got {score!r}")
        if not math.isfinite(float(score)):
            raise ValueError(f"{name}[{position}].score must be finite, got {score!r}")
        if not _fits(float(score)):
            raise ValueError(
                f"{name}[{position}].score {score!r} is beyond the float32 range of a store's distances"
            )
        if candidate.store_id not in (None, store_id):
            raise ValueError(
                f"{name}[{position}] ({candidate.path!r}) was scored by another store (another embedder, "
                "space or gallery); re-rank candidates with the reranker of the store that retrieved them"
            )
        if candidate.path in seen:
            raise ValueError(f"{name} holds the path {candidate.path!r} more than once")
        seen.add(candidate.path)
    return pool


#: The checks every re-ranker runs on what it receives (the names the base and the methods use).
check_candidates = _check_candidates
check_candidate_lists = _check_candidate_lists
