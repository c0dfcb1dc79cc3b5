"""The backward pass: from a result back through the records to the leaves' `.grad`.

Records are visited once each, in reverse topological order, so every record has the full sum
of the gradients flowing into its result before its own backward function runs. The pass
runs with grad mode off (it records nothing) and, unless told to keep the graph, releases each
record after using it. Leaves accumulate: `.grad` is created on the first pass and added to
in place on later ones.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from onemodel.backends import BinaryOp
from onemodel.eager import (
    activations,
    calls,
    convolution,
    elementwise,
    embeddings,
    linalg,
    normalization,
    pooling,
    reductions,
    shaping,
)
from onemodel.eager.record import BackwardRecord, OpKind
from onemodel.tensors import Tensor, TensorError, TensorShapeError
from onemodel.tensors.autograd import GradLeaf, no_grad

BackwardFunction = Callable[[BackwardRecord, Tensor], tuple[Tensor | None, ...]]

# The one table from operation to gradient formula; each family module holds its own formulas.
BACKWARD: dict[OpKind, BackwardFunction] = {
    **elementwise.BACKWARD,
    **linalg.BACKWARD,
    **reductions.BACKWARD,
    **shaping.BACKWARD,
    **pooling.BACKWARD,
    **normalization.BACKWARD,
    **activations.BACKWARD,
    **convolution.BACKWARD,
    **embeddings.BACKWARD,
}


def backward(result: Tensor, gradient: Tensor | None = None, *, retain_graph: bool = False) -> None:
    """Accumulate d(result)/d(leaf) into every leaf's `.grad`.

    `result` must be a single element unless `gradient` (of its shape and type) is given; the
    gradient then is that vector's product with the Jacobian. Raises TensorVersionError if a
    tensor the pass needs was written after it was saved.
    """
    if result.autograd is None:
        raise TensorError("backward() of a tensor that does not require gradients")
    seed = _seed(result, gradient)
    with no_grad():
        if isinstance(result.autograd, GradLeaf):
            _accumulate_leaf(result.autograd, seed)
            return
        pending: dict[BackwardRecord, Tensor] = {result.autograd: seed}
        for record in _reverse_topological(result.autograd):
            grad = pending.pop(record, None)
            grads = () if grad is None else BACKWARD[record.op](record, grad)
            for edge, input_grad in zip(record.inputs, grads, strict=False):
                if edge.node is None or input_grad is None:
                    continue
                if isinstance(edge.node, GradLeaf):
                    _accumulate_leaf(edge.node, input_grad)
                elif edge.node in pending:
                    pending[edge.node] = calls.binary(BinaryOp.ADD, pending[edge.node], input_grad)
                else:
                    pending[edge.node] = input_grad
            if not retain_graph:
                record.release()


def _seed(result: Tensor, gradient: Tensor | None) -> Tensor:
    if gradient is None:
        if result.size != 1:
            raise TensorShapeError(
                f"backward() without a gradient needs a single-element result, not {result.shape}"
            )
        return calls.constant(1, result).broadcast_to(result.shape)
    if gradient.shape != result.shape or gradient.dtype is not result.dtype:
        raise TensorShapeError(
            f"the gradient {gradient.dtype.name}{gradient.shape} does not match the result "
            f"{result.dtype.name}{result.shape}"
        )
    return gradient


def _reverse_topological(root: BackwardRecord) -> Iterator[BackwardRecord]:
    """Each record after every record that uses its result (iterative depth-first search)."""
    order: list[BackwardRecord] = []
    visited = {root}
    stack = [(root, iter(root.inputs))]
    while stack:
        record, edges = stack[-1]
        for edge in edges:
            node = edge.node
            if isinstance(node, BackwardRecord) and node not in visited:
                visited.add(node)
                stack.append((node, iter(node.inputs)))
                break
        else:
            stack.pop()
            order.append(record)
    return reversed(order)


def _accumulate_leaf(leaf: GradLeaf, grad: Tensor) -> None:
    """A private copy the first time (gradients may be views of others), then in-place adds."""
    if leaf.grad is None:
        leaf.grad = calls.empty(grad.shape, grad)
        leaf.grad.copy_from(grad)
    else:
        calls.kernels(grad).binary(BinaryOp.ADD, leaf.grad, grad, leaf.grad)
