"""Stopping runs: a cancellation token, a deadline and a memory budget, checked between
operators, in every Loop and Scan iteration and before dynamic allocations, so a model whose
Loop never ends, or grows without bound, can still be stopped."""

from __future__ import annotations

import threading
import time

from onemodel.errors import ErrorKind, SessionError


class CancellationToken:
    """Cancel runs (or a session's creation) from another thread; it cannot be un-cancelled."""

    def __init__(self) -> None:
        self._event = threading.Event()

    def cancel(self) -> None:
        self._event.set()

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()


class RunGuard:
    """A token, a deadline and a memory budget for one run.

    `check()` raises SessionError(CANCELLED) when the run was cancelled or is late; `charge()`
    raises SessionError(UNSUPPORTED) before an allocation that would take the run's memory (its
    slab, scratch, dynamic values, Loop and Scan accumulations) beyond `memory_limit`."""

    __slots__ = ("deadline", "memory_limit", "timeout", "token", "used")

    def __init__(
        self,
        token: CancellationToken | None,
        timeout: float | None,
        memory_limit: int | None = None,
    ) -> None:
        self.token = token
        self.timeout = timeout
        self.deadline = None if timeout is None else time.monotonic() + timeout
        self.memory_limit = memory_limit
        self.used = 0

    def charge(self, nbytes: int, node: str | None = None, what: str = "values") -> None:
        if self.memory_limit is None:
            return
        if self.used + nbytes > self.memory_limit:
            raise SessionError(
                ErrorKind.UNSUPPORTED,
                f"{what} of {nbytes} bytes would take the run to {self.used + nbytes} bytes, "
                f"beyond the session's memory limit of {self.memory_limit}",
                node=node,
            )
        self.used += nbytes

    def check(self, node: str | None = None) -> None:
        if self.token is not None and self.token.cancelled:
            raise SessionError(ErrorKind.CANCELLED, "the run was cancelled", node=node)
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise SessionError(
                ErrorKind.CANCELLED, f"the run exceeded its timeout of {self.timeout} s", node=node
            )
