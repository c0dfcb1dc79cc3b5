"""The happy path: `onemodel.load(path).run(array)` with no names, shapes or options."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from onemodel.errors import ErrorKind, SessionError
from onemodel.graph.importer import ModelSource
from onemodel.session import Session, SessionOptions


class Model:
    """A loaded model that maps arrays to arrays by position."""

    def __init__(self, session: Session) -> None:
        self.session = session

    def run(self, inputs: Any) -> Any:
        """One array for a single-input model, or a list of arrays in input order; returns one
        array for a single-output model, else a list."""
        arrays = list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]
        required = [meta.name for meta in self.session.inputs]
        if len(arrays) > len(required):
            raise SessionError(
                ErrorKind.INVALID_INPUT,
                f"the model takes {len(required)} input(s), {len(arrays)} were given",
            )
        results = self.session.run(None, dict(zip(required, arrays, strict=False)))
        return results[0] if len(results) == 1 else results

    @property
    def input_names(self) -> Sequence[str]:
        return [meta.name for meta in self.session.inputs]

    @property
    def output_names(self) -> Sequence[str]:
        return [meta.name for meta in self.session.outputs]

    def close(self) -> None:
        self.session.close()


def load(source: ModelSource, options: SessionOptions | None = None) -> Model:
    """Load a model from a path, bytes or a binary stream, on the best backend available."""
    return Model(Session.load(source, options))
