"""One query searched plainly and re-ranked, side by side, with each re-ranked item's change of rank.

:func:`compare_search` is what ``galleria serve`` answers; :func:`rank_changes` measures how much a
re-ranking moved a list (the HTML report shows the queries it moved most). Class marks come from
:class:`GalleryLabels`: when the gallery's images sit in class folders, an image's label is the
first-level folder under the gallery's root.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from galleria.evaluation.configs import DEFAULT_POOL, RetrievalConfig
from galleria.rerank.registry import DEFAULT_METHOD

__all__ = [
    "GalleryLabels",
    "RankedItem",
    "SearchSettings",
    "SideBySide",
    "compare_search",
    "rank_changes",
    "search_defaults",
]

#: Largest ``k`` and ``pool`` a :class:`SearchSettings` accepts (a bound on one request's work).
MAX_RESULTS = 1000
#: Results shown, and candidates re-ranked, when a request does not say.
DEFAULT_K = 10


@dataclass(frozen=True)
class RankedItem:
    """One result: gallery path, score (a distance), 1-based rank; ``previous_rank`` in the plain list."""

    path: str
    score: float
    rank: int
    previous_rank: int | None = None
    same_label: bool | None = None

    def to_dict(self, *, with_previous: bool) -> dict[str, Any]:
        """The JSON entry (``previous_rank`` only for re-ranked items)."""
        entry: dict[str, Any] = {"path": self.path, "score": self.score, "rank": self.rank}
        if with_previous:
            entry["previous_rank"] = self.previous_rank
        if self.same_label is not None:
            entry["same_label"] = self.same_label
        return entry


@dataclass(frozen=True)
class SideBySide:
    """The plain results and, when re-ranking is on, the re-ranked ones; with the time it took."""

    plain: list[RankedItem]
    reranked: list[RankedItem] | None
    elapsed_ms: float
    query_label: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The JSON answer of ``POST /api/search``."""
        return {
            "plain": [item.to_dict(with_previous=False) for item in self.plain],
            "reranked": None
            if self.reranked is None
            else [item.to_dict(with_previous=True) for item in self.reranked],
            "elapsed_ms": self.elapsed_ms,
            "query_label": self.query_label,
        }


def _number(settings: Mapping[str, Any], key: str, default: Any, kind: type) -> Any:
    value = settings.get(key, default)
    if value is None or value == "":
        return default
    if isinstance(value, bool) or (kind is int and isinstance(value, float)):
        raise ValueError(f"{key} must be {'an integer' if kind is int else 'a number'}, got {value!r}")
    try:
        return kind(value)
    except (TypeError, ValueError, OverflowError):  # float(10**400) overflows
        raise ValueError(
            f"{key} must be {'an integer' if kind is int else 'a number'}, got {value!r}"
        ) from None


def _flag(settings: Mapping[str, Any], key: str, default: bool = False) -> bool:
    value = settings.get(key, default)
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in {"1", "true", "on", "yes", "0", "false", "off", "no"}:
        return value.lower() in {"1", "true", "on", "yes"}
    if value == "":
        return default
    raise ValueError(f"{key} must be true or false, got {value!r}")


#: The page's and the API's names of the settings, and the RetrievalConfig fields they set.
_FIELD_NAMES = {"expansion_alpha": "alpha", "expansion_neighbors": "neighbors", "lambda_value": "lambda"}


def _as_sent(message: str, lambda_name: str) -> str:
    """``message`` of RetrievalConfig's validation with its field names replaced by the names sent."""
    names = {**_FIELD_NAMES, "lambda_value": lambda_name}
    return re.sub(r"\b(expansion_alpha|expansion_neighbors|lambda_value)\b", lambda m: names[m[1]], message)


