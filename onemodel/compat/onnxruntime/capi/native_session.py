"""The native half of onnxruntime's InferenceSession (`session._sess`) and SessionIOBinding,
over a onemodel Session.

Runs take arrays or OrtValues; `run` hands back NumPy arrays as onnxruntime does, while
`run_with_ort_values` and I/O binding keep outputs where the session computed them, so device
tensors on the CuPy backend never pass through the host.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from onemodel.compat.onnxruntime.capi.devices import OrtDevice, device_for, memory_info_for
from onemodel.compat.onnxruntime.capi.exceptions import as_onnxruntime_error
from onemodel.compat.onnxruntime.capi.options import RunOptions
from onemodel.compat.onnxruntime.capi.ort_value import (
    OrtValue,
    OrtValueVector,
    device_library,
    element_code,
    on_host,
    wrap_device_memory,
    wrap_host_memory,
)
from onemodel.compat.onnxruntime.capi.profiling import Profiler
from onemodel.errors import SessionError
from onemodel.session import Session
from onemodel.tensors import numpy_dtype_for_onnx


def _as_text(value: Any) -> Any:
    """A list or object array fed to a string input with its elements as onnxruntime reads
    them: str() of each element that is not already text (numbers, None, even bytes)."""
    if isinstance(value, (list, tuple)):
        value = np.array(value, dtype=object)
    if not isinstance(value, np.ndarray) or value.dtype != object:
        return value
    if all(isinstance(item, str) for item in value.flat):
        return value
    return np.array([str(item) for item in value.flat], dtype=object).reshape(value.shape)


def _plain(value: Any) -> Any:
    """What a onemodel Session takes for a feed that may be an OrtValue, or NumPy void
    elements, which onnxruntime reads as strings (their bytes as UTF-8, NUL padding dropped)."""
    if isinstance(value, OrtValue):
        return value._value
    if isinstance(value, list):
        return [_plain(item) for item in value]
    if isinstance(value, np.ndarray) and value.dtype.kind == "V":
        texts = [bytes(item).rstrip(b"\0").decode() for item in value.ravel()]
        return np.array(texts, dtype=object).reshape(value.shape)
    return value


class InferenceSession:
    """`_sess` of onnxruntime's InferenceSession: the runs, profiling and binding."""

    def __init__(self, session: Session, providers: list[str], profiler: Profiler | None):
        self.session = session
        self.providers = providers
        self.profiler = profiler
        self.device = "cpu" if session.kernels.xp is np else "cuda"
        self._text_inputs = {
            meta.name for meta in session.inputs if meta.kind == "tensor" and meta.elem_type == 8
        }

    def _run(
        self,
        output_names: Sequence[str] | None,
        feeds: Mapping[str, Any],
        run_options: RunOptions | None,
        outputs_as: str,
    ) -> list[Any]:
        cancel = None if run_options is None else run_options.token
        for adapter in [] if run_options is None else run_options.adapters:
            feeds = {**adapter.parameters, **feeds}
        plain = {
            name: _as_text(_plain(value)) if name in self._text_inputs else _plain(value)
            for name, value in feeds.items()
        }
        trace: list[tuple] | None = None if self.profiler is None else []
        started = time.perf_counter()
        try:
            outputs = self.session.run(
                list(output_names) if output_names else None,
                plain,
                cancel=cancel,
                trace=trace,
                outputs_as=outputs_as,
            )
        except SessionError as error:
            raise as_onnxruntime_error(error) from error
        if self.profiler is not None and trace is not None:
            self.profiler.record(trace, started, time.perf_counter() - started)
        return outputs

    def run(
        self,
        output_names: Sequence[str] | None,
        feeds: Mapping[str, Any],
        run_options: RunOptions | None = None,
    ) -> list[Any]:
        """NumPy outputs (copied from the device on the CuPy backend), as onnxruntime's run,
        unless onemodel's own options passed as `sess_options` ask for "input"."""
        wanted = "input" if self.session.options.outputs_as == "input" else "numpy"
        return self._run(output_names, feeds, run_options, wanted)

    def run_with_ort_values(
        self,
        feeds: Mapping[str, Any],
        output_names: Sequence[str] | None,
        run_options: RunOptions | None = None,
    ) -> OrtValueVector:
        """OrtValue outputs where the session computed them (the device on CuPy)."""
        outputs = self._run(output_names, feeds, run_options, "backend")
        return OrtValueVector(OrtValue(value) for value in outputs)

    def run_with_ortvaluevector(
        self,
        run_options: RunOptions | None,
        feed_names: Sequence[str],
        feeds: Sequence[OrtValue],
        fetch_names: Sequence[str],
        fetches: OrtValueVector,
        fetch_devices: Sequence[Any] = (),
    ) -> None:
        outputs = self.run_with_ort_values(
            dict(zip(feed_names, feeds, strict=True)), fetch_names, run_options
        )
        fetches.clear()
        fetches.extend(outputs)

    def run_with_iobinding(self, binding: SessionIOBinding, run_options: Any = None) -> None:
        binding._run(self, run_options)

    def run_async(
        self,
        output_names: Sequence[str] | None,
        feeds: Mapping[str, Any],
        callback: Callable[[list, Any, str], None],
        user_data: Any = None,
        run_options: RunOptions | None = None,
    ) -> None:
        """Run on another thread; `callback(outputs, user_data, error text)` when done."""

        def work() -> None:
            try:
                outputs = self.run(output_names, feeds, run_options)
            except Exception as error:
                callback([], user_data, str(error))
            else:
                callback(outputs, user_data, "")

        threading.Thread(target=work, name="onemodel-run-async", daemon=True).start()

    def input_meminfos(self) -> list[Any]:
        return [memory_info_for(self.device) for _ in self.session.inputs]

    def output_meminfos(self) -> list[Any]:
        return [memory_info_for(self.device) for _ in self.session.outputs]

    def end_profiling(self) -> str:
        """Write the profile and stop profiling; "" when profiling was not enabled."""
        if self.profiler is None:
            return ""
        path, self.profiler = self.profiler.end(), None
        return path

    def get_profiling_start_time_ns(self) -> int:
        return 0 if self.profiler is None else self.profiler.start_ns


