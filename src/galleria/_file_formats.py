"""The file formats of untrusted artefacts, read through :mod:`galleria._files` (the one trust layer):
``.npy`` arrays mapped once their header is checked on the descriptor that is mapped, parquet files
opened with their footer only, and their decompressed sizes bounded from their metadata before a
row group is decompressed. Every failure is a ValueError naming the artefact, its value cut short."""

from __future__ import annotations

import os
from typing import Any, BinaryIO

from galleria._files import open_regular_file, short

__all__ = ["check_parquet_expansion", "map_npy", "open_parquet"]


def map_npy(
    path: str | os.PathLike[str],
    what: str,
    dtypes: tuple[Any, ...] | None,
    *,
    inside: str | os.PathLike[str] | None = None,
    max_header: int = 4096,
) -> Any:
    """A read-only memory map of the ``.npy`` array in the regular file ``path``, never unpickled.

    The header is parsed (version 1 or 2, at most ``max_header`` bytes) on the descriptor
    :func:`open_regular_file` opened and checked: a dtype in ``dtypes`` (None: any without Python
    objects; never one with them) and a
    file size exactly what the header says; the same descriptor is then mapped, so a file swapped
    after the check is never the one mapped. ValueError naming ``what`` and the file otherwise.
    """
    import struct

    import numpy as np

    name = os.fspath(path)
    shown = short(name)
    with open_regular_file(name, what, inside=inside) as stream:
        try:
            version = np.lib.format.read_magic(stream)
            if version == (1, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_1_0(
                    stream, max_header_size=max_header
                )
            elif version == (2, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_2_0(
                    stream, max_header_size=max_header
                )
            else:
                raise ValueError(f"unsupported .npy version {version}")
        except (ValueError, SyntaxError, struct.error, EOFError) as error:
            raise ValueError(f"{what} {shown} is not a valid .npy file: {short(str(error))}") from None
        offset, size = stream.tell(), os.fstat(stream.fileno()).st_size
        if dtype.hasobject:
            raise ValueError(f"{what} {shown} holds Python objects (pickle); refused")
        if dtypes is not None and dtype not in dtypes:
            raise ValueError(f"{what} {shown} holds {dtype}, not one of {[str(d) for d in dtypes]}")
        count = 1
        for extent in shape:
            count *= int(extent)
        if size != offset + count * dtype.itemsize:
            raise ValueError(f"{what} {shown} is {size} bytes, not what its header {short(shape)} says")
        if count == 0:
            return np.zeros(shape, dtype=dtype)
        return np.memmap(
            stream, dtype=dtype, mode="r", offset=offset, shape=shape, order="F" if fortran else "C"
        )


def open_parquet(stream: BinaryIO, what: str) -> Any:
    """A ``pyarrow.parquet.ParquetFile`` over ``stream`` (opened by :func:`open_regular_file`); its
    footer read, nothing decompressed. ValueError naming ``what`` when it is no readable parquet."""
    import pyarrow.parquet as pq

    try:
        return pq.ParquetFile(stream)
    except Exception as error:  # pyarrow raises its own types on damaged files
        raise ValueError(f"{what} is not a readable parquet file: {short(str(error))}") from None


def check_parquet_expansion(
    parquet: Any, what: str, columns: list[str], size: int, *, ratio: int, slack: int, per_row: int
) -> None:
    """Refuse (ValueError naming ``what`` and the row group) a parquet file whose row groups, by the
    sizes its metadata records for ``columns``, would decompress past ``ratio`` times the file's
    ``size`` plus ``slack`` in all, or one row group past ``per_row`` bytes per row plus ``slack``.
    Checked from the metadata alone, before anything is decompressed."""
    metadata = parquet.metadata
    limit = ratio * size + slack
    total = 0
    for group in range(metadata.num_row_groups):
        chunk = metadata.row_group(group)
        wanted = 0
        for position in range(chunk.num_columns):
            column = chunk.column(position)
            if str(column.path_in_schema).split(".")[0] in columns:
                wanted += int(column.total_uncompressed_size)
        total += wanted
        if total > limit or wanted > per_row * chunk.num_rows + slack:
            raise ValueError(
                f"{what}: row group {group} would decompress to {wanted} bytes ({total} so far), more "
                f"than the {limit} a {size}-byte file may expand to or the field caps of its "
                f"{chunk.num_rows} rows allow; refused"
            )
