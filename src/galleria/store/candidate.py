"""One retrieved gallery item: its path and the score it was ranked by."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from galleria.store.reading import read_rgb

__all__ = ["Candidate"]


@dataclass(frozen=True)
class Candidate:
    """A ranked gallery item.

    Parameters
    ----------
    path : str
        The gallery image's path, as the store holds it.
    score : float
        The score it was ranked by. For the built-in indexes and the re-ranker this is a
        distance (lower is better); an external index keeps its own scores.

    Examples
    --------
    >>> c = Candidate("cat.png", 0.25)
    >>> c.path, c.score
    ('cat.png', 0.25)
    """

    path: str
    score: float
    _buffer: list[np.ndarray] = field(default_factory=list, init=False, repr=False, compare=False, hash=False)

    @property
    def array(self) -> np.ndarray:
        """The image as an (H, W, 3) uint8 RGB array, read on first access and kept."""
        if not self._buffer:
            self._buffer.append(read_rgb(self.path))
        return self._buffer[0]

    def clear_buffer(self) -> None:
        """Drop the image read by :attr:`array` (it is read again on the next access)."""
        self._buffer.clear()
