"""onnxruntime's exception classes, as SessionErrors so that either kind of `except` catches
them, and the translation of a onemodel error into the class onnxruntime raises for it.

Their text starts as onnxruntime's does, "[ONNXRuntimeError] : 2 : INVALID_ARGUMENT : ", for
code that reads the status from it; onemodel's message (kind, node, value) follows."""

from __future__ import annotations

from onemodel.errors import ErrorKind, SessionError


class OnnxRuntimeError(SessionError):
    """The base of onnxruntime's classes here: its status code and name lead the text."""

    code = 1
    status = "FAIL"

    def __str__(self) -> str:
        return f"[ONNXRuntimeError] : {self.code} : {self.status} : {super().__str__()}"


class Fail(OnnxRuntimeError):
    code, status = 1, "FAIL"


class InvalidArgument(OnnxRuntimeError):
    code, status = 2, "INVALID_ARGUMENT"


class NoSuchFile(OnnxRuntimeError):
    code, status = 3, "NO_SUCHFILE"


class NoModel(OnnxRuntimeError):
    code, status = 4, "NO_MODEL"


class EngineError(OnnxRuntimeError):
    code, status = 5, "ENGINE_ERROR"


class RuntimeException(OnnxRuntimeError):
    code, status = 6, "RUNTIME_EXCEPTION"


class InvalidProtobuf(OnnxRuntimeError):
    code, status = 7, "INVALID_PROTOBUF"


class ModelLoaded(OnnxRuntimeError):
    code, status = 8, "MODEL_LOADED"


class NotImplemented(OnnxRuntimeError):  # onnxruntime's name; this module never needs the builtin
    code, status = 9, "NOT_IMPLEMENTED"


class InvalidGraph(OnnxRuntimeError):
    code, status = 10, "INVALID_GRAPH"


class EPFail(OnnxRuntimeError):
    code, status = 11, "EP_FAIL"


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
