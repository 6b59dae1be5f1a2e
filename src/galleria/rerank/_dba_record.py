"""The codec of the database-side augmentation record a store file keeps (:mod:`galleria.rerank.dba`),
registered when :mod:`galleria.rerank` is imported."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from galleria.expansion import MAX_EXPANSION_ALPHA
from galleria.store.extensions import ExtensionCodec, ExtensionContext, register_extension

__all__ = ["AugmentationCodec"]


def _valid(record: Any) -> bool:
    """Whether ``record`` is ``{"method": "dba", "neighbors": int >= 1, "alpha": finite float >= 0}``."""
    if not isinstance(record, dict) or set(record) != {"method", "neighbors", "alpha"}:
        return False
    neighbors, alpha = record["neighbors"], record["alpha"]
    return (
        record["method"] == "dba"
        and isinstance(neighbors, int)
        and not isinstance(neighbors, bool)
        and 1 <= neighbors <= 1 << 20
        and isinstance(alpha, (int, float))
        and not isinstance(alpha, bool)
        and math.isfinite(alpha)
        and 0 <= alpha <= MAX_EXPANSION_ALPHA
    )


class AugmentationCodec(ExtensionCodec):
    """``augmentation``: ``{"method": "dba", "neighbors": n, "alpha": a}`` for a store whose vectors
    were replaced by database-side augmentation (the augmented vectors are the index's own, so the
    record has no tensors). Only a cosine store on a built-in index can hold one."""

    name = "augmentation"
    legacy_key = "augmentation"
    state_field = "augmentation"

    def check_record(self, record: Any, context: ExtensionContext) -> None:
        if not _valid(record):
            raise context.fail(
                f"must be {{'method': 'dba', 'neighbors': int, 'alpha': float}}, got {record!r}"[:300]
            )
        if context.space != "cosine" or context.index_name == "external":
            # augment_store refuses these stores, so no file galleria writes holds such a record.
            raise context.fail(
                f"records database-side augmentation, which only a cosine store on a built-in index has "
                f"(this one: space {context.space!r}, index {context.index_name!r})"
            )

    def check(self, record: Any, tensors: dict[str, np.ndarray], context: ExtensionContext) -> Any:
        self.check_record(record, context)
        return dict(record)

    def encode(self, value: Any) -> tuple[Any, dict[str, np.ndarray]]:
        return dict(value), {}


register_extension(AugmentationCodec())
