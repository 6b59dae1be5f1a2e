"""The HTML pages of ``galleria serve``: browse the gallery, search it, look at an evaluation's queries.

Every view lives at a GET address, so it can be shared, reloaded and reached with the back button:

- ``/`` browses the gallery (``folder=``, ``name=``, ``page=``); with ``path=`` (a gallery image,
  relative to the gallery root), ``text=`` or ``upload=`` (the id of an image uploaded earlier) it
  shows that query's plain and re-ranked results side by side, with the settings in the address
  (``k``, ``expand``, ``alpha``, ``neighbors``, ``rerank``, ``k1``, ``k2``, ``lambda``, ``pool``).
- ``POST /`` takes the search form: an uploaded image is kept (see
  :class:`~galleria.viewer.UploadStore`) and the answer redirects to the search's address.
- ``/upload/{id}.jpg`` is the preview of a kept upload.
- ``/eval`` lists the queries of an evaluation (``galleria serve --eval DIR``), the ones whose AP
  re-ranking lowered most first; ``/eval/{n}`` shows query ``n``'s two recorded result lists.

The pages hold no logic of their own: searching, browsing, settings and uploads are
:mod:`galleria.viewer`'s; the evaluation is :mod:`galleria.evaluation.per_query`'s.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates
from starlette.datastructures import UploadFile

from galleria.evaluation.per_label import per_label_metrics
from galleria.store.reading import ImageReadError
from galleria.viewer import GalleryLabels, SearchSettings, UploadError, UploadStore
from galleria.viewer.browse import BrowsePage, browse_gallery
from galleria.viewer.compare import _flag as read_flag
from galleria.viewer.compare import setting_keys
from galleria.viewer.text import format_score
from galleria.viewer.thumbnails import array_thumbnail
from galleria.web._work import RequestTimeout

__all__ = ["EVAL_PAGE_SIZE", "SETTING_KEYS", "UPLOAD_GONE", "Site", "add_pages"]

#: The settings a request may give (``lambda_value`` is another name of ``lambda``).
SETTING_KEYS = setting_keys()
#: The kinds of query an address may hold.
QUERY_KEYS = ("path", "text", "upload")
#: The answer to an upload id the server no longer keeps (or never gave).
UPLOAD_GONE = (
    "this uploaded image is no longer kept (the server keeps only the last few uploads); upload it again"
)
#: Queries listed per page of ``/eval``.
EVAL_PAGE_SIZE = 50
#: Longest side of an upload's preview, in pixels.
PREVIEW_SIZE = 160

_TEMPLATES = Path(__file__).parent / "templates"


@dataclass(frozen=True)
class Site:
    """What the pages need from the app: the gallery's labels, the settings, search and uploads."""

    labels: GalleryLabels
    initial: SearchSettings
    settings_from: Callable[[dict[str, Any]], SearchSettings]
    run_search: Callable[[Any, str, SearchSettings], dict[str, Any]]
    info: Callable[[], dict[str, Any]]
    uploads: UploadStore
    max_upload_bytes: int
    decode_upload: Callable[[bytes], Any]
    evaluation: Any = None
    #: The label summary of the evaluation's report (``metrics.json``), if it records one.
    evaluation_labels: Any = None
    #: The worker pool (:class:`galleria.web._work.WorkerPool`) searches and uploads run in.
    workers: Any = None

    async def work(self, function: Callable[..., Any], *args: Any) -> Any:
        """``function(*args)`` in the worker pool (here, without one)."""
        if self.workers is None:
            return function(*args)
        return await self.workers.run(function, *args)


def _number_text(value: Any) -> str:
    """A setting as the form shows it: ``repr`` of a float (``0.3``, as given), ``str`` otherwise."""
    return repr(value) if isinstance(value, float) else str(value)


def _form_values(settings: SearchSettings, sent: Mapping[str, str]) -> dict[str, Any]:
    """The form's fields: each setting as it was sent, else as the settings hold it.

    The two switches too: when another setting was bad, ``settings`` are the defaults, and the page
    must still show re-ranking (or αQE) on if it was sent on.
    """
    values: dict[str, Any] = {key: _number_text(value) for key, value in settings.to_dict().items()}
    values["expand"] = settings.config.query_expansion
    values["rerank"] = settings.config.rerank
    for switch in ("expand", "rerank"):
        try:
            values[switch] = read_flag(sent, switch, values[switch])
        except ValueError:
            pass  # a bad switch is named by the error; the form shows the setting in force
    if "lambda_value" in sent and "lambda" not in sent:
        sent = {**sent, "lambda": sent["lambda_value"]}
    for key, text in sent.items():
        if key in values and key not in ("expand", "rerank", "method"):
            values[key] = text
    return values


