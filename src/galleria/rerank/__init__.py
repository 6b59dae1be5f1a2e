"""Re-ranking methods behind one protocol, one module each; the registry names them all
(:data:`RERANK_METHODS`; ``galleria methods`` prints each with its paper, parameters and ranges).

k-reciprocal re-ranking, pure numeric cores and the store-bound re-ranker:

* :func:`rerank_pool` — one pool (probe + N candidates) → ``d*`` of the candidates;
* :func:`rerank_pools` — many pools at once, equal or different in size (pools of
  ``_common.SPARSE_POOL_SIZE`` candidates or more go through :mod:`galleria.rerank.sparse_pool`, with
  the same results in memory near O(N·k1));
* :func:`k_reciprocal_rerank` / :func:`k_reciprocal_rerank_features` — a whole probe×gallery matrix
  (``mode="paper"`` or ``"reference"``) in memory near O(n·k) plus the output;
* :func:`iter_k_reciprocal_rerank_features` / :func:`iter_k_reciprocal_rerank` — the same output, a block
  of probes at a time, so the P×G matrix never exists;
* :func:`iter_k_reciprocal_rerank_approximate` — the same stream with neighbour lists from a k-NN graph
  (for galleries of millions, see :mod:`galleria.rerank.approximate`);
* :class:`KReciprocalReranker` — re-ranks the candidates an ``InMemoryImageEmbeddingStore`` retrieved.

The other re-rankers follow the same :class:`Reranker` protocol (:mod:`galleria.rerank.base`), most
with a full probe×gallery function beside them. :mod:`galleria.rerank.registry` names them all:
:func:`make_reranker` builds one by name (:data:`RERANK_METHODS`). :func:`default_rerank_params` gives
every method's default parameters on a store, read from its gallery (:mod:`galleria.rerank.adaptive`)
or the paper's by name.
"""

from __future__ import annotations

from galleria.rerank._dba_core import augment_store, database_augmentation, dba_aqe_rerank_features
from galleria.rerank._decoupled_features import decoupled_diffusion_rerank_features, offline_diffusion
from galleria.rerank._gnn_features import gnn_rerank_features
from galleria.rerank.adaptive import default_rerank_params
from galleria.rerank.approximate import iter_k_reciprocal_rerank_approximate
from galleria.rerank.base import Reranker
from galleria.rerank.batched import rerank_pools
from galleria.rerank.dba import DBAReranker
from galleria.rerank.decoupled import DecoupledDiffusionReranker, prepare_offline_diffusion
from galleria.rerank.diffusion import DiffusionReranker, diffusion_rerank_features
from galleria.rerank.full import (
    iter_k_reciprocal_rerank,
    iter_k_reciprocal_rerank_features,
    k_reciprocal_rerank,
    k_reciprocal_rerank_features,
)
from galleria.rerank.gnn import GnnReranker
from galleria.rerank.pool import rerank_pool, scale_rows
from galleria.rerank.registry import DEFAULT_METHOD, RERANK_METHODS, make_reranker
from galleria.rerank.reranker import KReciprocalReranker

__all__ = [
    "DEFAULT_METHOD",
    "RERANK_METHODS",
    "DBAReranker",
    "DecoupledDiffusionReranker",
    "DiffusionReranker",
    "GnnReranker",
    "KReciprocalReranker",
    "Reranker",
    "augment_store",
    "database_augmentation",
    "dba_aqe_rerank_features",
    "decoupled_diffusion_rerank_features",
    "default_rerank_params",
    "diffusion_rerank_features",
    "gnn_rerank_features",
    "iter_k_reciprocal_rerank",
    "iter_k_reciprocal_rerank_approximate",
    "iter_k_reciprocal_rerank_features",
    "k_reciprocal_rerank",
    "k_reciprocal_rerank_features",
    "make_reranker",
    "offline_diffusion",
    "prepare_offline_diffusion",
    "rerank_pool",
    "rerank_pools",
    "scale_rows",
]
