"""Cache blocking (onemodel/backends/blocking.py) does not change fast mode's results."""

import numpy as np
import pytest

from onemodel.backends import blocking
from tests.operator_harness import run_node

POOL = {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}
X = np.random.default_rng(2).standard_normal((37, 50)).astype(np.float32) * 3
CASES = [
    ("Softmax", [X], {"axis": -1}, 13),
    ("LogSoftmax", [X], {"axis": 1}, 13),
    ("LayerNormalization", [X, X[0] + 1, X[1]], {"axis": -1}, 17),
    ("LayerNormalization", [X.reshape(37, 5, 10), X[0].reshape(5, 10)], {"axis": 1}, 17),
    ("InstanceNormalization", [X.reshape(1, 37, 50), X[:, 0] + 1, X[:, 1]], {}, 6),
    (
        "GroupNormalization",
        [X[:36].reshape(2, 18, 50), X[:18, 0], X[:18, 1]],
        {"num_groups": 6},
        21,
    ),
    ("GroupNormalization", [X[:36].reshape(2, 18, 50), X[:6, 0], X[:6, 1]], {"num_groups": 6}, 18),
    ("RMSNormalization", [X, X[0] + 1], {"axis": -1}, 23),
    ("MaxPool", [X.reshape(1, 37, 5, 10)], POOL, 12),
    ("AveragePool", [X.reshape(1, 37, 5, 10)], POOL, 19),
    ("AveragePool", [X.reshape(37, 1, 5, 10)], POOL, 11),
]


@pytest.mark.parametrize(("op_type", "inputs", "attributes", "opset"), CASES)
def test_row_blocks_give_the_bits_of_whole_arrays(monkeypatch, op_type, inputs, attributes, opset):
    (whole,) = run_node(op_type, inputs, attributes, opset=opset)
    monkeypatch.setattr(blocking, "BLOCKED_ABOVE", 100)
    monkeypatch.setattr(blocking, "BLOCK", 120)  # 2 rows a block, the last one shorter
    assert len(list(blocking.row_blocks(37, 50))) == 19
    (blocked,) = run_node(op_type, inputs, attributes, opset=opset)
    np.testing.assert_array_equal(blocked, whole)
    (wide,) = run_node(op_type, [a.astype(np.float64) for a in inputs], attributes, opset=opset)
    np.testing.assert_allclose(whole, wide, rtol=2e-6, atol=2e-6)
