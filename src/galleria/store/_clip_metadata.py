"""The metadata of a clip-retrieval folder and the captions kept beside a store, read as untrusted input
(:mod:`galleria.store.clip_retrieval`): decompression bounded per row group from the parquet metadata
before anything is decompressed, field caps, messages cut to a readable length."""

from __future__ import annotations

import os
import unicodedata
from typing import Any

from galleria._file_formats import check_parquet_expansion, open_parquet
from galleria._files import open_regular_file, short

__all__ = ["EXPANSION_SLACK", "MAX_CAPTION", "MAX_EXPANSION", "MAX_PATH", "metadata_part", "read_captions"]

#: The longest item path (characters) and caption (UTF-8 bytes) a metadata file may hold.
MAX_PATH = 4096
MAX_CAPTION = 64 << 10
#: A metadata file may decompress to at most this many times its size, plus :data:`EXPANSION_SLACK`.
MAX_EXPANSION = 64
EXPANSION_SLACK = 16 << 20
#: Bytes a row may take besides its path and caption in the columns read (lengths, nulls, pages).
_ROW_OVERHEAD = 64
#: The columns that may name an item.
PATH_COLUMNS = ("image_path", "url")


def _parquet() -> Any:
    try:
        import pyarrow.parquet as pq
    except ImportError as error:  # pragma: no cover - the extra is installed in the tests
        raise ImportError(
            "reading clip-retrieval metadata needs pyarrow: pip install 'galleria[clip-retrieval]'"
        ) from error
    return pq


def _bad_text(value: str) -> bool:
    return any(unicodedata.category(char) in ("Cc", "Cf", "Cs") for char in value)


def _check_expansion(parquet: Any, what: str, columns: list[str], size: int) -> None:
    """The decompression caps of a metadata or captions file (module docstring)."""
    check_parquet_expansion(
        parquet,
        what,
        columns,
        size,
        ratio=MAX_EXPANSION,
        slack=EXPANSION_SLACK,
        per_row=MAX_PATH * 4 * len(columns) + MAX_CAPTION + _ROW_OVERHEAD * len(columns),
    )


def metadata_part(path: str, rows: int, part: str, use: str) -> tuple[list[str], list[str | None]]:
    """(paths, captions) of one metadata part of ``rows`` rows; ValueError naming the file and row."""
    _parquet()  # the ImportError naming the extra
    name, path = path, short(path)
    with open_regular_file(name, "metadata file") as stream:
        size = os.fstat(stream.fileno()).st_size
        parquet = open_parquet(stream, f"metadata file {path}")
        count = parquet.metadata.num_rows
        names = set(parquet.schema_arrow.names)
        if count != rows:
            first = min(count, rows)
            raise ValueError(
                f"metadata file {path} has {count} rows but {part} has {rows} embeddings "
                f"(row {first} is the first without its {'metadata' if count < rows else 'embedding'})"
            )
        wanted = [column for column in PATH_COLUMNS if column in names]
        if use != "auto":
            wanted = [use] if use in names else []
        if not wanted:
            missing = "'image_path' (nor 'url')" if use == "auto" else repr(use)
            raise ValueError(f"metadata file {path} has no column {missing}")
        columns = wanted + (["caption"] if "caption" in names else [])
        _check_expansion(parquet, f"metadata file {path}", columns, size)
        values: dict[str, list[Any]] = {column: [] for column in columns}
        for group in range(parquet.metadata.num_row_groups):
            try:
                table = parquet.read_row_group(group, columns=columns)
            except Exception as error:  # pyarrow's own types on damaged pages
                raise ValueError(
                    f"metadata file {path}: row group {group} cannot be read: {short(str(error))}"
                ) from None
            for column in columns:
                values[column].extend(table.column(column).to_pylist())
    return _checked_rows(path, rows, wanted, values)


def _checked_rows(
    path: str, rows: int, wanted: list[str], values: dict[str, list[Any]]
) -> tuple[list[str], list[str | None]]:
    paths = []
    for row in range(rows):
        chosen = next((values[name][row] for name in wanted if values[name][row]), None)
        if not isinstance(chosen, str) or not chosen:
            raise ValueError(
                f"metadata file {path}: row {row} has no {' or '.join(wanted)} string, got {short(chosen)}"
            )
        if len(chosen) > MAX_PATH:
            raise ValueError(
                f"metadata file {path}: row {row}: the path is {len(chosen)} characters long, more "
                f"than the {MAX_PATH} allowed: {short(chosen)}"
            )
        if _bad_text(chosen):
            raise ValueError(
                f"metadata file {path}: row {row}: the path {short(chosen)} holds control characters"
            )
        paths.append(chosen)
    captions = values.get("caption", [None] * rows)
    for row, caption in enumerate(captions):
        if caption is not None and not isinstance(caption, str):
            raise ValueError(f"metadata file {path}: row {row}: the caption is not a string")
        if caption is not None and len(caption.encode("utf-8", "surrogatepass")) > MAX_CAPTION:
            raise ValueError(
                f"metadata file {path}: row {row}: the caption is longer than the {MAX_CAPTION} bytes "
                f"allowed: {short(caption)}"
            )
    return paths, captions


def read_captions(path: str, paths: list[str]) -> list[str | None]:
    """The captions kept beside a store, by path (checked like any metadata file: sizes bounded before
    a row group is decompressed, ``image_path`` strings, captions strings or nulls)."""
    _parquet()  # the ImportError naming the extra
    name, path = path, short(path)
    with open_regular_file(name, "captions file") as stream:
        size = os.fstat(stream.fileno()).st_size
        parquet = open_parquet(stream, f"captions file {path}")
        names = set(parquet.schema_arrow.names)
        if parquet.metadata.num_rows > len(paths) or {"image_path", "caption"} - names:
            raise ValueError(
                f"captions file {path} must have image_path and caption, at most one row per item"
            )
        _check_expansion(parquet, f"captions file {path}", ["image_path", "caption"], size)
        table = parquet.read(columns=["image_path", "caption"])
    items, texts = table.column("image_path").to_pylist(), table.column("caption").to_pylist()
    for row, (item, text) in enumerate(zip(items, texts, strict=True)):
        if not isinstance(item, str):
            raise ValueError(
                f"captions file {path}: row {row}: image_path must be a string, got "
                f"{type(item).__name__} {short(item)}"
            )
        if text is not None and not isinstance(text, str):
            raise ValueError(f"captions file {path}: row {row}: caption must be a string or null")
    kept = dict(zip(items, texts, strict=True))
    return [value if isinstance(value := kept.get(item), str) else None for item in paths]
