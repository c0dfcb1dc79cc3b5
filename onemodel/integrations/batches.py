"""Running a session over more rows than one run should take: slices along the first axis,
one run per slice, outputs joined again as NumPy arrays (what Dask and Ray blocks hold). Every
engine integration runs its blocks this way."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from onemodel.arrays import output_converter
from onemodel.progress import bar
from onemodel.session import Session


def run_in_batches(
    session: Session,
    feeds: Mapping[str, Any],
    *,
    batch_size: int | None = None,
    output_names: Sequence[str] | None = None,
    progress: bool | None = False,
) -> list[Any]:
    """`session.run` over slices of `batch_size` rows of every feed (all rows at once for None),
    with the outputs concatenated along their first axis. `progress` None shows a bar on a
    terminal; batch-aligned outputs only (row i of an output belongs to row i of the inputs)."""
    rows = {len(value) for value in feeds.values()}
    if len(rows) != 1:
        raise ValueError(f"every feed needs the same number of rows; got {sorted(rows)}")
    (count,) = rows
    to_host = output_converter("numpy", feeds, session.kernels.xp)
    if batch_size is None or batch_size >= count:
        return to_host(session.run(output_names, feeds))
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, not {batch_size}")
    starts = range(0, count, batch_size)
    parts = [
        to_host(
            session.run(
                output_names,
                {name: value[start : start + batch_size] for name, value in feeds.items()},
            )
        )
        for start in bar(starts, description="onemodel", unit="batch", show=progress)
    ]
    return [np.concatenate(pieces) for pieces in zip(*parts, strict=True)]
