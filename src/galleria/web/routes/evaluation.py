"""The evaluation pages (``galleria serve --eval DIR``): ``/eval`` lists the queries of an evaluation,
the ones whose AP re-ranking lowered most first, with the per-label figures (worst label first) and
a ``label=`` filter; ``/eval/{n}`` shows query ``n``'s two recorded result lists side by side.
Above the list, the summary gives each configuration's Recall@1 beside its mAP@100, the two
compared (plain and the re-ranked one) with their differences, and the warnings ``evaluate``
printed (re-ranking lowering Recall@1 or mAP@100 below plain's), as text.

The evaluation is :mod:`galleria.evaluation.per_query`'s; without one, both pages say how to load it.
"""

from __future__ import annotations

import dataclasses
from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from galleria.evaluation.per_label import per_label_metrics
from galleria.viewer import SearchSettings
from galleria.web._site import Renderer, Site, page_number, shorten
from galleria.web.routes._grid import form_error

__all__ = ["EVAL_PAGE_SIZE", "evaluation_router"]

#: Queries listed per page of ``/eval``.
EVAL_PAGE_SIZE = 50
_NO_EVALUATION = "no evaluation is loaded: start galleria serve with --eval DIR (an evaluate --report folder)"


def _summary(evaluation: Any) -> dict[str, Any]:
    """The compared pair's titles, and its Recall@1 and mAP@100 before and after with the change
    (Recall@1 None when the file records none)."""
    entries = {entry["name"]: entry for entry in evaluation.configurations}
    before, after = (entries[name] for name in evaluation.compared)

    def pair(key: str) -> dict[str, float] | None:
        if before.get(key) is None or after.get(key) is None:
            return None
        return {"before": before[key], "after": after[key], "change": after[key] - before[key]}

    return {
        "before": before["title"],
        "after": after["title"],
        "recall": pair("recall@1"),
        "map": pair("map@100"),
    }


class _Listing:
    """The evaluation's queries in the order the list shows them, and by label."""

    def __init__(self, site: Site) -> None:
        self.site = site
        evaluation = self.evaluation = site.evaluation
        self.order: list[int] = evaluation.worst_first() if evaluation is not None else []
        self.place = {position: rank for rank, position in enumerate(self.order)}
        self.by_label: dict[str, list[int]] = {}
        for position in self.order:
            self.by_label.setdefault(evaluation.queries[position].label, []).append(position)
        self.label_rows = per_label_metrics(evaluation) if evaluation is not None else []
        self.summary = _summary(evaluation) if evaluation is not None else None

    def context(self, page: int, label: str | None) -> dict[str, Any]:
        """The list page ``page`` (the last when past it), of ``label``'s queries or all."""
        evaluation = self.evaluation
        chosen = self.order if label is None else self.by_label[label]
        pages = max(1, -(-len(chosen) // EVAL_PAGE_SIZE))
        page = min(page, pages)
        start = (page - 1) * EVAL_PAGE_SIZE
        rows = [
            {
                "rank": self.place[position] + 1,
                "position": position,
                "outcome": evaluation.queries[position],
                "change": evaluation.change(position),
            }
            for position in chosen[start : start + EVAL_PAGE_SIZE]
        ]
        suffix = "" if label is None else "&label=" + quote(label, safe="")
        return {
            "evaluation": evaluation,
            "rows": rows,
            "page_number": page,
            "pages": pages,
            "label_rows": self.label_rows,
            "label_filter": label,
            "label_suffix": suffix,
            "label_summary": self.site.evaluation_labels,
            "summary": self.summary,
        }

    def query(self, position: int) -> dict[str, Any]:
        """The page of query ``position``: both lists, its neighbours in the list, a live search."""
        site, evaluation = self.site, self.evaluation
        outcome = evaluation.queries[position]
        rank = self.place[position]
        before_name, after_name = evaluation.compared
        titles = {entry["name"]: entry["title"] for entry in evaluation.configurations}
        live = None
        query_relative = site.relative(outcome.query)
        if query_relative is not None:
            config = evaluation.config(after_name)
            try:
                settings = SearchSettings.from_mapping(
                    {"k": min(evaluation.depth, 1000), "rerank": config.rerank},
                    dataclasses.replace(config, name="search"),  # a live search's defaults
                )
                live = site.address({"path": query_relative}, settings)
            except ValueError:
                live = site.address({"path": query_relative})

        def link(path: str) -> str | None:
            shown = site.relative(path)
            return None if shown is None else site.address({"path": shown})

        return {
            "evaluation": evaluation,
            "position": position,
            "rank": rank + 1,
            "outcome": outcome,
            "ap_change": evaluation.change(position),
            "before_title": titles[before_name],
            "after_title": titles[after_name],
            "previous": self.order[rank - 1] if rank > 0 else None,
            "next": self.order[rank + 1] if rank + 1 < len(self.order) else None,
            "live": live,
            "link": link,
            "list_address": f"/eval?page={rank // EVAL_PAGE_SIZE + 1}",
        }


def evaluation_router(site: Site, render: Renderer) -> APIRouter:
    """``/eval`` and ``/eval/{n}`` (see the module docstring)."""
    router = APIRouter()
    listing = _Listing(site)

    @router.get("/eval", response_class=HTMLResponse)
    def eval_list(request: Request) -> HTMLResponse:
        """The evaluation's queries, the one whose AP re-ranking lowered most first, in pages;
        the per-label figures, worst label first; ``label=`` keeps one label's queries."""
        if site.evaluation is None:
            return form_error(site, render, request, _NO_EVALUATION, 404)
        raw = request.query_params.get("page", "1")
        label = request.query_params.get("label")
        if label is not None and label not in listing.by_label:
            context = {**listing.context(1, None), "error": f"no label {shorten(label)!r} in this evaluation"}
            return render(request, "eval_list.html", context, 404)
        number = page_number(raw)
        if number is None or number < 1:
            error = f"page must be a positive integer, got {shorten(raw)!r}"
            return render(request, "eval_list.html", {**listing.context(1, label), "error": error}, 400)
        return render(request, "eval_list.html", listing.context(number, label))

    @router.get("/eval/{number}", response_class=HTMLResponse)
    def eval_query(request: Request, number: str) -> HTMLResponse:
        """One query of the evaluation: the two lists compared, side by side."""
        if site.evaluation is None:
            return form_error(site, render, request, _NO_EVALUATION, 404)
        found = page_number(number)
        if found is None or found >= len(site.evaluation.queries):
            error = f"no query {shorten(number)!r} in this evaluation"
            return render(request, "eval_list.html", {**listing.context(1, None), "error": error}, 404)
        return render(request, "eval_query.html", listing.query(found))

    return router
