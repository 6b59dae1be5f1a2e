"""The library side of the pages: settings as addresses, browsing, uploads, score text, per-query files."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from galleria.evaluation import RetrievalConfig
from galleria.evaluation._query_reading import read_query_results
from galleria.evaluation._query_types import MAX_BYTES, QueryOutcome, QueryResults, RankedPaths
from galleria.evaluation.per_query import query_results, write_query_results
from galleria.evaluation.pipeline import ConfigResult
from galleria.metrics import average_precision
from galleria.viewer import GalleryLabels, SearchSettings, UploadError, UploadStore, browse_gallery
from galleria.viewer.text import format_score

# Settings as an address ------------------------------------------------------------------------------

_settings = st.fixed_dictionaries(
    {
        "k": st.integers(1, 50),
        "expand": st.booleans(),
        "alpha": st.floats(0, 20, allow_nan=False),
        "neighbors": st.integers(1, 100),
        "rerank": st.booleans(),
        "k1": st.integers(5, 40),
        "k2": st.integers(1, 5),
        "lambda": st.floats(0, 1, allow_nan=False),
        "pool": st.integers(50, 1000),
    }
)


@given(_settings, st.booleans())
@settings(max_examples=200, deadline=None)
def test_an_address_gives_back_its_settings(values: dict[str, Any], tuned: bool) -> None:
    defaults = RetrievalConfig("t", query_expansion=True, rerank=True, k1=9, pool=300) if tuned else None
    original = SearchSettings.from_mapping(values, defaults)
    query = original.to_query()
    assert all(isinstance(text, str) for text in query.values())
    again = SearchSettings.from_mapping(query, defaults)
    assert again.to_query() == query and again.k == original.k
    # What the search uses comes back: the switches, and the values of the parts switched on.
    kept = ["query_expansion", "rerank", "rerank_method"]
    kept += ["expansion_alpha", "expansion_neighbors"] if values["expand"] else []
    kept += ["k1", "k2", "lambda_value", "pool"] if values["rerank"] else []
    assert all(getattr(again.config, name) == getattr(original.config, name) for name in kept)
    # Only the switched-on parts are written, so the address stays short.
    assert ("alpha" in query) == values["expand"] and ("k1" in query) == values["rerank"]
    assert query["lambda"] == repr(values["lambda"]) if values["rerank"] else True  # as given


def test_absent_settings_take_the_defaults_switches_included() -> None:
    tuned = RetrievalConfig("t", query_expansion=True, rerank=True, k1=9, k2=3, lambda_value=0.125, pool=300)
    settings = SearchSettings.from_mapping({}, tuned).config
    assert (settings.query_expansion, settings.rerank, settings.k1, settings.lambda_value) == (
        True,
        True,
        9,
        0.125,
    )
    off = SearchSettings.from_mapping({"rerank": "0", "expand": "false"}, tuned).config
    assert not off.rerank and not off.query_expansion
    assert SearchSettings.from_mapping({"rerank": ""}, tuned).config.rerank  # an empty field: the default
    assert not SearchSettings.from_mapping({}).config.rerank


@pytest.mark.parametrize(
    ("values", "start"),
    [
        ({"lambda": 1.5}, "lambda must"),
        ({"lambda_value": 1.5}, "lambda_value must"),
        ({"lambda": "x"}, "lambda must be a number, got 'x'"),
        ({"alpha": -2}, "alpha must"),
        ({"neighbors": 0}, "neighbors must"),
        ({"k1": 0}, "k1 must"),
        ({"k2": 9, "k1": 3}, "k2 must not exceed k1"),
        ({"rerank": "maybe"}, "rerank must be true or false, got 'maybe'"),
    ],
)
def test_errors_name_the_setting_as_sent(values: dict[str, Any], start: str) -> None:
    with pytest.raises(ValueError) as caught:
        SearchSettings.from_mapping(values)
    message = str(caught.value)
    assert message.startswith(start), message
    assert "expansion_" not in message
    if "lambda_value" not in values:
        assert "lambda_value" not in message


# Score text -------------------------------------------------------------------------------------------


@given(st.floats(allow_nan=False, allow_infinity=False, min_value=-1e6, max_value=1e6))
def test_score_text_is_the_rounded_value_never_negative_zero(score: float) -> None:
    text = format_score(score)
    assert text != "-0.0000" and not text.startswith("-0.0000")
    assert abs(float(text) - score) <= 0.00005 + 1e-9 * abs(score)
    assert text.split(".")[1].__len__() == 4


# Browsing ---------------------------------------------------------------------------------------------


def _slow_browse(paths: list[str], root: str, folder: str, name: str, page: int, size: int) -> list[str]:
    """The definition, literally: keep what matches, in store order, then cut page ``page``."""
    kept = []
    for path in paths:
        relative = path[len(root) + 1 :]
        if folder and relative.split("/")[0] != folder:
            continue
        if name.strip() and name.strip().lower() not in relative.lower():
            continue
        kept.append(path)
    pages = max(1, (len(kept) + size - 1) // size)
    page = min(page, pages)
    return kept[(page - 1) * size : page * size]


@given(
    st.lists(st.tuples(st.sampled_from(["cat", "dog", "Bird"]), st.text("abAB_1", min_size=1, max_size=6)),
             min_size=2, max_size=40, unique=True),
    st.sampled_from(["", "cat", "dog", "Bird"]),
    st.text("abAB1 ", max_size=3),
    st.integers(1, 6),
    st.integers(1, 7),
)  # fmt: skip
@settings(max_examples=300, deadline=None)
def test_browsing_matches_its_definition(
    entries: list[tuple[str, str]], folder: str, name: str, page: int, size: int
) -> None:
    paths = [f"/g/{label}/{stem}.png" for label, stem in entries]
    labels = GalleryLabels(paths)
    folders = labels.folders()
    if folder and folder not in folders:
        with pytest.raises(ValueError, match="folder must be one of"):
            browse_gallery(labels, {"folder": folder}, per_page=size)
        return
    result = browse_gallery(labels, {"folder": folder, "name": name, "page": str(page)}, per_page=size)
    root = labels.root
    assert result.paths == _slow_browse(paths, root, folder, name, page, size)
    assert sum(folders.values()) == (len(paths) if labels.has_classes else 0)


def test_browse_pages_and_addresses() -> None:
    labels = GalleryLabels([f"/g/{'ab'[i % 2]}/{i}.png" for i in range(10)])
    page = browse_gallery(labels, {"page": "2", "folder": "a"}, per_page=3)
    assert (page.total, page.page, page.pages, len(page.paths)) == (5, 2, 2, 2)
    assert page.query() == {"folder": "a", "page": "2"} and page.query(page=1) == {"folder": "a"}
    for bad in ("0", "-1", "1.5", "x"):
        with pytest.raises(ValueError, match="page must be a positive integer"):
            browse_gallery(labels, {"page": bad})
    with pytest.raises(ValueError, match="name must be at most"):
        browse_gallery(labels, {"name": "x" * 201})


# Kept uploads -----------------------------------------------------------------------------------------


def test_kept_uploads_are_bounded_by_count_and_bytes() -> None:
    store = UploadStore(max_items=3, max_bytes=80)
    ids = [store.add(bytes(20), bytes(5)) for _ in range(3)]
    assert len(store) == 3 and store.nbytes == 75
    assert store.get(ids[0]) is not None  # now the most recently used
    fourth = store.add(bytes(30), bytes(5))  # 4 > 3 and 110, then 85 > 80 bytes: the two least recent go
    assert store.get(ids[1]) is None and store.get(ids[2]) is None
    assert store.get(ids[0]) is not None and store.get(fourth) is not None
    assert store.nbytes == 60 and len(store) == 2
    with pytest.raises(UploadError, match="kept for uploads") as caught:
        store.add(bytes(100), bytes(1))
    assert caught.value.too_large and len(store) == 2  # nothing dropped for a refused upload
    for bad in (None, 5, "", "a" * 21, "a" * 23, "a/" * 11, ids[0] + "\n"):
        assert store.get(bad) is None
    with pytest.raises(ValueError, match="max_items"):
        UploadStore(max_items=0)


def test_upload_ids_are_unique_under_threads() -> None:
    store = UploadStore(max_items=10_000, max_bytes=10**8)
    found: list[str] = []
    lock = threading.Lock()

    def work() -> None:
        mine = [store.add(b"x", b"y") for _ in range(200)]
        with lock:
            found.extend(mine)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(set(found)) == 1600 == len(store) and store.nbytes == 3200


# Per-query results ------------------------------------------------------------------------------------


def _config_result(name: str, aps: list[float], **options: Any) -> ConfigResult:
    return ConfigResult(
        RetrievalConfig(name, **options), len(aps), 0.0, 0.0, float(np.mean(aps)), 0.0, 0.0,
        np.zeros(1), np.zeros(1), np.asarray(aps),
    )  # fmt: skip


def test_query_results_record_hits_ranks_and_ap() -> None:
    gallery = {"a1": "a", "a2": "a", "b1": "b", "b2": "b", "b3": "b"}
    plain = [["b1", "a1", "a2", "b2"], ["b1", "b2", "a1", "b3"]]
    rerank = [["a1", "a2", "b1", "b3"], ["b2", "b1", "b3", "a2"]]
    queries, labels = ["qa", "qb"], ["a", "b"]
    aps = {}
    for name, lists in (("plain", plain), ("rerank", rerank)):
        hits = [[gallery[p] == label for p in ranked] for ranked, label in zip(lists, labels, strict=True)]
        aps[name] = average_precision(hits, [2, 3], 100).tolist()
    results = [_config_result("plain", aps["plain"]), _config_result("rerank", aps["rerank"], rerank=True)]
    recorded = query_results(
        queries, labels, {"plain": plain, "rerank": rerank}, results, gallery, compared=("plain", "rerank"),
        title="t", depth=3,
    )  # fmt: skip
    first = recorded.queries[0]
    assert first.before == RankedPaths(("b1", "a1", "a2"), (False, True, True))
    assert first.after == RankedPaths(("a1", "a2", "b1"), (True, True, False), (2, 3, 1))
    assert recorded.queries[1].after.previous_ranks == (2, 1, 4)  # b3 was 4th, beyond the kept depth
    assert first.ap == {"plain": round(aps["plain"][0], 6), "rerank": round(aps["rerank"][0], 6)}
    assert recorded.worst_first() == sorted(range(2), key=lambda i: (aps["rerank"][i] - aps["plain"][i], i))
    with pytest.raises(ValueError, match="compared names 'aqe'"):
        query_results(
            queries, labels, {"plain": plain}, results, gallery, compared=("plain", "aqe"), title="t"
        )


def _recorded() -> QueryResults:
    config = RetrievalConfig("rerank", rerank=True, k1=7, k2=2, pool=50)
    return QueryResults(
        "an evaluation",
        ("plain", "rerank"),
        3,
        [
            {
                "name": "plain",
                "title": "plain retrieval",
                "settings": {"query_expansion": False, "rerank": False},
                "map@100": 0.5,
            },
            {"name": "rerank", "title": config.title, "settings": config.settings(), "map@100": 0.75},
        ],
        [
            QueryOutcome(
                "/g/a/q.png",
                "a",
                {"plain": 0.5, "rerank": 0.75},
                RankedPaths(("/g/a/1.png", "/g/b/1.png"), (True, False)),
                RankedPaths(("/g/b/1.png", "/g/a/1.png"), (False, True), (2, None)),
            )
        ],
    )


def test_query_results_round_trip(tmp_path: Path) -> None:
    recorded = _recorded()
    write_query_results(tmp_path / "queries.json", recorded)
    assert read_query_results(tmp_path) == recorded  # the folder or the file
    assert read_query_results(tmp_path / "queries.json") == recorded
    assert recorded.config("rerank") == RetrievalConfig("rerank", rerank=True, k1=7, k2=2, pool=50)
    # Recall@1 and the warnings (recorded since 0.3) read back; a file without them (0.2) still reads.
    configurations = [{**entry, "recall@1": 0.9 - 0.1 * i} for i, entry in enumerate(recorded.configurations)]
    warned = dataclasses.replace(recorded, configurations=configurations, warnings=("it lowers Recall@1",))
    write_query_results(tmp_path / "queries.json", warned)
    again = read_query_results(tmp_path)
    assert again == warned and again.warnings == ("it lowers Recall@1",)
    assert [entry["recall@1"] for entry in again.configurations] == [0.9, 0.8]
    old = recorded.to_dict()
    del old["warnings"]
    (tmp_path / "queries.json").write_text(json.dumps(old))
    assert read_query_results(tmp_path) == recorded and recorded.warnings == ()


def _tampered(tmp_path: Path, change: Any) -> Path:
    document = _recorded().to_dict()
    change(document)
    path = tmp_path / "queries.json"
    path.write_text(json.dumps(document))
    return path


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.update(schema="galleria.queries/9"), "schema must be"),
        (lambda d: d.pop("depth"), "lacks the key"),
        (lambda d: d.update(depth=True), "depth must be an integer"),
        (lambda d: d.update(depth=10**9), "depth must be an integer"),
        (lambda d: d.update(title=["x"]), "title must be a text"),
        (lambda d: d.update(compared=["plain", "other"]), "compared must name two"),
        (lambda d: d.update(compared="plain"), "compared must name two"),
        (
            lambda d: d["configurations"].append(d["configurations"][0]),
            "name must be a non-empty name used once",
        ),
        (lambda d: d["configurations"][1].update({"map@100": 2}), r"configurations\[1\].map@100"),
        (lambda d: d["configurations"][1]["settings"].update(k1=-3), "k1"),
        (lambda d: d["configurations"][1]["settings"].update(rerank_method=["dba"]), r"configurations\[1\]"),
        (lambda d: d["configurations"][1]["settings"].update(pool="many"), "pool"),
        (lambda d: d["queries"][0].update(extra=1), r"queries\[0\] must hold exactly"),
        (lambda d: d["queries"][0].update(query=7), r"queries\[0\].query must be a text"),
        (lambda d: d["queries"][0].update(query="x" * 5000), r"queries\[0\].query must be a text"),
        (lambda d: d["queries"][0]["ap"].update(plain=float("nan")), r"queries\[0\].ap"),
        (lambda d: d["queries"][0]["ap"].update(plain=True), r"queries\[0\].ap"),
        (lambda d: d["queries"][0]["ap"].pop("rerank"), r"queries\[0\].ap"),
        (lambda d: d["queries"][0]["before"].update(hits=[1, 0]), r"before.hits must hold one true"),
        (
            lambda d: d["queries"][0]["before"].update(paths=["a"] * 4, hits=[True] * 4),
            r"before.paths must be a list",
        ),
        (lambda d: d["queries"][0]["after"].update(previous_ranks=[0, None]), r"after.previous_ranks"),
        (lambda d: d["queries"][0]["after"].update(previous_ranks=[1.0, None]), r"after.previous_ranks"),
        (lambda d: d["queries"][0]["after"].pop("previous_ranks"), r"after must hold exactly"),
        (lambda d: d["queries"][0]["before"].update(previous_ranks=[1, 2]), r"before must hold exactly"),
        (lambda d: d.update(queries={"0": 1}), "queries must be a list"),
        (lambda d: d["configurations"][0].update({"recall@1": 1.5}), r"configurations\[0\].recall@1"),
        (lambda d: d["configurations"][0].update({"recall@1": "0.9"}), r"configurations\[0\].recall@1"),
        (lambda d: d.update(warnings="lowers"), "warnings must be a list"),
        (lambda d: d.update(warnings=["x"] * 65), "warnings must be a list of at most 64"),
        (lambda d: d.update(warnings=[3]), r"warnings\[0\] must be a text"),
        (lambda d: d.update(warnings=["x" * 5000]), r"warnings\[0\] must be a text"),
    ],
)
def test_a_tampered_file_is_a_value_error_naming_file_and_key(
    tmp_path: Path, change: Any, message: str
) -> None:
    path = _tampered(tmp_path, change)
    with pytest.raises(ValueError, match=message) as caught:
        read_query_results(path)
    assert str(path) in str(caught.value)


def test_what_is_not_a_small_regular_json_file_is_refused(tmp_path: Path) -> None:
    deep = tmp_path / "deep"
    deep.mkdir()
    (deep / "queries.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ValueError, match="not valid JSON"):
        read_query_results(deep)
    digits = tmp_path / "digits.json"
    digits.write_text('{"schema": ' + "1" * 50_000 + "}")
    with pytest.raises(ValueError, match="not valid JSON"):
        read_query_results(digits)
    binary = tmp_path / "binary.json"
    binary.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(ValueError, match="not valid JSON"):
        read_query_results(binary)
    fifo = tmp_path / "fifo"
    fifo.mkdir()
    os.mkfifo(fifo / "queries.json")  # opening it must not wait for a writer
    with pytest.raises(ValueError, match="not a regular file"):
        read_query_results(fifo)
    zero = tmp_path / "zero"
    zero.mkdir()
    (zero / "queries.json").symlink_to("/dev/zero")
    with pytest.raises(ValueError, match="not a regular file"):
        read_query_results(zero)
    big = tmp_path / "big.json"
    with open(big, "wb") as stream:
        stream.truncate(MAX_BYTES + 1)  # sparse: no disk used, refused before reading
    with pytest.raises(ValueError, match="bound"):
        read_query_results(big)
    with pytest.raises(OSError):
        read_query_results(tmp_path / "missing.json")


_json = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=6,
)


def _leaves(value: Any, trail: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    if isinstance(value, dict):
        return [trail] + [leaf for key, item in value.items() for leaf in _leaves(item, (*trail, key))]
    if isinstance(value, list):
        return [trail] + [leaf for i, item in enumerate(value) for leaf in _leaves(item, (*trail, i))]
    return [trail]


@given(st.data())
@settings(max_examples=300, deadline=None)
def test_any_change_to_a_file_reads_back_or_is_a_value_error(tmp_path_factory: Any, data: Any) -> None:
    document = _recorded().to_dict()
    trail = data.draw(st.sampled_from(_leaves(document)[1:]))
    holder = document
    for step in trail[:-1]:
        holder = holder[step]
    holder[trail[-1]] = data.draw(_json)
    path = tmp_path_factory.mktemp("fuzz") / "queries.json"
    path.write_text(json.dumps(document))
    try:
        read_query_results(path)
    except ValueError as error:
        assert str(path) in str(error)


@given(st.floats(0, 1, allow_nan=False), st.floats(0, 50, allow_nan=False))
def test_titles_show_numbers_as_given(lam: float, alpha: float) -> None:
    """A configuration's title (the evaluation table, the legend) never rounds a setting away."""
    config = RetrievalConfig("x", query_expansion=True, expansion_alpha=alpha, rerank=True, lambda_value=lam)
    shown = re.search(r"λ=([^,]+),", config.title)
    assert shown is not None and float(shown[1]) == lam
    given_alpha = re.search(r"α=([^,]+),", config.title)
    assert given_alpha is not None and float(given_alpha[1]) == alpha
