"""``galleria info``: what a store file holds — embedder, index, space, size, re-ranking parts, skips."""

from __future__ import annotations

import argparse
import os
from typing import Any

from galleria.cli._common import add_command, print_json
from galleria.cli._store_options import add_load_options, load_store
from galleria.viewer.text import printable

__all__ = ["add_parser", "describe_store", "run"]

_EXAMPLES = """\
  galleria info photos.safetensors
  galleria info photos.safetensors --json
"""


def add_parser(subparsers: Any) -> None:
    """Register ``galleria info``."""
    parser = add_command(
        subparsers,
        "info",
        help="describe a store file: embedder, index, space, size",
        description=(
            "Load a store file (checking it, as every command does) and print its embedder, index and "
            "parameters, distance space, vector dimension, image count, the files skipped when it was "
            "built, its format version and its size on disk."
        ),
        examples=_EXAMPLES,
    )
    parser.add_argument("store", metavar="STORE", help="store file written by `galleria build`")
    add_load_options(parser)
    parser.add_argument("--json", action="store_true", help="print the description as JSON")
    parser.set_defaults(run=run)


class _NoModel:
    """Stands in for the saved embedder, so describing a store never loads its model."""

    def __init__(self, dim: Any) -> None:
        self.dim = dim

    def embed(self, images: Any) -> Any:  # pragma: no cover - never called
        raise RuntimeError("galleria info does not embed")


def describe_store(path: str, store: Any) -> dict[str, Any]:
    """The JSON-able description of a store file loaded by :func:`run` (``galleria info --json``).

    The embedder is described from the file's header (its saved config), not rebuilt.
    """
    from galleria.embedders import describe_weights
    from galleria.store.persistence import read_store_header

    header = read_store_header(path)
    entry = header.get("embedder")
    config = entry.get("config") if isinstance(entry, dict) else None
    index = store.search_index
    graph = _graph_record(path, store)
    return {
        "store": path,
        "format_version": header.get("format_version"),
        "file_bytes": os.path.getsize(path),
        "count": len(store),
        "dim": store.dim,
        "space": store.space,
        "index": {"name": index.name, "params": index.params()},
        # What an index chose and measured while it was built (IVF-PQ: its recall on the gallery).
        "index_build": getattr(index, "build_report", None),
        "embedder": config,
        "weights": describe_weights(config),
        "text_queries": isinstance(config, dict) and config.get("type") == "clip",
        "runtime": _runtime_of(config),
        "skipped": store.skipped,
        "rerank": _rerank_record(store),
        "extensions": _extension_records(store),
        "labels_root": store.labels_root,
        "graph": graph,
        "duplicates": _duplicates_record(store, config, graph),
    }


#: Above this many images, ``info`` calibrates the duplicates threshold only from a current STORE.graph.
_THRESHOLD_BUILD_LIMIT = 20_000


def _duplicates_record(store: Any, config: Any, graph: dict[str, Any] | None) -> dict[str, Any] | None:
    """The near-copy threshold ``galleria duplicates`` would apply (None: not computed, no graph at hand).

    A large store is calibrated only from a current ``STORE.graph`` (read, as loading remembered it).
    """
    from galleria.curation.threshold import DEFAULT_K, store_threshold

    kept = graph is not None and graph.get("current") and graph.get("k", 0) >= DEFAULT_K
    if len(store) > _THRESHOLD_BUILD_LIMIT and not kept:
        return None
    threshold, basis = store_threshold(store, embedder_config=config)
    return {"threshold": threshold, **basis}


def _graph_record(path: str, store: Any) -> dict[str, Any] | None:
    """What ``STORE.graph`` beside the store holds: its k, method, size, and whether it is of this state."""
    from galleria.store.graph import graph_file_for, graph_state, read_graph_header

    side = graph_file_for(path)
    if not os.path.exists(side):
        return None
    try:
        header = read_graph_header(side)
    except ValueError as error:
        return {"file": side, "problem": str(error)}
    current = header["state"] == graph_state(store) and header["n"] == len(store)
    return {
        "file": side,
        "k": header["k"],
        "method": header["method"],
        "current": current,
        "file_bytes": os.path.getsize(side),
    }


def _graph_text(record: dict[str, Any] | None) -> str:
    if record is None:
        return "none kept (galleria graph STORE --k K builds one)"
    if "problem" in record:
        return f"unreadable: {record['problem']}"
    state = "current" if record["current"] else "of another store state (ignored, rebuilt on use)"
    return f"k={record['k']} ({record['method']}), {_size_text(record['file_bytes'])}, {state}"


def _duplicates_text(record: dict[str, Any] | None) -> str:
    if record is None:
        return "threshold not computed (no current neighbour graph: galleria graph STORE builds one)"
    return f"threshold {record['threshold']:.4g} (calibrated on this store, {record['rule']})"


def _rerank_record(store: Any) -> dict[str, Any]:
    """What the store keeps for re-ranking: its DBA augmentation (its vectors replaced by it), a
    precomputed offline part and the gallery statistics.

    Each was checked when the file was loaded; ``None`` when the file holds none.
    """
    offline = getattr(store, "_offline_diffusion", None)
    statistics = getattr(store, "_rerank_statistics", None)
    augmentation = getattr(store, "augmentation", None)
    return {
        "augmentation": None if augmentation is None else dict(augmentation),
        "precomputed": (
            None if offline is None else {"method": "decoupled-diffusion", "params": dict(offline.params)}
        ),
        "statistics": None if statistics is None else statistics.record(),
    }


