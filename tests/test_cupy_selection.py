"""How a session comes to run on CuPy, checked on the CPU with a fake `cupy` module.

The fake is the checked-device stand-in's namespace with CuPy's device query added, so with a
"device" present the real CupyKernels (its memory, allocator and host copies) run on it. What is
checked: best() picks CuPy exactly when a device is seen, a forced choice is honoured either
way, the choice shows on the session and in `onemodel run`'s JSON, and a missing device or
driver is an error only when the GPU was forced.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import ml_dtypes
import numpy as np
import pytest

from onemodel import cli
from onemodel.backends import KernelPaths, cupy_gpu
from onemodel.backends.checked_device import DeviceArray, checked_xp
from onemodel.errors import ErrorKind, SessionError
from onemodel.session import Session, SessionOptions
from onemodel.tensors.buffers import aligned_numpy_bytes

MODEL = Path(__file__).parent / "models" / "mlp.onnx"


class _FakeCupy:
    """`import cupy` on a machine with `devices` CUDA devices (or a broken driver)."""

    def __init__(self, devices: int | Exception) -> None:
        def count() -> int:
            if isinstance(devices, Exception):
                raise devices
            return devices

        self.synchronized = 0

        def synchronize() -> None:
            self.synchronized += 1

        self.cuda = SimpleNamespace(
            runtime=SimpleNamespace(getDeviceCount=count),
            get_current_stream=lambda: SimpleNamespace(synchronize=synchronize),
        )

    def __getattr__(self, name: str) -> Any:
        return getattr(checked_xp, name)

    @staticmethod
    def empty(shape: Any, dtype: Any = np.float64) -> DeviceArray:
        """CuPy's allocator hands out aligned blocks (256 bytes; the backend checks 64)."""
        dtype = np.dtype(dtype)
        block = aligned_numpy_bytes(int(np.prod(shape)) * dtype.itemsize)
        return DeviceArray(block.view(dtype).reshape(shape))


@pytest.fixture
def fake_cupy(monkeypatch: pytest.MonkeyPatch):
    """Install a fake cupy with the given device count; backends built before are forgotten."""
    monkeypatch.setattr(KernelPaths, "_built", {})

    def install(devices: int | Exception) -> None:
        monkeypatch.setitem(sys.modules, "cupy", _FakeCupy(devices))

    return install


def _feeds() -> dict[str, np.ndarray]:
    with np.load(MODEL.with_suffix("").with_suffix(".inputs.npz")) as data:
        return {k: data[k] for k in data.files if not k.startswith("output:")}


def test_with_a_device_best_is_cupy_and_sessions_run_there(fake_cupy) -> None:
    fake_cupy(1)
    assert cupy_gpu.available() and "cupy" in KernelPaths.available()
    assert KernelPaths.best().name == "cupy"
    session = Session.load(str(MODEL))
    assert session.backend == "cupy"
    feeds = _feeds()
    (ours,) = session.run(None, feeds)
    assert isinstance(ours, DeviceArray)  # the fake device's arrays: a CuPy session's output
    (reference,) = Session.load(str(MODEL), SessionOptions(backend="numpy")).run(None, feeds)
    np.testing.assert_allclose(checked_xp.asnumpy(ours), reference, rtol=1e-5, atol=1e-6)


def test_numpy_can_be_forced_where_cupy_is_available(fake_cupy) -> None:
    fake_cupy(2)
    session = Session.load(str(MODEL), SessionOptions(backend="numpy"))
    assert session.backend == "numpy"
    assert isinstance(session.run(None, _feeds())[0], np.ndarray)


@pytest.mark.parametrize(
    "devices", [0, RuntimeError("cudaErrorInsufficientDriver")], ids=["no-device", "no-driver"]
)
def test_without_a_device_numpy_is_chosen_silently(fake_cupy, devices) -> None:
    fake_cupy(devices)
    assert not cupy_gpu.available()
    assert KernelPaths.best().name == "numpy"
    assert Session.load(str(MODEL)).backend == "numpy"


@pytest.mark.parametrize(
    ("devices", "reason"),
    [(0, "found no CUDA device"), (RuntimeError("cudaErrorNoDevice"), "cudaErrorNoDevice")],
    ids=["no-device", "no-driver"],
)
def test_forcing_cupy_without_a_device_is_an_unsupported_error(fake_cupy, devices, reason):
    fake_cupy(devices)
    with pytest.raises(SessionError, match=reason) as caught:
        Session.load(str(MODEL), SessionOptions(backend="cupy"))
    assert caught.value.kind is ErrorKind.UNSUPPORTED


@pytest.mark.parametrize(("devices", "expected"), [(1, "cupy"), (0, "numpy")])
def test_onemodel_run_reports_the_chosen_backend(fake_cupy, capsys, devices, expected) -> None:
    fake_cupy(devices)
    assert cli.main(["run", str(MODEL)]) == 0
    assert json.loads(capsys.readouterr().out)["backend"] == expected


def test_onemodel_run_refuses_a_forced_gpu_it_cannot_reach(fake_cupy, capsys) -> None:
    fake_cupy(0)
    assert cli.main(["run", str(MODEL), "--backend", "cupy"]) == 2
    assert "no CUDA device" in capsys.readouterr().err


def _bfloat16_round_trip() -> bytes:
    """x -> Cast(bfloat16) -> Cast(float): a model CuPy cannot hold the middle value of."""
    from onnx import TensorProto, helper

    nodes = [
        helper.make_node("Cast", ["x"], ["half"], to=TensorProto.BFLOAT16, name="narrow"),
        helper.make_node("Cast", ["half"], ["y"], to=TensorProto.FLOAT, name="widen"),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])
    return helper.make_model(helper.make_graph(nodes, "g", [x], [y])).SerializeToString()


def test_a_model_using_a_type_cupy_lacks_runs_on_numpy_with_a_warning(fake_cupy) -> None:
    fake_cupy(1)
    with pytest.warns(RuntimeWarning, match="no arrays of BFLOAT16 .used by 'narrow'"):
        session = Session.load(_bfloat16_round_trip())
    assert session.backend == "numpy"
    x = np.array([1.0, 1.00390625, 3.0], np.float32)  # the middle one is a bfloat16 tie
    expected = x.astype(ml_dtypes.bfloat16).astype(np.float32)
    np.testing.assert_array_equal(session.run(None, {"x": x})[0], expected)


@pytest.mark.parametrize("backend", ["cupy", "checked-device"])
def test_forcing_a_backend_that_lacks_a_type_is_refused_before_running(fake_cupy, backend) -> None:
    fake_cupy(1)
    with pytest.raises(SessionError, match="no arrays of BFLOAT16") as error:
        Session.load(_bfloat16_round_trip(), SessionOptions(backend=backend))
    assert error.value.kind is ErrorKind.UNSUPPORTED


def test_synchronize_waits_for_the_stream_on_cupy_and_does_nothing_on_numpy(fake_cupy) -> None:
    fake_cupy(1)
    KernelPaths.get("cupy").synchronize()
    assert sys.modules["cupy"].synchronized == 1
    KernelPaths.get("numpy").synchronize()  # nothing queued, nothing to wait for
    assert sys.modules["cupy"].synchronized == 1
