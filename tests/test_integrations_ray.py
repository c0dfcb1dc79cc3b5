"""onemodel.integrations.ray.Predictor in Ray Data's map_batches on a local Ray instance, against
one local run; skipped where ray is not installed."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

import onemodel

# Set before ray is imported (it reads them then) and inherited by the processes it starts: the
# node binds to the loopback address instead of the machine's network address, and sends no
# usage reports. The test talks to nothing but this machine.
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
ray = pytest.importorskip("ray")
pytest.importorskip("ray.data")
from onemodel.integrations.ray import Predictor  # noqa: E402 - only once ray is known to import

MLP = Path(__file__).parent / "models" / "mlp.onnx"


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    assert ray.util.get_node_ip_address() == "127.0.0.1"
    yield
    ray.shutdown()


def test_map_batches_runs_the_model_on_actors(local_ray):
    rows = np.random.default_rng(3).standard_normal((40, 32)).astype(np.float32)
    dataset = ray.data.from_numpy(rows)  # one column, "data"
    predicted = dataset.map_batches(
        Predictor,
        fn_constructor_kwargs={
            "model": MLP.read_bytes(),
            "inputs": {"input": "data"},
            "outputs": {"logits": "scores"},
            "batch_size": 7,
        },
        batch_size=16,
        batch_format="numpy",
        compute=ray.data.ActorPoolStrategy(size=1),
    )
    result = predicted.to_numpy_refs()
    batches = [ray.get(ref) for ref in result]
    scores = np.concatenate([batch["scores"] for batch in batches])
    data = np.concatenate([batch["data"] for batch in batches])
    reference = onemodel.Session.load(MLP).run(None, {"input": data})[0]
    np.testing.assert_allclose(scores, reference, rtol=1e-5, atol=1e-5)
    assert sorted(map(tuple, data)) == sorted(map(tuple, rows))  # each row once, any order


def test_the_predictor_names_a_missing_column():
    predictor = Predictor(MLP)
    with pytest.raises(KeyError, match="input"):
        predictor({"features": np.zeros((1, 32), np.float32)})
    with pytest.raises(TypeError, match="batch_format='numpy'"):
        predictor([np.zeros((1, 32), np.float32)])
