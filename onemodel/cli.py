"""The `onemodel` command line: run, info, demo (each prints one line of JSON) and bench (a
table, optionally JSON and Markdown files)."""

from __future__ import annotations

import argparse
import json
import sys

from onemodel.backends import BackendUnavailableError
from onemodel.errors import SessionError


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="onemodel", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="run a model once, optionally check, bench, profile")
    run.add_argument("model")
    run.add_argument("--inputs", help=".npz with inputs by name and golden 'output:<name>'")
    run.add_argument("--check", action="store_true", help="compare with the golden outputs")
    run.add_argument("--bench", type=int, default=0, metavar="N", help="timed runs")
    run.add_argument("--warmup", type=int, default=3, metavar="N")
    run.add_argument("--threads", type=int, default=0, metavar="N")
    run.add_argument("--profile", action="store_true", help="time per operator label")
    run.add_argument("--mode", choices=["fast", "exact"], default="fast")
    run.add_argument("--backend", help="kernel path by name (default: the best available)")
    run.add_argument("--trace", metavar="FILE", help="Chrome trace-event JSON of one run")
    info = commands.add_parser("info", help="inputs, outputs, opsets, unsupported operators")
    info.add_argument("model")
    info.add_argument(
        "--weight-storage", choices=["original", "binary16", "bfloat16"], default="original",
        help="report the weight bytes with this storage and what it saves",
    )  # fmt: skip
    info.add_argument("--optimization-level", type=int, choices=[0, 1, 2], default=2)
    info.add_argument("--save-optimized", metavar="FILE", help="write the optimised graph (ONNX)")
    demo = commands.add_parser("demo", help="build a small MLP model and run it")
    demo.add_argument("--backend", help="kernel path by name (default: the best available)")
    demo.add_argument("--batch", type=int, default=8)
    bench = commands.add_parser(
        "bench",
        help="onemodel against onnxruntime and the onnx reference evaluator "
        "('bench ops': one node per operator, see onemodel/bench_ops.py)",
    )
    from onemodel.bench import add_arguments

    add_arguments(bench)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:2] == ["bench", "ops"]:
        return _bench_ops(argv[2:])
    args = _parser().parse_args(argv)
    from onemodel import runner

    try:
        if args.command == "bench":
            from onemodel.bench import main_bench

            main_bench(args)
            return 0
        if args.command == "run":
            report = runner.run_model(
                args.model,
                inputs_path=args.inputs,
                check=args.check,
                bench=args.bench,
                warmup=args.warmup,
                threads=args.threads,
                profile=args.profile,
                mode=args.mode,
                backend=args.backend,
                trace=args.trace,
            )
        elif args.command == "info":
            report = runner.model_info(
                args.model,
                weight_storage=args.weight_storage,
                optimization_level=args.optimization_level,
                save_optimized=args.save_optimized,
            )
        else:
            from onemodel import demo  # builds its model with onnx.helper: only for the demo

            report = demo.main(args.backend, args.batch)
    except (SessionError, BackendUnavailableError, ValueError, OSError, RuntimeError) as error:
        print(f"onemodel: {error}", file=sys.stderr)
        return 2
    print(json.dumps(report))
    if args.command == "demo":
        return 0 if report["max_abs_error_vs_numpy"] < 1e-4 else 1
    return 0


def _bench_ops(argv: list[str]) -> int:
    """`onemodel bench ops`: the operator table (onemodel/bench_ops.py)."""
    from onemodel import bench_ops

    args = bench_ops.parser().parse_args(argv)
    try:
        bench_ops.main_bench_ops(args)
    except (ValueError, OSError, RuntimeError) as error:
        print(f"onemodel: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
