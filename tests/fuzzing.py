"""Mutation fuzzing of model loading and running, one worker subprocess at a time.

Each case is a mutated copy of a small valid model (bit flips, truncation, attribute kinds,
dims, element types, rewired inputs, initializer dims) run on inputs made from its declared
types, or the unmutated model run on inputs in other layouts (Fortran order, big-endian,
strided), whose result must equal the plain run bit for bit. The models: the example MLP, the
exported MLP, CNN and transformer, and two scikit-learn models (one with Scan and TopK). The
only acceptable outcomes are a result (equal where it must be) or a SessionError; a crash, a
hang, a memory blow-up or any other exception is a finding.

    python tests/fuzzing.py --cases 5000 --seed 7     # a longer run than CI's
"""

from __future__ import annotations

import argparse
import collections
import os
import random
import struct
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx

MODELS = Path(__file__).resolve().parent / "models"
CASE_TIMEOUT_S = 20.0
MEMORY_CAP_BYTES = 4 * 1024**3


def seed_models() -> list[bytes]:
    from onemodel.examples import mlp_model

    return [
        mlp_model().SerializeToString(),
        (MODELS / "mlp.onnx").read_bytes(),
        (MODELS / "cnn.onnx").read_bytes(),
        (MODELS / "transformer.onnx").read_bytes(),
        (MODELS / "sklearn" / "random_forest.onnx").read_bytes(),
        (MODELS / "sklearn" / "kneighbors.onnx").read_bytes(),  # Scan, TopK, ai.onnx.ml
    ]


def mutate(data: bytes, rng: random.Random) -> tuple[str, bytes]:
    """One mutation of a serialized model: (kind, bytes); kind "layout" leaves it unchanged."""
    kind = rng.choice(
        ["flip", "truncate", "dims", "dtype", "attribute", "rewire", "init", "layout"]
    )
    if kind == "flip":
        mutated = bytearray(data)
        for _ in range(rng.randint(1, 8)):
            mutated[rng.randrange(len(mutated))] ^= 1 << rng.randrange(8)
        return kind, bytes(mutated)
    if kind == "truncate":
        return kind, data[: rng.randrange(len(data))]
    if kind == "layout":
        return kind, data
    model = onnx.ModelProto.FromString(data)
    graph = model.graph
    if kind == "dims" and graph.input:
        dims = graph.input[0].type.tensor_type.shape.dim
        if dims:
            dims[rng.randrange(len(dims))].dim_value = rng.choice([0, 1, 7, 2**31, 2**40])
    elif kind == "dtype" and graph.input:
        graph.input[0].type.tensor_type.elem_type = rng.randrange(0, 32)
    elif kind == "attribute":
        nodes = [n for n in graph.node if n.attribute]
        if nodes:
            attribute = rng.choice(rng.choice(nodes).attribute)
            attribute.type = rng.choice([1, 2, 3, 6, 7])
            attribute.i = rng.choice([-5, 0, 3, 10**9])
            attribute.f = rng.random() * 100
    elif kind == "rewire" and len(graph.node) > 1:
        node = rng.choice(graph.node)
        if node.input:
            names = [o for n in graph.node for o in n.output] + ["undefined"]
            node.input[rng.randrange(len(node.input))] = rng.choice(names)
    elif kind == "init" and graph.initializer:
        initializer = rng.choice(graph.initializer)
        if initializer.dims:
            initializer.dims[0] = rng.choice([0, 1, 3, 1000])
    return kind, model.SerializeToString()


def _inputs(session) -> dict[str, np.ndarray]:
    from onemodel.tensors import numpy_dtype_for_onnx

    rng = np.random.default_rng(0)
    feeds = {}
    for meta in session.inputs:
        dims = tuple(d if isinstance(d, int) else 2 for d in (meta.dims or ()))
        dtype = numpy_dtype_for_onnx(meta.elem_type or 1)
        if np.prod(dims, dtype=np.float64) > 2**24:  # a mutated dim: a view costs nothing
            feeds[meta.name] = np.broadcast_to(np.zeros((), dtype), dims)
        elif np.issubdtype(dtype, np.integer):
            feeds[meta.name] = rng.integers(0, 4, dims).astype(dtype)
        else:
            feeds[meta.name] = rng.standard_normal(dims).astype(dtype)
    return feeds


def _relayout(array: np.ndarray, how: int) -> np.ndarray:
    if how == 0:
        return np.asfortranarray(array)
    if how == 1 and array.dtype.itemsize > 1:
        return array.astype(array.dtype.newbyteorder(">"))
    wide = np.zeros((*array.shape[:-1], array.shape[-1] * 2), array.dtype) if array.ndim else None
    if wide is None:
        return array
    wide[..., ::2] = array
    return wide[..., ::2]


