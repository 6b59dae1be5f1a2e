"""JSON that every strict parser reads: no NaN, no Infinity, numpy values made plain.

Python's :mod:`json` writes ``NaN`` and ``Infinity`` by default, which is not JSON. Everything
galleria prints or writes as JSON goes through :func:`finite`, which turns a non-finite number into
``null``, and is dumped with ``allow_nan=False`` so a value that slipped through raises instead of
producing an invalid document.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = ["dumps", "finite"]


def finite(payload: Any) -> Any:
    """``payload`` with every non-finite float as None and numpy scalars and arrays as Python values.

    Examples
    --------
    >>> finite({"a": float("nan"), "b": [np.float32(1.5), float("-inf")], "c": np.int64(2)})
    {'a': None, 'b': [1.5, None], 'c': 2}
    """
    if isinstance(payload, Mapping):
        return {key: finite(value) for key, value in payload.items()}
    if isinstance(payload, (list, tuple)):
        return [finite(value) for value in payload]
    if isinstance(payload, np.ndarray):
        return [finite(value) for value in payload.tolist()]
    if isinstance(payload, (bool, np.bool_)):
        return bool(payload)
    if isinstance(payload, (float, np.floating)):
        value = float(payload)
        return value if math.isfinite(value) else None
    if isinstance(payload, np.integer):
        return int(payload)
    return payload


def dumps(payload: Any, **options: Any) -> str:
    """:func:`json.dumps` of :func:`finite` ``(payload)``, never writing NaN or Infinity.

    A payload that is plain JSON already is dumped as it is (no walk over it); only one holding a
    non-finite number or a numpy value is walked and cleaned first.

    >>> dumps({"x": [1.0, float("inf")]})
    '{"x": [1.0, null]}'
    """
    try:
        return json.dumps(payload, allow_nan=False, **options)
    except (TypeError, ValueError):
        return json.dumps(finite(payload), allow_nan=False, **options)
