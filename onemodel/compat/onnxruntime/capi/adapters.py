"""onnxruntime's LoRA adapters: `AdapterFormat` reads and writes its adapter files, `LoraAdapter`
loads one, and `RunOptions.add_active_adapter` feeds its parameters to a run.

An adapter file is a FlatBuffer of onnxruntime's schema (adapter_schema.fbs, identifier
"TORT"): a table Adapter {format_version, adapter_version, model_version: int32;
parameters: [Parameter]} of tables Parameter {name: string; dims: [int64]; data_type: int32
(ONNX's codes); raw_data: [uint8], 8-byte aligned}. The buffer is read and written here with
`struct` (the format is small and fixed; no FlatBuffers library is needed). A parameter is fed
as the model input of its name, as onnxruntime feeds it.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from onemodel.compat.onnxruntime.capi.ort_value import OrtValue
from onemodel.tensors import numpy_dtype_for_onnx

FILE_IDENTIFIER = b"TORT"
FORMAT_VERSION = 1


class _Reader:
    """Tables, vectors and strings of a FlatBuffer (little-endian, offsets from the field)."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def _at(self, fmt: str, position: int) -> int:
        return struct.unpack_from(fmt, self.data, position)[0]

    def root(self) -> int:
        if len(self.data) < 8 or self.data[4:8] != FILE_IDENTIFIER:
            raise RuntimeError("not an onnxruntime adapter file (no 'TORT' identifier)")
        return self._at("<I", 0)

    def field(self, table: int, index: int) -> int | None:
        """Where field `index` of the table is stored, None when absent."""
        vtable = table - self._at("<i", table)
        slot = 4 + 2 * index
        if slot >= self._at("<H", vtable):
            return None
        offset = self._at("<H", vtable + slot)
        return table + offset if offset else None

    def int32(self, table: int, index: int) -> int:
        position = self.field(table, index)
        return 0 if position is None else self._at("<i", position)

    def target(self, table: int, index: int) -> int | None:
        position = self.field(table, index)
        return None if position is None else position + self._at("<I", position)

    def vector(self, table: int, index: int, dtype: str) -> np.ndarray:
        position = self.target(table, index)
        if position is None:
            return np.empty(0, dtype)
        count = self._at("<I", position)
        return np.frombuffer(self.data, dtype=dtype, count=count, offset=position + 4).copy()

    def tables(self, table: int, index: int) -> list[int]:
        position = self.target(table, index)
        if position is None:
            return []
        slots = [position + 4 + 4 * i for i in range(self._at("<I", position))]
        return [slot + self._at("<I", slot) for slot in slots]

    def string(self, table: int, index: int) -> str:
        position = self.target(table, index)
        if position is None:
            return ""
        length = self._at("<I", position)
        return self.data[position + 4 : position + 4 + length].decode()


class _Writer:
    """A FlatBuffer laid out front to back, so that every offset points forward."""

    def __init__(self) -> None:
        self.data = bytearray()

    def pad(self, alignment: int, ahead: int = 0) -> None:
        """Pad so that position + `ahead` is a multiple of `alignment`."""
        self.data += bytes(-(len(self.data) + ahead) % alignment)

    def put(self, fmt: str, *values: Any) -> int:
        position = len(self.data)
        self.data += struct.pack(fmt, *values)
        return position

    def point(self, slot: int) -> None:
        """Patch the offset at `slot` to reach the current position."""
        struct.pack_into("<I", self.data, slot, len(self.data) - slot)

    def table(self, slot: int, fields: list[tuple[str, Any]]) -> list[int]:
        """A vtable then its table of 4-byte fields ("i" values or "o" offsets to patch), the
        offset at `slot` reaching the table; returns the table's position and each field's
        slot."""
        self.pad(4)
        size = 4 + 4 * len(fields)
        vtable = self.put(f"<{2 + len(fields)}H", 4 + 2 * len(fields), size,
                          *(4 + 4 * i for i in range(len(fields))))  # fmt: skip
        self.pad(4)
        self.point(slot)
        table = self.put("<i", 0)
        struct.pack_into("<i", self.data, table, table - vtable)
        return [table] + [self.put("<i" if kind == "i" else "<I", value or 0)
                          for kind, value in fields]  # fmt: skip

    def vector(self, slot: int, payload: bytes, count: int, alignment: int = 4) -> None:
        """A vector (its count, then `payload` aligned) that the offset at `slot` reaches."""
        self.pad(alignment, ahead=4)
        self.point(slot)
        self.put("<I", count)
        self.data += payload


