"""OrtValue, OrtValueVector and SparseTensor over onemodel's arrays.

An OrtValue holds the array a session takes or gives: a NumPy array on the host, or the GPU
backend's array (CuPy, or the checked-device stand-in) on the device, which stays there. The
native (`capi`) and Python (`onnxruntime.OrtValue`) forms are one class here: `_ortvalue` and
`_get_c_value()` give the object itself, and the factories accept both calling conventions.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import Any

import numpy as np

from onemodel.backends import KernelPaths
from onemodel.compat.onnxruntime.capi.devices import OrtDevice, device_for
from onemodel.tensors import numpy_dtype_for_onnx, onnx_code_for_numpy, onnx_name


def device_library() -> Any:
    """The array module of the GPU backend, refused as onnxruntime refuses CUDA it lacks."""
    if "cupy" not in KernelPaths.available():
        raise RuntimeError(
            "CUDA is not available: onemodel's CuPy backend cannot reach a CUDA device"
        )
    return KernelPaths.get("cupy").xp


def element_code(element_type: Any) -> int:
    """An ONNX element type from either form onnxruntime takes: a code or a NumPy dtype."""
    if isinstance(element_type, (int, np.integer)) and not isinstance(element_type, bool):
        return int(element_type)
    return onnx_code_for_numpy(np.dtype(element_type))


def on_host(array: Any) -> bool:
    return isinstance(array, np.ndarray)


def host_copy(array: Any) -> np.ndarray:
    """A device array copied to the host (the one explicit transfer); host arrays as they are."""
    return array if on_host(array) else array.get()


def data_pointer(array: Any) -> int:
    if on_host(array):
        return int(array.__array_interface__["data"][0])
    return int(array.data.ptr)


def wrap_host_memory(pointer: int, dtype: np.dtype, shape: Sequence[int]) -> np.ndarray:
    """A NumPy view of caller-owned host memory at `pointer` (onnxruntime's bind_input)."""
    count = int(np.prod(shape, dtype=np.int64))
    if count == 0:
        return np.empty(tuple(shape), dtype)
    raw = (ctypes.c_byte * (count * dtype.itemsize)).from_address(int(pointer))
    return np.frombuffer(raw, dtype=dtype, count=count).reshape(tuple(shape))


def wrap_device_memory(pointer: int, dtype: np.dtype, shape: Sequence[int]) -> Any:
    """A CuPy view of caller-owned device memory at `pointer`."""
    cupy = device_library()
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    memory = cupy.cuda.UnownedMemory(int(pointer), nbytes, None)
    return cupy.ndarray(tuple(shape), dtype, cupy.cuda.MemoryPointer(memory, 0))


class _Capsule:
    """A bare DLPack capsule given the protocol NumPy's from_dlpack asks for (host memory)."""

    def __init__(self, capsule: Any) -> None:
        self._capsule = capsule

    def __dlpack__(self, **_: Any) -> Any:
        return self._capsule

    def __dlpack_device__(self) -> tuple[int, int]:
        return (1, 0)


class OrtValue:
    """A tensor (or a sequence, map or empty optional a session returned) and where it lives.

    `OrtValue(array)` takes any array a onemodel session takes, a backend's device array
    included (onemodel's way to hand over CuPy or stand-in arrays without DLPack)."""

    def __init__(self, value: Any, numpy_obj: Any = None, element_type: int | None = None):
        self._value = value
        self._numpy_obj = numpy_obj  # keeps the caller's array alive, as onnxruntime does
        self._element = element_type

    # -- the two forms of onnxruntime's API --------------------------------------------------

    @property
    def _ortvalue(self) -> OrtValue:
        return self

    def _get_c_value(self) -> OrtValue:
        return self

    # -- factories -----------------------------------------------------------------------

    @staticmethod
    def ortvalue_from_numpy(
        numpy_obj: Any, device_type: Any = "cpu", device_id: int = 0, vendor_id: int = -1
    ) -> OrtValue:
        """The array on the named device: shared with the caller on the host (contiguous
        arrays), uploaded once for a device."""
        device = device_for(device_type, device_id)
        array = np.asarray(numpy_obj)
        if device.on_host:
            contiguous = np.ascontiguousarray(array) if array.ndim else array.copy()
            return OrtValue(contiguous, numpy_obj)
        return OrtValue(device_library().asarray(array))

    @staticmethod
    def ortvalue_from_numpy_with_onnx_type(data: Any, onnx_element_type: int) -> OrtValue:
        """The array's bytes read as the ONNX element type (bfloat16 as uint16 bits...)."""
        array = np.ascontiguousarray(data)
        wanted = np.dtype(numpy_dtype_for_onnx(int(onnx_element_type)))
        if wanted.itemsize != array.dtype.itemsize:
            raise RuntimeError(
                f"the array's {array.dtype} elements are not {onnx_name(int(onnx_element_type))}"
            )
        return OrtValue(array.view(wanted), data)

    @staticmethod
    def ortvalue_from_shape_and_type(
        shape: Sequence[int],
        element_type: Any,
        device_type: Any = "cpu",
        device_id: int = 0,
        vendor_id: int = -1,
    ) -> OrtValue:
        """An uninitialised tensor the caller fills or a run writes into."""
        dtype = np.dtype(numpy_dtype_for_onnx(element_code(element_type)))
        device = device_for(device_type, device_id)
        xp = np if device.on_host else device_library()
        return OrtValue(xp.empty(tuple(int(n) for n in shape), dtype))

    ortvalue_from_shape_and_onnx_type = ortvalue_from_shape_and_type

    @staticmethod
    def from_dlpack(data: Any) -> OrtValue:
        """An OrtValue sharing the memory of a DLPack producer or capsule."""
        producer = data if hasattr(data, "__dlpack__") else _Capsule(data)
        if int(producer.__dlpack_device__()[0]) in (1, 3):
            return OrtValue(np.from_dlpack(producer))
        return OrtValue(device_library().from_dlpack(producer))

    @staticmethod
    def ort_value_from_sparse_tensor(sparse_tensor: SparseTensor) -> OrtValue:
        return OrtValue(sparse_tensor)

    # -- queries ---------------------------------------------------------------------------

    def _array(self) -> Any:
        if not self.is_tensor():
            raise RuntimeError(f"the OrtValue holds a {self.data_type()}, not a tensor")
        return self._value

    def is_tensor(self) -> bool:
        return hasattr(self._value, "dtype") and not isinstance(self._value, SparseTensor)

    def is_sparse_tensor(self) -> bool:
        return isinstance(self._value, SparseTensor)

    def is_tensor_sequence(self) -> bool:
        return isinstance(self._value, list)

    def has_value(self) -> bool:
        return self._value is not None

    def data_ptr(self) -> int:
        return data_pointer(self._array())

    def device_name(self) -> str:
        if isinstance(self._value, SparseTensor):
            return self._value.device_name()
        return "cpu" if not self.is_tensor() or on_host(self._value) else "cuda"

    def shape(self) -> list[int]:
        if isinstance(self._value, SparseTensor):
            return self._value.dense_shape()
        return [int(n) for n in self._array().shape]

    def element_type(self) -> int:
        if self._element is not None:
            return self._element
        return onnx_code_for_numpy(self._array().dtype)

    def data_type(self) -> str:
        if self._value is None:
            return "optional"
        if isinstance(self._value, SparseTensor):
            return self._value.data_type()
        if isinstance(self._value, list):
            inner = OrtValue(self._value[0]).data_type() if self._value else "tensor(float)"
            return f"seq({inner})"
        if isinstance(self._value, dict):
            return "map"
        return f"tensor({_type_name(self.element_type())})"

    def tensor_size_in_bytes(self) -> int:
        return int(self._array().nbytes)

    def numpy(self) -> Any:
        """The values as NumPy, copied to the host for a device tensor (strings as objects)."""
        if isinstance(self._value, list):
            return [host_copy(item) for item in self._value]
        return host_copy(self._array())

    def update_inplace(self, np_arr: Any) -> None:
        array = self._array()
        if on_host(array):
            np.copyto(array, np.asarray(np_arr, dtype=array.dtype).reshape(array.shape))
        else:
            array[...] = type(array)(np.asarray(np_arr, dtype=array.dtype))  # one upload

    def as_sparse_tensor(self) -> SparseTensor:
        if not isinstance(self._value, SparseTensor):
            raise RuntimeError("the OrtValue does not hold a sparse tensor")
        return self._value

    def to_dlpack(self) -> Any:
        return self._array().__dlpack__()

    def __dlpack__(self, **kwargs: Any) -> Any:
        return self._array().__dlpack__(**kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        return self._array().__dlpack_device__()

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        array = self.numpy()
        if dtype is not None and np.dtype(dtype) != array.dtype:
            return array.astype(dtype)
        return array.copy() if copy else array

    def __repr__(self) -> str:
        return f"OrtValue({self.data_type()}, shape={self.shape()}, {self.device_name()})"


def _type_name(code: int) -> str:
    return onnx_name(code).lower()


class OrtValueVector(list):
    """A list of OrtValues with the native vector's methods."""

    def push_back(self, value: OrtValue) -> None:
        self.append(value)

    def reserve(self, count: int) -> None:
        """Accepted and ignored: a Python list grows as needed."""

    def shrink_to_fit(self) -> None:
        """Accepted and ignored, as above."""

    def element_type_at(self, index: int) -> int:
        return self[index].element_type()

    def dlpack_at(self, index: int) -> Any:
        return self[index].to_dlpack()

    def to_dlpacks(self, _to_tensor: Any = None) -> list[Any]:
        return [value.to_dlpack() for value in self]


class OrtSparseFormat:
    ORT_SPARSE_UNDEFINED = 0
    ORT_SPARSE_COO = 1
    ORT_SPARSE_CSRC = 2
    ORT_SPARSE_BLOCK_SPARSE = 4


def _read_only(array: np.ndarray) -> np.ndarray:
    view = array.view()
    view.flags.writeable = False
    return view


class SparseCooView:
    def __init__(self, indices: np.ndarray) -> None:
        self._indices = indices

    def indices(self) -> np.ndarray:
        return _read_only(self._indices)


class SparseCsrView:
    def __init__(self, inner: np.ndarray, outer: np.ndarray) -> None:
        self._inner, self._outer = inner, outer

    def inner(self) -> np.ndarray:
        return _read_only(self._inner)

    def outer(self) -> np.ndarray:
        return _read_only(self._outer)


class SparseTensor:
    """A sparse tensor on the host in COO or CSR(C) form, as onnxruntime builds one on the CPU
    (onemodel's operators take sparse initializers, densified at import; not sparse feeds)."""

    def __init__(
        self,
        sparse_format: int,
        dense_shape: Sequence[int],
        values: np.ndarray,
        indices: tuple[np.ndarray, ...],
    ) -> None:
        self._format = sparse_format
        self._shape = [int(n) for n in dense_shape]
        self._values = values
        self._indices = indices

    @staticmethod
    def sparse_coo_from_numpy(
        dense_shape: Sequence[int], values: Any, coo_indices: Any, ort_device: OrtDevice
    ) -> SparseTensor:
        _host_only(ort_device)
        return SparseTensor(
            OrtSparseFormat.ORT_SPARSE_COO,
            dense_shape,
            _sparse_values(values),
            (np.ascontiguousarray(coo_indices, dtype=np.int64),),
        )

    @staticmethod
    def sparse_csr_from_numpy(
        dense_shape: Sequence[int],
        values: Any,
        inner_indices: Any,
        outer_indices: Any,
        ort_device: OrtDevice,
    ) -> SparseTensor:
        _host_only(ort_device)
        return SparseTensor(
            OrtSparseFormat.ORT_SPARSE_CSRC,
            dense_shape,
            _sparse_values(values),
            (
                np.ascontiguousarray(inner_indices, dtype=np.int64),
                np.ascontiguousarray(outer_indices, dtype=np.int64),
            ),
        )

    def format(self) -> int:
        return self._format

    def dense_shape(self) -> list[int]:
        return list(self._shape)

    def data_type(self) -> str:
        return f"sparse_tensor({_type_name(onnx_code_for_numpy(self._values.dtype))})"

    def device_name(self) -> str:
        return "cpu"

    def values(self) -> np.ndarray:
        return _read_only(self._values)

    def as_coo_view(self) -> SparseCooView:
        if self._format != OrtSparseFormat.ORT_SPARSE_COO:
            raise RuntimeError("the sparse tensor is not in COO format")
        return SparseCooView(self._indices[0])

    def as_csrc_view(self) -> SparseCsrView:
        if self._format != OrtSparseFormat.ORT_SPARSE_CSRC:
            raise RuntimeError("the sparse tensor is not in CSR(C) format")
        return SparseCsrView(*self._indices)

    def to_cuda(self, ort_device: OrtDevice) -> SparseTensor:
        raise RuntimeError(
            "onemodel keeps sparse tensors on the host; there is no CUDA copy of one"
        )

    def __repr__(self) -> str:
        return f"SparseTensor({self.data_type()}, dense_shape={self._shape})"


def _sparse_values(values: Any) -> np.ndarray:
    array = np.asarray(values)
    return array.astype(object) if array.dtype.kind in "US" else np.ascontiguousarray(array)


def _host_only(device: OrtDevice) -> None:
    if not device_for(device).on_host:
        raise RuntimeError("onemodel builds sparse tensors on the host (OrtDevice cpu) only")