@dataclass(frozen=True)
class SearchSettings:
    """How many results, and whether and how to expand (αQE) and re-rank (k-reciprocal).

    Examples
    --------
    >>> SearchSettings.from_mapping({"k": "5", "rerank": "on", "k1": "10"}).config.k1
    10
    >>> SearchSettings.from_mapping({"k": 0})
    Traceback (most recent call last):
    ...
    ValueError: k must be between 1 and 1000, got 0
    """

    k: int = 10
    config: RetrievalConfig = field(default_factory=lambda: RetrievalConfig("search", pool=DEFAULT_POOL))
    #: The k-reciprocal parameters read from the gallery (``{"k1", "k2", "lambda_value"}``) when they
    #: were the defaults of these settings (:meth:`from_mapping` with a ``store``); None otherwise.
    gallery_params: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        # The one bound on a request's work, wherever the settings come from (a form, the JSON API,
        # a tuned settings file used for the first page): checked here, on every construction.
        if not isinstance(self.config, RetrievalConfig):
            raise TypeError(f"config must be a RetrievalConfig, got {type(self.config).__name__}")
        for name, value in (("k", self.k), ("pool", self.config.pool)):
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_RESULTS:
                raise ValueError(f"{name} must be between 1 and {MAX_RESULTS}, got {value!r}")
        if self.config.rerank and self.config.pool < self.k:
            raise ValueError(f"pool must be at least k ({self.k}), got {self.config.pool}")

    @classmethod
    def from_mapping(
        cls,
        settings: Mapping[str, Any],
        defaults: RetrievalConfig | None = None,
        *,
        store: Any = None,
    ) -> SearchSettings:
        """Read ``k``, ``expand``, ``alpha``, ``neighbors``, ``rerank``, ``k1``, ``k2``, ``lambda``, ``pool``.

        Values may be text (form fields, URL parameters) or JSON numbers and booleans;
        ``lambda_value`` is accepted for ``lambda``. ValueError names the setting as it was sent
        (``lambda``, ``alpha``, ``neighbors``...) and the value. ``defaults`` (a settings file
        written by ``galleria tune``) gives every absent setting, the two switches ``expand`` and
        ``rerank`` included, and the re-ranking method: with a method other than k-reciprocal, its
        tuned parameters are used and ``k1``, ``k2``, ``lambda`` only apply to k-reciprocal.

        ``store`` (the served store) makes the re-ranking defaults the gallery's own: without
        ``defaults``, and with ``defaults`` whose ``rerank_preset`` is ``"adaptive"``, the parameters
        a request leaves out are :func:`galleria.rerank.adaptive.default_rerank_params` of ``store``
        (cached on the store while its gallery is unchanged); :attr:`gallery_params` then holds
        them. Without ``store`` the paper's values are the defaults.
        """
        base = search_defaults(store, defaults)
        gallery_params = None
        if base is not defaults and base.rerank_method == DEFAULT_METHOD and store is not None:
            gallery_params = {"k1": base.k1, "k2": base.k2, "lambda_value": base.lambda_value}
        k = _number(settings, "k", DEFAULT_K, int)
        pool = _number(settings, "pool", base.pool, int)
        for name, value in (("k", k), ("pool", pool)):
            if not 1 <= value <= MAX_RESULTS:
                raise ValueError(f"{name} must be between 1 and {MAX_RESULTS}, got {value!r}")
        rerank = _flag(settings, "rerank", base.rerank)
        if rerank and pool < k:
            raise ValueError(f"pool must be at least k ({k}), got {pool}")
        lambda_name = "lambda_value" if "lambda" not in settings and "lambda_value" in settings else "lambda"
        lam = settings.get(lambda_name)
        try:
            config = RetrievalConfig(
                "search",
                query_expansion=_flag(settings, "expand", base.query_expansion),
                expansion_alpha=_number(settings, "alpha", base.expansion_alpha, float),
                expansion_neighbors=_number(settings, "neighbors", base.expansion_neighbors, int),
                rerank=rerank,
                k1=_number(settings, "k1", base.k1, int),
                k2=_number(settings, "k2", base.k2, int),
                lambda_value=_number({lambda_name: lam}, lambda_name, base.lambda_value, float),
                pool=pool,
                rerank_method=base.rerank_method,
                rerank_params=dict(base.rerank_params),
            )
        except (TypeError, ValueError) as error:
            raise ValueError(_as_sent(str(error), lambda_name)) from None
        return cls(k=k, config=config, gallery_params=gallery_params)

    def to_dict(self) -> dict[str, Any]:
        """The settings as JSON (what the page's form fields hold)."""
        config = self.config
        return {
            "k": self.k,
            "expand": config.query_expansion,
            "alpha": config.expansion_alpha,
            "neighbors": config.expansion_neighbors,
            "rerank": config.rerank,
            "k1": config.k1,
            "k2": config.k2,
            "lambda": config.lambda_value,
            "pool": config.pool,
            "method": config.rerank_method,
        }

    def to_query(self) -> dict[str, str]:
        """The settings as URL parameters: both switches always, the values of the parts switched on.

        Read back with :meth:`from_mapping` (with the same ``defaults``), they give these settings
        again, so a page's address reproduces its search. Numbers are written as Python writes them
        (the shortest text that reads back as the same number: ``0.3``, never ``0.30000000000000004``).

        Examples
        --------
        >>> SearchSettings.from_mapping({"k": "5", "rerank": "1", "lambda": "0.25"}).to_query()
        {'k': '5', 'expand': '0', 'rerank': '1', 'k1': '20', 'k2': '6', 'lambda': '0.25', 'pool': '200'}
        """
        config = self.config
        query = {"k": str(self.k), "expand": "1" if config.query_expansion else "0"}
        if config.query_expansion:
            query.update(alpha=repr(config.expansion_alpha), neighbors=str(config.expansion_neighbors))
        query["rerank"] = "1" if config.rerank else "0"
        if config.rerank:
            if config.rerank_method == DEFAULT_METHOD:
                query.update(k1=str(config.k1), k2=str(config.k2), **{"lambda": repr(config.lambda_value)})
            query["pool"] = str(config.pool)
        return query


