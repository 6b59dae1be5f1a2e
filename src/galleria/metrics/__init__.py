"""Retrieval metrics: ranks with the tie rule (docs/metrics.md), Recall@K, MRR, mAP, PR curves, text-image.

Two families of inputs:

* **scores** (similarities, higher is better) or **embeddings** with the positives of each
  query → 0-indexed ranks (:func:`retrieval_ranks`, :func:`ranks_from_embeddings`) → rank summaries
  (:func:`recall_from_ranks`, :func:`mrr_from_ranks`, :func:`median_rank`, :func:`mean_rank`);
  :func:`recall_at_k` is Recall@K as docs/metrics.md defines it; :func:`image_text_retrieval` does
  both directions.
* **ranked result lists** (the store's candidates, scores are distances) with labels →
  :func:`ranked_relevance` → ``hits`` → :func:`hit_rate`, :func:`mean_reciprocal_rank`,
  :func:`average_precision`, :func:`mean_average_precision`, :func:`interpolated_pr_curve`.

The protocols the field reports, with junk removed from each ranking: :func:`reid_evaluate` (person
re-identification: CMC, mAP, mINP), :func:`revisited_evaluate` (revisited Oxford / Paris: Easy, Medium,
Hard) and :func:`precision_at_1`, :func:`r_precision`, :func:`map_at_r` (metric learning; all three at
once with :func:`metric_learning_evaluate`). See ``docs/metrics.md``.
"""

from __future__ import annotations

from galleria.metrics._checks import Positives, as_ks, as_positives, as_score_matrix
from galleria.metrics._ranked import (
    PR_LEVELS,
    average_precision_full,
    collect,
    interpolated_pr,
    rank_rows,
    top_of_block,
)
from galleria.metrics.candidates import RankedRelevance, ranked_relevance
from galleria.metrics.embeddings import ranks_from_embeddings
from galleria.metrics.image_text import image_text_retrieval
from galleria.metrics.metric_learning import (
    MetricLearningResult,
    map_at_r,
    metric_learning_evaluate,
    precision_at_1,
    r_precision,
)
from galleria.metrics.ranks import retrieval_ranks
from galleria.metrics.recall import recall_at_k
from galleria.metrics.reid import ReidResult, reid_evaluate
from galleria.metrics.relevance import (
    average_precision,
    hit_rate,
    interpolated_pr_curve,
    mean_average_precision,
    mean_reciprocal_rank,
)
from galleria.metrics.revisited import revisited_evaluate
from galleria.metrics.summary import mean_rank, median_rank, mrr_from_ranks, recall_from_ranks

__all__ = [
    "PR_LEVELS",
    "MetricLearningResult",
    "Positives",
    "RankedRelevance",
    "ReidResult",
    "as_ks",
    "as_positives",
    "as_score_matrix",
    "average_precision",
    "average_precision_full",
    "collect",
    "hit_rate",
    "image_text_retrieval",
    "interpolated_pr",
    "interpolated_pr_curve",
    "map_at_r",
    "mean_average_precision",
    "mean_rank",
    "mean_reciprocal_rank",
    "median_rank",
    "metric_learning_evaluate",
    "mrr_from_ranks",
    "precision_at_1",
    "r_precision",
    "rank_rows",
    "ranked_relevance",
    "ranks_from_embeddings",
    "recall_at_k",
    "recall_from_ranks",
    "reid_evaluate",
    "retrieval_ranks",
    "revisited_evaluate",
    "top_of_block",
]