def write_adapter(path: str | os.PathLike[str], adapter: int, model: int, params: Mapping) -> None:
    writer = _Writer()
    root = writer.put("<I", 0)
    writer.data += FILE_IDENTIFIER
    _, _, _, _, parameters = writer.table(
        root, [("i", FORMAT_VERSION), ("i", adapter), ("i", model), ("o", None)]
    )
    writer.vector(parameters, bytes(4 * len(params)), len(params))
    slots = [len(writer.data) - 4 * len(params) + 4 * i for i in range(len(params))]
    for slot, (name, value) in zip(slots, params.items(), strict=True):
        array = np.ascontiguousarray(value.numpy())
        _, name_at, dims_at, _, data_at = writer.table(
            slot, [("o", None), ("o", None), ("i", value.element_type()), ("o", None)]
        )
        encoded = str(name).encode()
        writer.vector(name_at, encoded + b"\0", len(encoded))
        writer.vector(dims_at, np.asarray(array.shape, "<i8").tobytes(), array.ndim, 8)
        raw = array.tobytes()
        writer.vector(data_at, raw, len(raw), 8)
    Path(path).write_bytes(bytes(writer.data))


def read_adapter(path: str | os.PathLike[str]) -> tuple[int, int, dict[str, OrtValue]]:
    """(adapter version, model version, parameters by name) of an adapter file."""
    reader = _Reader(Path(path).read_bytes())
    root = reader.root()
    if reader.int32(root, 0) != FORMAT_VERSION:
        raise RuntimeError(f"adapter format version {reader.int32(root, 0)} is not supported")
    params = {}
    for table in reader.tables(root, 3):
        dtype = np.dtype(numpy_dtype_for_onnx(reader.int32(table, 2)))
        shape = tuple(int(n) for n in reader.vector(table, 1, "<i8"))
        raw = reader.vector(table, 3, "u1")
        params[reader.string(table, 0)] = OrtValue(raw.view(dtype).reshape(shape))
    return reader.int32(root, 1), reader.int32(root, 2), params


class AdapterFormat:
    """An adapter file's contents: versions and named parameters."""

    def __init__(self) -> None:
        self._adapter_version = 0
        self._model_version = 0
        self._parameters: dict[str, OrtValue] = {}

    @staticmethod
    def read_adapter(file_path: str | os.PathLike[str]) -> AdapterFormat:
        adapter = AdapterFormat()
        adapter._adapter_version, adapter._model_version, adapter._parameters = read_adapter(
            file_path
        )
        return adapter

    def export_adapter(self, file_path: str | os.PathLike[str]) -> None:
        write_adapter(file_path, self._adapter_version, self._model_version, self._parameters)

    def get_adapter_version(self) -> int:
        return self._adapter_version

    def set_adapter_version(self, adapter_version: int) -> None:
        self._adapter_version = int(adapter_version)

    def get_model_version(self) -> int:
        return self._model_version

    def set_model_version(self, model_version: int) -> None:
        self._model_version = int(model_version)

    def get_parameters(self) -> dict[str, OrtValue]:
        return dict(self._parameters)

    def set_parameters(self, parameters: Mapping[str, OrtValue]) -> None:
        self._parameters = {str(name): value._get_c_value() for name, value in parameters.items()}


class LoraAdapter:
    """A loaded adapter whose parameters a run takes through `RunOptions.add_active_adapter`."""

    def __init__(self) -> None:
        self.parameters: dict[str, OrtValue] = {}

    def Load(self, file_path: str | os.PathLike[str]) -> None:
        self.parameters = read_adapter(file_path)[2]
