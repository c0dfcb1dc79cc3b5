"""Write onemodel/backends/checked_device/cupy_names.py: the public names of CuPy's namespace,
its submodules and its ndarray, which the checked-device stand-in then limits itself to.

Run it by hand where CuPy imports (no GPU is needed: CuPy loads CUDA lazily), after moving to a
new CuPy release, and commit the result:

    pip install cupy-cuda13x cuda-pathfinder   # anywhere, even without CUDA
    python tools/update_cupy_names.py
"""

from __future__ import annotations

import importlib
from pathlib import Path

import cupy

TARGET = Path(__file__).parent.parent / "onemodel/backends/checked_device/cupy_names.py"
SUBMODULES = ("linalg", "fft", "random", "lib", "lib.stride_tricks")


def public(names: list[str]) -> list[str]:
    return sorted(name for name in names if not name.startswith("_"))


def frozen(names: list[str], indent: str = "    ") -> str:
    lines = [f'{indent}"{name}",' for name in names]
    return "frozenset({\n" + "\n".join(lines) + "\n" + indent[:-4] + "})"


def main() -> None:
    submodules = {name: public(dir(importlib.import_module(f"cupy.{name}"))) for name in SUBMODULES}
    text = [
        f'"""Public names of CuPy {cupy.__version__} (tools/update_cupy_names.py wrote this file).',
        "",
        "The checked-device stand-in offers only these, so a NumPy function CuPy lacks fails on",
        'the CPU too."""',
        "",
        f'CUPY_VERSION = "{cupy.__version__}"',
        "",
        f"NAMESPACE = {frozen(public(dir(cupy)))}  # fmt: skip",
        "",
        "SUBMODULES = {",
    ]
    for name, names in submodules.items():
        text.append(f'    "{name}": {frozen(names, indent="        ")},')
    text += [
        "}  # fmt: skip",
        "",
        f"NDARRAY = {frozen(public(dir(cupy.ndarray)))}  # fmt: skip",
        "",
    ]
    TARGET.write_text("\n".join(text))
    print(f"wrote {TARGET} for CuPy {cupy.__version__}")


if __name__ == "__main__":
    main()
