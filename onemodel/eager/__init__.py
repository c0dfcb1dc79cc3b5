"""Eager tensor operations with gradient tracking (seed 002 §8 and §9); see docs/eager.md.

Operations take `onemodel.Tensor`s, compute through the kernel seam at once, and, when grad
mode is on and an input requires gradients, leave a BackwardRecord on their result for
`backward()`.
"""

from onemodel.eager.activations import gelu, softmax
from onemodel.eager.context import use_kernels
from onemodel.eager.convolution import conv2d
from onemodel.eager.elementwise import (
    abs,
    add,
    div,
    exp,
    log,
    maximum,
    minimum,
    mul,
    neg,
    relu,
    sigmoid,
    sqrt,
    sub,
    tanh,
)
from onemodel.eager.embeddings import embedding
from onemodel.eager.engine import backward
from onemodel.eager.linalg import matmul
from onemodel.eager.normalization import layer_norm
from onemodel.eager.pooling import max_pool2d, relu_max_pool2d
from onemodel.eager.record import BackwardRecord, InputEdge, OpKind
from onemodel.eager.reductions import mean, sum
from onemodel.eager.shaping import permute, reshape
from onemodel.tensors.autograd import is_grad_enabled, no_grad

__all__ = [
    "BackwardRecord",
    "InputEdge",
    "OpKind",
    "abs",
    "add",
    "backward",
    "conv2d",
    "div",
    "embedding",
    "exp",
    "gelu",
    "is_grad_enabled",
    "layer_norm",
    "log",
    "matmul",
    "max_pool2d",
    "maximum",
    "mean",
    "minimum",
    "mul",
    "neg",
    "no_grad",
    "permute",
    "relu",
    "relu_max_pool2d",
    "reshape",
    "sigmoid",
    "softmax",
    "sqrt",
    "sub",
    "sum",
    "tanh",
    "use_kernels",
]
