"""The `onemodel` command line."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="onemodel", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser("demo", help="build a small MLP model and run it")
    demo.add_argument("--backend", help="kernel path by name (default: the best available)")
    demo.add_argument("--batch", type=int, default=8)
    args = parser.parse_args(argv)
    if args.command == "demo":
        from onemodel import demo as demo_module
        from onemodel.backends import BackendUnavailableError

        try:
            report = demo_module.main(args.backend, args.batch)
        except (BackendUnavailableError, ValueError) as error:
            print(f"onemodel: {error}", file=sys.stderr)
            return 2
        return 0 if report["max_abs_error_vs_numpy"] < 1e-4 else 1
    return 2


if __name__ == "__main__":
    sys.exit(main())