def run_case(kind: str, data: bytes) -> str:
    """The outcome of one case, inside the worker. A result is also computed in checked mode
    (dead memory poisoned), which must give the same bits: a difference means some value was
    read after its memory went to another one."""
    from onemodel import Session, SessionError, SessionOptions

    try:
        session = Session.load(data, SessionOptions(checked=False))
        feeds = _inputs(session)
        results = session.run(None, feeds)
        checked = Session.load(data, SessionOptions(checked=True)).run(None, feeds)
        if not _same_bits(results, checked):
            return "OTHER different result in checked mode"
        if kind == "layout":
            for how in range(3):
                moved = {k: _relayout(v, how) for k, v in feeds.items()}
                again = session.run(None, moved)
                if not _same_bits(results, again):
                    return f"different result with layout {how}"
        return "result"
    except SessionError as error:
        return f"SessionError {error.kind.name}"
    except Exception as error:  # the finding this fuzzer exists for
        return f"OTHER {type(error).__name__}: {str(error)[:160]}"


def _same_bits(first: object, second: object) -> bool:
    """Equal outputs, bit for bit apart from NaN payloads; sequences element by element."""
    if isinstance(first, (list, tuple)):
        return (
            isinstance(second, (list, tuple))
            and len(first) == len(second)
            and all(_same_bits(a, b) for a, b in zip(first, second, strict=True))
        )
    if isinstance(first, np.ndarray):
        if not isinstance(second, np.ndarray) or (first.dtype, first.shape) != (
            second.dtype,
            second.shape,
        ):
            return False
        if first.dtype.kind == "f":
            nan = np.isnan(first)
            return bool((nan == np.isnan(second)).all()) and (
                first[~nan].tobytes() == second[~nan].tobytes()
            )
        if first.dtype.kind == "O":
            return bool((first == second).all())
        return first.tobytes() == second.tobytes()
    return first == second


def worker() -> None:
    """Read length-prefixed (kind, model) cases from stdin; write one outcome line each."""
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP_BYTES, MEMORY_CAP_BYTES))
    stdin, stdout = sys.stdin.buffer, sys.stdout
    while header := stdin.read(8):
        kind_length, data_length = struct.unpack("<II", header)
        kind = stdin.read(kind_length).decode()
        data = stdin.read(data_length)
        stdout.write(run_case(kind, data).replace("\n", " ") + "\n")
        stdout.flush()


class Worker:
    """A worker subprocess, restarted after a crash or a hang."""

    def __init__(self) -> None:
        self.process: subprocess.Popen | None = None

    def run(self, kind: str, data: bytes) -> str:
        if self.process is None or self.process.poll() is not None:
            self.process = subprocess.Popen(
                [sys.executable, __file__, "--worker"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)},
            )
        process = self.process
        encoded = kind.encode()
        try:
            process.stdin.write(struct.pack("<II", len(encoded), len(data)) + encoded + data)
            process.stdin.flush()
        except BrokenPipeError:
            return self._lost("crash")
        import selectors

        selector = selectors.DefaultSelector()
        selector.register(process.stdout, selectors.EVENT_READ)
        if not selector.select(CASE_TIMEOUT_S):
            return self._lost("hang")
        line = process.stdout.readline().decode().strip()
        return line or self._lost(f"crash (exit {process.wait()})")

    def _lost(self, what: str) -> str:
        if self.process is not None:
            self.process.kill()
            self.process.wait()
        self.process = None
        return f"OTHER {what}"

    def close(self) -> None:
        if self.process is not None:
            self.process.stdin.close()
            self.process.wait()


def fuzz(cases: int, seed: int) -> collections.Counter:
    rng = random.Random(seed)
    models = seed_models()
    outcomes: collections.Counter = collections.Counter()
    worker_process = Worker()
    try:
        for _ in range(cases):
            kind, data = mutate(rng.choice(models), rng)
            outcomes[worker_process.run(kind, data)] += 1
    finally:
        worker_process.close()
    return outcomes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cases", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker()
        return
    started = time.monotonic()
    outcomes = fuzz(args.cases, args.seed)
    for outcome, count in outcomes.most_common():
        print(f"{count:6}  {outcome}")
    print(f"{args.cases} cases in {time.monotonic() - started:.1f} s")
    sys.exit(1 if any(o.startswith(("OTHER", "different")) for o in outcomes) else 0)


if __name__ == "__main__":
    main()
