"""One retrieved gallery item: its path and the score it was ranked by."""

from __future__ import annotations

import numbers
import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from galleria.images.reading import read_rgb
from galleria.store._urls import is_url, url_error

__all__ = ["Candidate"]


@dataclass(frozen=True)
class Candidate:
    """A ranked gallery item.

    Parameters
    ----------
    path : str or os.PathLike
        The gallery image's path, as the store holds it (kept as a str).
    score : real number
        The score it was ranked by, kept as a Python float. For the built-in indexes and the
        re-ranker this is a distance (lower is better); an external index keeps its own scores.

    Raises
    ------
    TypeError
        ``path`` is not a str or os.PathLike, or ``score`` is not a real number (bool included).

    Notes
    -----
    Candidates returned by a store also carry that store's identity (:attr:`store_id`), which is
    not part of equality or the constructor; a re-ranker refuses candidates scored by another
    store. Candidates you make yourself carry none and are accepted by any store.

    Examples
    --------
    >>> c = Candidate("cat.png", 0.25)
    >>> c.path, c.score
    ('cat.png', 0.25)
    >>> Candidate("cat.png", 1) == Candidate("cat.png", 1.0)
    True
    """

    path: str
    score: float
    _buffer: list[np.ndarray] = field(default_factory=list, init=False, repr=False, compare=False, hash=False)
    _store_id: str | None = field(default=None, init=False, repr=False, compare=False, hash=False)
    #: (path table token, row) where the store found it; (0, -1) for a candidate made by hand.
    _where: tuple[int, int] = field(default=(0, -1), init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        path: Any = self.path
        if isinstance(path, os.PathLike):
            path = os.fspath(path)
        if not isinstance(path, str):
            raise TypeError(f"path must be a str or os.PathLike, got {path!r} ({type(path).__name__})")
        score: Any = self.score
        if isinstance(score, (bool, np.bool_)) or not isinstance(score, numbers.Real):
            raise TypeError(f"score must be a real number, got {score!r} ({type(score).__name__})")
        object.__setattr__(self, "path", path)
        object.__setattr__(self, "score", float(score))

    @classmethod
    def _from_store(
        cls, path: str, score: float, store_id: str | None, where: tuple[int, int] = (0, -1)
    ) -> Candidate:
        """A candidate from trusted parts (a str path, a Python float), tagged with a store identity
        and, when known, ``where``: the token of the store's path table and the row it holds it in."""
        candidate = object.__new__(cls)
        object.__setattr__(candidate, "path", path)
        object.__setattr__(candidate, "score", score)
        object.__setattr__(candidate, "_buffer", [])
        object.__setattr__(candidate, "_store_id", store_id)
        object.__setattr__(candidate, "_where", where)
        return candidate

    def rescored(self, score: Any) -> Candidate:
        """This candidate with another ``score`` (a re-ranker's own), still tagged with the store
        that found it, so that the next stage accepts it as that store's.

        Examples
        --------
        >>> Candidate("cat.png", 0.25).rescored(0.5)
        Candidate(path='cat.png', score=0.5)
        """
        if isinstance(score, (bool, np.bool_)) or not isinstance(score, numbers.Real):
            raise TypeError(f"score must be a real number, got {score!r} ({type(score).__name__})")
        return Candidate._from_store(self.path, float(score), self._store_id, self._where)

    @property
    def store_id(self) -> str | None:
        """The identity of the store that scored this candidate, or None for one made by hand."""
        return self._store_id

    @property
    def array(self) -> np.ndarray:
        """The image as an (H, W, 3) uint8 RGB array, read on first access and kept.

        A URL-only item (``scheme://...``, from an imported clip-retrieval folder) raises ValueError:
        galleria never fetches images.
        """
        if not self._buffer:
            if is_url(self.path):
                raise url_error(self.path)
            self._buffer.append(read_rgb(self.path))
        return self._buffer[0]

    def clear_buffer(self) -> None:
        """Drop the image read by :attr:`array` (it is read again on the next access)."""
        self._buffer.clear()
