"""A store's extension records, attached and read by their owners (a plugin's table over the gallery).

:class:`ExtensionRecordsMixin` gives the store :meth:`~ExtensionRecordsMixin.extension` and
:meth:`~ExtensionRecordsMixin.set_extension`, the public way to attach a record whose codec is
registered (:mod:`galleria.store.extensions`); :func:`check_attached` checks such a value the way a
load will check it when the file is read back.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from galleria._interrupts import deferred_interrupts
from galleria.store._core import StoreCore
from galleria.store.extensions import (
    MAX_EXTENSIONS,
    MAX_RECORD_BYTES,
    ExtensionContext,
    extension_codec,
    record_bytes,
    tensor_key,
)

__all__ = ["ExtensionRecordsMixin", "check_attached"]


class ExtensionRecordsMixin(StoreCore):
    """The store's extension records, by name."""

    def extension(self, name: str) -> Any:
        """The extension record ``name`` this store keeps, or None.

        A record of a registered codec (:func:`galleria.store.extensions.register_extension`) is
        the value its codec checked; one no codec reads is an
        :class:`~galleria.store.extensions.OpaqueRecord`. galleria's own records (DBA augmentation,
        the offline diffusion, the statistics) are read through their own properties.
        """
        if not isinstance(name, str):
            raise TypeError(f"name must be a str, got {type(name).__name__}")
        with self._lock.reading():
            return self._extensions.get(name)

    def set_extension(self, name: str, value: Any) -> None:
        """Attach the extension record ``name`` (a plugin's table over this gallery), replacing the
        one of that name; None removes it. A save writes it into the store file's extension slot,
        and a load reads it back through the same codec.

        The record's codec must be registered (:func:`galleria.store.extensions.register_extension`)
        and must not be one of galleria's own. ``value`` is checked now, the way a load will check
        it: encoded by the codec, bounded (:data:`~galleria.store.extensions.MAX_RECORD_BYTES`, the
        codec's tensor names, :data:`~galleria.store.extensions.MAX_EXTENSIONS` records), then read
        back by ``codec.check_record`` and ``codec.check`` against this store's rows, space and
        index; the checked value is what the store keeps. A bad value raises and leaves the store as
        it was. Like every extension record it is dropped when the gallery's rows change (it
        describes rows that are gone).

        Raises
        ------
        TypeError, ValueError
            No codec registered for ``name``, one of galleria's own, or a value the codec refuses.
        RuntimeError
            The store is not built.

        Examples
        --------
        >>> import numpy as np
        >>> from galleria.store.extensions import ExtensionCodec, register_extension
        >>> class Counts(ExtensionCodec):
        ...     name = "doc_counts"
        ...     tensors = frozenset({"counts"})
        ...     def check(self, record, tensors, context):
        ...         counts = tensors.get("counts")
        ...         if counts is None or counts.shape != (context.rows,):
        ...             raise context.fail("needs one count per row")
        ...         return counts
        ...     def encode(self, value):
        ...         return {}, {"counts": np.asarray(value, dtype=np.int64)}
        >>> _ = register_extension(Counts())
        >>> from galleria.store import InMemoryImageEmbeddingStore
        >>> store = InMemoryImageEmbeddingStore.from_embeddings(["a", "b"], np.eye(2))
        >>> store.set_extension("doc_counts", [3, 4])
        >>> store.extension("doc_counts").tolist()
        [3, 4]
        """
        self._require_built()
        self._require_own("attach an extension record")
        with self._lock.reading():
            context = (len(self._paths), self._index.space, self._index.name, len(self._extensions))
        checked = check_attached(name, value, *context, replacing=name in self._extensions)
        with self._lock.writing(), deferred_interrupts():
            if value is None:
                self._extensions.pop(name, None)
            else:
                self._extensions[name] = checked


#: The dtypes a store file's tensors may have.
_STORE_DTYPES = ("uint8", "int32", "int64", "float32")


def check_attached(
    name: Any, value: Any, rows: int, space: str, index_name: str, count: int, *, replacing: bool
) -> Any:
    """``value`` of the record ``name`` a caller attaches to a store of ``rows`` rows, checked as a
    load would check it (:meth:`InMemoryImageEmbeddingStore.set_extension`): its codec's encoding,
    bounded, read back by the codec. Returns the checked value (None for None)."""
    if not isinstance(name, str):
        raise TypeError(f"name must be a str, got {type(name).__name__}")
    codec = extension_codec(name)
    if codec is None:
        raise ValueError(
            f"no codec is registered for the extension record {name!r}; "
            "register one with galleria.store.extensions.register_extension first"
        )
    if codec.state_field is not None:
        raise ValueError(f"the extension record {name!r} is galleria's own; it cannot be attached")
    if value is None:
        return None
    if not replacing and count >= MAX_EXTENSIONS:
        raise ValueError(f"a store keeps at most {MAX_EXTENSIONS} extension records")
    record, tensors = codec.encode(value)
    size = record_bytes(record)
    if size > MAX_RECORD_BYTES:
        raise ValueError(f"the extension record {name!r} is {size} bytes of JSON, over {MAX_RECORD_BYTES}")
    if not isinstance(tensors, dict) or not all(isinstance(array, np.ndarray) for array in tensors.values()):
        raise TypeError(f"the codec of {name!r} must encode its tensors as a dict of numpy arrays")
    odd = sorted(key for key, array in tensors.items() if array.dtype.name not in _STORE_DTYPES)
    if odd:
        raise TypeError(f"the codec of {name!r} encoded {odd} in a dtype a store file cannot hold")
    unknown = sorted(set(map(str, tensors)) - set(codec.tensors))
    if unknown:
        raise ValueError(f"the codec of {name!r} encoded tensors {unknown} it does not declare")
    context = ExtensionContext(
        source="the store",
        rows=rows,
        space=space,
        index_name=index_name,
        tensor_names={short: tensor_key(name, short) for short in codec.tensors},
        label=f"extension record {name!r}",
    )
    codec.check_record(record, context)
    return codec.check(record, dict(tensors), context)
