"""A callable class for Ray Data's `Dataset.map_batches`: Ray makes one per actor, so each actor
compiles the model once and runs every batch it is given on that session.

    dataset.map_batches(
        Predictor,
        fn_constructor_kwargs={"model": "model.onnx", "inputs": {"input": "image"}},
        batch_size=256,
        compute=ray.data.ActorPoolStrategy(size=4),
    )

Batches are Ray's NumPy format (a dict of column name → array); the outputs are added to the
batch as columns named after the model's outputs (or as `outputs` renames them).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from onemodel.integrations.batches import run_in_batches
from onemodel.session import Session, SessionOptions


class Predictor:
    """`model`: a path or bytes (Ray pickles the constructor's arguments to each actor once);
    `inputs`: model input → batch column (default: the same names); `outputs`: model output →
    column to write (default: every output under its own name); `batch_size`: rows per run
    inside one Ray batch (default: the whole batch)."""

    def __init__(
        self,
        model: str | os.PathLike[str] | bytes,
        *,
        inputs: Mapping[str, str] | None = None,
        outputs: Mapping[str, str] | None = None,
        options: SessionOptions | None = None,
        batch_size: int | None = None,
    ) -> None:
        self.session = Session.load(model, options)
        self.inputs = dict(inputs) if inputs else {m.name: m.name for m in self.session.inputs}
        self.outputs = dict(outputs) if outputs else {m.name: m.name for m in self.session.outputs}
        self.batch_size = batch_size

    def __call__(self, batch: Mapping[str, Any]) -> dict[str, Any]:
        if not isinstance(batch, Mapping):
            raise TypeError(
                f"Predictor takes Ray's NumPy batches (a dict of arrays), not "
                f"{type(batch).__name__}; pass batch_format='numpy' to map_batches"
            )
        missing = sorted(set(self.inputs.values()) - set(batch))
        if missing:
            raise KeyError(f"the batch has no column(s) {missing}; it has {sorted(batch)}")
        feeds = {name: np.asarray(batch[column]) for name, column in self.inputs.items()}
        results = run_in_batches(
            self.session, feeds, batch_size=self.batch_size, output_names=list(self.outputs)
        )
        return {**batch, **dict(zip(self.outputs.values(), results, strict=True))}
