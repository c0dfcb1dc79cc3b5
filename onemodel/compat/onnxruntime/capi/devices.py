"""Where onnxruntime says memory lives: OrtDevice, OrtMemoryInfo, OrtArenaCfg and their enums.

onemodel has two places for a tensor: the host (NumPy) and the device of its GPU backend (CuPy,
or the checked-device stand-in). "cpu" is the host; "cuda" (and onnxruntime's other GPU names)
the device. Allocator settings are stored for code that reads them back; onemodel plans its own
memory (docs/memory-planning.md).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any


class OrtDeviceVendorId(enum.IntEnum):
    NONE = 0
    AMD = 0x1002
    NVIDIA = 0x10DE
    ARM = 0x13B5
    MICROSOFT = 0x1414
    HUAWEI = 0x19E5
    QUALCOMM = 0x5143
    INTEL = 0x8086


class OrtAllocatorType(enum.IntEnum):
    INVALID = -1
    ORT_DEVICE_ALLOCATOR = 0
    ORT_ARENA_ALLOCATOR = 1


class OrtMemType(enum.IntEnum):
    CPU_INPUT = -2
    CPU_OUTPUT = -1
    CPU = -1
    DEFAULT = 0


class OrtDeviceMemoryType(enum.IntEnum):
    DEFAULT = 0
    HOST_ACCESSIBLE = 5


class OrtMemoryInfoDeviceType(enum.IntEnum):
    CPU = 0
    GPU = 1
    FPGA = 2
    NPU = 3


class ArenaExtendStrategy(enum.IntEnum):
    kNextPowerOfTwo = 0
    kSameAsRequested = 1


kNextPowerOfTwo = ArenaExtendStrategy.kNextPowerOfTwo
kSameAsRequested = ArenaExtendStrategy.kSameAsRequested

_CPU, _GPU, _FPGA, _NPU, _DML = 0, 1, 2, 3, 4
# onnxruntime's device names → (device type, vendor) as OrtDevice.make reports them.
_NAMED = {
    "cpu": (_CPU, OrtDeviceVendorId.NONE),
    "cuda": (_GPU, OrtDeviceVendorId.NVIDIA),
    "gpu": (_GPU, OrtDeviceVendorId.NONE),
    "dml": (_DML, OrtDeviceVendorId.MICROSOFT),
    "cann": (_NPU, OrtDeviceVendorId.HUAWEI),
    "webgpu": (_GPU, OrtDeviceVendorId.NONE),
}


class OrtDevice:
    """A device: type (0 cpu, 1 gpu...), memory type, id and vendor. Both of onnxruntime's forms
    in one class: the native `OrtDevice(type, mem_type, id[, vendor])` with `OrtDevice.cpu()` and
    friends, and the Python `OrtDevice.make("cuda", 0)` with `device_type()` etc."""

    def __init__(self, device_type: int, mem_type: int = 0, device_id: int = 0, vendor_id: int = 0):
        self._type, self._mem, self._id = int(device_type), int(mem_type), int(device_id)
        if not vendor_id and self._type == _GPU:
            vendor_id = OrtDeviceVendorId.NVIDIA
        self._vendor = int(vendor_id)

    @staticmethod
    def make(ort_device_name: str, device_id: int = 0) -> OrtDevice:
        name = ort_device_name.lower()
        if name not in _NAMED:
            raise RuntimeError(f"Unsupported device type: {ort_device_name}")
        device_type, vendor = _NAMED[name]
        return OrtDevice(device_type, 0, device_id, vendor)

    @property
    def _ort_device(self) -> OrtDevice:
        return self

    @staticmethod
    def cpu() -> int:
        return _CPU

    @staticmethod
    def gpu() -> int:
        return _GPU

    @staticmethod
    def cuda() -> int:
        return _GPU

    @staticmethod
    def webgpu() -> int:
        return _GPU

    @staticmethod
    def fpga() -> int:
        return _FPGA

    @staticmethod
    def npu() -> int:
        return _NPU

    @staticmethod
    def cann() -> int:
        return _NPU

    @staticmethod
    def dml() -> int:
        return _DML

    @staticmethod
    def default_memory() -> int:
        return 0

    def device_id(self) -> int:
        return self._id

    def device_type(self) -> int:
        return self._type

    def mem_type(self) -> int:
        return self._mem

    device_mem_type = mem_type

    def vendor_id(self) -> int:
        return self._vendor

    device_vendor_id = vendor_id

    @property
    def on_host(self) -> bool:
        return self._type == _CPU

    def name(self) -> str:
        """onnxruntime's device_name(): "cpu", or the name of the GPU kind."""
        if self._type == _CPU:
            return "cpu"
        return "dml" if self._type == _DML else "cuda"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, OrtDevice) and (self._type, self._mem, self._id) == (
            other._type,
            other._mem,
            other._id,
        )

    def __hash__(self) -> int:
        return hash((self._type, self._mem, self._id))

    def __repr__(self) -> str:
        return f"OrtDevice({self.name()}:{self._id}, mem_type={self._mem})"


