"""The codec of the offline decoupled-diffusion record a store file keeps
(:mod:`galleria.rerank.decoupled`), registered when :mod:`galleria.rerank` is imported."""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np

from galleria.store import OfflineDiffusion
from galleria.store.extensions import ExtensionCodec, ExtensionContext, register_extension

__all__ = ["OfflineDiffusionCodec"]

#: Bounds of the integer settings of a stored offline diffusion.
_INTS = {"k": 1 << 20, "truncation": 1 << 20, "maxiter": 1 << 20}
_KEYS = frozenset({"k", "truncation", "alpha", "gamma", "tol", "maxiter"})


class OfflineDiffusionCodec(ExtensionCodec):
    """``offline_diffusion``: ``{"k", "truncation", "alpha", "gamma", "tol", "maxiter"}`` with the
    tensors ``positions`` ((n, T) int32, row i starting with i, distinct rows in [0, n)) and ``values``
    ((n, T) finite float32), ``T = min(truncation, n)``. Files written before the extension slot
    name them ``diffusion_positions`` and ``diffusion_values``."""

    name = "offline_diffusion"
    tensors = frozenset({"positions", "values"})
    legacy_key = "offline_diffusion"
    legacy_tensors: ClassVar[dict[str, str]] = {
        "diffusion_positions": "positions",
        "diffusion_values": "values",
    }
    state_field = "offline_diffusion"

    def check_record(self, record: Any, context: ExtensionContext) -> None:
        if not isinstance(record, dict) or set(record) != _KEYS:
            raise context.fail(f"must have exactly the keys {sorted(_KEYS)}")
        for key, high in _INTS.items():
            value = record[key]
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= high:
                raise context.fail(f"{key!r} must be an integer in [1, {high}], got {value!r}")
        for key in ("alpha", "gamma", "tol"):
            value = record[key]
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not math.isfinite(value)
                or value < 0
            ):
                raise context.fail(f"{key!r} must be a finite number >= 0, got {value!r}")
        if record["alpha"] >= 1:
            raise context.fail(f"'alpha' must be below 1, got {record['alpha']!r}")

    def check(self, record: Any, tensors: dict[str, np.ndarray], context: ExtensionContext) -> Any:
        self.check_record(record, context)
        if set(tensors) != self.tensors:
            names = [context.tensor(key) for key in ("positions", "values")]
            raise context.fail(f"needs the tensors {names}")
        positions, values = tensors["positions"], tensors["values"]
        count = context.rows
        shape = (count, min(record["truncation"], count))
        where, what = context.tensor("positions"), context.tensor("values")
        source = context.source
        if positions.dtype != np.int32 or positions.shape != shape:
            raise ValueError(
                f"{source!r}: tensor {where!r} must be int32 of shape {shape}, got "
                f"{positions.dtype} {positions.shape}"
            )
        if values.dtype != np.float32 or values.shape != shape:
            raise ValueError(
                f"{source!r}: tensor {what!r} must be float32 of shape {shape}, got "
                f"{values.dtype} {values.shape}"
            )
        if count and (positions.min() < 0 or positions.max() >= count):
            raise ValueError(f"{source!r}: tensor {where!r} holds rows outside [0, {count})")
        if count and not np.array_equal(positions[:, 0], np.arange(count)):
            raise ValueError(f"{source!r}: row i of tensor {where!r} must start with i")
        if shape[1] > 1 and not (np.diff(np.sort(positions, axis=1), axis=1) > 0).all():
            raise ValueError(f"{source!r}: a row of tensor {where!r} names a gallery row twice")
        if not np.isfinite(values).all():
            raise ValueError(f"{source!r}: tensor {what!r} holds NaN or infinite values")
        where_read = f"{source!r}: {context.label} (tensors {where!r}, {what!r})"  # what errors name
        return OfflineDiffusion(dict(record), positions, values, source=where_read)

    def encode(self, value: Any) -> tuple[Any, dict[str, np.ndarray]]:
        return dict(value.params), {"positions": value.positions, "values": value.values}


register_extension(OfflineDiffusionCodec())
