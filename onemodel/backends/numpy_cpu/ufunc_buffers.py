"""NumPy's ufunc buffer made small around the convolution kernels.

NumPy 2.4's iterator copies operands through buffers of `bufsize` elements (8192 by default)
whenever that makes longer inner loops than the arrays' own rows, and the copies cost more
than the loops they lengthen: a (96, 3136) multiply by a (96, 1) weight column took 0.081 ms at
the default and 0.044 ms with 1024-element buffers (one 56×56 depthwise tap, AMD EPYC, one
thread), a contiguous (96, 3136) bias add 0.073 and 0.033 ms. With 1024 rows of 3136 are long
enough to run unbuffered, and cropped 56-wide rows still gather into 1024-element loops (0.10
ms where 256 takes 0.15). Same-type operations only: nothing inside needs a casting buffer.
"""

from __future__ import annotations

import numpy as np

from onemodel.backends.fp_errors import buffered_run_state

SMALL_BUFFER = 1024  # elements


class small_buffers:
    """A context in which NumPy's ufuncs use SMALL_BUFFER-element buffers (the old size comes
    back on exit, on this thread's context only): inside a run set through NumPy's context
    variable (fp_errors.buffered_run_state, 0.2 us), elsewhere by np.setbufsize (6 us)."""

    __slots__ = ("_outer", "_state")

    def __enter__(self) -> None:
        self._state = buffered_run_state(SMALL_BUFFER)
        if self._state is None:
            self._outer = np.setbufsize(SMALL_BUFFER)
        else:
            self._outer = self._state[0].set(self._state[1])

    def __exit__(self, *exc: object) -> None:
        if self._state is None:
            np.setbufsize(self._outer)
        else:
            self._state[0].reset(self._outer)
