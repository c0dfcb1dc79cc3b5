"""What bounds onemodel's Winograd convolutions (numpy_cpu/winograd.py) on NumPy: each step
around the core GEMMs timed on its own, in every form measured for it, against the kernel and
onnxruntime's whole Conv node (thread CPU time, one BLAS thread, the runs taken in turn, each
right after an untimed call of itself, min).

    python tools/winograd_floor.py [C,M,H,W,N ...]   # default: the bench's 3x3 stride-1 layers

A shape is a 3×3 convolution, pads 1 and a bias, with the block the fast backend gives its
outputs (`WinogradFilters.for_output`). The steps run a band of tile rows at a time as the
kernel does, on preallocated arrays, so their sum (the floor) leaves out only Python's own overhead:

- pad: x into the zero-bordered tile grid, one copy (plus the borders' zeros).
- tiles and Bᵀ·d·B: (a) the kernel's: one strided copy of the overlapping tiles, then Bᵀ
  along rows and columns as two BLAS passes with K = m + 2; (b) the same tiles, the passes as
  NumPy ufuncs over Bᵀ's sparse rows (F(4×4): 18 ufunc calls a pass, F(2×2): 4); (c) rows
  first: the tiles' m + 2 rows copied per tile row with rows cut at m·cols columns (so that
  the tiles' columns are one strided run over a whole plane), Bᵀ along them as one BLAS pass
  on 1.5× (not 2.25×) the input, the strided copy of the columns, the two columns past the
  cut patched in, the second BLAS pass.
- core GEMMs: the (m + 2)² GEMMs (M, C) @ (C, tiles).
- Aᵀ·y·A and the copy into NCHW: (a) the kernel's: Aᵀ along y's rows (one BLAS pass), along
  its columns as a GEMM of the transposed rows (block column innermost), then a copy moving
  whole rows of blocks; (b) both passes as contiguous BLAS passes, then the copy that moves
  the block column innermost; (c) one GEMM with Aᵀ ⊗ Aᵀ (m² × (m + 2)²), then that copy.
- bias: one contiguous add over the band's blocks.

NumPy has no cheaper primitive for these than the forms listed: BLAS runs the K = m + 2
passes at about 1 cycle per output (OpenBLAS fills 6 of its 16 kernel rows), the ufunc form
reads and writes each row per call, and overlapping tiles are not a BLAS matrix (their
leading dimension m is below their width m + 2), so one strided copy (NumPy: about 0.3 ns an
element) is the least that forms them.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import onnxruntime as ort
from threadpoolctl import threadpool_limits

from onemodel import bench_ops
from onemodel.backends.numpy_cpu import winograd
from onemodel.backends.numpy_cpu.plane_blocks import Reused

Bands = list[tuple[int, int]] | None  # [start, stop) tile rows; None: every band
DEFAULT = ("64,64,56,56,1", "64,64,56,56,8", "128,128,28,28,1", "256,256,14,14,1")
_rng = np.random.default_rng(0)


def _mins(runs: dict[str, Callable[[], object]], rounds: int) -> dict[str, float]:
    """Least thread CPU seconds of each run, the runs taken in turn, each timed right after
    an untimed call of itself (its arrays as warm as they get: a step's floor)."""
    best = dict.fromkeys(runs, float("inf"))
    for _ in range(rounds):
        for name, run in runs.items():
            run()
            start = time.thread_time()
            run()
            best[name] = min(best[name], time.thread_time() - start)
    return best


def _sparse_bt(m: int) -> Callable[[np.ndarray, np.ndarray, np.ndarray], None]:
    """d (t, K) -> out (t, K) = Bᵀ d as ufunc calls over Bᵀ's sparse rows, tmp (2, K)."""

    def f2(d: np.ndarray, out: np.ndarray, tmp: np.ndarray) -> None:
        np.subtract(d[0], d[2], out=out[0])
        np.add(d[1], d[2], out=out[1])
        np.subtract(d[2], d[1], out=out[2])
        np.subtract(d[1], d[3], out=out[3])

    def f4(d: np.ndarray, out: np.ndarray, tmp: np.ndarray) -> None:
        d0, d1, d2, d3, d4, d5 = d
        t0, t1 = tmp
        np.subtract(d4, d2, out=t0)  # d4 - d2
        np.multiply(d2, -3, out=t1)
        np.add(t1, t0, out=t1)  # d4 - 4 d2
        np.multiply(d1, -4, out=out[5])
        np.add(out[5], d3, out=out[5])  # d3 - 4 d1
        np.add(t1, out[5], out=out[1])
        np.subtract(t1, out[5], out=out[2])
        np.subtract(d3, d1, out=t1)
        np.multiply(t1, 2, out=t1)  # 2 (d3 - d1)
        np.add(t0, t1, out=out[3])
        np.subtract(t0, t1, out=out[4])
        np.subtract(d0, d2, out=out[0])
        np.multiply(out[0], 4, out=out[0])
        np.add(out[0], t0, out=out[0])  # 4 d0 - 5 d2 + d4
        np.subtract(d1, d3, out=out[5])
        np.multiply(out[5], 4, out=out[5])
        np.add(out[5], d5, out=out[5])
        np.subtract(out[5], d3, out=out[5])  # 4 d1 - 5 d3 + d5

    return f4 if m == 4 else f2


@dataclass
class Steps:
    """A shape's steps: {step: {form: run}} (each run covers every band), and for a step of
    several forms the array each of them fills (the same values, whichever form)."""

    block: int
    bands: list[tuple[int, int]]
    forms: dict[str, dict[str, Callable[..., object]]]
    products: dict[str, np.ndarray]
    out: np.ndarray  # the convolution without bias, once pad, tiles, core and output ran

    def check(self) -> None:
        """Run every form in order, a band at a time (the steps share the band's arrays);
        each step's forms must fill the same values (float32 rounding apart: F(4×4)'s
        transforms sum terms up to 8× the result, so forms that order them differently part
        by up to about 2e-5 of the largest; 1e-4 as tests/test_winograd.py bounds the kernel),
        so that the floor times the kernel's work and no less."""
        for band in self.bands:
            self._check_band([band])

    def _check_band(self, which: list[tuple[int, int]]) -> None:
        for step, by in self.forms.items():
            first = None
            for run in by.values():
                run(which)
                if step in self.products:
                    if first is None:
                        first = self.products[step].copy()
                    scale = np.abs(first).max()
                    assert np.abs(self.products[step] - first).max() <= 1e-4 * scale, step
            if first is not None:
                self.products[step][...] = first


def steps(x: np.ndarray, w: np.ndarray) -> Steps:
    """The steps of the 3×3 convolution of x by w (pads 1, a bias) as the kernel runs them."""
    batch, channels, height, width = x.shape
    filters = w.shape[0]
    transforms = winograd.winograd_filter(w, 1)
    prepared = transforms and transforms.for_output(batch, (height, width), (1, 1))
    if prepared is None:
        raise SystemExit(f"{x.shape} by {w.shape}: the fast backend takes the direct path")
    m, t = prepared.block, prepared.tile
    bt, _, at = (np.array(a, np.float32) for a in winograd._TRANSFORMS[m])
    rows, cols = -(-height // m), -(-width // m)
    per_row = batch * cols
    band = max(1, min(rows, winograd._BAND_ELEMENTS // (t * t * max(channels, filters) * per_row)))
    bands = [(s, min(s + band, rows)) for s in range(0, rows, band)]
    padded = winograd._padded(x, (1, 1), (rows * m + 2, cols * m + 2), np.empty)
    sn, sc, sh, sw = padded.strides
    tiles = np.lib.stride_tricks.as_strided(
        padded, (t, t, channels, batch, rows, cols), (sh, sw, sc, sn, m * sh, m * sw)
    )
    columns = band * per_row
    size = t * t * channels * columns
    # zeros, not empty: a check compares whole arrays of which one band is written
    flat_d, flat_half, flat_v = (np.zeros(size, np.float32) for _ in range(3))
    tmp = np.empty((2, t * channels * columns), np.float32)
    sparse = _sparse_bt(m)

    def part(flat: np.ndarray, n: int, *shape: int) -> np.ndarray:
        return flat[: t * t * channels * n].reshape(*shape)

    def gather(s: int, e: int) -> int:
        n = (e - s) * per_row
        part(flat_d, n, t, t, channels, batch, e - s, cols)[...] = tiles[:, :, :, :, s:e]
        return n

    def kernel_input(which: Bands = None) -> None:
        for s, e in which or bands:
            n = gather(s, e)
            np.matmul(bt, part(flat_d, n, t, -1), out=part(flat_half, n, t, -1))
            np.matmul(bt, part(flat_half, n, t, t, -1), out=part(flat_v, n, t, t, -1))

    def ufunc_input(which: Bands = None) -> None:
        for s, e in which or bands:
            n = gather(s, e)
            sparse(part(flat_d, n, t, -1), part(flat_half, n, t, -1), tmp[:, : t * channels * n])
            half, v = part(flat_half, n, t, t, -1), part(flat_v, n, t, t, -1)
            for i in range(t):  # the columns of each row i
                sparse(half[i], v[i], tmp[:, : channels * n])

    cut = m * cols
    row_buffer = np.empty((t, batch * channels * band * (cut + 2) + m), np.float32)
    row_done = np.empty_like(row_buffer)

    def rows_first_input(which: Bands = None) -> None:
        for s, e in which or bands:
            count = e - s
            main, side = batch * channels * count * cut, batch * channels * count * 2
            for first, width_, at_ in ((0, cut, 0), (cut, 2, main)):
                row_buffer[:, at_ : at_ + (main if first == 0 else side)].reshape(
                    t, batch, channels, count, width_
                )[...] = np.lib.stride_tricks.as_strided(
                    padded[:, :, s * m :, first:],
                    (t, batch, channels, count, width_),
                    (sh, sn, sc, m * sh, sw),
                )
            length = main + side
            np.matmul(bt, row_buffer[:, :length], out=row_done[:, :length])
            n = count * per_row
            item = row_done.itemsize
            target = part(flat_d, n, t, t, channels, batch, count, cols)
            target.reshape(t, t, channels, batch, -1)[...] = np.lib.stride_tricks.as_strided(
                row_done,
                (t, t, channels, batch, count * cols),
                (row_done.strides[0], item, count * cut * item, channels * count * cut * item,
                 m * item),
            )  # fmt: skip
            past = row_done[:, main:length].reshape(t, batch, channels, count, 2)
            target[:, m:, :, :, :, cols - 1] = past.transpose(0, 4, 2, 1, 3)
            np.matmul(bt, part(flat_d, n, t, t, -1), out=part(flat_v, n, t, t, -1))

    u = prepared.transformed
    flat_y = np.empty(t * t * filters * columns, np.float32)
    flat_z = np.empty(m * t * filters * columns, np.float32)
    flat_r = np.empty(m * m * filters * columns, np.float32)

    def core(which: Bands = None) -> None:
        for s, e in which or bands:
            n = (e - s) * per_row
            y = flat_y[: t * t * filters * n].reshape(t * t, filters, n)
            np.matmul(u, part(flat_v, n, t * t, channels, n), out=y)

    out = np.zeros((batch, filters, rows * m, cols * m), np.float32)
    blocks = out.reshape(batch, filters, rows, m, cols, m)
    kron = np.kron(at, at)

    def spectrum(n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """y (t, ...), z (m, t, ...) and the result (m m · filters · n) of n columns."""
        return (
            flat_y[: t * t * filters * n].reshape(t, -1),
            flat_z[: m * t * filters * n].reshape(m, t, -1),
            flat_r[: m * m * filters * n],
        )

    def kernel_output(which: Bands = None) -> None:
        for s, e in which or bands:
            y, z, r = spectrum((e - s) * per_row)
            np.matmul(at, y, out=z.reshape(m, -1))
            r = r.reshape(m, -1, m)
            for row in range(m):
                np.matmul(z[row].T, at.T, out=r[row])
            blocks[:, :, s:e] = r.reshape(m, filters, batch, e - s, cols, m).transpose(
                2, 1, 3, 0, 4, 5
            )

    def move_q(s: int, e: int, pq: np.ndarray) -> None:
        blocks[:, :, s:e] = pq.reshape(m, m, filters, batch, e - s, cols).transpose(
            3, 2, 4, 0, 5, 1
        )

    def contiguous_output(which: Bands = None) -> None:
        for s, e in which or bands:
            y, z, r = spectrum((e - s) * per_row)
            np.matmul(at, y, out=z.reshape(m, -1))
            np.matmul(at, z, out=r.reshape(m, m, -1))
            move_q(s, e, r)

    def kronecker_output(which: Bands = None) -> None:
        for s, e in which or bands:
            y, _, r = spectrum((e - s) * per_row)
            np.matmul(kron, y.reshape(t * t, -1), out=r.reshape(m * m, -1))
            move_q(s, e, r)

    bias = _rng.standard_normal(filters).astype(np.float32)

    def add_bias(which: Bands = None) -> None:
        for s, e in which or bands:
            r = flat_r[: m * m * filters * (e - s) * per_row].reshape(m, filters, -1)
            np.add(r, bias[:, None], out=r)

    def pad(which: Bands = None) -> None:  # the whole grid, whichever bands
        winograd._padded(x, (1, 1), (rows * m + 2, cols * m + 2), lambda *_: padded)

    forms = {
        "pad": {"one copy": pad},
        "tiles, Bᵀ·d·B": {
            "strided copy, 2 BLAS passes": kernel_input,
            "strided copy, 2 ufunc passes": ufunc_input,
            "rows first": rows_first_input,
        },
        "core GEMMs": {"BLAS": core},
        "Aᵀ·y·A, copy": {
            "BLAS, transposed rows, copy": kernel_output,
            "2 BLAS passes, strided copy": contiguous_output,
            "Kronecker GEMM, strided copy": kronecker_output,
        },
        "bias": {"one add": add_bias},
    }
    products = {"tiles, Bᵀ·d·B": flat_v, "Aᵀ·y·A, copy": out}
    return Steps(m, bands, forms, products, out[:, :, :height, :width])


def node_runs(
    x: np.ndarray, w: np.ndarray, b: np.ndarray
) -> tuple[Callable[[], object], Callable[[], object]]:
    """onemodel's kernel and onnxruntime's Conv node on the same convolution."""
    batch, _, height, width = x.shape
    filters = w.shape[0]
    case = bench_ops.OpCase(
        "conv", "layer", "Conv", [bench_ops.Input(x.shape)],
        {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}, {"W": w, "B": b},
    )  # fmt: skip
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    theirs = ort.InferenceSession(
        bench_ops.case_model(case), options, providers=["CPUExecutionProvider"]
    )
    feeds = {"x0": x}
    prepared = winograd.winograd_filter(w, 1).for_output(batch, (height, width), (1, 1))
    out = np.empty((batch, filters, height, width), np.float32)
    scratch = Reused(np.empty)

    def ours() -> None:
        scratch.next_block()
        matmul = lambda a, c, o: np.matmul(a, c, out=o)  # noqa: E731
        winograd.winograd_conv(x, prepared, out, (1, 1), (1, 1), scratch, matmul, b)

    return ours, lambda: theirs.run(None, feeds)


def main(shapes: list[str]) -> None:
    for text in shapes or DEFAULT:
        shape = tuple(int(v) for v in text.split(","))
        channels, filters, height, width, batch = shape
        x = _rng.standard_normal((batch, channels, height, width)).astype(np.float32)
        w = (_rng.standard_normal((filters, channels, 3, 3)) / np.sqrt(9 * channels)).astype(
            np.float32
        )
        b = _rng.standard_normal(filters).astype(np.float32)
        measured = steps(x, w)
        measured.check()
        block, forms = measured.block, measured.forms
        ours, theirs = node_runs(x, w, b)
        runs = {"om": ours, "ort": theirs}
        runs.update(
            {f"{step}|{form}": run for step, by in forms.items() for form, run in by.items()}
        )
        best = _mins(runs, 30)
        floor, parts = 0.0, []
        for step, by in forms.items():
            form = min(by, key=lambda f: best[f"{step}|{f}"])
            floor += best[f"{step}|{form}"]
            others = ", ".join(f"{f} {best[f'{step}|{f}'] * 1e3:.3f}" for f in by if f != form)
            parts.append(
                f"    {step:14s} {best[f'{step}|{form}'] * 1e3:7.3f} ms  {form}"
                + (f"  (else {others})" if others else "")
            )
        core = best["core GEMMs|BLAS"]
        print(
            f"C{shape[0]} M{shape[1]} {shape[2]}x{shape[3]} b{shape[4]} F{block}: "
            f"om {best['om'] * 1e3:.3f} ms, ort {best['ort'] * 1e3:.3f}, core GEMMs "
            f"{core * 1e3:.3f}, floor {floor * 1e3:.3f} = {floor / best['ort']:.2f}x ort = "
            f"{floor / core:.2f}x core (om {best['om'] / floor:.2f}x floor)",
            flush=True,
        )
        print("\n".join(parts), flush=True)


if __name__ == "__main__":
    with threadpool_limits(1):
        main(sys.argv[1:])
