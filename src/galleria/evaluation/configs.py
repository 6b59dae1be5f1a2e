"""The retrieval configurations an evaluation compares: plain search, αQE, k-reciprocal re-ranking."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from galleria._validation import check_choice, check_fraction, check_positive_int
from galleria.expansion import check_expansion_alpha
from galleria.rerank.registry import DEFAULT_METHOD, check_method_params, label

__all__ = ["DEFAULT_POOL", "RetrievalConfig", "standard_configs"]

#: Candidates re-ranked per query when nothing says otherwise: here, in every command's ``--pool`` and
#: in ``galleria serve`` (the spec's benchmark pool).
DEFAULT_POOL = 200


@dataclass(frozen=True)
class RetrievalConfig:
    """How to answer one query: search, optionally with αQE, optionally re-ranked.

    Parameters
    ----------
    name : str
        Short identifier used in ``metrics.json`` (``"plain"``, ``"aqe"``, ``"aqe+rerank"``...).
    query_expansion : bool
        Search with alpha query expansion (``store.retrieve_top_k_similar(query_expansion=True)``).
    expansion_alpha, expansion_neighbors : float, int
        αQE's exponent and the number of matches it averages.
    rerank : bool
        Re-rank a pool of the first ``pool`` candidates (of the expanded query when
        ``query_expansion`` is set) with the re-ranker ``rerank_method``.
    k1, k2, lambda_value : int, int, float
        The k-reciprocal re-ranker's parameters.
    pool : int
        How many candidates are re-ranked.
    rerank_method : str
        One of :data:`galleria.rerank.RERANK_METHODS` (default ``"k-reciprocal"``). With ``"dba"``
        the candidates are searched in the DBA-augmented store (made once per evaluation).
    rerank_params : dict
        The parameters of a method other than k-reciprocal (see :func:`galleria.rerank.make_reranker`);
        a parameter left out takes the re-ranker's default.
    rerank_preset : {"paper", "adaptive"}
        ``"paper"`` (the default here): the parameters above. ``"adaptive"``: the re-ranking
        parameters are read from the gallery when the configuration meets a store
        (:meth:`resolve`, :func:`galleria.rerank.adaptive.default_rerank_params`); the fields
        above are then ignored.

    Examples
    --------
    >>> RetrievalConfig("aqe", query_expansion=True).settings()
    {'query_expansion': True, 'expansion_alpha': 3.0, 'expansion_neighbors': 50, 'rerank': False}
    """

    name: str
    query_expansion: bool = False
    expansion_alpha: float = 3.0
    expansion_neighbors: int = 50
    rerank: bool = False
    k1: int = 20
    k2: int = 6
    lambda_value: float = 0.3
    pool: int = DEFAULT_POOL
    rerank_method: str = DEFAULT_METHOD
    rerank_params: dict[str, Any] = field(default_factory=dict)
    rerank_preset: str = "paper"

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise TypeError(f"name must be a non-empty str, got {self.name!r}")
        for flag in ("query_expansion", "rerank"):
            if not isinstance(getattr(self, flag), bool):
                raise TypeError(f"{flag} must be a bool, got {getattr(self, flag)!r}")
        object.__setattr__(
            self, "expansion_alpha", check_expansion_alpha("expansion_alpha", self.expansion_alpha)
        )
        for name in ("expansion_neighbors", "k1", "k2", "pool"):
            object.__setattr__(self, name, check_positive_int(name, getattr(self, name)))
        if self.k2 > self.k1:
            raise ValueError(f"k2 must not exceed k1, got k2={self.k2!r} > k1={self.k1!r}")
        object.__setattr__(self, "lambda_value", check_fraction("lambda_value", self.lambda_value))
        if self.rerank_method == DEFAULT_METHOD and self.rerank_params:
            raise ValueError("k-reciprocal takes k1, k2 and lambda_value as fields, not in rerank_params")
        params = check_method_params(  # the work of one request is bounded too
            self.rerank_method, self.rerank_params, pool=self.pool if self.rerank else None
        )
        object.__setattr__(self, "rerank_params", {} if self.rerank_method == DEFAULT_METHOD else params)
        check_choice("rerank_preset", self.rerank_preset, ("paper", "adaptive"))

    @property
    def adaptive(self) -> bool:
        """Whether the re-ranking parameters are still to be read from a gallery (:meth:`resolve`)."""
        return self.rerank and self.rerank_preset == "adaptive"

    def resolve(self, store: Any) -> RetrievalConfig:
        """This configuration with its re-ranking parameters read from ``store``'s gallery if adaptive.

        A configuration that is not adaptive is returned as it is.
        """
        if not self.adaptive:
            return self
        from galleria.rerank.adaptive import default_rerank_params

        params = default_rerank_params(store, self.rerank_method)
        if self.rerank_method == DEFAULT_METHOD:
            return replace(self, rerank_preset="paper", **params)
        return replace(self, rerank_preset="paper", rerank_params=params)

    def reranker_params(self) -> dict[str, Any]:
        """The keyword arguments of :func:`galleria.rerank.make_reranker` for this configuration."""
        if self.rerank_method == DEFAULT_METHOD:
            return {"k1": self.k1, "k2": self.k2, "lambda_value": self.lambda_value}
        return dict(self.rerank_params)

    def settings(self) -> dict[str, Any]:
        """The JSON-able settings of this configuration (αQE and re-ranking keys only when they are on)."""
        result: dict[str, Any] = {"query_expansion": self.query_expansion}
        if self.query_expansion:
            result["expansion_alpha"] = self.expansion_alpha
            result["expansion_neighbors"] = self.expansion_neighbors
        result["rerank"] = self.rerank
        if self.adaptive:
            if self.rerank_method != DEFAULT_METHOD:
                result["rerank_method"] = self.rerank_method
            result.update(rerank_preset="adaptive", pool=self.pool)
        elif self.rerank and self.rerank_method == DEFAULT_METHOD:
            result.update(k1=self.k1, k2=self.k2, lambda_value=self.lambda_value, pool=self.pool)
        elif self.rerank:
            result.update(rerank_method=self.rerank_method, **self.rerank_params, pool=self.pool)
        return result

    @property
    def title(self) -> str:
        """A human-readable name with the settings, for tables and legends."""
        parts: list[str] = []
        if self.query_expansion:
            parts.append(f"αQE (α={_shown(self.expansion_alpha)}, n={self.expansion_neighbors})")
        if self.adaptive:  # labels are the declarations' (galleria.rerank.registry.label)
            parts.append(f"{label(self.rerank_method)} (adaptive, pool={self.pool})")
        elif self.rerank:
            parts.append(label(self.rerank_method, self.reranker_params(), pool=self.pool))
        return " + ".join(parts) if parts else "plain retrieval"


def _shown(value: Any) -> str:
    """A number as given: short (``0.3``, ``1``), with every digit when short would round it.

    Examples
    --------
    >>> _shown(1.0), _shown(0.3), _shown(0.123456789), _shown(7), _shown("gallery")
    ('1', '0.3', '0.123456789', '7', 'gallery')
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    short = format(value, "g")
    return short if float(short) == value else repr(value)


