#!/usr/bin/env bash
# The GPU checks of the CuPy backend in one run, sized for at most 10 minutes on one GPU
# (docs/gpu.md): the gpu-marked tests, the exact golden files on cupy, the GPU benchmark
# (tools/gpu_bench.py: ResNet-50 and BERT-base at batch 1 and 32 against torch), the exact
# parity sweep on cupy, the ONNX conformance suite with the CuPy adapter (pass counts by kind)
# and `onemodel bench`.
# Each step has its own time limit and the script goes on after a failure or a timeout, so a
# slow step never costs the others; logs go to $OUT (default /tmp/gpu_check).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu_check}
mkdir -p "$OUT"

step() {  # step NAME SECONDS COMMAND...: run with a limit, keep the log, show its tail
    local name=$1 limit=$2
    shift 2
    local start=$SECONDS
    echo "== $name (limit ${limit}s): $*"
    timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
    local rc=$?
    echo "   rc=$rc ($([ $rc -eq 124 ] && echo 'timed out, ')$((SECONDS - start))s), log $OUT/$name.log"
    tail -n "${TAIL:-15}" "$OUT/$name.log" | sed 's/^/   | /'
}

counts() {  # pass counts by suite kind from a verbose pytest log, complete or cut short
    awk '/test_conformance.py::/ && / (PASSED|FAILED|XFAIL|SKIPPED)/ {
        split($1, id, "::"); kind = id[2]; sub(/OnnxBackend/, "", kind); sub(/Test$/, "", kind)
        for (i = 2; i <= NF; i++) if ($i ~ /^(PASSED|FAILED|XFAIL|SKIPPED)$/) n[kind " " $i]++
    } END { for (k in n) printf "   %-32s %5d\n", k, n[k] }' "$1" | sort
}

echo "== machine"
python3 -m pip install --no-deps -q -e . 2>&1 | tail -n 2
python3 - <<'EOF'
import cupy
from onemodel.backends import KernelPaths
properties = cupy.cuda.runtime.getDeviceProperties(0)
print("   cupy", cupy.__version__, "| device:", properties["name"].decode(),
      "| best backend:", KernelPaths.best().name)
EOF

step gpu-tests 120 python3 -m pytest -q -m gpu -p no:cacheprovider tests \
    --ignore tests/test_exact_parity_sweep.py
step exact-golden 45 python3 -m pytest -q -p no:cacheprovider tests/test_exact_golden.py -k cupy
TAIL=20 step gpu-bench 200 python3 tools/gpu_bench.py --out /tmp/gpu_bench_models \
    --json "$OUT/gpu_bench.json"  # the exported models (~0.5 GB) stay out of $OUT
step exact-sweep 60 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_exact_parity_sweep.py
TAIL=40 step conformance-cuda 150 python3 -m pytest -v -rf -p no:cacheprovider \
    tests/test_conformance.py -k _cuda
echo "   counts by kind (also when cut short):"
counts "$OUT/conformance-cuda.log"
step bench 30 python3 -m onemodel.cli bench tests/models/cnn.onnx tests/models/transformer.onnx \
    --in-process --vs "" --iterations 20 --warmup 3 --json "$OUT/bench.json"
echo "== done in ${SECONDS}s; logs in $OUT"
