"""A search index held by Milvus (Milvus Lite in a local ``.db`` file, or a Milvus server or cluster).

pymilvus is an optional dependency: ``pip install -e '.[milvus]'`` (pymilvus and milvus-lite).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from galleria._declare import Component
from galleria._moved import moved_names
from galleria._params import Param
from galleria._validation import check_choice
from galleria.distances import prepare_vectors
from galleria.index import _serial
from galleria.index._checks import check_k, check_rows, check_vectors, empty_result
from galleria.index._faiss import LiveRows
from galleria.index._milvus_settings import (
    BATCH,
    MAX_LIMIT,
    METRIC,
    MILVUS_INDEX_TYPES,
    ROW,
    SEARCH_PARAMS,
    VECTOR,
    check_collection,
    check_params,
    check_uri,
    client_class,
    read_rows,
    read_saved,
)
from galleria.index.base import SPACES

__all__ = ["MILVUS_INDEX_TYPES", "MilvusIndex"]

#: Names that moved (galleria 0.3): read from here they warn once, until galleria 0.4.0.
__getattr__ = moved_names(
    __name__,
    {
        "TOKEN_VARIABLE": "galleria.index._milvus_settings",
        "URI_VARIABLE": "galleria.index._milvus_settings",
        "check_token_destination": "galleria.index._milvus_settings",
    },
)


class MilvusIndex:
    """The :class:`~galleria.index.base.SearchIndex` contract on a Milvus collection (pymilvus).

    The collection holds one entity per row: an int64 primary key, the vector and (when given to
    :meth:`add`) its image path. Rows are positions, like every galleria index: :meth:`remove`
    deletes entities and renumbers the rest. Scores are distances — ``1 - <q, v>`` for cosine (the
    vectors are normalised before they are sent) and ip, squared Euclidean for l2 — and equal
    distances are ordered by row.

    ``uri`` is a Milvus Lite file (``"gallery.db"``, one machine, nothing to run) or a server or
    cluster (``"http://host:19530"`` with ``token``); the code is the same. :meth:`to_bytes`
    (what a saved store holds) records the uri, the collection, the index type and parameters and
    the row bookkeeping — never the token; loading reconnects (pass ``token`` again, or set
    ``GALLERIA_MILVUS_TOKEN``).

    Parameters
    ----------
    uri : str
        Milvus Lite ``.db`` file or server address.
    collection : str
        Collection name. An existing collection is reused (its vectors become rows in key order);
        a missing one is created on the first :meth:`add` unless ``create=False``.
    space : {"cosine", "ip", "l2"}
        Distance space.
    index_type : {"FLAT", "HNSW", "IVF_PQ"}
        Milvus index type.
    index_params : dict, optional
        Vendor-neutral names, as for the faiss indexes: HNSW ``graph_degree``, ``build_candidates``,
        ``search_candidates``; IVF_PQ ``lists``, ``subquantizers``, ``bits``, ``probe_lists``.
    token : str, optional
        Credentials for a server; never saved.
    create : bool
        Whether a missing collection may be created.

    Raises
    ------
    ImportError
        pymilvus is not installed (``pip install -e '.[milvus]'``).
    ValueError
        The uri cannot be reached, the collection is missing (``create=False``) or has another
        schema, dimension or metric.
    """

    name = "milvus"
    higher_is_better = False

    #: The store gives :meth:`add` each row's path, which the collection keeps in its ``path`` field.
    stores_paths = True

    def __init__(
        self,
        uri: str,
        collection: str,
        *,
        space: str = "cosine",
        index_type: str = "FLAT",
        index_params: Mapping[str, Any] | None = None,
        token: str | None = None,
        create: bool = True,
    ) -> None:
        self._uri = check_uri(uri)
        if not isinstance(collection, str) or not collection:
            raise TypeError(f"collection must be a non-empty str, got {collection!r}")
        self._collection = collection
        self._space = check_choice("space", space, SPACES)
        if not isinstance(index_type, str):
            raise TypeError(f"index_type must be one of {list(MILVUS_INDEX_TYPES)}, got {index_type!r}")
        self._index_type = check_choice("index_type", index_type.upper(), tuple(MILVUS_INDEX_TYPES))
        self._index_params = check_params(self._index_type, index_params)
        if token is not None and not isinstance(token, str):
            raise TypeError("token must be a str or None")
        self._client = self._connect(token)
        self._dim: int | None = None
        self._rows = LiveRows.identity(0)
        if self._client.has_collection(collection):
            self._dim = check_collection(self._client, self._collection, self._space)
            self._rows = read_rows(self._client, self._collection)
        elif not create:
            raise ValueError(f"Milvus collection {collection!r} does not exist at {self._uri!r}")

    def _connect(self, token: str | None) -> Any:
        connect = client_class()
        if not self._uri.startswith(("http://", "https://", "tcp://", "unix:")):
            folder = os.path.dirname(os.path.abspath(self._uri))
            if not os.path.isdir(folder):
                raise ValueError(f"uri {self._uri!r}: folder {folder!r} does not exist")
        try:
            return connect(uri=self._uri, token=token or "")
        except Exception as error:  # pymilvus raises its own exception types
            raise ValueError(f"cannot connect to Milvus at {self._uri!r}: {error}") from error

    def __repr__(self) -> str:
        return (
            f"MilvusIndex(uri={self._uri!r}, collection={self._collection!r}, space={self._space!r}, "
            f"index_type={self._index_type!r}, rows={len(self)})"
        )

    # ------------------------------------------------------------------ properties

    @property
    def space(self) -> str:
        """The distance space: ``"cosine"``, ``"ip"`` or ``"l2"``."""
        return self._space

    @property
    def dim(self) -> int | None:
        """Vector dimension, or None before the collection exists."""
        return self._dim

    @property
    def can_reconstruct(self) -> bool:
        """Always True: Milvus returns stored vectors (``output_fields``)."""
        return True

    @property
    def uri(self) -> str:
        """The Milvus address or Milvus Lite file."""
        return self._uri

    @property
    def collection(self) -> str:
        """The collection name."""
        return self._collection

    @property
    def client(self) -> Any:
        """The pymilvus ``MilvusClient``."""
        return self._client

    def __len__(self) -> int:
        return int(self._rows.internal.size)

    def params(self) -> dict[str, Any]:
        """Where the data lives and how it is indexed (JSON-able; never the token)."""
        return {
            "uri": self._uri,
            "collection": self._collection,
            "index_type": self._index_type,
            "index_params": dict(self._index_params),
        }

    # ------------------------------------------------------------------ collection

    def _create(self, dim: int) -> None:
        from pymilvus import DataType

        schema = self._client.create_schema(auto_id=False, enable_dynamic_field=False)
        schema.add_field(ROW, DataType.INT64, is_primary=True)
        schema.add_field(VECTOR, DataType.FLOAT_VECTOR, dim=dim)
        schema.add_field("path", DataType.VARCHAR, max_length=4096)
        names = MILVUS_INDEX_TYPES[self._index_type]
        build = {names[key]: value for key, value in self._index_params.items() if key not in SEARCH_PARAMS}
        index_params = self._client.prepare_index_params()
        index_params.add_index(
            field_name=VECTOR, index_type=self._index_type, metric_type=METRIC[self._space], params=build
        )
        try:
            self._client.create_collection(
                self._collection, schema=schema, index_params=index_params, consistency_level="Strong"
            )
        except Exception as error:
            raise ValueError(f"cannot create Milvus collection {self._collection!r}: {error}") from error
        self._dim = dim

    # ------------------------------------------------------------------ the SearchIndex contract

    def add(self, vectors: np.ndarray, paths: list[str] | None = None) -> None:
        """Insert an (n, dim) batch as rows ``len(self) .. len(self) + n - 1`` (with their paths if given)."""
        array = prepare_vectors(check_vectors("vectors", vectors, self._dim, self.space), self._space)
        count = array.shape[0]
        if paths is not None and (
            not isinstance(paths, (list, tuple))
            or len(paths) != count
            or not all(isinstance(p, str) for p in paths)
        ):
            raise ValueError(f"paths must be a list of {count} str, one per vector")
        if count == 0:
            return
        if self._dim is None:
            self._create(array.shape[1])
        first = self._rows.total
        for start in range(0, count, BATCH):
            block = array[start : start + BATCH]
            entities = [
                {
                    ROW: first + start + offset,
                    VECTOR: vector,
                    "path": "" if paths is None else paths[start + offset],
                }
                for offset, vector in enumerate(block)
            ]
            self._client.insert(self._collection, entities)
        self._rows.append(count)

    def _search_params(self) -> dict[str, Any]:
        names = MILVUS_INDEX_TYPES[self._index_type]
        params = {names[key]: value for key, value in self._index_params.items() if key in SEARCH_PARAMS}
        return {"metric_type": METRIC[self._space], "params": params}

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Return the ``k`` nearest rows of each query: (q, min(k, len)) ids and distances, best first."""
        k = check_k(k)
        array = check_vectors("queries", queries, self._dim, self.space)
        live = len(self)
        if live == 0:
            return empty_result(array.shape[0])
        array = prepare_vectors(array, self._space)
        k = min(k, live, MAX_LIMIT)
        params = self._search_params()
        if self._index_type == "HNSW":
            params["params"]["ef"] = max(k, int(params["params"].get("ef", k)))
        ids = np.full((array.shape[0], k), -1, dtype=np.int64)
        scores = np.full((array.shape[0], k), np.inf, dtype=np.float32)
        for start in range(0, array.shape[0], 1000):
            block = array[start : start + 1000]
            results = self._client.search(
                self._collection,
                data=[vector for vector in block],
                limit=k,
                anns_field=VECTOR,
                search_params=params,
                output_fields=[],
            )
            for offset, hits in enumerate(results):
                keys = [int(hit[ROW]) for hit in hits][:k]
                distances = [float(hit["distance"]) for hit in hits][:k]
                ids[start + offset, : len(keys)] = keys
                scores[start + offset, : len(keys)] = distances
        found = ids >= 0
        ids = np.where(found, self._rows.to_positions(np.maximum(ids, 0)), -1)
        if self._space != "l2":
            scores = np.where(found, 1.0 - scores, np.inf).astype(np.float32)
        order = np.lexsort((np.where(found, ids, np.iinfo(np.int64).max), scores), axis=1)
        return np.take_along_axis(ids, order, axis=1), np.take_along_axis(scores, order, axis=1)

    def reconstruct(self, rows: np.ndarray) -> np.ndarray:
        """Fetch the stored vectors of the given rows from Milvus, shape (len(rows), dim)."""
        positions = check_rows(rows, len(self))
        if positions.size == 0:
            return np.zeros((0, self._dim or 0), dtype=np.float32)
        keys = self._rows.internal[positions]
        unique = np.unique(keys)
        found: dict[int, Any] = {}
        for start in range(0, unique.size, BATCH):
            batch = [int(key) for key in unique[start : start + BATCH]]
            for entity in self._client.get(self._collection, ids=batch, output_fields=[VECTOR]):
                found[int(entity[ROW])] = entity[VECTOR]
        missing = [int(key) for key in unique if int(key) not in found]
        if missing:
            raise ValueError(f"Milvus collection {self._collection!r} lost rows with keys {missing[:5]}")
        return np.asarray([found[int(key)] for key in keys], dtype=np.float32)

    def paths(self, rows: np.ndarray) -> list[str]:
        """The paths stored with the given rows ("" where :meth:`add` was given none)."""
        positions = check_rows(rows, len(self))
        keys = [int(key) for key in self._rows.internal[positions]]
        entities = self._client.get(self._collection, ids=keys, output_fields=["path"]) if keys else []
        by_key = {int(entity[ROW]): str(entity.get("path", "")) for entity in entities}
        return [by_key.get(key, "") for key in keys]

    def remove(self, rows: np.ndarray) -> None:
        """Delete the given rows (duplicates count once); the rest are renumbered compactly, order kept."""
        positions = np.unique(check_rows(rows, len(self)))
        if positions.size == 0:
            return
        keys = self._rows.internal[positions]
        for start in range(0, keys.size, BATCH):
            self._client.delete(self._collection, ids=[int(key) for key in keys[start : start + BATCH]])
        self._rows.remove(positions)

    def drop(self) -> None:
        """Delete the whole collection from Milvus (the index is then empty)."""
        if self._client.has_collection(self._collection):
            self._client.drop_collection(self._collection)
        self._dim = None
        self._rows = LiveRows.identity(0)

    # ------------------------------------------------------------------ files

    def to_bytes(self) -> bytes:
        """Record where the data lives (uri, collection, index settings) and the row bookkeeping.

        The vectors stay in Milvus; no credentials are written.
        """
        meta = {"space": self._space, "dim": self._dim, "params": self.params(), "total": self._rows.total}
        return _serial.pack("milvus", meta, {"live": self._rows.internal})

    @classmethod
    def from_bytes(cls, data: bytes, *, token: str | None = None, uri: str | None = None) -> MilvusIndex:
        """Reconnect to the collection recorded by :meth:`to_bytes`; ValueError if it is gone or differs.

        ``token`` defaults to the ``GALLERIA_MILVUS_TOKEN`` environment variable, ``uri`` (the
        server the caller means) to ``GALLERIA_MILVUS_URI``. The data is untrusted, so its uri
        must be one the caller named (:func:`check_token_destination`): a token is never sent to
        a server only the file names. A Milvus Lite file named in the data must already exist:
        nothing is created while loading.
        """
        space, dim, params, total, live, credentials = read_saved(data, token, uri)
        try:
            index = cls(
                params["uri"],
                params["collection"],
                space=space,
                index_type=params["index_type"],
                index_params=params["index_params"],
                token=credentials,
                create=False,
            )
        except TypeError as error:
            raise ValueError(f"serialised milvus index has invalid parameters: {error}") from error
        if dim is not None and index.dim != dim:
            raise ValueError(f"Milvus collection has dimension {index.dim}, the saved index {dim}")
        if not np.array_equal(index._rows.internal, live):
            raise ValueError(
                f"Milvus collection {index.collection!r} holds {len(index)} rows, which differ from the "
                f"{live.size} rows the saved index recorded"
            )
        index._rows = LiveRows(live, int(total))
        return index


#: The declaration of the Milvus index (:mod:`galleria._declare`); made by the caller (it needs a
#: server), rebuilt from a store file only with ``connect``.
COMPONENT = Component(
    kind="index",
    name="milvus",
    summary="a Milvus collection (extra: milvus); built by the caller with a uri and a collection",
    params=(
        Param("uri", str, None, optional=True, help="the Milvus server or Milvus Lite file"),
        Param("collection", str, None, optional=True, help="the collection's name"),
        Param("index_type", str, "FLAT", choices=tuple(MILVUS_INDEX_TYPES), help="Milvus's index type"),
    ),
    build=MilvusIndex,
    order=30,
    extra={"from_bytes": MilvusIndex.from_bytes},
)