class _Output:
    """A bound output: the device to leave it on, and the caller's tensor when preallocated."""

    def __init__(self, device: OrtDevice, target: OrtValue | None = None) -> None:
        self.device = device
        self.target = target
        self.value: OrtValue | None = None


class SessionIOBinding:
    """Inputs and outputs bound to memory before a run, as onnxruntime's IOBinding.

    Takes both of onnxruntime's calling conventions: the native one (an OrtDevice) and the
    Python one (a device name and id). Outputs bound to the session's device stay there; a
    preallocated output is written in place."""

    def __init__(self, session: Any) -> None:
        self._session = getattr(session, "_sess", session)
        self._inputs: dict[str, OrtValue] = {}
        self._outputs: dict[str, _Output] = {}

    @property
    def _iobinding(self) -> SessionIOBinding:
        return self

    # -- inputs ----------------------------------------------------------------------------

    def bind_cpu_input(self, name: str, arr_on_cpu: Any) -> None:
        self._inputs[name] = OrtValue(np.asarray(arr_on_cpu), arr_on_cpu)

    def bind_ortvalue_input(self, name: str, ortvalue: OrtValue) -> None:
        self._inputs[name] = ortvalue._get_c_value()

    def bind_input(self, name: str, *args: Any) -> None:
        """(name, OrtDevice, element_type, shape, pointer) or (name, device_type, device_id,
        element_type, shape, pointer): memory the caller owns, read in place."""
        device, element_type, shape, pointer = _device_and_rest(args, 4)
        self._inputs[name] = OrtValue(_wrap(device, element_type, shape, pointer))

    def clear_binding_inputs(self) -> None:
        self._inputs.clear()

    # -- outputs ---------------------------------------------------------------------------

    def bind_ortvalue_output(self, name: str, ortvalue: OrtValue) -> None:
        value = ortvalue._get_c_value()
        device = OrtDevice.make("cpu" if value.device_name() == "cpu" else "cuda")
        self._outputs[name] = _Output(device, value)

    def bind_output(self, name: str, *args: Any, **kwargs: Any) -> None:
        """(name[, OrtDevice[, element_type, shape, pointer]]) or (name[, device_type="cpu",
        device_id=0, element_type, shape, buffer_ptr]): where the output goes."""
        if kwargs:
            args = (
                kwargs.get("device_type", args[0] if args else "cpu"),
                kwargs.get("device_id", 0),
                kwargs.get("element_type"),
                kwargs.get("shape"),
                kwargs.get("buffer_ptr"),
            )
        device, element_type, shape, pointer = _device_and_rest(args or ("cpu", 0), 4)
        target = None
        if pointer:
            target = OrtValue(_wrap(device, element_type, shape, pointer))
        self._outputs[name] = _Output(device, target)

    def clear_binding_outputs(self) -> None:
        self._outputs.clear()

    # -- running and results -----------------------------------------------------------------

    def _run(self, native: InferenceSession, run_options: Any) -> None:
        names = list(self._outputs) or [meta.name for meta in native.session.outputs]
        if not self._outputs:
            self._outputs = {name: _Output(OrtDevice.make(native.device)) for name in names}
        options = run_options if isinstance(run_options, RunOptions) else None
        produced = native._run(names, self._inputs, options, "backend")
        for name, value in zip(names, produced, strict=True):
            self._outputs[name].value = _placed(self._outputs[name], value)

    def get_outputs(self) -> OrtValueVector:
        """The outputs of the last run, where they were bound."""
        values = [output.value for output in self._outputs.values()]
        if any(value is None for value in values):
            raise RuntimeError("the binding has not been run since its outputs were bound")
        return OrtValueVector(values)

    get_outputs_as_ortvaluevector = get_outputs

    def copy_outputs_to_cpu(self) -> list[Any]:
        return [value.numpy() for value in self.get_outputs()]

    def synchronize_inputs(self) -> None:
        _synchronize(self._inputs.values())

    def synchronize_outputs(self) -> None:
        _synchronize(o.value for o in self._outputs.values() if o.value is not None)


