"""The graph runtime: ONNX import, operators, plans, memory planning and sessions."""