def _method_heading(settings: SearchSettings) -> str:
    """The re-ranked column's heading: the method and the exact parameters it used."""
    config = settings.config
    names = {"lambda_value": "λ"} if config.rerank_method == "k-reciprocal" else {}
    shown = " · ".join(
        f"{names.get(key, key)} {_number_text(value)}" for key, value in config.rerank_params.items()
    )
    return f"re-ranked · {config.rerank_method}{' · ' + shown if shown else ''} · pool {config.pool}"


def _gallery_note(settings: SearchSettings) -> str | None:
    """The note by the re-rank box when its defaults were read from the gallery (None otherwise)."""
    read = settings.gallery_params
    if read is None or settings.config.rerank_method != "k-reciprocal":
        return None
    params = settings.config.rerank_params
    if all(params.get(name) == read[name] for _, name in _NOTE_NAMES):
        return "k1, k2, λ read from this gallery"
    shown = ", ".join(f"{key} {_number_text(read[name])}" for key, name in _NOTE_NAMES)
    return f"values read from this gallery: {shown}"


_NOTE_NAMES = (("k1", "k1"), ("k2", "k2"), ("λ", "lambda_value"))


def _hidden_params(settings: SearchSettings) -> list[tuple[str, str]]:
    """The form's hidden fields of a method other than k-reciprocal: its name and exact parameters."""
    config = settings.config
    if config.rerank_method == "k-reciprocal":
        return []
    fields = [("method", config.rerank_method)]
    fields += [(f"param.{key}", _number_text(value)) for key, value in config.rerank_params.items()]
    return fields


def _search_heading(settings: SearchSettings) -> str:
    config = settings.config
    if not config.query_expansion:
        return "search"
    return f"search · αQE · α {_number_text(config.expansion_alpha)} · n {config.expansion_neighbors}"


