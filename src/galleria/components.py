"""The public API for writing components and plugins (see docs/extending.md): everything a plugin
needs is here, and nothing a plugin needs is anywhere else.

* Declaring: :class:`Component`, :class:`Param`, :class:`Space`, :data:`PLUGIN_API_VERSION`,
  :data:`KINDS`, :data:`MAX_WORK`, :class:`DeclarationError`, :func:`format_value`.
* One contract per kind, what galleria calls:

  - a re-ranker: :class:`Reranker` (``rerank``, a ``store``, a batched ``rerank_batch`` by default),
    or :class:`PoolReranker` for a method that scores each pool from its similarities, with
    :func:`check_store`, :func:`similarities_from_distances` and :class:`Candidate`
    (``candidate.rescored(score)``); an adaptive rule reads :class:`GalleryStatistics` through
    :func:`read_statistics`;
  - an index: :class:`SearchIndex` (:data:`SPACES`);
  - an embedder: :class:`Embedder` (:class:`TextEmbedder` with a text side).

  :data:`CONTRACTS` lists the methods each kind must have: a plugin whose class lacks one is refused
  at discovery with a :class:`PluginWarning`.
* A plugin's own records in a store file: :class:`ExtensionCodec`, :class:`ExtensionContext`,
  :func:`register_extension`, then ``store.set_extension(name, value)`` / ``store.extension(name)``.
* What a plugin's failures become: :class:`PluginWarning` (refused at discovery),
  :class:`PluginError` (its code raised while galleria ran it). :data:`NO_PLUGINS_VARIABLE` turns
  discovery off.

A package exposes a component through the entry-point groups ``galleria.rerankers``,
``galleria.indexes`` and ``galleria.embedders``.
"""

from __future__ import annotations

from galleria._declare import KINDS, MAX_WORK, PLUGIN_API_VERSION, Component
from galleria._params import DeclarationError, Param, Space, format_value
from galleria._plugin_guard import CONTRACTS, PluginError
from galleria._plugins import NO_PLUGINS_VARIABLE
from galleria._warnings import PluginWarning
from galleria.embedders.base import Embedder, TextEmbedder
from galleria.index.base import SPACES, SearchIndex
from galleria.rerank.base import PoolReranker, Reranker, check_store, similarities_from_distances
from galleria.statistics import GalleryStatistics, read_statistics
from galleria.store.candidate import Candidate
from galleria.store.extensions import ExtensionCodec, ExtensionContext, register_extension

__all__ = [
    "CONTRACTS",
    "KINDS",
    "MAX_WORK",
    "NO_PLUGINS_VARIABLE",
    "PLUGIN_API_VERSION",
    "SPACES",
    "Candidate",
    "Component",
    "DeclarationError",
    "Embedder",
    "ExtensionCodec",
    "ExtensionContext",
    "GalleryStatistics",
    "Param",
    "PluginError",
    "PluginWarning",
    "PoolReranker",
    "Reranker",
    "SearchIndex",
    "Space",
    "TextEmbedder",
    "check_store",
    "format_value",
    "read_statistics",
    "register_extension",
    "similarities_from_distances",
]
