"""NumPy's floating-point warnings, switched off once per run rather than once per operator.

ONNX defines the inf and NaN results of overflow, log(0), 0/0 and friends, so operators ignore
NumPy's floating-point errors. Entering np.errstate costs about a microsecond, which is a tenth
of a small model's per-step time; the run loop enters it once (`run_scope`) and operators use
`quiet()`, which is a no-op inside a run and np.errstate elsewhere (plan-time evaluation,
constant folding, direct calls in tests).
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any

import numpy as np

_state = threading.local()
_NOTHING = contextlib.nullcontext()


def quiet() -> Any:
    """A context in which NumPy's floating-point errors are ignored."""
    if getattr(_state, "in_run", False):
        return _NOTHING
    return np.errstate(all="ignore")


def in_run() -> bool:
    """Whether this thread is inside a run (its errors are ignored already)."""
    return getattr(_state, "in_run", False)


def _ignoring_errstate() -> tuple[Any, Any] | None:
    """NumPy's error-state context variable and its value under errstate(all="ignore"): set
    directly, it costs 0.3 us where entering np.errstate costs 2 us (NumPy 2, AMD EPYC), which
    is a fifth of a small model's run. None where NumPy keeps it elsewhere (np.errstate then)."""
    try:
        from numpy._core._ufunc_config import _extobj_contextvar
    except ImportError:
        return None
    with np.errstate(all="ignore"):
        return _extobj_contextvar, _extobj_contextvar.get()


_IGNORING = _ignoring_errstate()


class run_scope:
    """Ignore NumPy's floating-point errors for a whole run on this thread (runs nest: Loop and
    Scan bodies run inside their parent's run). A class, not a generator: it is entered once
    per run, and a generator context costs a few microseconds more. One object may be entered
    again after it exits (a run state keeps one), never twice at once."""

    __slots__ = ("_errstate", "_outer")

    def __enter__(self) -> None:
        self._outer = getattr(_state, "in_run", False)
        _state.in_run = True
        if _IGNORING is None:
            self._errstate = np.errstate(all="ignore")
            self._errstate.__enter__()
        else:
            self._errstate = _IGNORING[0].set(_IGNORING[1])

    def __exit__(self, *exc: object) -> None:
        try:
            if _IGNORING is None:
                self._errstate.__exit__(*exc)
            else:
                _IGNORING[0].reset(self._errstate)
        finally:
            _state.in_run = self._outer


_BUFFERED: dict[int, Any] = {}


def buffered_run_state(size: int) -> tuple[Any, Any] | None:
    """NumPy's ufunc-configuration context variable and the value that keeps a run's error
    state (all ignored) with ufunc buffers of `size` elements, for a caller inside a run to set
    directly and reset: 0.2 us, where np.setbufsize costs 6 us a call (NumPy 2.4, AMD EPYC), a
    tenth of a medium-sized LayerNormalization. None outside a run, where an np.errstate has
    changed the state inside one, or where NumPy keeps it elsewhere (np.setbufsize then)."""
    if _IGNORING is None or not getattr(_state, "in_run", False):
        return None
    variable, ignoring = _IGNORING
    if variable.get() is not ignoring:
        return None
    value = _BUFFERED.get(size)
    if value is None:
        token = variable.set(ignoring)
        try:
            np.setbufsize(size)
            value = variable.get()
        finally:
            variable.reset(token)
        _BUFFERED[size] = value  # one per row length a model broadcasts over: few
    return variable, value
