"""Sessions cached per worker process, keyed by the model's hash and the options, so an engine
that runs many blocks in one process compiles the model once there."""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path

from onemodel.session import Session, SessionOptions

_sessions: dict[tuple[str, str], Session] = {}
_lock = threading.Lock()


def model_bytes(model: str | os.PathLike[str] | bytes) -> tuple[bytes, str]:
    """A model's serialized bytes and their SHA-256, from a path or bytes."""
    data = (
        bytes(model)
        if isinstance(model, (bytes, bytearray, memoryview))
        else Path(model).read_bytes()
    )
    return data, hashlib.sha256(data).hexdigest()


def cached_session(digest: str, data: bytes, options: SessionOptions | None) -> Session:
    """This process's session for the model with this hash, made from `data` the first time."""
    key = (digest, repr(options))
    with _lock:
        session = _sessions.get(key)
        if session is None:
            session = _sessions[key] = Session.load(data, options)
        return session


def cached_count() -> int:
    """How many sessions this process holds (one per model and options if reuse works)."""
    return len(_sessions)
