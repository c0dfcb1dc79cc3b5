"""Run a model over a Dask array or DataFrame, block by block, on whatever scheduler is active
(a distributed cluster included); the results are Dask collections like any other.

The model's bytes enter the graph once, as one key that every block depends on, so the scheduler
ships them to each worker once; each worker process compiles one session per model and options
(onemodel/integrations/sessions.py) and reuses it for every block it runs.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import dask
import dask.array as da
import numpy as np
from dask.core import flatten

from onemodel.integrations.batches import run_in_batches
from onemodel.integrations.sessions import cached_session, model_bytes
from onemodel.progress import bar
from onemodel.session import Session, SessionOptions
from onemodel.tensors import numpy_dtype_for_onnx

ModelSource = str | os.PathLike[str] | bytes


class _Model:
    """The model as the graph carries it: one delayed key holding the bytes, and their hash."""

    def __init__(self, model: ModelSource, options: SessionOptions | None) -> None:
        data, self.digest = model_bytes(model)
        self.options = options
        self.data = dask.delayed(data, name=f"onemodel-model-{self.digest[:16]}", pure=True)
        # A session here in the client to learn the model's names and output shapes.
        self.local = Session.load(data, options)

    def input_name(self, name: str | None) -> str:
        return name if name is not None else self.local.inputs[0].name

    def output_names(self, names: Sequence[str] | None) -> list[str]:
        return list(names) if names is not None else [meta.name for meta in self.local.outputs]

    def probe(self, feed: dict[str, np.ndarray], outputs: list[str]) -> list[np.ndarray]:
        """The outputs for one row, to learn their trailing shapes and dtypes."""
        results = run_in_batches(self.local, feed, output_names=outputs)
        for name, result in zip(outputs, results, strict=True):
            if np.ndim(result) == 0 or len(result) != 1:
                raise ValueError(
                    f"output '{name}' is not one row per input row (shape {np.shape(result)} "
                    "for one row); only batch-aligned outputs can be computed block by block"
                )
        return results


def predict_array(
    model: ModelSource,
    array: da.Array,
    *,
    input_name: str | None = None,
    output_name: str | None = None,
    options: SessionOptions | None = None,
    batch_size: int | None = None,
) -> da.Array:
    """One output of a one-input model over `array`, whose first axis is the batch: blocks are
    rows (other axes are joined into one chunk), each run in `batch_size` rows at a time."""
    source = _Model(model, options)
    name = source.input_name(input_name)
    (output,) = source.output_names(None if output_name is None else [output_name])[:1]
    rows = array.rechunk({axis: -1 for axis in range(1, array.ndim)})
    (sample,) = source.probe({name: np.zeros((1, *rows.shape[1:]), rows.dtype)}, [output])
    extra = {}
    if sample.ndim < rows.ndim:
        extra["drop_axis"] = list(range(sample.ndim, rows.ndim))
    elif sample.ndim > rows.ndim:
        extra["new_axis"] = list(range(rows.ndim, sample.ndim))
    return rows.map_blocks(
        _run_block,
        source.data,
        source.digest,
        options,
        name,
        output,
        batch_size,
        chunks=(rows.chunks[0], *((extent,) for extent in sample.shape[1:])),
        dtype=sample.dtype,
        meta=np.empty((0,) * sample.ndim, sample.dtype),
        **extra,
    )


def predict_frame(
    model: ModelSource,
    frame: Any,
    *,
    columns: Sequence[str] | None = None,
    input_name: str | None = None,
    output_names: Sequence[str] | None = None,
    options: SessionOptions | None = None,
    batch_size: int | None = None,
) -> Any:
    """A model whose one input takes a row of features, over a Dask DataFrame partition by
    partition: `columns` (default all) in order are the features; the result has one column per
    output, or `name_0`, `name_1`... for an output with several values per row, and the
    frame's index."""
    import pandas as pd

    source = _Model(model, options)
    name = source.input_name(input_name)
    outputs = source.output_names(output_names)
    columns = list(frame.columns) if columns is None else list(columns)
    declared = next(meta for meta in source.local.inputs if meta.name == name).elem_type
    dtype = np.dtype(np.float32) if declared is None else numpy_dtype_for_onnx(declared)
    samples = source.probe({name: np.zeros((1, len(columns)), dtype)}, outputs)
    meta = _frame(pd, outputs, [sample[:0] for sample in samples], pd.RangeIndex(0))
    return frame.map_partitions(
        _run_partition,
        source.data,
        source.digest,
        options,
        name,
        columns,
        dtype,
        outputs,
        batch_size,
        meta=meta,
    )


def compute(collection: Any, *, progress: bool | None = None) -> Any:
    """`collection.compute()` with a bar over its blocks, on the distributed client when one is
    active, else on the local scheduler. `progress` None shows it only on a terminal."""
    keys = list(flatten(collection.__dask_keys__()))
    client = _active_client()
    with bar(total=len(keys), description="onemodel", unit="block", show=progress) as shown:
        if client is None:
            return _compute_locally(collection, set(keys), shown)
        from distributed import as_completed, futures_of

        persisted = client.persist(collection)
        for _ in as_completed(futures_of(persisted)):
            shown.update(1)
        return persisted.compute()


def _active_client() -> Any:
    try:
        from distributed import default_client

        return default_client()
    except (ImportError, ValueError):  # distributed is not installed, or no client is active
        return None


def _compute_locally(collection: Any, keys: set, shown: Any) -> Any:
    from dask.callbacks import Callback

    def finished(key: Any, *_: Any) -> None:
        if key in keys:
            shown.update(1)

    with Callback(posttask=finished):
        return collection.compute()


def _run_block(
    block: np.ndarray,
    data: bytes,
    digest: str,
    options: SessionOptions | None,
    input_name: str,
    output_name: str,
    batch_size: int | None,
) -> np.ndarray:
    session = cached_session(digest, data, options)
    (result,) = run_in_batches(
        session, {input_name: block}, batch_size=batch_size, output_names=[output_name]
    )
    return np.asarray(result)


def _run_partition(
    partition: Any,
    data: bytes,
    digest: str,
    options: SessionOptions | None,
    input_name: str,
    columns: list[str],
    dtype: np.dtype,
    outputs: list[str],
    batch_size: int | None,
) -> Any:
    import pandas as pd

    session = cached_session(digest, data, options)
    features = partition[columns].to_numpy(dtype=dtype)
    results = run_in_batches(
        session, {input_name: features}, batch_size=batch_size, output_names=outputs
    )
    return _frame(pd, outputs, [np.asarray(result) for result in results], partition.index)


def _frame(pd: Any, outputs: list[str], results: list[np.ndarray], index: Any) -> Any:
    columns = {}
    for name, result in zip(outputs, results, strict=True):
        if result.ndim == 1:
            columns[name] = result
        else:
            flat = result.reshape(len(result), int(np.prod(result.shape[1:])))
            columns.update({f"{name}_{i}": flat[:, i] for i in range(flat.shape[1])})
    return pd.DataFrame(columns, index=index)