def search_defaults(store: Any, defaults: RetrievalConfig | None = None) -> RetrievalConfig:
    """The settings a search of ``store`` starts from: ``defaults`` with adaptive parameters read.

    Without ``defaults`` (no settings file): plain search, re-ranking off, and the re-ranking
    parameters read from ``store``'s gallery (the adaptive preset). ``defaults`` whose preset is
    ``"paper"`` (a tuned settings file) are returned as they are; adaptive ones are resolved
    against ``store``, whether re-ranking is switched on or not (the page's form shows the values).
    With ``store`` None nothing is read: the paper's values (or ``defaults``) stand.
    """
    if defaults is None:
        if store is None:
            return RetrievalConfig("search", pool=DEFAULT_POOL)
        defaults = RetrievalConfig("search", pool=DEFAULT_POOL, rerank_preset="adaptive")
    if store is None or defaults.rerank_preset != "adaptive":
        return defaults
    return replace(replace(defaults, rerank=True).resolve(store), rerank=defaults.rerank)


class GalleryLabels:
    """Gallery paths relative to their common root, and their class (first-level folder) if any.

    ``has_classes`` is True when every image lies in a sub-folder of the root and there are at least
    two of them. ``root`` (default: the paths' common folder) is the folder they are relative to.

    Examples
    --------
    >>> labels = GalleryLabels(["/g/cat/1.png", "/g/cat/x/2.png", "/g/dog/3.png"])
    >>> labels.root, labels.relative("/g/cat/x/2.png"), labels.label_of("/g/cat/x/2.png")
    ('/g', 'cat/x/2.png', 'cat')
    >>> labels.path_of("../etc/passwd") is None, labels.path_of("/g/dog/3.png") is None
    (True, True)
    """

    def __init__(self, paths: Sequence[str], root: str | None = None) -> None:
        paths = list(paths)
        #: The gallery paths, in the store's order.
        self.paths: list[str] = paths
        if root is not None:  # the folder the user named (``galleria serve --root``)
            self.root = root
        elif not paths:
            self.root = ""
        elif len(paths) == 1:
            self.root = os.path.dirname(paths[0])
        else:
            try:
                self.root = os.path.commonpath(paths)
            except ValueError:  # a mix of absolute and relative paths, or of drives
                self.root = ""
        self._relative = {path: self._relpath(path) for path in paths}
        self._by_relative = {relative: path for path, relative in self._relative.items()}
        parts = [relative.split("/") for relative in self._relative.values()]
        self.has_classes = bool(parts) and all(len(p) > 1 for p in parts) and len({p[0] for p in parts}) > 1
        self._labels = (
            {path: relative.split("/")[0] for path, relative in self._relative.items()}
            if self.has_classes
            else {}
        )

    def _relpath(self, path: str) -> str:
        if not self.root or (os.path.isabs(self.root) and not os.path.isabs(path)):
            relative = path  # already relative to the root (never resolved against the working directory)
        else:
            relative = os.path.relpath(path, self.root)
        return relative.replace(os.sep, "/")

    def relative(self, path: str) -> str:
        """``path`` relative to the root, with ``/`` separators (KeyError for a path not in the gallery)."""
        return self._relative[path]

    def path_of(self, relative: str) -> str | None:
        """The gallery path whose relative form is exactly ``relative``; None for anything else."""
        return self._by_relative.get(relative)

    def label_of(self, path: str) -> str | None:
        """The class of a gallery path, or None without class folders."""
        return self._labels.get(path)

    def folders(self) -> dict[str, int]:
        """The class folders and how many images each holds, by name (empty without class folders)."""
        counts: dict[str, int] = {}
        for label in self._labels.values():
            counts[label] = counts.get(label, 0) + 1
        return dict(sorted(counts.items()))


