"""The output pool: large graph outputs reuse host blocks only once nothing can see them."""

from __future__ import annotations

import gc
import threading

import numpy as np
from onnx import TensorProto, helper

from onemodel import Session, SessionOptions
from onemodel.backends.numpy_cpu.output_pool import POOLED_BYTES, OutputPool, copy_out
from onemodel.graph.importer import model_from_proto

ROWS, COLS = 256, 1024  # 1 MiB of float32: pooled


def _session(op: str = "Neg", shape: tuple = (ROWS, COLS), **options: object) -> Session:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, list(shape))
    graph = helper.make_graph([helper.make_node(op, ["x"], ["y"])], "g", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_operatorsetid("", 18)])
    return Session(model_from_proto(model), SessionOptions(**options) if options else None)


def _input(seed: int, shape: tuple = (ROWS, COLS)) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape, dtype=np.float32)


def test_a_kept_view_survives_its_base_and_later_runs() -> None:
    """The adversarial case: only a view is kept; the block must not be lent again."""
    session = _session()
    first = _input(0)
    (y,) = session.run(None, {"x": first})
    view = y[3:7, 100:200]
    pointer = y.ctypes.data
    del y
    gc.collect()
    for seed in range(1, 6):
        (later,) = session.run(None, {"x": _input(seed)})
        assert later.ctypes.data != pointer
        np.testing.assert_array_equal(later, -_input(seed))
        del later
    np.testing.assert_array_equal(view, -first[3:7, 100:200])


def test_a_kept_output_stays_intact_while_later_runs_happen() -> None:
    session = _session()
    kept = [session.run(None, {"x": _input(seed)})[0] for seed in range(4)]
    pointers = {array.ctypes.data for array in kept}
    assert len(pointers) == 4
    for seed, array in enumerate(kept):
        np.testing.assert_array_equal(array, -_input(seed))


def test_a_released_block_is_lent_again() -> None:
    session = _session()
    (y,) = session.run(None, {"x": _input(0)})
    pointer = y.ctypes.data
    del y
    (again,) = session.run(None, {"x": _input(1)})
    assert again.ctypes.data == pointer
    np.testing.assert_array_equal(again, -_input(1))


def test_a_view_keeps_the_block_until_it_goes() -> None:
    session = _session()
    (y,) = session.run(None, {"x": _input(0)})
    pointer = y.ctypes.data
    view = y.reshape(-1)[::2]
    del y
    (other,) = session.run(None, {"x": _input(1)})
    assert other.ctypes.data != pointer
    del view, other
    both = [session.run(None, {"x": _input(2)})[0] for _ in range(2)]
    assert pointer in {array.ctypes.data for array in both}


def test_small_outputs_and_checked_runs_are_not_pooled() -> None:
    small = _session(shape=(4, 8))
    (y,) = small.run(None, {"x": _input(0, (4, 8))})
    assert y.base is None  # a plain new array
    checked = _session(checked=True)
    (y,) = checked.run(None, {"x": _input(0)})
    assert y.base is None


def test_concurrent_runs_give_correct_results() -> None:
    session = _session()
    failures: list[str] = []

    def work(thread: int) -> None:
        for seed in range(thread * 100, thread * 100 + 20):
            x = _input(seed)
            (y,) = session.run(None, {"x": x})
            view = y[::3]
            del y
            if not np.array_equal(view, -x[::3]):
                failures.append(f"thread {thread} seed {seed}")

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []


def test_the_idle_cap_holds() -> None:
    pool = OutputPool(max_idle_bytes=3 * POOLED_BYTES)
    arrays = [pool.empty((POOLED_BYTES // 4,), np.dtype(np.float32)) for _ in range(5)]
    assert pool.idle_bytes == 0
    del arrays
    assert pool.idle_bytes == 3 * POOLED_BYTES
    reused = pool.empty((POOLED_BYTES // 4,), np.dtype(np.float32))
    assert pool.idle_bytes == 2 * POOLED_BYTES
    del reused
    pool.trim()
    assert pool.idle_bytes == 0


def test_a_copied_out_array_is_equal_and_owns_a_pooled_block() -> None:
    source = np.arange(POOLED_BYTES // 8 * 2, dtype=np.int64).reshape(2, -1)[:, ::2]
    out = copy_out(source)
    np.testing.assert_array_equal(out, source)
    assert out.flags.c_contiguous and out.base is not None
    small = copy_out(source[:, :4])
    assert small.base is None
