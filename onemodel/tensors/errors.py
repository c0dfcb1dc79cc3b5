"""Exceptions of the tensor layer.

They are distinct types (not one generic error with a message) because callers react to them
differently: a shape error is the caller's input, a stale access is a lifetime bug, a version
error means a backward pass would have read overwritten data.
"""


class TensorError(Exception):
    """Base class of every error the tensor layer raises."""


class UnsupportedDTypeError(TensorError, TypeError):
    """An ONNX element type the tensor layer does not store (the message names the type)."""


class TensorShapeError(TensorError, ValueError):
    """A shape, stride or size outside the limits of seed 002 §3; raised before allocating."""


class StaleTensorError(TensorError):
    """A tensor touched memory that was released, re-rented or reset since it was made."""


class TensorVersionError(TensorError):
    """A saved tensor was written to after it was saved."""


class BufferOverrunError(TensorError):
    """Checked mode found the canary bytes after a buffer overwritten at release."""
