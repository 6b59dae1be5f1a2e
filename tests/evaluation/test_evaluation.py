"""Tests of galleria.evaluation: configurations, the scoring pipeline, and the report files."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from _support.extras import needs
from galleria.evaluation import (
    SCHEMA,
    ConfigResult,
    RetrievalConfig,
    evaluate_retrieval,
    format_table,
    markdown_table,
    results_payload,
    standard_configs,
    write_report,
)
from galleria.store import Candidate, InMemoryImageEmbeddingStore

# ---------------------------------------------------------------------------------------------------------
# A small labelled gallery: each label is a base colour; images are that colour plus seeded noise, and a
# few images are "hard" (closer to another label's colour), so no configuration is perfect.

N_LABELS = 4
PER_LABEL = 12


class MeanColourEmbedder:
    """Embeds an image as its mean RGB colour plus a constant offset (a 4-d vector)."""

    batch_size = 8

    def embed(self, images: Sequence[Any]) -> np.ndarray:
        rows = [
            np.concatenate([np.asarray(image, dtype=np.float32).mean(axis=(0, 1)), [40.0]])
            for image in images
        ]
        return np.asarray(rows, dtype=np.float32)


def _colour(label: int) -> np.ndarray:
    return np.array([[200, 30, 30], [30, 200, 30], [30, 30, 200], [200, 200, 30]][label], dtype=np.float64)


@pytest.fixture(scope="module")
def labelled(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[str], list[str]]:
    root = tmp_path_factory.mktemp("gallery")
    rng = np.random.default_rng(0)
    paths, labels = [], []
    for label in range(N_LABELS):
        for i in range(PER_LABEL):
            base = _colour(label)
            if i % 5 == 4:  # a hard example: half-way towards the next label's colour
                base = 0.5 * base + 0.5 * _colour((label + 1) % N_LABELS)
            pixels = np.clip(base + rng.normal(0, 25, size=(6, 6, 3)), 0, 255).astype(np.uint8)
            path = root / f"{label}_{i:02d}.png"
            Image.fromarray(pixels).save(path)
            paths.append(str(path))
            labels.append(str(label))
    return paths, labels


@pytest.fixture(scope="module")
def setup(
    labelled: tuple[list[str], list[str]],
) -> tuple[InMemoryImageEmbeddingStore, list[str], list[str], dict[str, str]]:
    paths, labels = labelled
    query_rows = [i for i in range(len(paths)) if i % PER_LABEL in (0, 4, 7)]
    gallery_rows = [i for i in range(len(paths)) if i not in query_rows]
    store = InMemoryImageEmbeddingStore([paths[i] for i in gallery_rows], MeanColourEmbedder(), "exact")
    store.build_store(progress=False)
    return (
        store,
        [paths[i] for i in query_rows],
        [labels[i] for i in query_rows],
        {paths[i]: labels[i] for i in gallery_rows},
    )


def _literal_scores(
    lists: list[list[Candidate]], query_labels: list[str], gallery_labels: dict[str, str]
) -> dict[str, float]:
    """The metrics of docs/metrics.md, transcribed literally from ranked lists."""
    recall_1 = recall_5 = ap_sum = rr_sum = 0.0
    for candidates, label in zip(lists, query_labels, strict=True):
        relevant = [gallery_labels[c.path] == label for c in candidates[:100]]
        total_relevant = sum(1 for value in gallery_labels.values() if value == label)
        recall_1 += any(relevant[:1])
        recall_5 += any(relevant[:5])
        found, precision_sum = 0, 0.0
        for position, is_relevant in enumerate(relevant, start=1):
            if is_relevant:
                found += 1
                precision_sum += found / position
        ap_sum += precision_sum / min(total_relevant, 100)
        first = next(
            (position for position, is_relevant in enumerate(relevant, start=1) if is_relevant), None
        )
        rr_sum += 1.0 / first if first else 0.0
    n = len(lists)
    return {"recall@1": recall_1 / n, "recall@5": recall_5 / n, "map@100": ap_sum / n, "mrr": rr_sum / n}


# ---------------------------------------------------------------------------------------------------------
# RetrievalConfig / standard_configs


def test_standard_configs_names_and_settings() -> None:
    plain, aqe, rerank = standard_configs(expansion_alpha=2.0, expansion_neighbors=7, k1=9, k2=3, pool=50)
    assert (plain.name, aqe.name, rerank.name) == ("plain", "aqe", "aqe+rerank")
    assert plain.settings() == {"query_expansion": False, "rerank": False}
    assert aqe.settings() == {
        "query_expansion": True,
        "expansion_alpha": 2.0,
        "expansion_neighbors": 7,
        "rerank": False,
    }
    assert rerank.settings()["k1"] == 9 and rerank.settings()["pool"] == 50 and rerank.query_expansion
    assert [c.name for c in standard_configs(expand=False)] == ["plain", "rerank"]
    assert not standard_configs(expand=False)[1].query_expansion
    assert [c.name for c in standard_configs(expand=False, rerank=False)] == ["plain"]
    assert plain.title == "plain retrieval" and "αQE" in aqe.title and "k1=9" in rerank.title


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"name": ""}, TypeError, "name"),
        ({"query_expansion": 1}, TypeError, "query_expansion"),
        ({"rerank": "yes"}, TypeError, "rerank"),
        ({"expansion_alpha": -1.0}, ValueError, "expansion_alpha"),
        ({"expansion_neighbors": 0}, ValueError, "expansion_neighbors"),
        ({"k1": 2.5}, TypeError, "k1"),
        ({"k1": 3, "k2": 4}, ValueError, "k2"),
        ({"lambda_value": 1.5}, ValueError, "lambda_value"),
        ({"pool": 0}, ValueError, "pool"),
    ],
)
def test_config_validation(kwargs: dict[str, Any], error: type[Exception], match: str) -> None:
    arguments = {"name": "x", **kwargs}
    with pytest.raises(error, match=match):
        RetrievalConfig(**arguments)


# ---------------------------------------------------------------------------------------------------------
# evaluate_retrieval


def test_plain_and_expanded_match_a_literal_computation(
    setup: tuple[InMemoryImageEmbeddingStore, list[str], list[str], dict[str, str]],
) -> None:
    store, queries, query_labels, gallery_labels = setup
    configs = standard_configs(expansion_neighbors=5, k1=6, k2=2, pool=30)
    results = evaluate_retrieval(store, queries, query_labels, gallery_labels, configs, batch_size=4)
    assert [r.config.name for r in results] == ["plain", "aqe", "aqe+rerank"]
    plain_lists = store.retrieve_top_k_similar(queries, 200)
    expanded_lists = store.retrieve_top_k_similar(queries, 200, query_expansion=True, expansion_neighbors=5)
    for result, lists in ((results[0], plain_lists), (results[1], expanded_lists)):
        expected = _literal_scores(lists, query_labels, gallery_labels)
        got = result.to_dict()
        for key, value in expected.items():
            assert got[key] == pytest.approx(value, abs=1e-4), (result.config.name, key)
    for result in results:
        assert result.n_queries == len(queries)
        assert result.ms_per_query > 0
        assert len(result.pr_recall) == len(result.pr_precision) > 0
        assert np.all(np.diff(result.pr_precision) <= 1e-12)  # interpolated precision never rises
        assert 0.0 <= result.mrr <= 1.0 and 0.0 <= result.map_at_100 <= 1.0


def test_reranked_configuration_matches_the_reranker(
    setup: tuple[InMemoryImageEmbeddingStore, list[str], list[str], dict[str, str]],
) -> None:
    from galleria.rerank import KReciprocalReranker

    store, queries, query_labels, gallery_labels = setup
    config = RetrievalConfig("rerank", rerank=True, k1=6, k2=2, lambda_value=0.3, pool=20)
    (result,) = evaluate_retrieval(store, queries, query_labels, gallery_labels, [config], depth=20)
    pools = store.retrieve_top_k_similar(queries, 20)
    reranked = KReciprocalReranker(store, k1=6, k2=2, lambda_value=0.3).rerank_batch(pools, top_k=20)
    expected = _literal_scores(reranked, query_labels, gallery_labels)
    for key, value in expected.items():
        assert result.to_dict()[key] == pytest.approx(value, abs=1e-4), key


def test_pool_smaller_than_depth_is_followed_by_the_search_order(
    setup: tuple[InMemoryImageEmbeddingStore, list[str], list[str], dict[str, str]],
) -> None:
    """A pool of 5 re-ranked, then the rest of the 25-deep search list: every list is 25 long."""
    from galleria.rerank import KReciprocalReranker
    from galleria.retrieval import Searcher

    store, queries, query_labels, gallery_labels = setup
    params = {"k1": 3, "k2": 2, "lambda_value": 0.3}
    config = RetrievalConfig("rerank", rerank=True, rerank_params=params, pool=5)
    reranker = KReciprocalReranker(store, k1=3, k2=2, lambda_value=0.3)
    lists = Searcher(store, config).search(queries, 25)
    searched = store.retrieve_top_k_similar(queries, 25)
    heads = reranker.rerank_batch([candidates[:5] for candidates in searched], top_k=25)
    for got, head, full in zip(lists, heads, searched, strict=True):
        assert len(got) == 25
        assert [c.path for c in got] == [c.path for c in head] + [c.path for c in full[5:]]
    (result,) = evaluate_retrieval(store, queries, query_labels, gallery_labels, [config], depth=25)
    expected = _literal_scores(
        [head + full[5:] for head, full in zip(heads, searched, strict=True)], query_labels, gallery_labels
    )
    for key, value in expected.items():
        assert result.to_dict()[key] == pytest.approx(value, abs=1e-4), key


def test_evaluation_errors(
    setup: tuple[InMemoryImageEmbeddingStore, list[str], list[str], dict[str, str]],
) -> None:
    store, queries, query_labels, gallery_labels = setup
    configs = standard_configs(expand=False, rerank=False)
    with pytest.raises(TypeError, match="store"):
        evaluate_retrieval("store", queries, query_labels, gallery_labels, configs)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="queries"):
        evaluate_retrieval(store, [], [], gallery_labels, configs)
    with pytest.raises(ValueError, match="query_labels"):
        evaluate_retrieval(store, queries, query_labels[:-1], gallery_labels, configs)
    with pytest.raises(ValueError, match="configs"):
        evaluate_retrieval(store, queries, query_labels, gallery_labels, [])
    with pytest.raises(TypeError, match=r"configs\[0\]"):
        evaluate_retrieval(store, queries, query_labels, gallery_labels, ["plain"])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="distinct names"):
        evaluate_retrieval(store, queries, query_labels, gallery_labels, configs * 2)
    with pytest.raises(ValueError, match="also in the gallery"):
        evaluate_retrieval(store, [store.paths[0]], ["0"], gallery_labels, configs)
    missing = dict(gallery_labels)
    missing.pop(store.paths[3])
    with pytest.raises(ValueError, match="no label"):
        evaluate_retrieval(store, queries, query_labels, missing, configs)
    with pytest.raises(ValueError, match="depth"):
        evaluate_retrieval(store, queries, query_labels, gallery_labels, configs, depth=0)
    with pytest.raises(TypeError, match="batch_size"):
        evaluate_retrieval(store, queries, query_labels, gallery_labels, configs, batch_size=1.5)  # type: ignore[arg-type]
    unbuilt = InMemoryImageEmbeddingStore(store.paths, MeanColourEmbedder())
    with pytest.raises(RuntimeError):
        evaluate_retrieval(unbuilt, queries, query_labels, gallery_labels, configs)


# ---------------------------------------------------------------------------------------------------------
# Reports


def _fake_results() -> list[ConfigResult]:
    levels = np.linspace(0.0, 1.0, 11)
    results = []
    for number, config in enumerate(standard_configs()):
        results.append(
            ConfigResult(
                config=config,
                n_queries=10,
                recall_at_1=(0.5, 0.6, 0.7)[number],
                recall_at_5=0.8,
                map_at_100=(0.4, 0.5, 0.6)[number],
                mrr=0.6,
                ms_per_query=1.25 * (number + 1),
                pr_recall=levels,
                pr_precision=np.linspace(1.0, 0.2 + 0.1 * number, 11),
            )
        )
    return results


def test_payload_schema() -> None:
    payload = results_payload(_fake_results(), {"dataset": {"name": "x"}})
    assert payload["schema"] == SCHEMA and payload["dataset"] == {"name": "x"}
    entries = payload["configurations"]
    assert [entry["name"] for entry in entries] == ["plain", "aqe", "aqe+rerank"]
    for entry in entries:
        assert set(entry) == {
            "name",
            "title",
            "settings",
            "recall@1",
            "recall@5",
            "map@100",
            "mrr",
            "ms_per_query",
        }
    json.dumps(payload)  # JSON-able
    with pytest.raises(ValueError, match="reserved"):
        results_payload(_fake_results(), {"configurations": []})


def test_tables_hold_every_configuration_and_value() -> None:
    results = _fake_results()
    text = format_table(results)
    lines = text.splitlines()
    assert len(lines) == 4 and lines[0].split()[:2] == ["configuration", "Recall@1"]
    assert "0.7000" in lines[3] and "3.75" in lines[3]
    markdown = markdown_table(results)
    assert markdown.splitlines()[0].startswith("| Configuration | Recall@1")
    assert markdown.count("\n") == 4


@needs("matplotlib")
def test_write_report_files(tmp_path: Path) -> None:
    out = tmp_path / "nested" / "report"
    files = write_report(out, _fake_results(), {"dataset": {"name": "toy"}, "seed": 3}, title="Toy")
    assert files.report == out / "report.md" and files.metrics == out / "metrics.json"
    metrics = json.loads(files.metrics.read_text())
    assert metrics["schema"] == SCHEMA and metrics["seed"] == 3
    assert [entry["map@100"] for entry in metrics["configurations"]] == [0.4, 0.5, 0.6]
    report = files.report.read_text()
    assert report.startswith("# Toy") and "| Configuration |" in report and "pr_curve.png" in report
    with Image.open(files.pr_curve) as image:
        assert image.format == "PNG" and image.size[0] > 100 and image.size[1] > 100
    assert sorted(p.name for p in out.iterdir()) == [
        "metrics.json",
        "pr_curve.png",
        "report.html",
        "report.md",
    ]


def test_write_report_errors_leave_nothing_behind(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(NotADirectoryError, match="not a directory"):
        write_report(blocker, _fake_results(), {})
    with pytest.raises(TypeError, match="out_dir"):
        write_report(3, _fake_results(), {})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="reserved"):
        write_report(tmp_path / "new", _fake_results(), {"schema": 2})
    assert not (tmp_path / "new").exists()


@needs("matplotlib")
def test_report_files_are_not_private(tmp_path: Path) -> None:
    """Atomic writes go through a private temporary file; the report keeps the usual permissions."""
    import os
    import stat

    mask = os.umask(0o022)
    try:
        files = write_report(tmp_path / "out", _fake_results(), {})
    finally:
        os.umask(mask)
    for path in (files.report, files.metrics, files.pr_curve):
        assert stat.S_IMODE(path.stat().st_mode) == 0o644, path


@needs("matplotlib")
def test_pr_curve_has_labelled_axes_and_a_legend() -> None:
    from galleria.evaluation.report import pr_curve_figure

    results = _fake_results()
    figure = pr_curve_figure(results, "Toy")
    (axes,) = figure.axes
    assert axes.get_xlabel() == "Recall" and axes.get_ylabel() == "Interpolated precision"
    assert axes.get_title() == "Toy"
    legend = axes.get_legend()
    assert legend is not None
    assert [text.get_text() for text in legend.get_texts()] == [r.config.title for r in results]
    for line, result in zip(axes.get_lines(), results, strict=True):
        np.testing.assert_array_equal(line.get_xdata(), result.pr_recall)
        np.testing.assert_array_equal(line.get_ydata(), result.pr_precision)
