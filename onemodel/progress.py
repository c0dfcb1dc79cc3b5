"""Progress bars for long jobs: tqdm where it is installed, shown only on a terminal."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


class _NoBar:
    """Stands in for a bar where tqdm is not installed or none is to be shown."""

    def __init__(self, iterable: Iterable[Any] | None) -> None:
        self._iterable = iterable if iterable is not None else ()

    def __iter__(self):
        return iter(self._iterable)

    def update(self, count: int = 1) -> None:
        pass

    def close(self) -> None:
        pass

    def __enter__(self) -> _NoBar:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


def bar(
    iterable: Iterable[Any] | None = None,
    *,
    total: int | None = None,
    description: str = "",
    unit: str = "it",
    show: bool | None = None,
    unit_scale: bool = False,
) -> Any:
    """A tqdm bar over `iterable` (or updated by hand); `show` None: only when writing to a
    terminal (tqdm's own rule), True or False to force it. A bar never shown does not import
    tqdm (33 ms of every model load otherwise)."""
    if show is False:
        return _NoBar(iterable)
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return _NoBar(iterable)
    return tqdm(
        iterable,
        total=total,
        desc=description,
        unit=unit,
        unit_scale=unit_scale,
        disable=None if show is None else not show,
    )
