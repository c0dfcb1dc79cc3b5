"""`onnxruntime.transformers`: the one piece of onnxruntime's transformer tooling that
inference code imports (optimum's ORTModel classes): `io_binding_helper.TypeHelper`."""
