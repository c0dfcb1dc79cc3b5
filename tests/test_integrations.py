"""Batch inference on Dask: arrays and DataFrames on a two-process LocalCluster, one session per
worker process, results equal to one local run; and the in-process batching they share."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import onemodel
from onemodel import progress
from onemodel.integrations import batches

MODELS = Path(__file__).parent / "models"
MLP = MODELS / "mlp.onnx"
SKLEARN = MODELS / "sklearn"


def local_run(path: Path, x: np.ndarray) -> list[np.ndarray]:
    return onemodel.Session.load(path).run(None, {"X" if "sklearn" in str(path) else "input": x})


@pytest.fixture(scope="module")
def rows() -> np.ndarray:
    return np.random.default_rng(2).standard_normal((50, 32)).astype(np.float32)


def test_run_in_batches_matches_one_run_and_shows_a_bar_when_asked(rows, capsys):
    session = onemodel.Session.load(MLP)
    (whole,) = session.run(None, {"input": rows})
    (batched,) = batches.run_in_batches(session, {"input": rows}, batch_size=16, progress=True)
    # BLAS may block a 16-row product differently from a 50-row one: not bit-equal
    np.testing.assert_allclose(batched, whole, rtol=1e-5, atol=1e-5)
    assert "4/4" in capsys.readouterr().err  # 50 rows in batches of 16
    batches.run_in_batches(session, {"input": rows}, batch_size=16)
    assert capsys.readouterr().err == ""


def test_run_in_batches_refuses_ragged_feeds_and_empty_batches(rows):
    session = onemodel.Session.load(MLP)
    with pytest.raises(ValueError, match="batch_size"):
        batches.run_in_batches(session, {"input": rows}, batch_size=0)
    with pytest.raises(ValueError, match="same number of rows"):
        batches.run_in_batches(session, {"a": rows, "b": rows[:3]}, batch_size=4)


def test_the_bar_is_off_when_not_on_a_terminal(capsys):
    shown = progress.bar(range(3), total=3)
    assert list(shown) == [0, 1, 2]
    assert capsys.readouterr().err == ""  # pytest's captured stderr is not a terminal


# --- Dask ------------------------------------------------------------------------------------

dask_array = pytest.importorskip("dask.array")
distributed = pytest.importorskip("distributed")
dask_dataframe = pytest.importorskip("dask.dataframe")
pd = pytest.importorskip("pandas")
onemodel_dask = pytest.importorskip("onemodel.integrations.dask")


def test_compute_on_the_local_scheduler_counts_the_blocks(rows, capsys):
    """Runs before the cluster fixture exists, so no distributed client is active."""
    blocks = dask_array.from_array(rows, chunks=(10, 32))
    result = onemodel_dask.compute(onemodel_dask.predict_array(MLP, blocks), progress=True)
    assert "5/5" in capsys.readouterr().err
    np.testing.assert_allclose(result, local_run(MLP, rows)[0], rtol=1e-5, atol=1e-5)
    frame = dask_dataframe.from_pandas(pd.DataFrame(rows[:, :8]), npartitions=3)
    model = SKLEARN / "linear_regression.onnx"
    predicted = onemodel_dask.compute(onemodel_dask.predict_frame(model, frame), progress=True)
    assert "3/3" in capsys.readouterr().err
    np.testing.assert_allclose(
        predicted.to_numpy(), local_run(model, rows[:, :8])[0], rtol=1e-5, atol=1e-5
    )


@pytest.fixture(scope="module")
def client():
    with (
        distributed.LocalCluster(
            n_workers=2,
            processes=True,
            threads_per_worker=1,
            host="127.0.0.1",
            dashboard_address=None,
            worker_dashboard_address=None,
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        yield client


def sessions_per_worker(client) -> list[int]:
    from onemodel.integrations.sessions import cached_count

    return sorted(client.run(cached_count).values())


def test_an_array_runs_block_by_block_with_one_session_per_worker(client, rows):
    blocks = dask_array.from_array(rows, chunks=(5, 16))  # 10 row blocks; columns are joined
    logits = onemodel_dask.predict_array(MLP, blocks, batch_size=3)
    assert isinstance(logits, dask_array.Array)
    assert logits.chunks == ((5,) * 10, (10,))
    result = onemodel_dask.compute(logits, progress=False)
    np.testing.assert_allclose(result, local_run(MLP, rows)[0], rtol=1e-5, atol=1e-5)
    assert sessions_per_worker(client) in ([1, 1], [0, 1])  # ten blocks, never a second load


def test_a_dataframe_gets_a_column_per_output_value(client):
    data = np.load(SKLEARN / "logistic_regression.npz")
    features = data["X"].astype(np.float32)
    frame = pd.DataFrame(features, columns=[f"f{i}" for i in range(8)])
    frame["id"] = np.arange(len(frame))
    partitions = dask_dataframe.from_pandas(frame, npartitions=4)
    columns = [f"f{i}" for i in range(8)]
    predicted = onemodel_dask.predict_frame(
        SKLEARN / "logistic_regression.onnx", partitions, columns=columns
    )
    assert isinstance(predicted, dask_dataframe.DataFrame)
    result = predicted.compute()
    labels, probabilities = local_run(SKLEARN / "logistic_regression.onnx", features)
    assert list(result.columns) == [
        "label",
        "probabilities_0",
        "probabilities_1",
        "probabilities_2",
    ]
    np.testing.assert_array_equal(result["label"].to_numpy(), labels)
    np.testing.assert_array_equal(result["label"].to_numpy(), data["label"])
    np.testing.assert_allclose(
        result[["probabilities_0", "probabilities_1", "probabilities_2"]].to_numpy(),
        probabilities,
        rtol=1e-6,
    )
    pd.testing.assert_index_equal(result.index, frame.index)


def test_compute_shows_a_bar_over_the_blocks(client, rows, capsys):
    blocks = dask_array.from_array(rows, chunks=(25, 32))
    result = onemodel_dask.compute(onemodel_dask.predict_array(MLP, blocks), progress=True)
    assert "2/2" in capsys.readouterr().err
    np.testing.assert_allclose(result, local_run(MLP, rows)[0], rtol=1e-5, atol=1e-5)


def test_outputs_that_are_not_one_row_per_row_are_refused(tmp_path):
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("ReduceSum", ["x"], ["total"], keepdims=0)],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
        [helper.make_tensor_value_info("total", TensorProto.FLOAT, [])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    blocks = dask_array.zeros((8, 4), chunks=4, dtype=np.float32)
    with pytest.raises(ValueError, match="batch-aligned"):
        onemodel_dask.predict_array(model.SerializeToString(), blocks)
