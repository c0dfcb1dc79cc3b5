"""The one exception type sessions raise, with a kind a caller can branch on."""

from __future__ import annotations

import enum
from collections.abc import Sequence


class ErrorKind(enum.Enum):
    UNSUPPORTED_OPERATOR = "unsupported_operator"
    EXACT_MODE_UNAVAILABLE = "exact_mode_unavailable"
    INVALID_MODEL = "invalid_model"
    UNSUPPORTED = "unsupported"
    INVALID_INPUT = "invalid_input"
    DISPOSED = "disposed"
    CANCELLED = "cancelled"


class SessionError(Exception):
    """An error of a model or session: `kind`, and where known the node, value and operators.

    The message always names what is wrong and where, so that a user can act on it without a
    traceback from inside a kernel.
    """

    def __init__(
        self,
        kind: ErrorKind,
        message: str,
        *,
        node: str | None = None,
        value: str | None = None,
        operators: Sequence[str] = (),
    ) -> None:
        self.kind = kind
        self.node = node
        self.value = value
        self.operators = tuple(operators)
        where = []
        if node is not None:
            where.append(f"node '{node}'")
        if value is not None:
            where.append(f"value '{value}'")
        prefix = f"[{kind.name}] " + (", ".join(where) + ": " if where else "")
        super().__init__(prefix + message)
