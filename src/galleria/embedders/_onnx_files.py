"""The files an ONNX model names, found before ONNX Runtime parses it (docs/security.md, the model cache).

An ONNX tensor may keep its data outside the model (``external_data``: a ``location`` and an offset and
length). ONNX Runtime resolves such a location against the model's folder, or, for a model handed over
as bytes, against the *working directory*; one location (``*/_ORT_MEM_ADDR_/*``) even reads process
memory. A cached model is untrusted like every other artefact, so :func:`external_tensors` walks the
serialized ``ModelProto`` with a minimal protobuf reader, needing no ``onnx`` package, and lists every
tensor that keeps its data elsewhere, wherever it sits: initializers, sparse initializers, node
attributes (``Constant``'s value), subgraphs (``If``, ``Loop``, ``Scan``), local functions and training
graphs. A model that cannot be walked (malformed, nested too deep) is refused, never passed on.

:func:`inline_external_data` puts the verified bytes of files inside the cache folder into the tensors
(needs the ``onnx`` package), so ONNX Runtime is only ever given a model that names no file.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

__all__ = ["MAX_DEPTH", "external_tensors", "inline_external_data"]

#: Deepest nesting of messages walked (protobuf's own default recursion limit is 100).
MAX_DEPTH = 64

# The message fields of onnx.proto that can lead to a TensorProto, by message: field -> message kind.
_MODEL, _GRAPH, _NODE, _ATTRIBUTE, _FUNCTION, _TRAINING, _SPARSE, _TENSOR, _ENTRY = range(9)
_CHILDREN: dict[int, dict[int, int]] = {
    _MODEL: {7: _GRAPH, 20: _TRAINING, 25: _FUNCTION},
    _TRAINING: {1: _GRAPH, 2: _GRAPH},
    _GRAPH: {1: _NODE, 5: _TENSOR, 15: _SPARSE},
    _NODE: {5: _ATTRIBUTE},
    _FUNCTION: {7: _NODE, 11: _ATTRIBUTE},
    _ATTRIBUTE: {5: _TENSOR, 10: _TENSOR, 6: _GRAPH, 11: _GRAPH, 22: _SPARSE, 23: _SPARSE},
    _SPARSE: {1: _TENSOR, 2: _TENSOR},
    _TENSOR: {13: _ENTRY},
    _ENTRY: {},
}
_EXTERNAL_DATA, _DATA_LOCATION, _TENSOR_NAME = 13, 14, 8


class _Malformed(ValueError):
    pass


def _varint(data: memoryview, position: int, end: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if position >= end or shift > 63:
            raise _Malformed("a truncated or overlong varint")
        byte = data[position]
        position += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, position
        shift += 7


def _fields(data: memoryview, start: int, end: int) -> list[tuple[int, int, int, int]]:
    """``(field, wire type, value or start, end)`` of each field of the message in ``data[start:end]``."""
    fields: list[tuple[int, int, int, int]] = []
    position = start
    while position < end:
        key, position = _varint(data, position, end)
        field, wire = key >> 3, key & 7
        if field == 0:
            raise _Malformed("field number 0")
        if wire == 0:
            value, position = _varint(data, position, end)
            fields.append((field, wire, value, position))
        elif wire == 1 or wire == 5:
            position += 8 if wire == 1 else 4
            fields.append((field, wire, 0, position))
        elif wire == 2:
            length, position = _varint(data, position, end)
            if length > end - position:
                raise _Malformed("a length past the end of its message")
            fields.append((field, wire, position, position + length))
            position += length
        else:  # groups (3, 4) and the reserved wire types: onnx.proto has none
            raise _Malformed(f"wire type {wire}")
    if position != end:
        raise _Malformed("a field past the end of its message")
    return fields


def external_tensors(data: bytes) -> list[dict[str, str]]:
    """Every tensor of the serialized model ``data`` that keeps its data outside it, as its
    ``external_data`` key/value pairs (plus ``"name"`` and ``"data_location"``); [] for a
    self-contained model. ValueError when the bytes cannot be walked as a ModelProto."""
    view = memoryview(data)
    found: list[dict[str, str]] = []
    stack: list[tuple[int, int, int, int]] = [(_MODEL, 0, len(view), 0)]
    try:
        while stack:
            kind, start, end, depth = stack.pop()
            if depth > MAX_DEPTH:
                raise _Malformed(f"messages nested deeper than {MAX_DEPTH}")
            fields = _fields(view, start, end)
            if kind == _TENSOR:
                record = _tensor_record(view, fields)
                if record is not None:
                    found.append(record)
                continue
            children = _CHILDREN[kind]
            for field, wire, first, last in fields:
                child = children.get(field)
                if child is not None and wire == 2:
                    stack.append((child, first, last, depth + 1))
    except _Malformed as error:
        raise ValueError(f"the model cannot be checked for the files it names: {error}") from None
    return found


def _text(view: memoryview, first: int, last: int) -> str:
    return bytes(view[first:last]).decode("utf-8", "replace")


def _tensor_record(view: memoryview, fields: list[tuple[int, int, int, int]]) -> dict[str, str] | None:
    record: dict[str, str] = {}
    external = False
    for field, wire, first, last in fields:
        if field == _DATA_LOCATION and wire == 0 and first != 0:
            record["data_location"] = str(first)
            external = True
        elif field == _EXTERNAL_DATA and wire == 2:
            external = True
            key = value = ""
            for inner, inner_wire, a, b in _fields(view, first, last):
                if inner_wire == 2 and inner == 1:
                    key = _text(view, a, b)
                elif inner_wire == 2 and inner == 2:
                    value = _text(view, a, b)
            record[key] = value
        elif field == _TENSOR_NAME and wire == 2:
            record.setdefault("name", _text(view, first, last))
    return record if external else None


def inline_external_data(data: bytes, read: Callable[[str], bytes], allowed: Mapping[str, int]) -> bytes:
    """``data`` with every external tensor's bytes put inside it: ``read(location)`` gives the
    (verified) bytes of a file named in ``allowed`` (location → size); any other location, an offset
    or length outside the file, or a model that still names a file afterwards is a ValueError."""
    import onnx
    from onnx import external_data_helper

    model = onnx.ModelProto()
    model.ParseFromString(data)
    cache: dict[str, bytes] = {}
    for tensor in external_data_helper._get_all_tensors(model):
        if not tensor.HasField("data_location") or tensor.data_location != onnx.TensorProto.EXTERNAL:
            if len(tensor.external_data):
                raise ValueError(f"tensor {tensor.name!r} names external data but is not marked external")
            continue
        info = {entry.key: entry.value for entry in tensor.external_data}
        location = info.get("location", "")
        if location not in allowed or set(info) - {"location", "offset", "length", "checksum"}:
            raise ValueError(f"tensor {tensor.name!r} names the file {location[:80]!r}, which is not allowed")
        size = allowed[location]
        try:
            offset = int(info.get("offset", "0"))
            length = int(info.get("length", str(size - offset)))
        except ValueError:
            raise ValueError(f"tensor {tensor.name!r}: offset and length must be integers") from None
        if not (0 <= offset <= size and 0 <= length <= size - offset):
            raise ValueError(f"tensor {tensor.name!r}: bytes {offset}+{length} lie outside {location!r}")
        if location not in cache:
            cache[location] = read(location)
        tensor.raw_data = cache[location][offset : offset + length]
        del tensor.external_data[:]
        tensor.data_location = onnx.TensorProto.DEFAULT
    result: bytes = model.SerializeToString()
    if external_tensors(result):
        raise ValueError("the model still names external files after inlining the allowed ones")
    return result
