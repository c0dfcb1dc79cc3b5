"""The command line: `onemodel demo` runs the example model on the chosen backend."""

from __future__ import annotations

import json

import pytest

from onemodel import cli
from onemodel.backends import KernelPaths


@pytest.mark.parametrize("backend", KernelPaths.available())
def test_demo_runs_the_mlp_and_reports_json(capsys, backend):
    assert cli.main(["demo", "--backend", backend, "--batch", "3"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["backend"] == backend
    assert report["output_shape"] == [3, 4]
    assert report["max_abs_error_vs_numpy"] < 1e-5


def test_demo_picks_the_best_backend_by_default(capsys):
    assert cli.main(["demo"]) == 0
    assert json.loads(capsys.readouterr().out)["backend"] == KernelPaths.best().name


def test_an_unknown_backend_is_a_clear_error_not_a_traceback(capsys):
    assert cli.main(["demo", "--backend", "tpu"]) == 2
    assert "unknown kernel path 'tpu'" in capsys.readouterr().err
