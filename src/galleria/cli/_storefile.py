"""Reading the JSON header of a store file without loading the store (the CLI's view of it).

Callers use it for what the loaded store object does not tell: the format version, the embedder
config as saved, and the settings of a build checkpoint. The header is checked as loading checks it
(:func:`galleria.store.persistence.read_store_header`).
"""

from __future__ import annotations

from galleria.store.persistence import read_store_header

__all__ = ["read_store_header"]
