"""onemodel: run ONNX models from Python on NumPy or CuPy, with a bit-exact mode."""

from onemodel.tensors import DType, Layout, Tensor

__version__ = "0.1.0"

__all__ = ["DType", "Layout", "Tensor", "__version__"]
