"""The duplicates view: ``/duplicates``, the gallery's duplicate groups side by side, largest first.

The groups are :func:`galleria.curation.dedup.duplicate_report`'s (star groups around the image each
keeps: exact copies by pixel digest, near copies from the neighbour graph), found once per gallery
and threshold in the background; the page says so and reloads itself until they are ready.
``threshold=`` (a distance in [0, 2]; default calibrated on the store, and shown) and ``page=`` are
read from the address; anything else there is a 400.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from galleria.web._background import Background

__all__ = ["GROUPS_PER_PAGE", "duplicates_router"]

#: Groups shown per page.
GROUPS_PER_PAGE = 20
#: Images of one group shown (the rest are counted).
SHOWN_PER_GROUP = 24


def _page(text: str) -> int:
    if not (0 < len(text) <= 9 and text.isascii() and text.isdigit()) or int(text) < 1:
        shown = text if len(text) <= 40 else text[:37] + "..."
        raise ValueError(f"page must be a positive integer, got {shown!r}")
    return int(text)


def _threshold(text: str | None) -> float | None:
    from galleria.curation.threshold import check_threshold

    if text is None or text == "":
        return None
    if len(text) > 32:
        raise ValueError(f"threshold must be a number in [0, 2], got {text[:29] + '...'!r}")
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"threshold must be a number in [0, 2], got {text!r}") from None
    return check_threshold(value)


def duplicates_router(store: Any, background: Background, render: Callable[..., Any]) -> APIRouter:
    """The route of the duplicates view (see the module docstring)."""
    router = APIRouter()

    @router.get("/duplicates", response_class=HTMLResponse)
    def duplicates_page(request: Request) -> Any:
        """The duplicate groups, largest first, :data:`GROUPS_PER_PAGE` a page."""
        from galleria.curation.dedup import duplicate_report

        params = request.query_params
        context: dict[str, Any] = {"groups": [], "computing": False, "page_number": 1, "pages": 1}
        context.update(total=0, threshold_text=params.get("threshold", ""), shown_per_group=SHOWN_PER_GROUP)
        try:
            threshold = _threshold(params.get("threshold"))
            page = _page(params.get("page", "1"))
        except (TypeError, ValueError) as error:
            return render(request, "duplicates.html", {**context, "error": str(error)}, 400)
        state, report = background.get(  # the same key and value as the map's colouring
            ("duplicates", len(store), threshold), lambda: duplicate_report(store, threshold=threshold)
        )
        if state == "computing":
            return render(request, "duplicates.html", {**context, "computing": True})
        if state == "failed":
            return render(
                request, "duplicates.html", {**context, "error": f"no duplicates found: {report}"}, 500
            )
        value = report.groups
        pages = max(1, -(-len(value) // GROUPS_PER_PAGE))
        page = min(page, pages)
        start = (page - 1) * GROUPS_PER_PAGE
        shown = [
            {"number": start + i + 1, "group": group}
            for i, group in enumerate(value[start : start + GROUPS_PER_PAGE])
        ]
        context.update(
            groups=shown,
            page_number=page,
            pages=pages,
            total=len(value),
            images=sum(len(group.paths) for group in value),
            applied=report.threshold,
            calibrated=report.basis.get("source") == "calibrated",
            keep_rule=report.keep,
            notes=report.notes,
        )
        return render(request, "duplicates.html", context)

    return router
