"""Results depend on the inputs, the options and the kernel path only.

Exact mode: a model's outputs are the same bits on one thread and two, on a session's first run
and on later ones (plan reuse), from runs on several threads at once (pooled run states), and on
both NumPy paths. Fast mode: the same bits on plan reuse and across interleaved concurrent runs
of one session; across thread counts and the two NumPy paths its bits may differ (OpenBLAS
picks other GEMM kernels when threaded): that is what fast means.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import onnx
import pytest

import onemodel
from onemodel import ExecutionMode, SessionOptions

MODELS = Path(__file__).parent / "models"
NAMES = ["mlp", "cnn", "transformer"]
DIMS = {"batch": 3, "seq": 6}
MODES = [ExecutionMode.EXACT, ExecutionMode.FAST]


def _feeds(name: str, seed: int) -> dict[str, np.ndarray]:
    """Inputs of the model's declared types (token ids below 100), batch 3 and sequence 6."""
    rng = np.random.default_rng(seed)
    feeds = {}
    model = onnx.load(str(MODELS / f"{name}.onnx"), load_external_data=False)
    for value in model.graph.input:
        tensor_type = value.type.tensor_type
        dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor_type.elem_type)
        shape = tuple(
            DIMS[d.dim_param] if d.dim_param else d.dim_value for d in tensor_type.shape.dim
        )
        if np.issubdtype(dtype, np.integer):
            feeds[value.name] = rng.integers(0, 100, size=shape, dtype=dtype)
        else:
            feeds[value.name] = rng.standard_normal(shape).astype(dtype)
    return feeds


def _session(name: str, mode: ExecutionMode, **options: object) -> onemodel.Session:
    return onemodel.Session.load(str(MODELS / f"{name}.onnx"), SessionOptions(mode=mode, **options))


def _assert_same_bits(got: list[np.ndarray], want: list[np.ndarray], label: str) -> None:
    assert len(got) == len(want), label
    for index, (have, wanted) in enumerate(zip(got, want, strict=True)):
        assert have.dtype == wanted.dtype and have.shape == wanted.shape, label
        assert have.tobytes() == wanted.tobytes(), f"{label}: output {index} differs"


@pytest.mark.parametrize("name", NAMES)
def test_thread_counts_give_the_same_exact_bits(name: str) -> None:
    feeds = _feeds(name, seed=1)
    mode = ExecutionMode.EXACT
    one = _session(name, mode, intra_op_threads=1, backend="numpy").run(None, feeds)
    two = _session(name, mode, intra_op_threads=2, backend="numpy").run(None, feeds)
    _assert_same_bits(two, one, f"{name} exact: 2 threads vs 1")


@pytest.mark.parametrize("mode", MODES, ids=lambda mode: mode.value)
@pytest.mark.parametrize("name", NAMES)
def test_plan_reuse_and_concurrent_runs_give_the_same_bits(name: str, mode: ExecutionMode) -> None:
    """Sequential runs first (the second reuses the plan and a pooled state), then the same
    inputs interleaved on four threads of the one session."""
    session = _session(name, mode, backend="numpy")
    inputs = [_feeds(name, seed) for seed in range(6)]
    first = [session.run(None, feeds) for feeds in inputs]
    again = [session.run(None, feeds) for feeds in inputs]
    for seed, (a, b) in enumerate(zip(again, first, strict=True)):
        _assert_same_bits(a, b, f"{name} {mode.value} seed {seed}: second run")
    with ThreadPoolExecutor(max_workers=4) as pool:
        concurrent = list(pool.map(lambda feeds: session.run(None, feeds), inputs * 3))
    for index, got in enumerate(concurrent):
        _assert_same_bits(got, first[index % len(inputs)], f"{name} {mode.value} concurrent")


@pytest.mark.parametrize("name", NAMES)
def test_exact_mode_gives_the_same_bits_on_both_numpy_paths(name: str) -> None:
    feeds = _feeds(name, seed=2)
    reference = _session(name, ExecutionMode.EXACT, backend="numpy-reference").run(None, feeds)
    fast = _session(name, ExecutionMode.EXACT, backend="numpy").run(None, feeds)
    _assert_same_bits(fast, reference, f"{name}: numpy vs numpy-reference")
