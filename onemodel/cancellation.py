"""Stopping runs: a cancellation token and a deadline, checked between operators and in every
Loop and Scan iteration, so a model whose Loop never ends can still be stopped."""

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
    """A token and a deadline for one run; `check()` raises SessionError(CANCELLED)."""

    __slots__ = ("deadline", "timeout", "token")

    def __init__(self, token: CancellationToken | None, timeout: float | None) -> None:
        self.token = token
        self.timeout = timeout
        self.deadline = None if timeout is None else time.monotonic() + timeout

    def check(self, node: str | None = None) -> None:
        if self.token is not None and self.token.cancelled:
            raise SessionError(ErrorKind.CANCELLED, "the run was cancelled", node=node)
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise SessionError(
                ErrorKind.CANCELLED, f"the run exceeded its timeout of {self.timeout} s", node=node
            )