def _device_and_rest(args: Sequence[Any], rest: int) -> tuple[Any, ...]:
    """Split onnxruntime's two conventions into (OrtDevice, *rest)."""
    if args and isinstance(args[0], OrtDevice):
        device, tail = args[0], list(args[1:])
    else:
        device, tail = device_for(args[0], args[1] if len(args) > 1 else 0), list(args[2:])
    return (device, *(tail + [None] * rest)[: rest - 1])


def _wrap(device: OrtDevice, element_type: Any, shape: Sequence[int], pointer: int) -> Any:
    dtype = np.dtype(numpy_dtype_for_onnx(element_code(element_type)))
    shape = [int(n) for n in shape]
    if device.on_host:
        return wrap_host_memory(pointer, dtype, shape)
    return wrap_device_memory(pointer, dtype, shape)


def _placed(output: _Output, value: Any) -> OrtValue:
    """A run's output moved where it was bound (a copy only across the host/device line)."""
    if output.target is not None:
        target = output.target._value
        if on_host(target):
            np.copyto(target, value if on_host(value) else value.get(), casting="no")
        else:
            target[...] = value  # device to device, or one upload from the host
        return output.target
    if output.device.on_host:
        return OrtValue(value if on_host(value) else value.get())
    if on_host(value):
        return OrtValue(device_library().asarray(value))
    return OrtValue(value)


def _synchronize(values: Any) -> None:
    """Wait for device work on the values' arrays (CuPy's current stream); a no-op on the host."""
    for value in values:
        array = value._value
        if hasattr(array, "device") and hasattr(array.device, "synchronize"):
            array.device.synchronize()
