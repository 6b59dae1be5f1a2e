"""Image↔text retrieval recall, the way CLIP papers report it."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from galleria._validation import check_choice, check_positive_int
from galleria.distances import normalize_rows
from galleria.metrics._checks import Positives, as_index_vector, as_ks
from galleria.metrics.embeddings import (
    METRICS,
    check_embedding_pair,
    default_block_rows,
    ranks_of_embeddings,
)

__all__ = ["image_text_retrieval"]


def _captions_of_images(text_to_image: npt.NDArray[np.int64], n_images: int) -> Positives:
    """CSR positives of every image: the texts that describe it (each image needs one)."""
    counts = np.bincount(text_to_image, minlength=n_images)
    missing = np.flatnonzero(counts == 0)
    if len(missing):
        raise ValueError(f"text_to_image names no text for image {missing[0]}: every image needs a caption")
    indptr = np.zeros(n_images + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    indices = np.argsort(text_to_image, kind="stable").astype(np.int64)
    return Positives(n_images, len(text_to_image), indptr=indptr, indices=indices)


def image_text_retrieval(
    image_embeddings: Any,
    text_embeddings: Any,
    text_to_image: Any,
    ks: Any = (1, 5, 10),
    *,
    metric: str = "cosine",
    chunk_size: int | None = None,
) -> dict[str, list[float]]:
    """Recall@K in both directions between images and their captions, in one call.

    Image→text: each image queries all texts and is answered at K when *any* of its captions ranks
    below K. Text→image: each text queries all images and is answered when its image ranks below
    K. Ties are broken by the lower index, as everywhere in :mod:`galleria.metrics`; scores are
    computed block by block (see :func:`ranks_from_embeddings`).

    Parameters
    ----------
    image_embeddings : array_like, shape (n_images, d)
    text_embeddings : array_like, shape (n_texts, d)
    text_to_image : sequence of int, length n_texts
        The image each text describes (e.g. COCO: 5 texts per image). Every image needs at least
        one text.
    ks : sequence of int, default (1, 5, 10)
        Cut-offs ≥ 1, order and duplicates kept.
    metric : {"cosine", "ip"}
        Similarity used for both directions.
    chunk_size : int, optional
        Queries per block of scores (default: about 8 MB of scores per block).

    Returns
    -------
    dict
        ``{"image_to_text": [...], "text_to_image": [...]}``, each a list of Recall@K in the order
        of ``ks`` (fractions in [0, 1], not rounded).

    Raises
    ------
    TypeError
        Non-numeric embeddings; ``text_to_image`` or ``ks`` entries not integers.
    ValueError
        Embeddings empty, non-finite or of different dimensions; ``text_to_image`` of the wrong
        length or out of range; an image without any text; bad ``ks``; unknown ``metric``.

    Examples
    --------
    >>> images = [[1.0, 0.0], [0.0, 1.0]]
    >>> texts = [[0.9, 0.1], [0.2, 0.8], [0.6, 0.4]]
    >>> image_text_retrieval(images, texts, [0, 1, 1], ks=[1, 2])
    {'image_to_text': [1.0, 1.0], 'text_to_image': [0.6666666666666666, 1.0]}
    """
    check_choice("metric", metric, METRICS)
    images, texts = check_embedding_pair(
        "image_embeddings", image_embeddings, "text_embeddings", text_embeddings, "ip"
    )
    owners = as_index_vector("text_to_image", text_to_image, len(texts), len(images))
    cutoffs = as_ks("ks", ks)
    rows = None if chunk_size is None else check_positive_int("chunk_size", chunk_size)
    captions = _captions_of_images(owners, len(images))
    if metric == "cosine":
        images = normalize_rows(images, dtype=None)
        texts = normalize_rows(texts, dtype=None)
    image_ranks = ranks_of_embeddings(images, texts, captions, "ip", rows or default_block_rows(len(texts)))
    text_ranks = ranks_of_embeddings(
        texts,
        images,
        Positives(len(texts), len(images), single=owners),
        "ip",
        rows or default_block_rows(len(images)),
    )
    return {
        "image_to_text": [float((image_ranks < k).mean()) for k in cutoffs],
        "text_to_image": [float((text_ranks < k).mean()) for k in cutoffs],
    }
