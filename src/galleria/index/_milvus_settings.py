"""Where a :class:`~galleria.index.milvus.MilvusIndex` connects and with what: the Milvus index
types and their parameters, the uri, the credentials (which go only to a server the user named), and
the schema of an existing collection, and the header of a saved index read back (untrusted)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from galleria._validation import is_int
from galleria.index import _serial
from galleria.index._faiss import LiveRows
from galleria.index.base import SPACES

__all__ = [
    "BATCH",
    "MAX_LIMIT",
    "METRIC",
    "MILVUS_INDEX_TYPES",
    "ROW",
    "SEARCH_PARAMS",
    "TOKEN_VARIABLE",
    "URI_VARIABLE",
    "VECTOR",
    "check_collection",
    "check_params",
    "check_token_destination",
    "check_uri",
    "client_class",
    "read_rows",
    "read_saved",
]

#: Milvus index types and the vendor-neutral parameter names each takes (→ Milvus's own names).
MILVUS_INDEX_TYPES: dict[str, dict[str, str]] = {
    "FLAT": {},
    "HNSW": {"graph_degree": "M", "build_candidates": "efConstruction", "search_candidates": "ef"},
    "IVF_PQ": {"lists": "nlist", "subquantizers": "m", "bits": "nbits", "probe_lists": "nprobe"},
}
SEARCH_PARAMS = {"search_candidates", "probe_lists"}
_DEFAULTS = {"graph_degree": 16, "build_candidates": 200, "search_candidates": 64, "lists": 128, "bits": 8}
METRIC = {"cosine": "IP", "ip": "IP", "l2": "L2"}  # cosine vectors are normalised first
ROW, VECTOR = "row", "vector"
BATCH = 5_000
MAX_LIMIT = 16_384


def client_class() -> Any:
    try:
        from pymilvus import MilvusClient
    except ImportError as error:  # pragma: no cover - exercised only without the extra
        raise ImportError("MilvusIndex needs pymilvus and milvus-lite: pip install -e '.[milvus]'") from error
    return MilvusClient


#: Environment variables of the server credentials and of the server they are meant for.
TOKEN_VARIABLE = "GALLERIA_MILVUS_TOKEN"
URI_VARIABLE = "GALLERIA_MILVUS_URI"
_NETWORK = ("http://", "https://", "tcp://", "unix:")


def _same_server(first: str, second: str) -> bool:
    return first.rstrip("/").lower() == second.rstrip("/").lower()


def check_token_destination(saved_uri: Any, named_uri: str | None, token: str | None) -> str | None:
    """The token to send to ``saved_uri`` (a uri an untrusted file records): ValueError if unsafe.

    Credentials go only where the user sends them. A uri the user named (``named_uri``: the
    ``GALLERIA_MILVUS_URI`` variable or an argument) must be the file's; a token with no uri
    named is refused rather than sent to whatever server the file records. A Milvus Lite file
    (``.db``) is local and gets no token.

    Examples
    --------
    >>> check_token_destination("http://db:19530", "http://db:19530/", "secret")
    'secret'
    >>> check_token_destination("lite.db", None, "secret") is None
    True
    """
    if not isinstance(saved_uri, str) or not saved_uri:
        raise ValueError(f"serialised milvus index records an invalid uri {saved_uri!r}")
    if named_uri is not None and not _same_server(saved_uri, named_uri):
        raise ValueError(
            f"the store file records the Milvus server {saved_uri!r}, but {URI_VARIABLE} (the server you "
            f"named) is {named_uri!r}; galleria connects, and sends {TOKEN_VARIABLE}, only to the server "
            "you named"
        )
    if not saved_uri.startswith(_NETWORK):
        return None
    if token is not None and named_uri is None:
        raise ValueError(
            f"{TOKEN_VARIABLE} is set, but no Milvus server is named: the store file records "
            f"{saved_uri!r}; set {URI_VARIABLE} to that address if it is the server the token is for "
            "(a store file never chooses where credentials go)"
        )
    return token


def check_uri(uri: Any) -> str:
    if isinstance(uri, os.PathLike):
        uri = os.fspath(uri)
    if not isinstance(uri, str) or not uri:
        raise TypeError(f"uri must be a non-empty str (a local .db file or http(s)://host:port), got {uri!r}")
    if uri.startswith(("http://", "https://", "tcp://", "unix:")):
        return uri
    if not uri.endswith(".db"):
        raise ValueError(
            f"uri must be a Milvus Lite file ending in '.db' or an http(s):// address, got {uri!r}"
        )
    return uri


def check_params(index_type: str, params: Mapping[str, Any] | None) -> dict[str, int]:
    if params is None:
        params = {}
    if not isinstance(params, Mapping):
        raise TypeError(f"index_params must be a mapping or None, got {type(params).__name__}")
    allowed = MILVUS_INDEX_TYPES[index_type]
    unknown = sorted(str(key) for key in params if key not in allowed)
    if unknown:
        raise ValueError(
            f"unknown parameter(s) {unknown} for a Milvus {index_type} index; "
            f"valid names are {sorted(allowed)}"
        )
    checked: dict[str, int] = {}
    for name in allowed:
        value = params.get(name, _DEFAULTS.get(name))
        if value is None:
            continue
        if not is_int(value) or value < 1:
            raise ValueError(f"index parameter {name!r} must be a positive integer, got {value!r}")
        checked[name] = int(value)
    return checked


def read_saved(
    data: bytes, token: str | None, uri: str | None
) -> tuple[str, Any, dict[str, Any], int, np.ndarray, str | None]:
    """A saved index's header checked: ``(space, dim, params, total, live rows, token to send)``."""
    meta, arrays = _serial.unpack(data, "milvus")
    space, dim, params, total = meta.get("space"), meta.get("dim"), meta.get("params"), meta.get("total")
    if space not in SPACES or not isinstance(params, dict) or not isinstance(total, int) or total < 0:
        raise ValueError("serialised milvus index has a corrupt header")
    if set(params) != {"uri", "collection", "index_type", "index_params"}:
        raise ValueError(f"serialised milvus index has unexpected parameters {sorted(params)}")
    live = arrays.get("live")
    if live is None or live.dtype != np.int64 or live.ndim != 1:
        raise ValueError("serialised milvus index lacks its 'live' row array")
    if live.size and (live[0] < 0 or live[-1] >= total or (np.diff(live) <= 0).any()):
        raise ValueError("serialised milvus index has an invalid 'live' row array")
    saved_uri = params["uri"]
    if isinstance(saved_uri, str) and saved_uri.endswith(".db") and not os.path.exists(saved_uri):
        raise ValueError(f"the Milvus Lite file {saved_uri!r} named by the saved index does not exist")
    credentials = token if token is not None else os.environ.get(TOKEN_VARIABLE) or None
    named = uri if uri is not None else os.environ.get(URI_VARIABLE) or None
    credentials = check_token_destination(saved_uri, named, credentials)
    return space, dim, params, total, live, credentials


