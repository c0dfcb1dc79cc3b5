"""Rules about which modules may import what."""

import ast
import os
import subprocess
import sys
from pathlib import Path

from onemodel.backends.numpy_cpu.threads import THREAD_VARIABLES

PACKAGE = Path(__file__).resolve().parent.parent / "onemodel"
CUPY_HOME = PACKAGE / "backends" / "cupy_gpu"


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_only_the_cupy_backend_imports_cupy():
    offenders = [
        str(path.relative_to(PACKAGE.parent))
        for path in PACKAGE.rglob("*.py")
        if CUPY_HOME not in path.parents
        and any(name == "cupy" or name.startswith("cupy.") for name in imported_modules(path))
    ]
    assert offenders == []


def test_the_rule_sees_an_import_of_cupy(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("def f():\n    import cupy.cuda\n    from cupy import ndarray\n")
    assert imported_modules(module) == {"cupy.cuda", "cupy"}


def test_importing_the_package_loads_neither_cupy_nor_onnxruntime():
    code = (
        "import sys, onemodel, onemodel.backends, onemodel.backends.cupy_gpu;"
        "print(sorted(m for m in ('cupy', 'onnxruntime') if m in sys.modules))"
    )
    output = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert output.strip() == "[]"


def test_importing_the_package_and_the_compat_layer_loads_no_batch_engine():
    """Dask, Ray and tqdm are optional extras: only their integration modules import them."""
    code = (
        "import sys, onemodel, onemodel.compat, onemodel.integrations;"
        "import onemodel.integrations.batches, onemodel.integrations.sessions;"
        "engines = ('dask', 'distributed', 'ray', 'tqdm', 'pandas', 'onnxruntime');"
        "print(sorted(m for m in engines if m in sys.modules))"
    )
    output = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert output.strip() == "[]"


# The graph runtime's layers, lowest first (seed 000 §1): each imports only those before it.
GRAPH_LAYERS = ("values", "compiled", "plan", "run_state", "executor")


def test_the_graph_runtime_layers_import_downward_only():
    layer_of = {f"onemodel.graph.{name}": index for index, name in enumerate(GRAPH_LAYERS)}
    upward = []
    for name, index in layer_of.items():
        path = PACKAGE / "graph" / f"{name.rsplit('.', 1)[1]}.py"
        upward += [
            f"{name} imports {module}"
            for module in imported_modules(path)
            if layer_of.get(module, -1) >= index
        ]
    for path in (PACKAGE / "graph" / "passes").glob("*.py"):  # passes run inside compiling
        upward += [
            f"{path.name} imports {module}"
            for module in imported_modules(path)
            if layer_of.get(module, -1) >= layer_of["onemodel.graph.compiled"]
        ]
    assert upward == []


def test_importing_the_package_imports_nothing_until_a_name_is_used():
    """Cold start (issue 16): `import onemodel` loads neither NumPy nor onnx; loading and
    running a model leaves the onnxruntime drop-in, the eager API, the batch integrations, the
    checked stand-in device, tqdm (no weights big enough for a bar), threadpoolctl (the BLAS
    already runs the thread count asked for) and the operator families the model does not use
    unloaded."""
    code = (
        "import sys, onemodel;"
        "bare = sorted(m for m in ('numpy', 'onnx', 'onemodel.session') if m in sys.modules);"
        "import numpy as np;"
        "from onemodel.examples import mlp_model;"
        "session = onemodel.Session.load(mlp_model().SerializeToString());"
        "session.run(None, {'x': np.zeros((2, 16), np.float32)});"
        "lazy = ('onemodel.compat', 'onemodel.eager', 'onemodel.integrations',"
        " 'onemodel.backends.checked_device', 'tqdm', 'threadpoolctl',"
        " 'onemodel.graph.operators.conv', 'onemodel.graph.operators.recurrent',"
        " 'onemodel.graph.passes.export');"
        "print(bare, sorted(m for m in lazy if m in sys.modules))"
    )
    env = {k: v for k, v in os.environ.items() if k not in THREAD_VARIABLES}
    output = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    ).stdout
    assert output.strip() == "[] []"


def test_choosing_the_numpy_backend_loads_neither_the_cupy_kernels_nor_exact_mode():
    """Backend selection asks whether CuPy is here (cupy_gpu.availability) and builds only the
    chosen backend; exact mode's kernel modules load on their first use."""
    code = (
        "import sys, onemodel; from onemodel.backends import KernelPaths;"
        "assert KernelPaths.best().name == 'numpy';"
        "lazy = ('onemodel.backends.cupy_gpu.backend', 'onemodel.backends.cupy_gpu.elementwise',"
        " 'onemodel.backends.exact_arrays', 'onemodel.backends.exact_gemm',"
        " 'onemodel.backends.exact_elementary');"
        "print(sorted(m for m in lazy if m in sys.modules))"
    )
    output = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert output.strip() == "[]"


def test_exact_kernels_load_on_first_use():
    from onemodel.backends.array_kernels import exact_gemm

    assert callable(exact_gemm.matmul)
