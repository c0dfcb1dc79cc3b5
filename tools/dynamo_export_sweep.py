"""Export every case of tests/dynamo_exports.py with torch's default (dynamo) exporter, load
it with onemodel in fast and exact mode, and compare each with onnxruntime on the CPU (rtol
1e-3, atol 1e-4 for float32, 1e-2 for float16, integers equal); where onnxruntime fails on an
export, against torch's own outputs.

    python tools/dynamo_export_sweep.py [--variants default,opset18,dynamic] [NAME ...]

Variants: `default` (the exporter's defaults), `opset18` and `opset23` (opset_version; 23
writes ONNX's Attention, RMSNormalization and RotaryEmbedding), `dynamic` (every input
dimension Dim.AUTO, run at batch 3 instead of the export's 2), `unoptimized` (optimize=False:
onnxscript's optimizer does not fold the translation), `float16` (module and float inputs
cast). One line per model and variant, and a JSON summary with --json FILE.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import dynamo_exports as dx
from output_difference import first_difference

import onemodel

VARIANTS = {
    "default": {},
    "opset18": {"opset": 18},
    "opset23": {"opset": 23},
    "dynamic": {"dynamic": True},
    "unoptimized": {"optimize": False},
    "float16": {"dtype": "float16"},
}


def _run_onemodel(path: Path, feeds: dict, want: list, mode: onemodel.ExecutionMode) -> str:
    stage = "load"
    try:
        session = onemodel.Session.load(str(path), onemodel.SessionOptions(mode=mode))
        stage = "run"
        got = session.run(None, feeds)
    except onemodel.SessionError as error:
        return f"{stage} SessionError: {str(error)[:300]}"
    except Exception as error:
        return f"{stage} CRASH {type(error).__name__}: {str(error)[:300]}"
    wrong = first_difference(got, want)
    return f"WRONG {wrong}" if wrong else "ok"


def _cause(error: Exception) -> str:
    """The exporter's own summary of why it failed (its first line only says which step)."""
    lines = str(error).splitlines()
    if "## Exception summary" in lines:
        lines = lines[lines.index("## Exception summary") + 1 :]
    lines = [line for line in lines if line.strip()]
    return lines[0][:300] if lines else ""


_ONNXRUNTIME = """
import sys, numpy as np, onnxruntime as ort
options = ort.SessionOptions()
options.log_severity_level = 3
session = ort.InferenceSession(sys.argv[1], options, providers=["CPUExecutionProvider"])
feeds = dict(np.load(sys.argv[2]))
np.savez(sys.argv[3], *session.run(None, feeds))
"""


def _onnxruntime_outputs(path: Path, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """onnxruntime's outputs, computed in a child process: it crashes on some exports (a
    segmentation fault loading an unoptimized one), which must not end the sweep."""
    np.savez(path.with_suffix(".feeds.npz"), **feeds)
    out = path.with_suffix(".outputs.npz")
    command = [sys.executable, "-c", _ONNXRUNTIME, str(path), str(path.with_suffix(".feeds.npz")),
               str(out)]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"exit {done.returncode}: {done.stderr.strip()[-200:]}")
    with np.load(out) as data:
        return [data[f"arr_{i}"] for i in range(len(data.files))]


def _torch_outputs(name: str, variant: str, args: tuple) -> list[np.ndarray]:
    """The module's own outputs, the same weights as the export's (the same seed)."""
    import torch

    torch.manual_seed(0)
    module, _ = dx.cases()[name](2)
    if VARIANTS[variant].get("dtype"):
        module = module.to(getattr(torch, VARIANTS[variant]["dtype"]))
    with torch.no_grad():
        outputs = torch.utils._pytree.tree_leaves(module(*args))
    return [o.numpy() for o in outputs]


def sweep_one(name: str, variant: str, folder: Path) -> dict[str, str]:
    """Export, then onemodel in fast and exact mode against onnxruntime (against torch itself
    where onnxruntime fails)."""
    result: dict[str, str] = {"model": name, "variant": variant}
    started = time.time()
    try:
        path, args = dx.export_dynamo(name, folder / variant / name, **VARIANTS[variant])
    except Exception as error:
        result["export"] = f"FAILED {type(error).__name__}: {_cause(error)}"
        return result
    result["export"] = f"ok {time.time() - started:.1f}s"
    if variant == "dynamic":
        args = dx.args_for(name, 3, VARIANTS[variant].get("dtype"))
    feeds = dx.feeds_for_args(path, args)
    try:
        want = _onnxruntime_outputs(path, feeds)
    except Exception as error:
        result["onnxruntime"] = f"FAILED {str(error)[:200]}; compared with torch instead"
        try:
            want = _torch_outputs(name, variant, args)
        except Exception as failure:
            result["torch"] = f"FAILED {type(failure).__name__}: {str(failure)[:200]}"
            return result
    result["fast"] = _run_onemodel(path, feeds, want, onemodel.ExecutionMode.FAST)
    result["exact"] = _run_onemodel(path, feeds, want, onemodel.ExecutionMode.EXACT)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="cases (default: all)")
    parser.add_argument("--variants", default="default")
    parser.add_argument("--json", type=Path)
    options = parser.parse_args()
    names = options.names or list(dx.cases())
    results = []
    with tempfile.TemporaryDirectory() as scratch:
        for name in names:
            for variant in options.variants.split(","):
                try:
                    result = sweep_one(name, variant, Path(scratch))
                except Exception:
                    result = {"model": name, "variant": variant,
                              "sweep": traceback.format_exc(limit=3)[-300:]}  # fmt: skip
                results.append(result)
                print(json.dumps(result), flush=True)
    if options.json:
        options.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