def standard_configs(
    *,
    expand: bool = True,
    rerank: bool = True,
    expansion_alpha: float = 3.0,
    expansion_neighbors: int = 50,
    k1: int = 20,
    k2: int = 6,
    lambda_value: float = 0.3,
    pool: int = DEFAULT_POOL,
    rerank_method: str = DEFAULT_METHOD,
    rerank_params: dict[str, Any] | None = None,
    rerank_preset: str = "paper",
) -> list[RetrievalConfig]:
    """The configurations of the benchmark table: plain, then αQE, then re-ranking.

    Plain retrieval is always first. ``expand`` adds ``"aqe"``; ``rerank`` adds the re-ranked
    configuration, on the expanded query's pool (``"aqe+rerank"``) when ``expand`` is on and on
    the plain query's pool (``"rerank"``) otherwise; ``rerank_method`` and ``rerank_params`` choose
    another re-ranker than k-reciprocal, and ``rerank_preset="adaptive"`` reads its parameters from
    the gallery.

    Examples
    --------
    >>> [config.name for config in standard_configs()]
    ['plain', 'aqe', 'aqe+rerank']
    >>> [config.name for config in standard_configs(expand=False)]
    ['plain', 'rerank']
    """
    configs = [
        RetrievalConfig("plain", expansion_alpha=expansion_alpha, expansion_neighbors=expansion_neighbors)
    ]
    if expand:
        configs.append(
            RetrievalConfig(
                "aqe",
                query_expansion=True,
                expansion_alpha=expansion_alpha,
                expansion_neighbors=expansion_neighbors,
            )
        )
    if rerank:
        configs.append(
            RetrievalConfig(
                "aqe+rerank" if expand else "rerank",
                query_expansion=expand,
                expansion_alpha=expansion_alpha,
                expansion_neighbors=expansion_neighbors,
                rerank=True,
                k1=k1,
                k2=k2,
                lambda_value=lambda_value,
                pool=pool,
                rerank_method=rerank_method,
                rerank_params=dict(rerank_params or {}),
                rerank_preset=rerank_preset,
            )
        )
    return configs
