"""The CuPy backend's generated element-wise kernels, checked on the CPU: which tail of a Fused
chain is generated, the compile options, the dtype mapping, and the generated C itself compiled
with the host's C++ compiler (contraction off, as `--fmad=false` does on the GPU) and compared
bit for bit with NumPy. The same sources run on a GPU in `pytest -m gpu` (tools/gpu_check.sh).
"""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from onemodel.backends import BackendUnavailableError, KernelPaths
from onemodel.backends.cupy_gpu.elementwise import (
    PREVIOUS,
    ChainMember,
    compile_options,
    cuda_type,
    elementwise_source,
    generated_tail,
)
from onemodel.graph.operators import fused
from onemodel.graph.operators.base import InferContext, NodeInfo, RunContext, TensorSpec
from onemodel.graph.operators.fused import Fused, Member
from onemodel.graph.operators.optable import resolve

P = PREVIOUS


def test_previous_is_the_fused_operators_marker() -> None:
    assert PREVIOUS == fused.PREVIOUS


def test_exact_kernels_compile_without_contraction() -> None:
    assert compile_options(True) == ("--fmad=false",)
    assert compile_options(False) == ()
    tail = generated_tail([("Gemm", (0, 1)), ("Add", (P, 2)), ("Relu", (P,))], np.float64, True)
    assert tail is not None and tail.source.options == ("--fmad=false",)


@pytest.mark.parametrize(
    ("dtype", "expected"),
    [(np.float32, "float"), (np.float64, "double"), (np.float16, None), (np.uint16, None),
     (np.int64, None)],
)  # fmt: skip
def test_kernels_are_generated_for_float_and_double_only(dtype, expected) -> None:
    assert cuda_type(np.dtype(dtype)) == expected
    chain = [("Conv", (0, 1)), ("Add", (P, 2)), ("Relu", (P,))]
    assert (generated_tail(chain, np.dtype(dtype), False) is None) == (expected is None)


def test_the_tail_is_the_longest_generatable_run_of_two_or_more() -> None:
    chain = [("MatMul", (0, 1)), ("Exp", (P,)), ("Add", (P, 2)), ("Sqrt", (P,))]
    fast = generated_tail(chain, np.float32, exact=False)
    assert [m.op_type for m in fast.members] == ["Exp", "Add", "Sqrt"]
    exact = generated_tail(chain, np.float64, exact=True)  # exp is not correctly rounded
    assert [m.op_type for m in exact.members] == ["Add", "Sqrt"]
    # -ftz=true would flush float32 subnormals: exact float32 runs member by member.
    assert generated_tail(chain, np.float32, exact=True) is None
    assert generated_tail([("Gemm", (0, 1)), ("Relu", (P,))], np.float32, False) is None
    # An operand before the previous result (Sub(o, x)) is not generated.
    assert (
        generated_tail([("Relu", (0,)), ("Sub", (1, P)), ("Neg", (P,))], np.float32, False) is None
    )


def test_operands_are_named_once_each() -> None:
    members = [ChainMember("Add", (P, 2)), ChainMember("Mul", (P, 2)), ChainMember("Div", (P, 3))]
    source = elementwise_source(members, np.float32, exact=True)
    assert source.operands == (2, 3)
    assert source.in_params == "float x, float o0, float o1"
    assert source.out_params == "float y"


_FORMULAS = {
    "Add": lambda v, o: v + o,
    "Sub": lambda v, o: v - o,
    "Mul": lambda v, o: v * o,
    "Div": lambda v, o: v / o,
    "Neg": np.negative,
    "Abs": np.abs,
    "Sqrt": np.sqrt,
    "Relu": lambda v: np.where(v <= 0, v.dtype.type(0), v),
}


def _compiled(source, tmp_path: Path):
    """The generated operation as a C++ loop over flat arrays, compiled without contraction."""
    compiler = shutil.which("g++")
    if compiler is None:
        pytest.skip("no g++ on this machine to compile the generated source")
    names = [p.split()[-1] for p in source.in_params.split(", ")]
    c_type = source.out_params.split()[0]
    args = ", ".join(f"const {c_type}* {n.upper()}" for n in names)
    loads = " ".join(f"{c_type} {n} = {n.upper()}[i];" for n in names)
    code = (
        "#include <cmath>\nusing std::sqrt; using std::fabs; using std::exp; using std::log;\n"
        "using std::tanh;\n"
        f'extern "C" void run(long n, {args}, {c_type}* Y) {{\n'
        f"  for (long i = 0; i < n; ++i) {{ {loads} {c_type} y;\n{source.operation}\n"
        "  Y[i] = y; }\n}\n"
    )
    (tmp_path / "kernel.cpp").write_text(code)
    library = tmp_path / "kernel.so"
    subprocess.run(
        [compiler, "-O2", "-ffp-contract=off", "-fno-fast-math", "-shared", "-fPIC",
         str(tmp_path / "kernel.cpp"), "-o", str(library)],
        check=True,
    )  # fmt: skip
    return ctypes.CDLL(str(library)).run