def add_pages(app: FastAPI, site: Site) -> None:
    """Register the page routes of ``site`` on ``app``."""
    templates = Jinja2Templates(directory=str(_TEMPLATES))
    templates.env.filters["score"] = format_score
    labels = site.labels
    evaluation = site.evaluation
    order = evaluation.worst_first() if evaluation is not None else []
    place = {position: rank for rank, position in enumerate(order)}

    def relative(path: str) -> str | None:
        """``path`` relative to the gallery root, None when it is not an image of this gallery."""
        try:
            return labels.relative(path)
        except KeyError:
            return None

    def thumb(path: str) -> str | None:
        shown = relative(path)
        return None if shown is None else "/thumb/" + quote(shown)

    def address(query: Mapping[str, str], settings: SearchSettings | None = None) -> str:
        params = dict(query)
        if settings is not None:
            params.update(settings.to_query())
        return "/?" + _encode(params) if params else "/"

    def render(request: Request, template: str, context: dict[str, Any], status: int = 200) -> HTMLResponse:
        settings = context.pop("settings", None) or site.initial
        sent = context.pop("sent", {})
        base = {
            "info": site.info(),
            "has_eval": evaluation is not None,
            "form": _form_values(settings, sent),
            "hidden_params": _hidden_params(settings),
            "gallery_note": _gallery_note(settings),
            "error": None,
            "query_text": "",
            "hidden_query": None,
            "relative": relative,
            "thumb": thumb,
        }
        return templates.TemplateResponse(request, template, {**base, **context}, status_code=status)

    app.state.render_page = render  # the other views' routers render through the same base

    def browse(
        request: Request,
        *,
        error: str | None,
        status: int,
        sent: dict[str, str],
        settings: SearchSettings | None = None,
        query_text: str = "",
    ) -> HTMLResponse:
        try:
            page: BrowsePage = browse_gallery(labels, request.query_params)
        except ValueError as problem:
            page = browse_gallery(labels, {})
            error, status = error or str(problem), 400

        def link(**changes: Any) -> str:
            return address(page.query(**changes))

        def query_link(path: str) -> str:
            return address({"path": relative(path) or ""})

        return render(
            request,
            "browse.html",
            {
                "page": page,
                "link": link,
                "query_link": query_link,
                "error": error,
                "sent": sent,
                "settings": settings,
                "query_text": query_text,
            },
            status,
        )

    @app.get("/", response_class=HTMLResponse)
    async def index(request: Request) -> HTMLResponse:
        """The gallery to browse; with ``path=``, ``text=`` or ``upload=``, that query's results."""
        params = request.query_params
        sent = {key: params[key] for key in SETTING_KEYS if key in params}
        error: str | None = None
        status = 200
        settings = site.initial
        try:
            settings = site.settings_from(sent)
        except ValueError as problem:
            error, status = str(problem), 400
        queries = {key: params[key] for key in QUERY_KEYS if params.get(key)}
        if not queries:
            return browse(request, error=error, status=status, sent=sent, settings=settings)
        context: dict[str, Any] = {"settings": settings, "sent": sent, "result": None}
        if len(queries) > 1:
            error, status = f"give one query: path, text or upload; got {sorted(queries)}", 400
        kind, given = next(iter(queries.items()))
        context.update(kind=kind, given=given)
        query: Any = None
        if kind == "path":
            query = labels.path_of(given)
            context.update(hidden_query=("path", given), query_path=query)
            if query is None and error is None:
                error, status = f"{given!r} is not an image of this gallery", 404
        elif kind == "text":
            query = given
            context.update(query_text=given)
        else:
            kept = site.uploads.get(given)
            context.update(hidden_query=("upload", given), preview=None)
            if kept is None:
                if error is None:
                    error, status = UPLOAD_GONE, 404
            else:
                context["preview"] = "/upload/" + given + ".jpg"
                query = kept.data
            kind = "upload"  # the kept bytes, decoded by the search in its worker
        if error is None:
            try:
                context["result"] = await site.work(site.run_search, query, kind, settings)
            except RequestTimeout as problem:
                error, status = str(problem), 503
            except (ValueError, LookupError, TypeError, OverflowError, ImageReadError) as problem:
                error = str(problem.args[0] if problem.args else problem)
                status = 404 if isinstance(problem, (LookupError, ImageReadError)) else 400

        def link(path: str) -> str:
            return address({"path": relative(path) or ""}, settings)

        context.update(
            error=error,
            link=link,
            search_heading=_search_heading(settings),
            rerank_heading=_method_heading(settings),
        )
        return render(request, "search.html", context, status)

    def form_error(
        request: Request, error: str, status: int, fields: Mapping[str, str] | None = None
    ) -> HTMLResponse:
        """The gallery with ``error``; the form keeps the settings and the text that were sent."""
        fields = fields or {}
        sent = {key: fields[key] for key in SETTING_KEYS if key in fields}
        try:
            settings = site.settings_from(sent)
        except ValueError:
            settings = site.initial
        return browse(
            request,
            error=error,
            status=status,
            sent=sent,
            settings=settings,
            query_text=fields.get("text", ""),
        )

    @app.post("/", response_class=HTMLResponse)
    async def index_form(request: Request) -> Response:
        """The search form: keep an uploaded image, then redirect (303) to the search's address."""
        fields: dict[str, str] = {}
        try:
            form = await request.form()
            images = form.getlist("image")
            if len(images) > 1:
                return form_error(request, "send one image at a time (the form has two 'image' fields)", 400)
            fields = {key: value for key, value in form.items() if isinstance(value, str)}
            query: dict[str, str] = {}
            image = images[0] if images else None
            data = await image.read(site.max_upload_bytes + 1) if isinstance(image, UploadFile) else b""
            if isinstance(image, UploadFile) and (data or image.filename):
                preview = await site.work(_preview, site.decode_upload, data)
                query["upload"] = site.uploads.add(data, preview)
            else:
                for key in ("text", "upload", "path"):
                    if fields.get(key, "").strip():
                        query[key] = fields[key].strip() if key != "text" else fields[key]
                        break
        except UploadError as problem:
            return form_error(request, str(problem), 413 if problem.too_large else 400, fields)
        except RequestTimeout as problem:
            return form_error(request, str(problem), 503, fields)
        if not query:
            message = "choose an image to upload, type a text or click a gallery image"
            return form_error(request, message, 400, fields)
        sent = {key: fields[key] for key in SETTING_KEYS if key in fields}
        try:
            params = site.settings_from(sent).to_query()
        except ValueError:
            params = sent  # the search's address shows the problem, with the form as it was sent
        return RedirectResponse("/?" + _encode({**query, **params}), status_code=303)

    @app.get("/upload/{key}.jpg")
    def upload_preview(key: str) -> Response:
        """The preview of a kept upload (404 once it is no longer kept)."""
        kept = site.uploads.get(key)
        if kept is None:
            return Response(UPLOAD_GONE, status_code=404, media_type="text/plain")
        return Response(
            kept.preview, media_type="image/jpeg", headers={"Cache-Control": "private, max-age=3600"}
        )

    def no_evaluation(request: Request) -> HTMLResponse:
        return form_error(
            request,
            "no evaluation is loaded: start galleria serve with --eval DIR (an evaluate --report folder)",
            404,
        )

    by_label: dict[str, list[int]] = {}
    for position in order:
        by_label.setdefault(evaluation.queries[position].label, []).append(position)
    label_rows = per_label_metrics(evaluation) if evaluation is not None else []

    @app.get("/eval", response_class=HTMLResponse)
    def eval_list(request: Request) -> HTMLResponse:
        """The evaluation's queries, the one whose AP re-ranking lowered most first, in pages;
        the per-label figures, worst label first; ``label=`` keeps one label's queries."""
        if evaluation is None:
            return no_evaluation(request)
        raw = request.query_params.get("page", "1")
        label = request.query_params.get("label")
        if label is not None and label not in by_label:
            shown = label if len(label) <= 40 else label[:37] + "..."
            context = {**_eval_context(1, None), "error": f"no label {shown!r} in this evaluation"}
            return render(request, "eval_list.html", context, 404)
        number = _page_number(raw)
        if number is None or number < 1:
            shown = raw if len(raw) <= 40 else raw[:37] + "..."
            return render(
                request,
                "eval_list.html",
                {**_eval_context(1, label), "error": f"page must be a positive integer, got {shown!r}"},
                400,
            )
        return render(request, "eval_list.html", _eval_context(number, label))

    def _eval_context(page: int, label: str | None) -> dict[str, Any]:
        chosen = order if label is None else by_label[label]
        pages = max(1, -(-len(chosen) // EVAL_PAGE_SIZE))
        page = min(page, pages)
        start = (page - 1) * EVAL_PAGE_SIZE
        rows = [
            {
                "rank": place[position] + 1,
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
            "label_rows": label_rows,
            "label_filter": label,
            "label_suffix": suffix,
            "label_summary": site.evaluation_labels,
        }

    @app.get("/eval/{number}", response_class=HTMLResponse)
    def eval_query(request: Request, number: str) -> HTMLResponse:
        """One query of the evaluation: the two lists compared, side by side."""
        if evaluation is None:
            return no_evaluation(request)
        found = _page_number(number)
        if found is None or found >= len(evaluation.queries):
            shown = number if len(number) <= 40 else number[:37] + "..."
            return render(
                request,
                "eval_list.html",
                {
                    **_eval_context(1, None),
                    "error": f"no query {shown!r} in this evaluation",
                },
                404,
            )
        position = found
        outcome = evaluation.queries[position]
        rank = place[position]
        before_name, after_name = evaluation.compared
        titles = {entry["name"]: entry["title"] for entry in evaluation.configurations}
        live = None
        query_relative = relative(outcome.query)
        if query_relative is not None:
            config = evaluation.config(after_name)
            try:
                settings = SearchSettings.from_mapping(
                    {"k": min(evaluation.depth, 1000), "rerank": config.rerank}, _as_search(config)
                )
                live = address({"path": query_relative}, settings)
            except ValueError:
                live = address({"path": query_relative})

        def link(path: str) -> str | None:
            shown = relative(path)
            return None if shown is None else address({"path": shown})

        return render(
            request,
            "eval_query.html",
            {
                "evaluation": evaluation,
                "position": position,
                "rank": rank + 1,
                "outcome": outcome,
                "ap_change": evaluation.change(position),
                "before_title": titles[before_name],
                "after_title": titles[after_name],
                "previous": order[rank - 1] if rank > 0 else None,
                "next": order[rank + 1] if rank + 1 < len(order) else None,
                "live": live,
                "link": link,
                "list_address": f"/eval?page={rank // EVAL_PAGE_SIZE + 1}",
            },
        )


def _page_number(text: str) -> int | None:
    """``text`` as a number of ASCII digits (at most 18 of them), else None.

    ``str.isdigit`` is not enough: ``"²"`` is a digit to it but not to ``int``, and ``int`` refuses
    strings of more than 4,300 digits; both raised in the handler (HTTP 500).

    Examples
    --------
    >>> _page_number("12"), _page_number("²"), _page_number("1" * 5000), _page_number("-1")
    (12, None, None, None)
    """
    if not 0 < len(text) <= 18 or not text.isascii() or not text.isdigit():
        return None
    return int(text)


def _preview(decode: Callable[[bytes], Any], data: bytes) -> bytes:
    """The preview JPEG of an upload's bytes (in a worker: decoding is the heavy part)."""
    return array_thumbnail(decode(data), PREVIEW_SIZE)


def _encode(params: Mapping[str, str]) -> str:
    """URL parameters, with ``/`` left readable (``path=cat/1.png``)."""
    return urlencode(params, safe="/", quote_via=quote)


def _as_search(config: Any) -> Any:
    """``config`` renamed for a search (the defaults a live search of an evaluated query starts from)."""
    import dataclasses

    return dataclasses.replace(config, name="search")
