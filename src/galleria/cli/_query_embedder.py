"""The embedder that turns ``galleria search``'s query images or texts into vectors.

A store records the embedder that made its vectors, and search rebuilds it. A store made from vectors
(``galleria import clip-retrieval``, ``from_embeddings``) records none: ``--embedder SPEC`` then names
the model that made them, as ``galleria models`` spells it. The named embedder is checked against
the store's header before the store is loaded: its output dimension must be the store's, its space
(when it declares one) must rank as the store's does, and when the store does record an embedder the
named one must be the same model. Every refusal is one line (:class:`CliError`, exit 2).
"""

from __future__ import annotations

from typing import Any

from galleria.cli._common import CliError

__all__ = ["check_space", "query_embedder"]

#: Spaces that rank unit vectors alike: galleria's embedders all return L2-normalised rows.
_UNIT_SPACES = frozenset({"cosine", "ip"})
#: Config keys that say how an embedder runs, not which model it is.
_RUN_KEYS = frozenset({"batch_size", "device", "runtime", "num_threads"})


def check_space(embedder: Any, space: str, name: str) -> None:
    """ValueError when ``embedder`` declares a ``space`` that does not rank like the store's ``space``.

    An embedder without a ``space`` attribute returns unit vectors (every built-in one does), which
    cosine and inner product rank alike; such an embedder fits every store.
    """
    declared = getattr(embedder, "space", None)
    if declared is None or declared == space or {declared, space} <= _UNIT_SPACES:
        return
    raise ValueError(
        f"{name} ({type(embedder).__name__}) makes vectors for space {declared!r}, "
        f"but the store's space is {space!r}"
    )


def _model(config: Any) -> dict[str, Any] | None:
    if not isinstance(config, dict):
        return None
    return {key: value for key, value in config.items() if key not in _RUN_KEYS}


def query_embedder(spec: str | None, store_path: str, runtime: str | None = None) -> Any:
    """The embedder named by ``--embedder`` (None when not given), checked against the store's header.

    Raises :class:`CliError` when the store records no embedder and ``spec`` is None, or when the
    named embedder's dimension, space or model disagrees with the store.
    """
    from galleria.cli._embedder_options import make_embedder
    from galleria.cli._parse import check_existing_file
    from galleria.embedders import embedder_config
    from galleria.store import check_embedder_dim
    from galleria.store.persistence import read_store_header

    header = read_store_header(check_existing_file("store file", store_path))
    saved = header.get("embedder")
    if spec is None:
        if saved is None:
            raise CliError(
                f"store {store_path!r} records no embedder (it was made from vectors); name the model "
                "that made them with --embedder SPEC (`galleria models` lists them)"
            )
        return None
    embedder = make_embedder(spec, runtime=runtime)
    name = f"--embedder {spec!r}"
    try:
        check_embedder_dim(embedder, int(header["dim"]), name)
        check_space(embedder, str(header["space"]), name)
    except ValueError as error:
        raise CliError(f"{error} (store {store_path!r})") from None
    recorded = _model(saved.get("config")) if isinstance(saved, dict) else None
    named = _model(embedder_config(embedder))
    if recorded is not None and named is not None and recorded != named:
        raise CliError(
            f"{name} is not the model store {store_path!r} was built with ({recorded.get('type')} "
            f"{recorded.get('model_name', '')}); leave --embedder out to use the store's own"
        )
    return embedder