_CHAIN = [
    ChainMember("Mul", (P, 1)), ChainMember("Add", (P, 2)), ChainMember("Relu", (P,)),
    ChainMember("Sqrt", (P,)), ChainMember("Sub", (P, 1)), ChainMember("Div", (P, 2)),
    ChainMember("Neg", (P,)), ChainMember("Abs", (P,)),
]  # fmt: skip


def _chain_data(dtype) -> tuple[np.ndarray, dict[int, np.ndarray], np.ndarray]:
    """x with NaN, ±0, ±inf among normal values, the operands by fused input, and NumPy's
    result of the chain (no subnormals: CuPy flushes those)."""
    rng = np.random.default_rng(5)
    x, o1, o2 = (rng.standard_normal(4096).astype(dtype) * 10 for _ in range(3))
    x[:6] = [np.nan, -0.0, np.inf, -np.inf, 0.0, 1e-30]
    operands = {1: o1, 2: o2}
    expected = x
    with np.errstate(all="ignore"):
        for member in _CHAIN:
            others = [operands[s] for s in member.sources[1:]]
            expected = _FORMULAS[member.op_type](expected, *others).astype(dtype)
    return x, operands, expected


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_generated_source_gives_numpys_bits(dtype, tmp_path: Path) -> None:
    source = elementwise_source(_CHAIN, np.dtype(dtype), exact=True)
    run = _compiled(source, tmp_path)
    x, operands, expected = _chain_data(dtype)
    y = np.empty_like(x)
    pointer = np.ctypeslib.ndpointer(dtype=dtype, flags="C_CONTIGUOUS")
    run.argtypes = [ctypes.c_long, pointer, *(pointer for _ in source.operands), pointer]
    run(x.size, x, *(operands[i] for i in source.operands), y)
    np.testing.assert_array_equal(y.view(np.uint8), expected.view(np.uint8))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_generated_kernel_gives_numpys_bits_on_the_gpu(dtype) -> None:
    try:
        kernels = KernelPaths.get("cupy")
    except BackendUnavailableError as error:
        pytest.skip(str(error))
    source = elementwise_source(_CHAIN, np.dtype(dtype), exact=True)
    x, operands, expected = _chain_data(dtype)
    xp = kernels.xp
    out = xp.empty(x.shape, dtype)
    kernels.run_elementwise_chain(
        source, xp.asarray(x), [xp.asarray(operands[i]) for i in source.operands], out
    )
    got = kernels.memory.to_host(out)
    np.testing.assert_array_equal(got.view(np.uint8), expected.view(np.uint8))


class _RecordingKernels:
    """A backend that generates tails and records the launches, computing them with NumPy."""

    def __init__(self, kernels, tail) -> None:
        self.inner = kernels
        self.xp = kernels.xp
        self.memory = kernels.memory
        self.tail = tail
        self.launches: list = []

    elementwise_tail = staticmethod(generated_tail)

    def run_elementwise_chain(self, source, x, operands, out) -> None:
        self.launches.append((source, x.copy()))
        value = x
        by_index = dict(zip(source.operands, operands, strict=True))
        for member in self.tail.members:
            value = _FORMULAS[member.op_type](value, *[by_index[s] for s in member.sources[1:]])
        out[...] = value

    def __getattr__(self, name):
        return getattr(self.inner, name)


def test_fused_runs_its_head_then_launches_the_tail_once() -> None:
    def member(op_type: str, sources: tuple) -> Member:
        node = NodeInfo(op_type.lower(), op_type, "", 17, ("a", "b"), ("y",))
        return Member(resolve("", op_type, 17).factory(node), sources)

    members = [member("MatMul", (0, 1)), member("Add", (P, 2)), member("Relu", (P,))]
    operator = Fused(NodeInfo("fused", "Fused", "", 17, ("a", "b", "c"), ("y",)), members)
    rng = np.random.default_rng(2)
    a, b, c = (rng.standard_normal(s).astype(np.float32) for s in [(3, 4), (4, 5), (5,)])
    tail = generated_tail([("MatMul", (0, 1)), ("Add", (P, 2)), ("Relu", (P,))], np.float32, False)
    kernels = _RecordingKernels(KernelPaths.get("numpy"), tail)
    specs = [TensorSpec(1, x.shape) for x in (a, b, c)]
    operator.infer(InferContext(operator.node, specs, [None] * 3))
    out = np.empty((3, 5), np.float32)
    operator.run(RunContext(kernels, False), [a, b, c], [out])
    ((source, x_seen),) = kernels.launches
    assert [m.op_type for m in tail.members] == ["Add", "Relu"] and source == tail.source
    np.testing.assert_array_equal(x_seen, a @ b)  # the head ran normally, into the output
    np.testing.assert_array_equal(out, np.maximum(a @ b + c, 0))
