"""`python -m onemodel.compat script.py args...` or `python -m onemodel.compat -m module args...`:
run a program with onemodel installed as `onnxruntime`."""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

from onemodel.compat import install

USAGE = "usage: python -m onemodel.compat (script.py | -m module) [args...]"


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help") or (argv[0] == "-m" and len(argv) < 2):
        print(USAGE, file=sys.stderr)
        return 2
    install()
    if argv[0] == "-m":
        sys.argv = [argv[1], *argv[2:]]
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = list(argv)
        sys.path.insert(0, str(Path(argv[0]).resolve().parent))  # as `python script.py` does
        runpy.run_path(argv[0], run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
