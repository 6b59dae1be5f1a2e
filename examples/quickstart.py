"""The README's Python tour, runnable offline: search, re-rank and evaluate the embedded digits."""

from __future__ import annotations

from galleria import InMemoryImageEmbeddingStore, PixelEmbedder, RetrievalConfig, Searcher, recall_at_k
from galleria.datasets import digits_folder, load_image_folder
from galleria.metrics import hit_rate, mean_average_precision, ranked_relevance

# 1,797 real handwritten digits written once as PNG files, as <label>/<id>.png.
split = load_image_folder(digits_folder()).split(n_queries=100, seed=0)

store = InMemoryImageEmbeddingStore(split.gallery_paths, PixelEmbedder(size=16, grayscale=True), "hnsw")
store.build_store(progress=False)

# The one retrieval path: search, take a pool of candidates (200), re-rank it, keep k. The
# re-ranking parameters left out are read from the gallery (its reciprocal-neighbour statistics,
# recorded when the store was built); rerank_preset="paper" gives the published values, and
# rerank_method= any method of `galleria methods`.
searcher = Searcher(store, RetrievalConfig("default re-ranking", rerank=True))
chosen = ", ".join(f"{name}={value}" for name, value in searcher.config.rerank_params.items())
print(f"re-ranking parameters read from the gallery: {chosen}")

best = searcher.search([split.query_paths[0]], k=5)[0]
print("query", split.query_paths[0])
for candidate in best:
    print(f"  {candidate.score:.4f}  {candidate.path}")

# Evaluate every query: plain retrieval against the default re-ranking.
plain = Searcher(store)  # RetrievalConfig("plain"): search only
for name, chosen in (("plain", plain), ("default re-ranking", searcher)):
    lists = chosen.search(split.query_paths, k=100)
    relevance = ranked_relevance(lists, split.query_labels, split.gallery_label_of)
    recall_1, recall_5 = hit_rate(relevance.hits, [1, 5])
    average = mean_average_precision(relevance.hits, relevance.n_relevant, 100)
    print(f"{name:>18}: Recall@1 {recall_1:.4f}  Recall@5 {recall_5:.4f}  mAP@100 {average:.4f}")

# Recall@K of the spec on a similarity matrix: ties go to the lower gallery index.
print(recall_at_k([[0.9, 0.1, 0.5], [0.3, 0.3, 0.2], [0.0, 0.8, 0.8]], [0, 1, 1], [1, 2, 5, 1]))