def _items(
    candidates: Sequence[Any],
    labels: GalleryLabels | None,
    query_label: str | None,
    previous: Mapping[str, int] | None = None,
) -> list[RankedItem]:
    items = []
    for rank, candidate in enumerate(candidates, start=1):
        same = None
        if labels is not None and query_label is not None:
            same = labels.label_of(candidate.path) == query_label
        items.append(
            RankedItem(
                path=candidate.path,
                score=float(candidate.score),
                rank=rank,
                previous_rank=None if previous is None else previous.get(candidate.path),
                same_label=same,
            )
        )
    return items


def compare_search(
    store: Any,
    query: Any,
    settings: SearchSettings,
    *,
    kind: str = "image",
    labels: GalleryLabels | None = None,
) -> SideBySide:
    """Search one query and, with re-ranking on, re-rank its pool; both lists of ``settings.k``.

    Parameters
    ----------
    store : InMemoryImageEmbeddingStore
        A built store.
    query
        An image (array, PIL image), a text (``kind="text"``), or a gallery path (``kind="path"``);
        a gallery path is left out of its own results and searched by its stored embedding (its
        file is not read).
    settings : SearchSettings
        ``k``, αQE and re-ranking settings. The plain list is the search (with αQE when on); the
        re-ranked list re-ranks its first ``pool`` candidates, and each item's ``previous_rank`` is
        its rank in that search.
    labels : GalleryLabels, optional
        Marks results of the query's class when the query is a gallery path in a class folder.
    """
    from galleria.rerank import make_reranker

    if kind not in {"image", "text", "path"}:
        raise ValueError(f"kind must be 'image', 'text' or 'path', got {kind!r}")
    config = settings.config
    started = time.perf_counter()
    extra = 1 if kind == "path" else 0
    depth = max(settings.k, config.pool if config.rerank else 0) + extra
    expansion: dict[str, Any] = {
        "query_expansion": config.query_expansion,
        "expansion_alpha": config.expansion_alpha,
        "expansion_neighbors": config.expansion_neighbors,
    }
    if kind == "text":
        found = store.retrieve_by_text([query], depth, **expansion)[0]
    elif kind == "path":  # the gallery image as it was indexed: its file is not read again
        vector = store.embeddings_of([query])
        found = store.retrieve_by_vector(vector, depth, **expansion)[0]
    else:
        found = store.retrieve_top_k_similar([query], depth, **expansion)[0]
    if kind == "path":
        found = [candidate for candidate in found if candidate.path != query][: depth - extra]
    query_label = labels.label_of(query) if (labels is not None and kind == "path") else None
    plain = _items(found[: settings.k], labels, query_label)
    reranked = None
    if config.rerank and found:
        reranker = make_reranker(config.rerank_method, store, **config.reranker_params())
        pool = found[: config.pool]
        if reranker.store is not store:  # DBA + αQE: its candidates come from the augmented store
            searched = reranker.store
            if kind == "text":
                pool = searched.retrieve_by_text([query], depth, **expansion)[0]
            elif kind == "path":
                pool = searched.retrieve_by_vector(vector, depth, **expansion)[0]
            else:
                pool = searched.retrieve_top_k_similar([query], depth, **expansion)[0]
            pool = [candidate for candidate in pool if kind != "path" or candidate.path != query]
            pool = pool[: config.pool]
        order = reranker.rerank(pool, top_k=settings.k)
        previous = {candidate.path: rank for rank, candidate in enumerate(found, start=1)}
        reranked = _items(order, labels, query_label, previous)
    elapsed = round(1000.0 * (time.perf_counter() - started), 3)
    return SideBySide(plain=plain, reranked=reranked, elapsed_ms=elapsed, query_label=query_label)


def rank_changes(before: Sequence[str], after: Sequence[str]) -> tuple[int, int]:
    """How much ``after`` differs from ``before`` (two ranked lists of paths of the same length).

    Returns ``(new, moved)``: how many items of ``after`` are not in ``before`` at all, and how many
    positions hold another item than before. Sort by it, largest first, to find the lists a
    re-ranking changed most.

    Examples
    --------
    >>> rank_changes(["a", "b", "c"], ["b", "a", "d"])
    (1, 3)
    """
    seen = set(before)
    new = sum(1 for item in after if item not in seen)
    moved = sum(1 for old, item in zip(before, after, strict=False) if old != item)
    moved += abs(len(after) - len(before))
    return new, moved
