"""onnxruntime's exception classes, as SessionErrors so that either kind of `except` catches
them, and the translation of a onemodel error into the class onnxruntime raises for it."""

from __future__ import annotations

from onemodel.errors import ErrorKind, SessionError


class Fail(SessionError):
    pass


class InvalidArgument(SessionError):
    pass


class NoSuchFile(SessionError):
    pass


class NoModel(SessionError):
    pass


class EngineError(SessionError):
    pass


class RuntimeException(SessionError):
    pass


class InvalidProtobuf(SessionError):
    pass


class ModelLoaded(SessionError):
    pass


class NotImplemented(SessionError):  # onnxruntime's name; this module never needs the builtin
    pass


class InvalidGraph(SessionError):
    pass


class EPFail(SessionError):
    pass


_CLASS_BY_KIND: dict[ErrorKind, type[SessionError]] = {
    ErrorKind.INVALID_INPUT: InvalidArgument,
    ErrorKind.INVALID_MODEL: InvalidGraph,
    ErrorKind.UNSUPPORTED_OPERATOR: NotImplemented,
}


def as_onnxruntime_error(error: SessionError) -> SessionError:
    """The same error as the onnxruntime exception class code written for it catches."""
    cls = _CLASS_BY_KIND.get(error.kind, Fail)
    translated = cls.__new__(cls)
    Exception.__init__(translated, *error.args)
    translated.__dict__.update(error.__dict__)
    return translated
