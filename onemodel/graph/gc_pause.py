"""Python's cyclic garbage collector paused while a session or a plan is built.

Building allocates a few objects per node that all stay alive, and the collector's full passes
over them grow with the graph: at 40,000 nodes they were a third of session creation, and the
reason it grew faster than the node count (issue 16). Nothing built there is garbage in a
cycle, so the pass finds nothing; reference counting still frees everything else. Pauses nest
and may overlap between threads: the collector comes back when the last one ends, and only if
it was on when the first began.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_depth = 0
_was_enabled = False


@contextmanager
def paused_gc() -> Iterator[None]:
    global _depth, _was_enabled
    with _lock:
        if _depth == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _was_enabled:
                gc.enable()
