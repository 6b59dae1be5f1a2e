"""``galleria methods``: every declared re-ranker, index and embedder with its parameters.

The listing, its JSON and the parameter tables of ``docs/components.md`` (``--markdown``) are all
read from the declarations (:mod:`galleria._declare`), plugins included.
"""

from __future__ import annotations

import argparse
from typing import Any

from galleria._declare import Component
from galleria._params import format_value
from galleria.cli._common import add_command, print_json

__all__ = ["BEGIN", "END", "add_parser", "components", "markdown", "markdown_table", "run", "with_tables"]

_EXAMPLES = """\
  galleria methods
  galleria methods --kind reranker --json
  galleria methods --markdown > tables.md        # the parameter tables of docs/components.md
"""
_TITLES = {"reranker": "Re-rankers", "index": "Indexes", "embedder": "Embedders"}


def components(kind: str | None = None, *, builtin_only: bool = False) -> list[Component]:
    """The declared components (of ``kind``), re-rankers first; ``builtin_only`` leaves plugins out."""
    from galleria.embedders.registry import embedder_components
    from galleria.index.registry import index_components
    from galleria.rerank.registry import reranker_components

    every = [*reranker_components(), *index_components(), *embedder_components()]
    chosen = [c for c in every if kind is None or c.kind == kind]
    if builtin_only:
        chosen = [c for c in chosen if getattr(c.build, "__module__", "").startswith("galleria.")]
    return chosen


def markdown(kind: str | None = None) -> str:
    """The parameter tables of the built-in components, as ``docs/components.md`` holds them."""
    parts: list[str] = []
    for each in _TITLES:
        if kind not in (None, each):
            continue
        parts.append(f"### {_TITLES[each]}")
        for component in components(each, builtin_only=True):
            parts.append(f"#### `{component.name}`: {component.summary}")
            rule = (component.adaptive.__doc__ or "").strip().splitlines() if component.adaptive else []
            if rule:
                parts.append(f"Adaptive rule (`--rerank-preset adaptive`, the default): {rule[0]}")
            parts.append(markdown_table(component) if component.params else "No parameters.")
    return "\n\n".join(parts) + "\n"


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def markdown_table(component: Component) -> str:
    """``component``'s parameters as a Markdown table (the docs tables are generated from this).

    Examples
    --------
    >>> from galleria.components import Param
    >>> demo = Component("reranker", "demo", (Param("k", int, 3, 1, 9, paper=5, help="size"),), build=dict)
    >>> print(markdown_table(demo))
    | parameter | type | default | range | paper | tuned over | help |
    |---|---|---|---|---|---|---|
    | `k` | int | 3 | [1, 9] | 5 | — | size |
    """
    lines = [
        "| parameter | type | default | range | paper | tuned over | help |",
        "|---|---|---|---|---|---|---|",
    ]
    for param in component.params:
        space = param.space
        if space is None:
            tuned = "—"
        elif space.kind == "categorical":
            tuned = ", ".join(format_value(value) for value in space.choices)
        else:
            tuned = f"{format_value(space.low)}–{format_value(space.high)}" + (" (log)" if space.log else "")
        default = "none" if param.default is None else format_value(param.default)
        paper = format_value(param.paper) if param.has_paper else "—"
        cells = [
            f"`{param.name}`",
            param.type.__name__,
            default,
            param.range_text(),
            paper,
            tuned,
            param.help,
        ]
        lines.append("| " + " | ".join(_cell(cell) for cell in cells) + " |")
    return "\n".join(lines)


BEGIN = "<!-- BEGIN GENERATED: galleria methods --markdown -->"
END = "<!-- END GENERATED -->"


def with_tables(document: str) -> str:
    """``document`` (docs/components.md) with the part between its markers replaced by :func:`markdown`."""
    head, begin, rest = document.partition(BEGIN)
    _, end, tail = rest.partition(END)
    if not begin or not end:
        raise ValueError(f"the document has no {BEGIN} ... {END} markers")
    return f"{head}{BEGIN}\n{markdown()}{END}{tail}"


def _record(component: Component) -> dict[str, Any]:
    return {
        "kind": component.kind,
        "name": component.name,
        "label": component.title,
        "summary": component.summary,
        "params": [
            {
                "name": p.name,
                "type": p.type.__name__,
                "default": p.default,
                "range": p.range_text(),
                "paper": p.paper if p.has_paper else None,
                "help": p.help,
            }
            for p in component.params
        ],
    }


def add_parser(subparsers: Any) -> None:
    """Register ``galleria methods``."""
    parser = add_command(
        subparsers,
        "methods",
        help="list the re-rankers, indexes and embedders and their parameters",
        description="List every declared re-ranker, index and embedder (plugins included) with its "
        "parameters: type, default, range, the paper's value and a line of help.",
        examples=_EXAMPLES,
    )
    parser.add_argument("--kind", choices=tuple(_TITLES), default=None, help="list one kind only")
    shape = parser.add_mutually_exclusive_group()
    shape.add_argument("--json", action="store_true", help="print the list as JSON")
    shape.add_argument("--markdown", action="store_true", help="print the docs' parameter tables")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Print the listing."""
    if args.markdown:
        print(markdown(args.kind), end="")
        return 0
    chosen = components(args.kind)
    if args.json:
        print_json([_record(component) for component in chosen])
        return 0
    for kind in _TITLES:
        group = [c for c in chosen if c.kind == kind]
        if not group:
            continue
        print(f"{_TITLES[kind]}:")
        for component in group:
            print(f"  {component.name} — {component.summary}")
            for p in component.params:
                default = "none" if p.default is None else format_value(p.default)
                paper = f", paper {format_value(p.paper)}" if p.has_paper else ""
                kind = f"{p.type.__name__} in {p.range_text()}"
                print(f"      {p.name} ({kind}, default {default}{paper}): {p.help}")
    return 0
