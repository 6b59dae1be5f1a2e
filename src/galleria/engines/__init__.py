"""Engines that build galleries past one process: distributed embedding on Ray, and the shards they write.

Importing this package is cheap; Ray and pyarrow are imported when used (``pip install -e '.[ray]'``).
"""

from __future__ import annotations

from galleria.engines.ray_build import build_with_ray
from galleria.engines.ray_ivfpq import build_ivfpq_with_ray
from galleria.engines.shards import ShardWriter, read_shards, store_from_shards

__all__ = ["ShardWriter", "build_ivfpq_with_ray", "build_with_ray", "read_shards", "store_from_shards"]
