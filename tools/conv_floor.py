"""The floor of onemodel's fast-path convolutions on this machine, against onnxruntime.

Run by hand (it needs onnxruntime, a test-time tool):

    python tools/conv_floor.py rows [--filter REGEX] [--runs N]   # `onemodel bench ops` Conv rows
    python tools/conv_floor.py models NAME... [--runs N]          # bench-set models

All figures are per-thread CPU time (`time.thread_time`, min of the runs, taken in turn in one
process, one BLAS and one onnxruntime thread), so they hold on a loaded machine too.

The floor is the part of a path NumPy cannot make cheaper: the GEMM(s) of the exact shapes the
path runs (np.matmul; Winograd's (m+2)² core GEMMs, im2col's one per group, ConvTranspose's
columns), or for depthwise the cheaper of 2·taps − 1 element-wise passes over the output's
elements in NumPy's fastest form (a flat contiguous multiply by a scalar; NumPy has no fused
multiply-add, so a tap is a multiply and an add) and the BLAS matrix-vector products of
already gathered columns (one per channel: weights (multiplier, taps) @ columns (taps,
positions), each column read once with fused multiply-adds, after one contiguous copy of
the columns: gathering them takes at least that).
A model's floor sums its Conv nodes' floors (stride-1 3×3 with ≥ 32 channels: the cheaper of
Winograd's core GEMMs and the direct GEMM) and counts every transform, copy, bias, activation
and other operator as zero: a lower bound of onemodel's time. Where the floor alone is above
a target ratio, no NumPy/OpenBLAS kernel of that form reaches it.

`rows` also times building an im2col-floored layer's columns as onemodel's held path does
(numpy_cpu/held_conv.py: x into the zero-bordered buffer, then the window copies, no GEMM),
and prints GEMM + columns: the floor of that path.
"""

from __future__ import annotations

import argparse
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from threadpoolctl import threadpool_limits

from onemodel import bench_ops
from onemodel.backends.numpy_cpu import depthwise
from onemodel.backends.numpy_cpu.held_conv import held_conv
from onemodel.bench_models import bench_set
from onemodel.session import Session, SessionOptions

_rng = np.random.default_rng(0)


def thread_min(run: Callable[[], Any], runs: int) -> float:
    """Least per-thread CPU seconds of `runs` calls after one warm-up."""
    run()
    best = float("inf")
    for _ in range(runs):
        start = time.thread_time()
        run()
        best = min(best, time.thread_time() - start)
    return best


def interleaved_mins(runs_of: tuple, runs: int) -> dict[str, float]:
    """Least per-thread CPU seconds of each named run, the runs taken in turn."""
    best = {name: float("inf") for name, _ in runs_of}
    for _, run in runs_of:
        run()
    for _ in range(runs):
        for name, run in runs_of:
            start = time.thread_time()
            run()
            best[name] = min(best[name], time.thread_time() - start)
    return best


def gemm(batch: int, m: int, k: int, n: int) -> Callable[[], Any]:
    """`batch` float32 GEMMs (m, k) @ (k, n), as np.matmul runs them."""
    a = _rng.standard_normal((batch, m, k)).astype(np.float32)
    b = _rng.standard_normal((batch, k, n)).astype(np.float32)
    out = np.empty((batch, m, n), np.float32)
    return lambda: np.matmul(a, b, out=out)