def check_collection(client: Any, collection: str, space: str) -> int:
    """Check an existing collection's schema (galleria's fields, the metric of ``space``); its dimension."""
    info = client.describe_collection(collection)
    fields = {field["name"]: field for field in info.get("fields", [])}
    vector, row = fields.get(VECTOR), fields.get(ROW)
    if vector is None or row is None or not row.get("is_primary"):
        raise ValueError(
            f"Milvus collection {collection!r} lacks galleria's schema (an int64 primary key "
            f"{ROW!r} and a float vector field {VECTOR!r}); fields: {sorted(fields)}"
        )
    dim = int(vector.get("params", {}).get("dim", 0))
    if dim < 1:
        raise ValueError(f"Milvus collection {collection!r} has no vector dimension")
    try:
        described = client.describe_index(collection, VECTOR)
    except Exception:  # no index on the field yet
        described = {}
    metric = described.get("metric_type") if described else None
    if metric is not None and metric != METRIC[space]:
        raise ValueError(
            f"Milvus collection {collection!r} uses metric {metric}, but space {space!r} "
            f"needs {METRIC[space]}"
        )
    return dim


def read_rows(client: Any, collection: str) -> LiveRows:
    """The collection's primary keys, sorted: they become rows 0 .. n - 1."""
    keys: list[int] = []
    iterator = client.query_iterator(collection, batch_size=BATCH, filter=f"{ROW} >= 0", output_fields=[ROW])
    try:
        while True:
            batch = iterator.next()
            if not batch:
                break
            keys.extend(int(entity[ROW]) for entity in batch)
    finally:
        iterator.close()
    internal = np.unique(np.asarray(keys, dtype=np.int64))
    return LiveRows(internal, int(internal[-1]) + 1 if internal.size else 0)
