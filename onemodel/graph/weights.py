"""Weight storage (seed 000 §4 options): float32 weights kept as float16 or bfloat16 bits.

Reduced with seed 002 §10's round-to-nearest-even conversions when the session is made and
widened back to float32 by a Widen step right before they are read, so a run holds at most the
float32 copies its current steps need. Only weights of at least MIN_REDUCED_ELEMENTS elements
are reduced: the memory is in the large matrices and kernels, while small constants (epsilons,
scales, shapes) would lose meaning at 16 bits for next to no saving.
"""

from __future__ import annotations

import enum

import numpy as np

from onemodel.tensors.conversions import float32_to_bfloat16_bits, float32_to_float16_bits

MIN_REDUCED_ELEMENTS = 1024


class WeightStorage(enum.Enum):
    ORIGINAL = "original"
    BINARY16 = "binary16"
    BFLOAT16 = "bfloat16"


# The Widen operator's name for each reduced storage.
WIDEN_FROM = {WeightStorage.BINARY16: "float16", WeightStorage.BFLOAT16: "bfloat16"}


def reduced(array: np.ndarray, storage: WeightStorage) -> np.ndarray | None:
    """The uint16 bits `array` is stored as, or None when it stays as it is."""
    if storage is WeightStorage.ORIGINAL:
        return None
    if array.dtype != np.float32 or array.size < MIN_REDUCED_ELEMENTS:
        return None
    if storage is WeightStorage.BINARY16:
        return float32_to_float16_bits(array)
    return float32_to_bfloat16_bits(array)