def _extension_records(store: Any) -> list[dict[str, Any]]:
    """The store file's other extension records (:mod:`galleria.store.extensions`), by name: those
    no registered codec reads are kept unread (``"read": false``), with their size and tensors."""
    from galleria.store.extensions import OpaqueRecord

    records = []
    for name, value in sorted(getattr(store, "_extensions", {}).items()):
        if isinstance(value, OpaqueRecord):
            records.append({**value.describe(), "read": False})
        else:
            records.append({"name": name, "read": True})
    return records


def _extensions_text(records: list[dict[str, Any]]) -> str:
    parts = []
    for record in records:
        if record["read"]:
            parts.append(str(record["name"]))
            continue
        tensors = ", ".join(f"{key} {shape}" for key, shape in record["tensors"].items())
        parts.append(
            f"{record['name']} (kept unread, no codec registered: {record['record_bytes']} B record"
            + (f"; tensors {tensors})" if tensors else ")")
        )
    return "; ".join(parts)


def _rerank_text(record: dict[str, Any]) -> str:
    parts = []
    augmentation = record["augmentation"]
    if augmentation is not None:
        params = ", ".join(f"{key}={value}" for key, value in augmentation.items() if key != "method")
        parts.append(f"vectors augmented by {str(augmentation['method']).upper()} ({params})")
    if record["precomputed"] is not None:
        params = ", ".join(f"{key}={value}" for key, value in record["precomputed"]["params"].items())
        parts.append(f"{record['precomputed']['method']} offline part kept ({params})")
    statistics = record["statistics"]
    if statistics is not None:
        pairs = ", ".join(
            f"{share:.2f} at k={k}" for k, share in zip(statistics["ks"], statistics["share"], strict=False)
        )
        parts.append(f"mutual-neighbour share {pairs or '–'} ({statistics['n_sample']} sampled items)")
    return "; ".join(parts) if parts else "nothing kept (computed on first use)"


def _runtime_of(config: dict[str, Any] | None) -> str | None:
    """Where the store's network ran when it was built (older timm stores and CLIP: torch)."""
    if not isinstance(config, dict) or config.get("type") not in ("timm", "clip"):
        return None
    runtime = config.get("runtime", "torch")
    return runtime if runtime in ("torch", "onnx") else None


def _embedder_text(config: dict[str, Any] | None) -> str:
    if config is None:
        return "none (made from vectors; search it by vector)"
    kind = config.get("type", "?")
    weights = ("pretrained", "checkpoint_name", "checkpoint_sha256")  # on their own line (``weights:``)
    rest = ", ".join(
        f"{key}={str(value)[:12] + '…' if key.endswith('sha256') else value}"
        for key, value in config.items()
        if key != "type" and (key not in weights or config.get("type") not in ("timm", "clip"))
    )
    return f"{kind} ({rest})" if rest else str(kind)


def _build_text(report: dict[str, Any]) -> str:
    chosen = ", ".join(report.get("chosen") or []) or "nothing (all given)"
    recall = report.get("recall_at_10")
    if recall is None:
        measured = "recall not measured"
    else:
        measured = (
            f"recall@10 {recall:.3f} on {report.get('sample_queries')} gallery vectors at "
            f"probe_lists={report.get('probe_lists')} (target {report.get('recall_target')})"
        )
    return f"{measured}; chosen from the gallery: {chosen}"


def _size_text(size: int) -> str:
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{size} B" if unit == "B" else f"{value:.1f} {unit} ({size} B)"
        value /= 1024
    return f"{size} B"  # pragma: no cover - the loop always returns


def run(args: argparse.Namespace) -> int:
    """Print the description of the store."""
    from galleria.cli._parse import check_existing_file
    from galleria.store.persistence import read_store_header

    dim = read_store_header(check_existing_file("store file", args.store)).get("dim")
    store = load_store(args, args.store, embedder=_NoModel(dim) if isinstance(dim, int) else None)
    info = describe_store(args.store, store)
    if args.json:
        print_json(info)
        return 0
    params = ", ".join(f"{key}={value}" for key, value in info["index"]["params"].items())
    lines = [
        f"store:          {info['store']}",
        f"images:         {info['count']}",
        f"embedder:       {_embedder_text(info['embedder'])}",
        *([f"weights:        {info['weights']['text']}"] if info["weights"] else []),
        f"index:          {info['index']['name']}" + (f" ({params})" if params else ""),
        *([f"index build:    {_build_text(info['index_build'])}"] if info["index_build"] else []),
        f"space:          {info['space']}",
        f"dim:            {info['dim']}",
        f"text queries:   {'yes' if info['text_queries'] else 'no'}",
        *([f"runtime:        {info['runtime']}"] if info["runtime"] else []),
        f"format version: {info['format_version']}",
        f"file size:      {_size_text(info['file_bytes'])}",
        f"re-ranking:     {_rerank_text(info['rerank'])}",
        *([f"extensions:     {_extensions_text(info['extensions'])}"] if info["extensions"] else []),
        f"labels root:    {info['labels_root'] or 'not recorded (the common folder of the paths)'}",
        f"neighbor graph: {_graph_text(info['graph'])}",
        f"duplicates:     {_duplicates_text(info['duplicates'])}",
        f"skipped files:  {len(info['skipped'])}",
        *(f"  {path}" for path in info["skipped"]),
    ]
    for line in lines:  # the file's own strings (paths, config values) may hold control characters
        print(printable(line))
    return 0
