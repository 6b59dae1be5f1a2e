"""The README's Python tour, runnable offline: search, re-rank and evaluate the embedded digits."""

from __future__ import annotations

from galleria import InMemoryImageEmbeddingStore, KReciprocalReranker, PixelEmbedder, recall_at_k
from galleria.datasets import digits_folder, load_image_folder
from galleria.metrics import hit_rate, mean_average_precision, ranked_relevance

# 1,797 real handwritten digits written once as PNG files, as <label>/<id>.png.
split = load_image_folder(digits_folder()).split(n_queries=100, seed=0)

store = InMemoryImageEmbeddingStore(split.gallery_paths, PixelEmbedder(size=16, grayscale=True), "hnsw")
store.build_store(progress=False)
# Without parameters, k1, k2 and λ are read from the gallery (its reciprocal-neighbour statistics,
# recorded when the store was built); KReciprocalReranker(store, k1=20, k2=6, lambda_value=0.3) gives
# the paper's values.
reranker = KReciprocalReranker(store)
chosen = f"k1={reranker.k1} k2={reranker.k2} λ={reranker.lambda_value}"
print(f"re-ranking parameters read from the gallery: {chosen}")

# Retrieve a pool of candidates, then keep the best five after re-ranking.
candidates = store.retrieve_top_k_similar(split.query_paths[0], k=100)[0]
best = reranker.rerank(candidates, top_k=5)
print("query", split.query_paths[0])
for candidate in best:
    print(f"  {candidate.score:.4f}  {candidate.path}")

# Evaluate every query: plain retrieval against the default re-ranking of a 200-candidate pool.
plain = store.retrieve_top_k_similar(split.query_paths, k=200)
reranked = reranker.rerank_batch(plain, top_k=100)
for name, lists in (("plain", [candidates[:100] for candidates in plain]), ("default re-ranking", reranked)):
    relevance = ranked_relevance(lists, split.query_labels, split.gallery_label_of)
    recall_1, recall_5 = hit_rate(relevance.hits, [1, 5])
    average = mean_average_precision(relevance.hits, relevance.n_relevant, 100)
    print(f"{name:>18}: Recall@1 {recall_1:.4f}  Recall@5 {recall_5:.4f}  mAP@100 {average:.4f}")

# Recall@K of the spec on a similarity matrix: ties go to the lower gallery index.
print(recall_at_k([[0.9, 0.1, 0.5], [0.3, 0.3, 0.2], [0.0, 0.8, 0.8]], [0, 1, 1], [1, 2, 5, 1]))
