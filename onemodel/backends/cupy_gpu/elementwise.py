"""One generated CUDA kernel for the element-wise tail of a Fused step: host logic only.

Everything here is plain Python on strings and dtypes, so it is tested on the CPU; the backend
(`CupyKernels.run_elementwise_chain`) hands the result to `cupy.ElementwiseKernel`, compiled once
per source and cached by CuPy.

A chain reads `x` (the result of the member before the tail, or the first fused input) and the
operands `o0, o1, ...`, all of one floating type, and writes `y`; CuPy broadcasts the operands.
Each member becomes one C statement on a local of that type, in member order, so the rounding
steps are NumPy's: one rounding per operation. Exact mode admits only the correctly rounded
operations (IEEE add, sub, mul, div, sqrt, and the moves neg, abs, relu) and compiles with
`--fmad=false`, so no a·b + c is contracted into one fused multiply-add.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

PREVIOUS = -1  # a source that is the previous member's result (onemodel.graph.operators.fused)

# The element types a generated kernel computes in, by their CUDA C names.
CUDA_TYPES: dict[np.dtype, str] = {
    np.dtype(np.float32): "float",
    np.dtype(np.float64): "double",
}

# C expression of each member on its operands `{0}`, `{1}` (the value, then the others), and
# whether it is correctly rounded (so exact mode may fuse it).
_EXACT_FORMULAS: dict[str, str] = {
    "Add": "{0} + {1}",
    "Sub": "{0} - {1}",
    "Mul": "{0} * {1}",
    "Div": "{0} / {1}",
    "Neg": "-{0}",
    "Abs": "fabs({0})",
    "Sqrt": "sqrt({0})",
    "Relu": "({0} <= 0 ? ({T})0 : {0})",  # as ArrayKernels' relu: −0 → +0, NaN passes
}
_FAST_FORMULAS: dict[str, str] = {
    "Exp": "exp({0})",
    "Log": "log({0})",
    "Tanh": "tanh({0})",
    "Sigmoid": "({T})1 / (({T})1 + exp(-{0}))",
}
_ARITY = {"Add": 2, "Sub": 2, "Mul": 2, "Div": 2}


@dataclass(frozen=True)
class ChainMember:
    """A member of the tail: its op type and where its inputs come from (PREVIOUS or an index
    into the fused node's inputs), as `Fused` keeps them."""

    op_type: str
    sources: tuple[int | None, ...]


@dataclass(frozen=True)
class ElementwiseSource:
    """What `cupy.ElementwiseKernel` takes (its cache key too), and the fused inputs its
    operands `o0...` are."""

    in_params: str
    out_params: str
    operation: str
    name: str
    options: tuple[str, ...]
    operands: tuple[int, ...]


def compile_options(exact: bool) -> tuple[str, ...]:
    """NVRTC options: no multiply-add contraction in exact mode (CuPy appends -ftz itself)."""
    return ("--fmad=false",) if exact else ()


def cuda_type(dtype: np.dtype) -> str | None:
    """The CUDA C type a kernel computes `dtype` in; None for types kernels are not generated
    for (narrow floats, whose NumPy path widens; integers; bfloat16 held as uint16)."""
    return CUDA_TYPES.get(np.dtype(dtype))


def formula(op_type: str, exact: bool) -> str | None:
    """The member's C template, or None when it cannot be generated in this mode."""
    found = _EXACT_FORMULAS.get(op_type)
    if found is None and not exact:
        found = _FAST_FORMULAS.get(op_type)
    return found


def fusible_tail(members: Sequence[ChainMember], exact: bool) -> int:
    """Where the longest generatable tail starts (len(members) when there is none worth a
    kernel: fewer than two members). The first member never belongs to it, since it reads the
    fused inputs rather than a previous result, and may be a Conv or Gemm."""
    start = len(members)
    while start > 1 and _generatable(members[start - 1], exact):
        start -= 1
    return start if len(members) - start >= 2 else len(members)


def _generatable(member: ChainMember, exact: bool) -> bool:
    arity = _ARITY.get(member.op_type, 1)
    return (
        formula(member.op_type, exact) is not None
        and len(member.sources) == arity
        and member.sources[0] == PREVIOUS
        and all(s is not None and s != PREVIOUS for s in member.sources[1:])
    )


def elementwise_source(
    members: Sequence[ChainMember], dtype: np.dtype, exact: bool
) -> ElementwiseSource:
    """The kernel of a tail whose members `fusible_tail` admitted, computing in `dtype`."""
    c_type = cuda_type(dtype)
    if c_type is None:
        raise ValueError(f"no generated element-wise kernels for {np.dtype(dtype)}")
    operands: list[int] = []
    lines = [f"{c_type} v = x;"]
    for member in members:
        template = formula(member.op_type, exact)
        if template is None or not _generatable(member, exact):
            raise ValueError(f"{member.op_type} cannot be generated (exact={exact})")
        names = ["v"]
        for source in member.sources[1:]:
            if source not in operands:
                operands.append(source)  # type: ignore[arg-type]
            names.append(f"o{operands.index(source)}")  # type: ignore[arg-type]
        lines.append(f"v = {template.format(*names, T=c_type)};")
    lines.append("y = v;")
    in_params = ", ".join([f"{c_type} x", *(f"{c_type} o{i}" for i in range(len(operands)))])
    ops = "_".join(m.op_type.lower() for m in members)
    return ElementwiseSource(
        in_params=in_params,
        out_params=f"{c_type} y",
        operation="\n".join(lines),
        name=f"onemodel_{ops}_{c_type}{'_exact' if exact else ''}",
        options=compile_options(exact),
        operands=tuple(operands),
    )


@dataclass(frozen=True)
class GeneratedTail:
    """The members a generated kernel runs (the last of the chain) and its source."""

    members: tuple[ChainMember, ...]
    source: ElementwiseSource


def generated_tail(
    chain: Sequence[tuple[str, tuple[int | None, ...]]], dtype: np.dtype, exact: bool
) -> GeneratedTail | None:
    """The tail of a fused chain (op type and sources per member) worth one kernel in
    `dtype`, or None: the members then run one by one, as on the CPU.

    Exact float32 chains are never generated: CuPy compiles with -ftz=true, which would flush
    subnormals; member by member, exact mode's namespace keeps them (ieee_float32.py)."""
    if cuda_type(dtype) is None or (exact and dtype == np.float32):
        return None
    members = [ChainMember(op_type, tuple(sources)) for op_type, sources in chain]
    start = fusible_tail(members, exact)
    if start == len(members):
        return None
    tail = tuple(members[start:])
    return GeneratedTail(tail, elementwise_source(tail, dtype, exact))
