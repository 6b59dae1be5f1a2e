"""What the routers of ``galleria serve`` share: the :class:`Site` (the gallery's labels, the settings,
search and uploads), the page renderer, and the small helpers of addresses and page numbers.

The pages hold no logic of their own: searching, browsing, settings and uploads are
:mod:`galleria.viewer`'s; the routers (:mod:`galleria.web.routes`) only route and render.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from fastapi import Request
from fastapi.responses import HTMLResponse
from fastapi.templating import Jinja2Templates

from galleria._params import format_value
from galleria._plugins import LazyNames
from galleria.rerank.registry import DEFAULT_METHOD, reranker_component
from galleria.store import is_url
from galleria.viewer import GalleryLabels, SearchSettings, UploadStore
from galleria.viewer.settings import read_flag, setting_keys
from galleria.viewer.text import format_score
from galleria.web._items import url_link, url_name

__all__ = [
    "QUERY_KEYS",
    "SETTING_KEYS",
    "UPLOAD_GONE",
    "Renderer",
    "Site",
    "encode_query",
    "page_number",
    "page_renderer",
    "shorten",
]

#: The settings a request may give (``lambda_value`` is another name of ``lambda``).
SETTING_KEYS: LazyNames[str] = LazyNames(setting_keys)  # plugins' parameters too: on first use
#: The kinds of query an address may hold.
QUERY_KEYS = ("path", "text", "upload")
#: The answer to an upload id the server no longer keeps (or never gave).
UPLOAD_GONE = (
    "this uploaded image is no longer kept (the server keeps only the last few uploads); upload it again"
)

_TEMPLATES = Path(__file__).parent / "templates"

#: ``render(request, template, context, status=200)``: a page through the shared base context.
Renderer = Callable[..., HTMLResponse]


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
    #: ``map_points()``: the gallery map's state, ``("ready", points)``, ``("computing", None)`` or
    #: ``("failed", message)`` (the browse grid's ``map=`` filter); None: no map filter.
    map_points: Callable[[], tuple[str, Any]] | None = None

    async def work(self, function: Callable[..., Any], *args: Any) -> Any:
        """``function(*args)`` in the worker pool (here, without one)."""
        if self.workers is None:
            return function(*args)
        return await self.workers.run(function, *args)

    def relative(self, path: str) -> str | None:
        """``path`` relative to the gallery root, None when it is not an image of this gallery."""
        try:
            return self.labels.relative(path)
        except KeyError:
            return None

    def address(self, query: Mapping[str, str], settings: SearchSettings | None = None) -> str:
        """The page address ``/?...`` of ``query`` (and ``settings``' parameters)."""
        params = dict(query)
        if settings is not None:
            params.update(settings.to_query())
        return "/?" + encode_query(params) if params else "/"


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


def method_heading(settings: SearchSettings) -> str:
    """The re-ranked column's heading: the method and the exact parameters it used."""
    config = settings.config
    names = {"lambda_value": "λ"} if config.rerank_method == "k-reciprocal" else {}
    shown = " · ".join(
        f"{names.get(key, key)} {_number_text(value)}" for key, value in config.rerank_params.items()
    )
    return f"re-ranked · {config.rerank_method}{' · ' + shown if shown else ''} · pool {config.pool}"


_NOTE_NAMES = (("k1", "k1"), ("k2", "k2"), ("λ", "lambda_value"))


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


def _hidden_params(settings: SearchSettings) -> list[tuple[str, str]]:
    """The form's hidden field of a method other than the default: its name."""
    config = settings.config
    return [] if config.rerank_method == DEFAULT_METHOD else [("method", config.rerank_method)]


def param_fields(settings: SearchSettings, sent: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The form's fields of the chosen method's parameters, drawn from its declaration: every
    parameter editable, with its declared type, range (``min`` / ``max``), choices and help.

    The default method's parameters go by their short names (``k1``, ``k2``, ``lambda``), another
    method's as ``param.NAME``; a value is the one sent, else the one the search used, else blank
    (a value the method leaves out: the declared default or the gallery's)."""
    config = settings.config
    default = config.rerank_method == DEFAULT_METHOD
    fields: list[dict[str, Any]] = []
    for param in reranker_component(config.rerank_method).params:
        name = (param.key or param.name) if default else f"param.{param.name}"
        value = config.rerank_params.get(param.name)
        text = sent.get(name, "" if value is None else _number_text(value))
        if param.type is bool:
            text = "1" if str(text).lower() in ("1", "true", "on", "yes") else "0"
        label = "λ" if param.name == "lambda_value" else param.name
        field = {"name": name, "label": label, "type": param.type.__name__, "value": text, "help": param.help}
        if param.type in (int, float):
            field["min"] = format_value(param.low)
            field["max"] = format_value(param.high)
        if param.type is str:
            field["choices"] = [str(choice) for choice in param.choices]
        fields.append(field)
    return fields


def search_heading(settings: SearchSettings) -> str:
    """The plain column's heading (with αQE's parameters when it is on)."""
    config = settings.config
    if not config.query_expansion:
        return "search"
    return f"search · αQE · α {_number_text(config.expansion_alpha)} · n {config.expansion_neighbors}"


def page_renderer(site: Site) -> Renderer:
    """``render(request, template, context, status=200)``: a page with the base every page shares
    (the store's info, the search form as the request left it, and the path helpers)."""
    templates = Jinja2Templates(directory=str(_TEMPLATES))
    templates.env.filters["score"] = format_score

    def thumb(path: str) -> str | None:
        shown = site.relative(path)
        return None if shown is None or is_url(path) else "/thumb/" + quote(shown)

    def render(request: Request, template: str, context: dict[str, Any], status: int = 200) -> HTMLResponse:
        settings = context.pop("settings", None) or site.initial
        sent = context.pop("sent", {})
        base = {
            "info": site.info(),
            "has_eval": site.evaluation is not None,
            "form": _form_values(settings, sent),
            "hidden_params": _hidden_params(settings),
            "param_fields": param_fields(settings, sent),
            "gallery_note": _gallery_note(settings),
            "error": None,
            "query_text": "",
            "hidden_query": None,
            "relative": site.relative,
            "thumb": thumb,
            "is_url": is_url,
            "url_link": url_link,
            "url_name": url_name,
        }
        return templates.TemplateResponse(request, template, {**base, **context}, status_code=status)

    return render


def page_number(text: str) -> int | None:
    """``text`` as a number of ASCII digits (at most 18 of them), else None.

    ``str.isdigit`` is not enough: ``"²"`` is a digit to it but not to ``int``, and ``int`` refuses
    strings of more than 4,300 digits; both raised in the handler (HTTP 500).

    Examples
    --------
    >>> page_number("12"), page_number("²"), page_number("1" * 5000), page_number("-1")
    (12, None, None, None)
    """
    if not 0 < len(text) <= 18 or not text.isascii() or not text.isdigit():
        return None
    return int(text)


def shorten(text: str, limit: int = 40) -> str:
    """``text`` cut to ``limit`` characters (with ``...``) for an error message."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def encode_query(params: Mapping[str, str]) -> str:
    """URL parameters, with ``/`` left readable (``path=cat/1.png``)."""
    return urlencode(params, safe="/", quote_via=quote)