def passes(count: int, elements: int, images: int = 1) -> Callable[[], Any]:
    """`count` flat contiguous float32 multiplies by a scalar over `elements`, one image's
    share at a time (cache-resident, as depthwise.py runs them), 1024-element buffers."""
    a = _rng.standard_normal(elements // images).astype(np.float32)
    out = np.empty_like(a)
    scale = np.float32(0.7)

    def run() -> None:
        outer = np.setbufsize(1024)
        for _ in range(images * count):
            np.multiply(a, scale, out=out)
        np.setbufsize(outer)

    return run


def columns_product(
    images: int, channels: int, multiplier: int, taps: int, positions: int
) -> Callable[[], Any]:
    """Per image and block of channels (as depthwise.py blocks them, so the columns stay in
    cache): one contiguous copy of the block's columns, the cheapest form of gathering them,
    then the batched matmul of each channel's (multiplier, taps) weights by its (taps,
    positions) columns."""
    block = max(1, min(channels, depthwise._BLOCK_ELEMENTS // (taps * positions)))
    source = _rng.standard_normal((block, taps, positions)).astype(np.float32)
    columns = np.empty_like(source)
    weights = _rng.standard_normal((block, multiplier, taps)).astype(np.float32)
    out = np.empty((block, multiplier, positions), np.float32)

    def run() -> None:
        for _ in range(images):
            for first in range(0, channels, block):
                count = min(block, channels - first)
                np.copyto(columns[:count], source[:count])
                np.matmul(weights[:count], columns[:count], out=out[:count])

    return run


def conv_floor(x: tuple, w: tuple, attrs: dict) -> tuple[str, Callable[[], Any], int]:
    """(what, floor, GEMM FLOPs or 0) of one Conv of input x and weight w, as onemodel's fast
    path computes it (numpy_cpu/fast.py); a 1-D one as 2-D of height 1."""
    strides = list(attrs.get("strides") or [1] * (len(x) - 2))
    pads = list(attrs.get("pads") or [0] * (2 * len(x) - 4))
    dilations = list(attrs.get("dilations") or [1] * (len(x) - 2))
    if len(x) == 3:
        x, w = (x[0], x[1], 1, x[2]), (w[0], w[1], 1, w[2])
        strides, dilations, pads = [1, *strides], [1, *dilations], [0, pads[0], 0, pads[1]]
    group = attrs.get("group") or 1
    batch, channels, height, width = x
    filters, per_group, kh, kw = w
    out_h = (height + pads[0] + pads[2] - (kh - 1) * dilations[0] - 1) // strides[0] + 1
    out_w = (width + pads[1] + pads[3] - (kw - 1) * dilations[1] - 1) // strides[1] + 1
    taps = kh * kw
    if group == channels and per_group == 1 and taps > 1:
        count, elements = 2 * taps - 1, batch * filters * out_h * out_w
        forms = {
            f"depthwise: {count} passes over {batch} x {elements // batch} elements": passes(
                count, elements, batch
            ),
            f"depthwise: {batch} x {channels} matrix-vector products "
            f"({filters // channels}x{taps} @ {taps}x{out_h * out_w})": columns_product(
                batch, channels, filters // channels, taps, out_h * out_w
            ),
        }
        what = min(forms, key=lambda name: thread_min(forms[name], 3))
        return what, forms[what], 0
    pixels = batch * out_h * out_w
    direct = (group, filters // group, per_group * taps, pixels)
    if group == 1 and (kh, kw) == (3, 3) and list(strides) == [1, 1] and min(x[1], w[0]) >= 32:
        block = 2 if max(channels, filters) >= 256 else 4
        tiles = (
            batch
            * -(-out_h // (block * dilations[0]))
            * dilations[0]
            * -(-out_w // (block * dilations[1]))
            * dilations[1]
        )
        shape = ((block + 2) ** 2, filters, channels, tiles)
        runs = {shape: gemm(*shape), direct: gemm(*direct)}
        best = min(runs, key=lambda s: thread_min(runs[s], 3))
        name = "Winograd core GEMMs" if best == shape else "im2col GEMM"
        return (
            f"{name} {best[0]}x({best[1]}x{best[2]} @ {best[2]}x{best[3]})",
            runs[best],
            _flops(best),
        )
    name = f"im2col GEMM {direct[0]}x({direct[1]}x{direct[2]} @ {direct[2]}x{direct[3]})"
    return name, gemm(*direct), _flops(direct)


def columns_copy(x: tuple, w: tuple, attrs: dict, out: tuple) -> Callable[[], Any] | None:
    """The column building of the held im2col path for a one-group Conv (None otherwise)."""
    rank = len(x) - 2
    if (attrs.get("group") or 1) != 1:
        return None
    matrix = _rng.standard_normal((w[0], int(np.prod(w[1:])))).astype(np.float32)
    pads = tuple(attrs.get("pads") or [0] * rank)[:rank]
    held = held_conv(
        x, np.float32, matrix, out, w[2:], tuple(attrs.get("strides") or [1] * rank), pads,
        tuple(attrs.get("dilations") or [1] * rank),
    )  # fmt: skip
    image = _rng.standard_normal(x).astype(np.float32)
    return None if held is None else (lambda: held.copy_columns(image))


def _flops(shape: tuple[int, int, int, int]) -> int:
    batch, m, k, n = shape
    return 2 * batch * m * k * n


def _engines(model: bytes | str, feeds: dict) -> tuple[Callable[[], Any], Callable[[], Any]]:
    ours = Session.load(model, SessionOptions(intra_op_threads=1))
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    options.log_severity_level = 3
    theirs = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    return (lambda: ours.run(None, feeds)), (lambda: theirs.run(None, feeds))


def rows(pattern: str, runs: int) -> None:
    print(
        f"{'case':38s} {'om ms':>7s} {'ort ms':>7s} {'om/ort':>6s} {'floor ms':>8s} "
        f"{'floor/ort':>9s} {'floor GFLOP/s':>13s} {'ort GFLOP/s':>11s} {'cols ms':>7s} "
        f"{'+cols/ort':>9s}  floor"
    )
    for case in bench_ops.selected(("layer",), pattern):
        if case.op not in ("Conv", "ConvTranspose"):
            continue
        x, w = case.inputs[0].shape, case.weights["W"].shape
        ours, theirs = _engines(bench_ops.case_model(case), bench_ops.case_feeds(case))
        if case.op == "Conv":
            what, floor, flops = conv_floor(x, w, case.attrs)
            useful = 2 * ours()[0].size * int(np.prod(w[1:]))  # the direct sum's FLOPs
        else:  # the columns GEMM (M·K, C) @ (C, pixels), then a scatter
            shape = (1, w[1] * w[2] * w[3], w[0], x[0] * x[2] * x[3])
            what = f"columns GEMM {shape[1]}x{shape[2]} @ {shape[2]}x{shape[3]}"
            floor, flops = gemm(*shape), _flops(shape)
            useful = flops
        columns = None
        if case.op == "Conv" and what.startswith("im2col"):
            columns = columns_copy(x, w, case.attrs, ours()[0].shape)
        runs_of = (("om", ours), ("ort", theirs), ("floor", floor))
        runs_of += (("cols", columns),) if columns is not None else ()
        times = interleaved_mins(runs_of, runs)
        cols = times.get("cols")
        built = (
            f"{cols * 1e3:7.3f} {(times['floor'] + cols) / times['ort']:9.2f}"
            if cols is not None
            else f"{'-':>7s} {'-':>9s}"
        )
        rate = f"{flops / times['floor'] / 1e9:13.1f}" if flops else f"{'-':>13s}"
        ort_rate = useful / times["ort"] / 1e9
        print(
            f"{case.name:38s} {times['om'] * 1e3:7.3f} {times['ort'] * 1e3:7.3f} "
            f"{times['om'] / times['ort']:6.2f} {times['floor'] * 1e3:8.3f} "
            f"{times['floor'] / times['ort']:9.2f} {rate} {ort_rate:11.1f} {built}  {what}",
            flush=True,
        )


def models(names: list[str], runs: int, exports: Path | None) -> None:
    known = {m.name: m for m in (bench_set(exports) if exports else bench_set())}
    for name in names:
        model = known[name]
        archive = np.load(model.inputs_path)
        feeds = {k: archive[k] for k in archive.files if not k.startswith("output:")}
        graph = onnx.load(str(model.path)).graph
        attributes = {
            node.name: {a.name: list(a.ints) if a.ints else a.i for a in node.attribute}
            for node in graph.node
        }
        session = Session.load(str(model.path), SessionOptions(intra_op_threads=1))
        trace: list[tuple] = []
        session.run(None, feeds, trace=trace)
        floors: dict[str, float] = {}
        for node, op_type, _, _, shapes in trace:
            if "Conv" not in op_type or len(shapes) < 2 or shapes[1] is None or len(shapes[1]) != 4:
                continue
            attrs = attributes.get(node) or next(
                (v for k, v in attributes.items() if k and node.startswith(k)), {}
            )
            what, floor, _ = conv_floor(tuple(shapes[0]), tuple(shapes[1]), attrs)
            kind = re.sub(r"[ :].*", "", what)
            floors[kind] = floors.get(kind, 0.0) + thread_min(floor, 3)
        ours, theirs = _engines(str(model.path), feeds)
        times = interleaved_mins((("om", ours), ("ort", theirs)), runs)
        t_ort, t_om = times["ort"], times["om"]
        total = sum(floors.values())
        parts = ", ".join(f"{k} {v * 1e3:.2f} ms" for k, v in sorted(floors.items()))
        print(
            f"{name:16s} ort {t_ort * 1e3:7.2f} ms  om {t_om * 1e3:7.2f} ms "
            f"({t_om / t_ort:4.2f}x)  "
            f"conv floor {total * 1e3:7.2f} ms = {total / t_ort:4.2f}x ort ({parts})",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=("rows", "models"))
    parser.add_argument("names", nargs="*", help="models (for `models`)")
    parser.add_argument("--filter", default="^Conv", help="rows whose name matches")
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--exports", type=Path, help="the exported models' folder")
    args = parser.parse_args()
    with threadpool_limits(1):
        if args.what == "rows":
            rows(args.filter, args.runs)
        else:
            models(args.names, args.runs, args.exports)


if __name__ == "__main__":
    main()
