"""The codec of the gallery statistics record (:mod:`galleria.statistics`, a ground-floor type the
store may import), registered when the store's file format is imported."""

from __future__ import annotations

from typing import Any

import numpy as np

from galleria.statistics import GalleryStatistics
from galleria.store.extensions import ExtensionCodec, ExtensionContext, register_extension

__all__ = ["StatisticsCodec"]


class StatisticsCodec(ExtensionCodec):
    """``rerank_statistics``: the gallery's reciprocal-neighbour statistics the adaptive re-ranking
    defaults read (a version, two counts, at most 8 numbers per list, each bounded; no tensors);
    its item count must be the store's."""

    name = "rerank_statistics"
    legacy_key = "rerank_statistics"
    state_field = "rerank_statistics"

    def check_record(self, record: Any, context: ExtensionContext) -> None:
        try:
            GalleryStatistics.from_record(record)
        except ValueError as error:
            raise context.fail(f"is invalid: {error}") from None

    def check(self, record: Any, tensors: dict[str, np.ndarray], context: ExtensionContext) -> Any:
        self.check_record(record, context)
        statistics = GalleryStatistics.from_record(record)
        if statistics.n_items != context.rows:
            raise context.fail(f"describes {statistics.n_items} items, but the store holds {context.rows}")
        return statistics.record()

    def encode(self, value: Any) -> tuple[Any, dict[str, np.ndarray]]:
        return dict(value), {}


register_extension(StatisticsCodec())
