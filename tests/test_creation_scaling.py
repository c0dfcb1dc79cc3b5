"""Session creation grows linearly with the graph (issue 16): the creation and first run of a
40,000-node graph take at most ~5x those of a 10,000-node one (4x is linear, 4.6x n log n,
16x quadratic). A ratio, not a time limit, in CPU time (`time.process_time`), best of a few
tries: the machine is shared, and other processes' load neither counts nor sets the figure.
The limit is 6: on a loaded shared machine the same calls cost up to ~1.4x more each at 40k
nodes than at 10k (caches; measured with equal call counts), which a quadratic step would
still exceed by far."""

from __future__ import annotations

import gc
import time

import numpy as np
import pytest

from onemodel import Session, SessionOptions
from onemodel.bench_graphs import add_chain_model, add_tree_model
from onemodel.graph.importer import model_from_proto

GROWTH_LIMIT = 6.0


def _create_and_run_seconds(build, nodes: int, tries: int, level: int) -> float:
    model = build(nodes)
    feeds = {model.graph.input[0].name: np.ones((1, 4), np.float32)}
    options = SessionOptions(optimization_level=level)
    best = float("inf")
    for _ in range(tries):
        gc.collect()
        started = time.process_time()
        session = Session.create(model_from_proto(model), options)
        (result,) = session.run(None, feeds)
        best = min(best, time.process_time() - started)
        del session
    assert result.shape == (1, 4)
    return best


@pytest.mark.slow
@pytest.mark.parametrize(
    ("build", "level"),
    [(add_chain_model, 2), (add_tree_model, 2), (add_tree_model, 0)],
    ids=["chain", "tree", "tree-unoptimised"],  # optimised, the tree's x + x nodes are merged
)
def test_creation_time_grows_linearly_with_the_node_count(build, level):
    small = _create_and_run_seconds(build, 10_000, tries=3, level=level)
    large = _create_and_run_seconds(build, 40_000, tries=3, level=level)
    assert large / small <= GROWTH_LIMIT, f"10k: {small:.2f} s, 40k: {large:.2f} s"


def test_the_generated_graphs_compute_what_they_say():
    x = np.arange(4, dtype=np.float32).reshape(1, 4)
    (chain,) = Session.create(model_from_proto(add_chain_model(10))).run(None, {"v0": x})
    np.testing.assert_array_equal(chain, x + 10)
    (tree,) = Session.create(model_from_proto(add_tree_model(7))).run(None, {"x": x})
    np.testing.assert_array_equal(tree, x * 8)  # 7 Adds: 8 leaves of x in a full tree