def device_for(device: Any, device_id: int = 0) -> OrtDevice:
    """An OrtDevice from either way onnxruntime's APIs name one: an OrtDevice or a name."""
    if isinstance(device, OrtDevice):
        return device
    return OrtDevice.make(str(device), int(device_id))


class OrtMemoryInfo:
    """Where an allocator's memory lives; `name` is onnxruntime's ("Cpu", "Cuda", ...)."""

    def __init__(
        self,
        name: str,
        allocator_type: int = OrtAllocatorType.ORT_ARENA_ALLOCATOR,
        device_id: int = 0,
        mem_type: int = OrtMemType.DEFAULT,
    ) -> None:
        self.name = name
        self.allocator_type = OrtAllocatorType(allocator_type)
        self.device_id = int(device_id)
        self.mem_type = OrtMemType(mem_type)
        self.device_mem_type = OrtDeviceMemoryType.DEFAULT
        self.device_vendor_id = (
            0 if name.lower().startswith("cpu") else int(OrtDeviceVendorId.NVIDIA)
        )

    @staticmethod
    def create_v2(
        name: str,
        device_type: int,
        vendor_id: int,
        device_id: int,
        device_mem_type: int,
        alignment: int,
        allocator_type: int,
    ) -> OrtMemoryInfo:
        info = OrtMemoryInfo(name, allocator_type, device_id, OrtMemType.DEFAULT)
        info.device_mem_type = OrtDeviceMemoryType(device_mem_type)
        info.device_vendor_id = int(vendor_id)
        return info

    def __repr__(self) -> str:
        return f"OrtMemoryInfo({self.name!r}, device_id={self.device_id})"


def memory_info_for(device_name: str) -> OrtMemoryInfo:
    """The memory info of a session's inputs or outputs on that device."""
    return OrtMemoryInfo("Cpu" if device_name == "cpu" else "Cuda")


_ARENA_FIELDS = (
    "max_mem",
    "arena_extend_strategy",
    "initial_chunk_size_bytes",
    "max_dead_bytes_per_chunk",
    "initial_growth_chunk_size_bytes",
    "max_power_of_two_extend_bytes",
)


class OrtArenaCfg:
    """Arena settings, `OrtArenaCfg(max_mem, strategy, initial_chunk, max_dead)` or from a dict
    of the same names; stored only."""

    def __init__(self, *args: Any) -> None:
        values: dict[str, int] = dict.fromkeys(_ARENA_FIELDS, -1)
        values["max_mem"] = 0
        if len(args) == 1 and isinstance(args[0], Mapping):
            for key, value in args[0].items():
                if key not in _ARENA_FIELDS:
                    raise RuntimeError(f"Invalid OrtArenaCfg option: {key}")
                values[key] = int(value)
        elif len(args) == 4:
            values.update(zip(_ARENA_FIELDS, (int(a) for a in args), strict=False))
        elif args:
            raise TypeError(
                "OrtArenaCfg takes (max_mem, arena_extend_strategy, "
                "initial_chunk_size_bytes, max_dead_bytes_per_chunk) or a dict"
            )
        for key, value in values.items():
            setattr(self, key, value)
