"""The BLAS threads of the NumPy backend: a session's intra-op thread count, set per run.

NumPy's BLAS (OpenBLAS, MKL, BLIS) keeps one process-wide thread count. threadpoolctl changes it
while the process runs (a C call of about a microsecond), so every run sets its session's count
as it starts, and sessions with different counts can share a process.

Fast-mode bits may depend on the count: OpenBLAS 0.3.31 (Haswell kernels, AMD EPYC) gives
other float32 roundings for GEMMs such as 32x288 @ 288x192 on two threads than on one, and
threaded gemv and dot split the sum over k. Exact mode's results never depend on it.
"""

from __future__ import annotations

import functools
import os
import threading
from typing import Any


@functools.cache
def all_cores() -> int:
    """The cores this process may run on (what intra_op_threads = 0 asks for), looked up once:
    the affinity call costs microseconds, and every run asks."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


# Environment variables a BLAS reads for its start-up thread count.
THREAD_VARIABLES = (
    "OPENBLAS_NUM_THREADS",
    "GOTO_NUM_THREADS",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "BLIS_NUM_THREADS",
)


def start_up_count() -> int | None:
    """The thread count the BLAS started with, when known without asking it: with none of
    `THREAD_VARIABLES` set, one per core this process may run on (what OpenBLAS takes from
    the affinity mask). Knowing it lets a session that asks for all cores (the default) leave
    threadpoolctl unimported: finding the libraries costs ~13 ms of a cold start."""
    if any(os.environ.get(name) for name in THREAD_VARIABLES):
        return None
    return all_cores()


class BlasThreads:
    """The process's BLAS libraries, found once, and the thread count last given to them."""

    def __init__(self) -> None:
        self._libraries: list[Any] | None = None
        self._lock = threading.Lock()
        self.count: int | None = start_up_count()

    def _found(self) -> list[Any]:
        if self._libraries is None:
            with self._lock:
                if self._libraries is None:
                    from threadpoolctl import ThreadpoolController  # ~13 ms: only when needed

                    blas = ThreadpoolController().select(user_api="blas")
                    self._libraries = list(blas.lib_controllers)
        return self._libraries

    def use(self, count: int) -> None:
        """Give the BLAS libraries `count` threads (0: all cores) unless they have them."""
        count = count or all_cores()
        if count != self.count:
            for library in self._found():
                library.set_num_threads(count)
            self.count = count


BLAS_THREADS = BlasThreads()
