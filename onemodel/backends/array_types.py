"""Names the array kernels' modules share: where temporaries come from, and the narrow floats
that compute in float32."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import ml_dtypes
import numpy as np

# Where a kernel may take temporary arrays from: (shape, dtype) -> a C-contiguous array.
Scratch = Callable[[Sequence[int], Any], Any]

NARROW_FLOATS = frozenset({np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16)})
