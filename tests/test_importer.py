"""ONNX import: sources, IR contents, external data and its attacks, validation, inlining."""

from __future__ import annotations

import dataclasses
import io
import time
from pathlib import Path

import ml_dtypes
import numpy as np
import onnx
import pytest
from google.protobuf.message import Message
from onnx import AttributeProto, TensorProto, helper, numpy_helper

from onemodel.errors import ErrorKind, SessionError
from onemodel.graph import importer
from onemodel.graph.importer import load_model, model_from_proto
from onemodel.graph.ir import AttributeRef, Graph, Model, ValueType

OPSET = 17


def value(name: str, elem_type: int = TensorProto.FLOAT, shape=("N",)) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem_type, shape)


def make_model(
    nodes,
    inputs=("x",),
    outputs=("y",),
    initializers=(),
    *,
    functions=(),
    opsets=(("", OPSET),),
    ir_version=8,
    sparse_initializers=(),
) -> onnx.ModelProto:
    """A model whose plain-string inputs and outputs are float vectors of length "N"."""
    graph = helper.make_graph(
        list(nodes),
        "main",
        [value(item) if isinstance(item, str) else item for item in inputs],
        [value(item) if isinstance(item, str) else item for item in outputs],
        list(initializers),
        sparse_initializer=list(sparse_initializers),
    )
    return helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid(domain, version) for domain, version in opsets],
        functions=list(functions),
        ir_version=ir_version,
    )


def chain_model() -> onnx.ModelProto:
    """x + w, then Relu: a small valid model with an initializer."""
    weights = numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3), "w")
    return make_model(
        [
            helper.make_node("Add", ["x", "w"], ["s"], name="add"),
            helper.make_node("Relu", ["s"], ["y"], name="relu"),
        ],
        inputs=[value("x", TensorProto.FLOAT, ["N", 3])],
        initializers=[weights],
    )


def import_error(source, **kwargs) -> SessionError:
    """The INVALID_MODEL error importing `source` raises (a ModelProto or a load_model source)."""
    with pytest.raises(SessionError) as caught:
        if isinstance(source, onnx.ModelProto):
            model_from_proto(source, **kwargs)
        else:
            load_model(source, **kwargs)
    assert caught.value.kind is ErrorKind.INVALID_MODEL
    return caught.value


def summary(model: Model) -> tuple:
    """What two imports of the same model must agree on."""
    graph = model.graph
    return (
        [(n.name, n.op_type, n.domain, n.inputs, n.outputs) for n in graph.nodes],
        graph.inputs,
        graph.outputs,
        {
            name: (array.dtype, array.shape, array.tobytes())
            for name, array in graph.initializers.items()
        },
        model.opsets,
    )


def protobuf_objects(root) -> list:
    """Every protobuf message reachable from an IR object (dataclass fields, containers)."""
    found, stack, seen = [], [root], set()
    while stack:
        item = stack.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, Message):
            found.append(item)
        elif dataclasses.is_dataclass(item):
            stack.extend(getattr(item, field.name) for field in dataclasses.fields(item))
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, (list, tuple, set, frozenset)):
            stack.extend(item)
        elif isinstance(item, np.ndarray) and item.dtype == object:
            stack.extend(item.ravel().tolist())
    return found


def save_with_external_data(model: onnx.ModelProto, folder: Path, location="weights.bin") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "model.onnx"
    onnx.save_model(
        model,
        str(path),
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location=location,
        size_threshold=0,
    )
    return path


def set_external_entry(path: Path, key: str, text: str) -> None:
    """Rewrite one external_data entry of the first initializer of the model file at `path`."""
    proto = onnx.load_model(str(path), load_external_data=False)
    tensor = proto.graph.initializer[0]
    entries = {entry.key: entry for entry in tensor.external_data}
    if key in entries:
        entries[key].value = text
    else:
        tensor.external_data.add(key=key, value=text)
    path.write_bytes(proto.SerializeToString())


# --- Sources -----------------------------------------------------------------------------------


def test_path_bytes_and_stream_sources_import_the_same_model(tmp_path):
    proto = chain_model()
    onnx.checker.check_model(proto)
    data = proto.SerializeToString()
    path = tmp_path / "model.onnx"
    path.write_bytes(data)
    expected = summary(load_model(str(path)))
    with path.open("rb") as file:
        from_open_file = load_model(file)
    for source in (path, data, bytearray(data), memoryview(data), io.BytesIO(data)):
        assert summary(load_model(source)) == expected
    assert summary(from_open_file) == expected
    assert summary(model_from_proto(proto)) == expected


def test_unsupported_sources_are_type_errors(tmp_path):
    with pytest.raises(TypeError, match="binary mode"):
        load_model(io.StringIO("text"))
    with pytest.raises(TypeError, match="not int"):
        load_model(42)
    with pytest.raises(FileNotFoundError):
        load_model(tmp_path / "missing.onnx")


def test_model_fields_metadata_and_opsets():
    proto = make_model(
        [helper.make_node("Relu", ["x"], ["y"], domain="ai.onnx")],
        opsets=(("ai.onnx", OPSET), ("com.example", 3)),
    )
    proto.producer_name, proto.producer_version = "tests", "1.2"
    proto.domain, proto.model_version, proto.doc_string = "org.example", 7, "a doc"
    helper.set_model_props(proto, {"author": "me", "license": "MIT"})
    model = model_from_proto(proto)
    assert model.ir_version == 8
    assert (model.producer_name, model.producer_version) == ("tests", "1.2")
    assert (model.domain, model.model_version, model.doc_string) == ("org.example", 7, "a doc")
    assert model.graph_name == model.graph.name == "main"
    assert model.metadata == {"author": "me", "license": "MIT"}
    assert model.opsets == {"": OPSET, "com.example": 3}
    assert model.opset_for("ai.onnx") == model.opset_for("") == OPSET
    assert model.opset_for("com.other") is None
    assert model.graph.nodes[0].domain == ""


# --- Values, types and attributes --------------------------------------------------------------


def test_value_types_keep_symbolic_dims_unknown_ranks_and_nested_types():
    sequence = helper.make_tensor_sequence_value_info("seq", TensorProto.INT64, ["K"])
    optional = helper.make_value_info(
        "opt",
        helper.make_optional_type_proto(helper.make_tensor_type_proto(TensorProto.BFLOAT16, [2])),
    )
    dims_unknown = helper.make_tensor_value_info("u", TensorProto.FLOAT8E4M3FN, [None, "B"])
    proto = make_model(
        [helper.make_node("Identity", ["x"], ["y"])],
        inputs=[value("x", TensorProto.FLOAT, ["N", 3, None]), sequence, optional, dims_unknown],
        outputs=[value("y", TensorProto.FLOAT, None)],
    )
    proto.graph.input.add(name="untyped")
    proto.graph.value_info.append(value("y", TensorProto.FLOAT, ["N", 3, None]))
    graph = model_from_proto(proto).graph
    types = {info.name: info.type for info in graph.inputs}
    assert types["x"] == ValueType("tensor", TensorProto.FLOAT, ("N", 3, None))
    assert types["seq"] == ValueType(
        "sequence", element=ValueType("tensor", TensorProto.INT64, ("K",))
    )
    assert types["opt"] == ValueType(
        "optional", element=ValueType("tensor", TensorProto.BFLOAT16, (2,))
    )
    assert types["u"] == ValueType("tensor", TensorProto.FLOAT8E4M3FN, (None, "B"))
    assert types["untyped"] == ValueType("unknown")
    assert graph.outputs[0].type == ValueType("tensor", TensorProto.FLOAT, None)
    assert graph.value_infos["y"].type.dims == ("N", 3, None)


def test_attributes_become_plain_python_values():
    inner = helper.make_graph([], "inner", [], [value("x")])
    sparse = helper.make_sparse_tensor(
        numpy_helper.from_array(np.array([5, 6], dtype=np.int32), "sparse"),
        numpy_helper.from_array(np.array([1, 3], dtype=np.int64), "indices"),
        [4],
    )
    node = helper.make_node(
        "Custom",
        ["x"],
        ["y"],
        domain="com.example",
        f=1.5,
        i=3,
        s="text",
        raw=b"\xff\xfe",
        t=numpy_helper.from_array(np.array([1, 2], dtype=np.int64)),
        floats=[1.0, 2.5],
        ints=[1, 2],
        strings=["a", "b"],
        g=inner,
        tp=helper.make_tensor_type_proto(TensorProto.FLOAT, ["N"]),
    )
    node.attribute.append(helper.make_attribute("sp", sparse))
    proto = make_model([node], opsets=(("", OPSET), ("com.example", 1)))
    attributes = model_from_proto(proto).graph.nodes[0].attributes
    assert attributes["f"] == 1.5 and attributes["i"] == 3
    assert attributes["s"] == "text" and attributes["raw"] == b"\xff\xfe"
    np.testing.assert_array_equal(attributes["t"], [1, 2])
    assert attributes["t"].dtype == np.int64
    assert attributes["floats"] == [1.0, 2.5] and attributes["ints"] == [1, 2]
    assert attributes["strings"] == ["a", "b"]
    assert isinstance(attributes["g"], Graph) and attributes["g"].outer_names == ("x",)
    assert attributes["tp"] == ValueType("tensor", TensorProto.FLOAT, ("N",))
    np.testing.assert_array_equal(attributes["sp"], [0, 5, 0, 6])
    assert protobuf_objects(attributes) == []


def test_an_attribute_reference_outside_a_function_is_invalid():
    node = helper.make_node("Relu", ["x"], ["y"], name="relu")
    node.attribute.append(helper.make_attribute_ref("alpha", AttributeProto.FLOAT))
    error = import_error(make_model([node]))
    assert error.node == "relu" and "not inside a function" in str(error)


def test_unnamed_and_repeated_node_names_become_unique_and_stable():
    proto = make_model(
        [
            helper.make_node("Relu", ["x"], ["a"]),
            helper.make_node("Relu", ["a"], ["b"], name="Relu_0"),
            helper.make_node("Relu", ["b"], ["c"], name="twin"),
            helper.make_node("Relu", ["c"], ["y"], name="twin"),
        ]
    )
    names = [node.name for node in model_from_proto(proto).graph.nodes]
    assert names == ["Relu_0_1", "Relu_0", "twin", "twin_1"]
    assert [node.name for node in model_from_proto(proto).graph.nodes] == names


# --- Initializers ------------------------------------------------------------------------------


def test_initializers_and_an_initializer_listed_as_an_input():
    default = numpy_helper.from_array(np.array([1.0, 2.0], dtype=np.float32), "bias")
    weights = numpy_helper.from_array(np.array([[1, 2]], dtype=np.int8), "w")
    nodes = [helper.make_node("Add", ["x", "bias"], ["y"])]
    proto = make_model(nodes, inputs=["x", "bias"], initializers=[default, weights])
    graph = model_from_proto(proto).graph
    assert [info.name for info in graph.inputs] == ["x", "bias"]
    assert graph.input_defaults == ("bias",)
    np.testing.assert_array_equal(graph.initializers["bias"], [1.0, 2.0])
    assert graph.initializers["w"].dtype == np.int8
    assert not graph.initializers["w"].flags.writeable


def test_before_ir_version_4_initializers_listed_as_inputs_are_constants():
    default = numpy_helper.from_array(np.array([1.0], dtype=np.float32), "bias")
    nodes = [helper.make_node("Add", ["x", "bias"], ["y"])]
    proto = make_model(nodes, inputs=["x", "bias"], initializers=[default], ir_version=3)
    graph = model_from_proto(proto).graph
    assert [info.name for info in graph.inputs] == ["x"]
    assert graph.input_defaults == ()
    assert "bias" in graph.initializers


@pytest.mark.parametrize(
    "indices",
    [np.array([1, 5], dtype=np.int64), np.array([[0, 1], [1, 2]], dtype=np.int64)],
    ids=["linear", "coordinates"],
)
def test_sparse_initializers_become_dense(indices):
    sparse = helper.make_sparse_tensor(
        numpy_helper.from_array(np.array([7.0, 9.0], dtype=np.float32), "sparse_w"),
        numpy_helper.from_array(indices, "sparse_w_indices"),
        [2, 3],
    )
    proto = make_model(
        [helper.make_node("Add", ["x", "sparse_w"], ["y"])], sparse_initializers=[sparse]
    )
    dense = model_from_proto(proto).graph.initializers["sparse_w"]
    np.testing.assert_array_equal(dense, [[0, 7, 0], [0, 0, 9]])
    assert dense.dtype == np.float32


def test_sparse_indices_outside_the_shape_are_invalid():
    sparse = helper.make_sparse_tensor(
        numpy_helper.from_array(np.array([7.0], dtype=np.float32), "sparse_w"),
        numpy_helper.from_array(np.array([6], dtype=np.int64), "sparse_w_indices"),
        [2, 3],
    )
    proto = make_model(
        [helper.make_node("Add", ["x", "sparse_w"], ["y"])], sparse_initializers=[sparse]
    )
    error = import_error(proto)
    assert error.value == "sparse_w" and "indices" in str(error)


# --- External data -----------------------------------------------------------------------------


def external_data_model() -> onnx.ModelProto:
    """Initializers, a Constant node and a subgraph initializer: every place tensors live."""
    branch_weight = numpy_helper.from_array(np.array([4.0], dtype=np.float32), "branch_w")
    then_branch = helper.make_graph(
        [helper.make_node("Add", ["s", "branch_w"], ["t"])],
        "then",
        [],
        [value("t")],
        [branch_weight],
    )
    else_branch = helper.make_graph(
        [helper.make_node("Neg", ["s"], ["e"])], "else", [], [value("e")]
    )
    constant = numpy_helper.from_array(np.array([0.5, 1.5], dtype=np.float32), "c_value")
    return make_model(
        [
            helper.make_node("Add", ["x", "w"], ["a"]),
            helper.make_node("Constant", [], ["c"], value=constant),
            helper.make_node("Mul", ["a", "c"], ["s"]),
            helper.make_node(
                "If", ["flag"], ["y"], then_branch=then_branch, else_branch=else_branch
            ),
        ],
        inputs=["x", value("flag", TensorProto.BOOL, [])],
        initializers=[numpy_helper.from_array(np.arange(4, dtype=np.float64), "w")],
    )


def test_external_data_is_read_from_the_model_folder(tmp_path):
    path = save_with_external_data(external_data_model(), tmp_path)
    assert (tmp_path / "weights.bin").stat().st_size > 0
    model = load_model(path)
    np.testing.assert_array_equal(model.graph.initializers["w"], np.arange(4, dtype=np.float64))
    constant = next(node for node in model.graph.nodes if node.op_type == "Constant")
    np.testing.assert_array_equal(constant.attributes["value"], [0.5, 1.5])
    if_node = model.graph.nodes[-1]
    np.testing.assert_array_equal(if_node.attributes["then_branch"].initializers["branch_w"], [4.0])
    assert if_node.attributes["then_branch"].outer_names == ("s",)
    assert protobuf_objects(model) == []


@pytest.mark.parametrize("threshold", [1, 1 << 40])
def test_loading_external_weights_reports_progress_past_a_size(tmp_path, monkeypatch, threshold):
    """The bar counts every external byte read; below the size it is never shown."""
    bars = []

    class Recorder:
        def __init__(self, **options):
            self.options, self.done = options, 0
            bars.append(self)

        def update(self, count):
            self.done += count

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return None

    monkeypatch.setattr(importer, "bar", Recorder)
    monkeypatch.setattr(importer, "PROGRESS_MIN_BYTES", threshold)
    path = save_with_external_data(external_data_model(), tmp_path)
    load_model(path)
    (recorder,) = bars
    main_graph_bytes = np.arange(4, dtype=np.float64).nbytes  # the one main-graph initializer
    assert recorder.options["total"] == main_graph_bytes
    assert recorder.done >= main_graph_bytes  # nested graphs' and attributes' bytes count too
    assert recorder.options["show"] is (None if threshold == 1 else False)


def test_external_data_for_bytes_and_streams_needs_base_dir(tmp_path):
    path = save_with_external_data(external_data_model(), tmp_path)
    data = path.read_bytes()
    error = import_error(data)
    assert error.value == "w" and "base_dir" in str(error) and "weights.bin" in str(error)
    expected = summary(load_model(path))
    assert summary(load_model(data, base_dir=tmp_path)) == expected
    assert summary(load_model(io.BytesIO(data), base_dir=str(tmp_path))) == expected
    proto = onnx.load_model(str(path), load_external_data=False)
    serialized = proto.SerializeToString()
    assert summary(model_from_proto(proto, base_dir=tmp_path)) == expected
    assert proto.SerializeToString() == serialized


@pytest.mark.parametrize(
    ("dtype", "values"),
    [
        (ml_dtypes.int4, [1, -2, 3, 0, -8]),
        (ml_dtypes.uint4, [1, 2, 15, 0, 7]),
        (ml_dtypes.float4_e2m1fn, [0.5, -1.0, 6.0, 0.0, 3.0]),
        (ml_dtypes.bfloat16, [1.5, -2.0, 3.0, 0.0, 7.0]),
        (ml_dtypes.float8_e4m3fn, [0.5, -1.0, 6.0, 0.0, 3.0]),
        (np.dtype(np.int32), [1, -2, 3, 0, 1 << 20]),
    ],
    ids=["int4", "uint4", "float4e2m1", "bfloat16", "float8e4m3fn", "int32"],
)
def test_external_data_of_packed_and_narrow_types(tmp_path, dtype, values):
    array = np.array(values, dtype=dtype)
    tensor = numpy_helper.from_array(array, "w")
    path = save_with_external_data(
        make_model([helper.make_node("Identity", ["w"], ["y"])], inputs=(), initializers=[tensor]),
        tmp_path,
    )
    loaded = load_model(path).graph.initializers["w"]
    assert loaded.dtype == np.dtype(dtype).newbyteorder("<") and loaded.shape == (5,)
    np.testing.assert_array_equal(loaded.astype(np.float64), array.astype(np.float64))


def test_external_data_at_an_absolute_location_is_refused(tmp_path):
    path = save_with_external_data(chain_model(), tmp_path / "model")
    secret = tmp_path / "secret.bin"
    secret.write_bytes(bytes(1000))
    set_external_entry(path, "location", str(secret))
    error = import_error(path)
    assert error.value == "w" and "absolute" in str(error) and str(secret) in str(error)


def test_external_data_escaping_the_folder_is_refused(tmp_path):
    path = save_with_external_data(chain_model(), tmp_path / "model")
    (tmp_path / "x").write_bytes(bytes(1000))
    set_external_entry(path, "location", "../x")
    error = import_error(path)
    assert error.value == "w" and "'../x'" in str(error) and "outside" in str(error)


def test_a_dot_dot_that_stays_inside_the_folder_is_allowed(tmp_path):
    path = save_with_external_data(chain_model(), tmp_path)
    (tmp_path / "sub").mkdir()
    set_external_entry(path, "location", "sub/../weights.bin")
    assert load_model(path).graph.initializers["w"].shape == (2, 3)


def test_a_symlink_pointing_outside_the_folder_is_refused(tmp_path):
    path = save_with_external_data(chain_model(), tmp_path / "model")
    outside = tmp_path / "outside.bin"
    outside.write_bytes((tmp_path / "model" / "weights.bin").read_bytes())
    (tmp_path / "model" / "link.bin").symlink_to(outside)
    set_external_entry(path, "location", "link.bin")
    error = import_error(path)
    assert error.value == "w" and "'link.bin'" in str(error) and "outside" in str(error)


@pytest.mark.parametrize("key", ["offset", "length"])
def test_external_data_beyond_the_end_of_its_file_is_refused(tmp_path, key):
    path = save_with_external_data(chain_model(), tmp_path)
    size = (tmp_path / "weights.bin").stat().st_size
    set_external_entry(path, key, str(size + 4))
    error = import_error(path)
    assert error.value == "w" and "past the end" in str(error) and f"({size} bytes)" in str(error)


def test_an_external_length_that_does_not_fit_the_shape_is_refused(tmp_path):
    path = save_with_external_data(chain_model(), tmp_path)
    set_external_entry(path, "length", "8")
    error = import_error(path)
    assert error.value == "w" and "length 8" in str(error) and "24 bytes" in str(error)


def test_a_missing_external_data_file_is_invalid(tmp_path):
    path = save_with_external_data(chain_model(), tmp_path)
    (tmp_path / "weights.bin").unlink()
    error = import_error(path)
    assert error.value == "w" and "weights.bin" in str(error) and "does not exist" in str(error)


# --- Broken files ------------------------------------------------------------------------------


def test_a_truncated_model_file_is_invalid_and_named(tmp_path):
    data = chain_model().SerializeToString()
    path = tmp_path / "half.onnx"
    path.write_bytes(data[: len(data) // 2])
    error = import_error(path)
    assert str(path) in str(error) and "not a valid ONNX model" in str(error)


def test_garbage_empty_and_graphless_models_are_invalid(tmp_path):
    assert "not a valid ONNX model" in str(import_error(b"not an onnx model at all"))
    assert "is empty" in str(import_error(b""))
    empty_file = tmp_path / "empty.onnx"
    empty_file.write_bytes(b"")
    assert str(empty_file) in str(import_error(empty_file))
    graphless = onnx.ModelProto(ir_version=8).SerializeToString()
    assert "has no graph" in str(import_error(graphless))


# --- Graph validation and order ----------------------------------------------------------------


def test_reading_an_undefined_value_is_invalid():
    proto = make_model([helper.make_node("Add", ["x", "nowhere"], ["y"], name="add")])
    error = import_error(proto)
    assert (error.node, error.value) == ("add", "nowhere")
    assert "not an input, initializer, node output" in str(error)


def test_absent_optional_inputs_and_outputs_are_kept():
    proto = make_model(
        [
            helper.make_node("Clip", ["x", "", "hi"], ["y"]),
            helper.make_node("Dropout", ["x"], ["z", ""]),
        ],
        inputs=["x", "hi"],
        outputs=["y", "z"],
    )
    nodes = model_from_proto(proto).graph.nodes
    assert nodes[0].inputs == ("x", "", "hi") and nodes[1].outputs == ("z", "")


def test_a_cycle_is_invalid_and_names_a_node_on_it():
    proto = make_model(
        [
            helper.make_node("Relu", ["x"], ["before"], name="entry"),
            helper.make_node("Add", ["before", "c"], ["a"], name="n1"),
            helper.make_node("Relu", ["a"], ["b"], name="n2"),
            helper.make_node("Relu", ["b"], ["c"], name="n3"),
            helper.make_node("Relu", ["c"], ["y"], name="after"),
        ]
    )
    error = import_error(proto)
    assert error.node in {"n1", "n2", "n3"} and error.value in {"a", "b", "c"}
    assert "cycle" in str(error)


def test_a_node_reading_its_own_output_is_a_cycle():
    proto = make_model([helper.make_node("Add", ["x", "y"], ["y"], name="self")])
    error = import_error(proto)
    assert (error.node, error.value) == ("self", "y")


def test_unsorted_acyclic_nodes_are_sorted_stably():
    proto = make_model(
        [
            helper.make_node("Add", ["a", "b"], ["y"], name="join"),
            helper.make_node("Relu", ["x"], ["a"], name="left"),
            helper.make_node("Neg", ["x"], ["b"], name="right"),
            helper.make_node("Abs", ["x"], ["z"], name="free"),
        ],
        outputs=["y", "z"],
    )
    names = [node.name for node in model_from_proto(proto).graph.nodes]
    assert names == ["left", "right", "join", "free"]


def test_a_value_produced_twice_is_invalid():
    proto = make_model(
        [
            helper.make_node("Relu", ["x"], ["y"], name="first"),
            helper.make_node("Neg", ["x"], ["y"], name="second"),
        ]
    )
    error = import_error(proto)
    assert (error.node, error.value) == ("second", "y") and "'first'" in str(error)


def test_a_node_output_shadowing_an_input_or_initializer_is_invalid():
    shadow_input = make_model([helper.make_node("Relu", ["x"], ["x"], name="again")], outputs=["x"])
    error = import_error(shadow_input)
    assert (error.node, error.value) == ("again", "x") and "input or initializer" in str(error)
    weights = numpy_helper.from_array(np.zeros(2, dtype=np.float32), "w")
    shadow_weights = make_model(
        [
            helper.make_node("Relu", ["x"], ["w"], name="over"),
            helper.make_node("Relu", ["w"], ["y"]),
        ],
        initializers=[weights],
    )
    error = import_error(shadow_weights)
    assert (error.node, error.value) == ("over", "w")


def test_a_graph_output_nobody_produces_is_invalid():
    proto = make_model([helper.make_node("Relu", ["x"], ["y"])], outputs=["y", "ghost"])
    error = import_error(proto)
    assert error.value == "ghost" and "no node produces it" in str(error)


def test_a_graph_output_may_be_an_input_or_initializer():
    weights = numpy_helper.from_array(np.zeros(2, dtype=np.float32), "w")
    proto = make_model([], outputs=["x", "w"], initializers=[weights])
    assert [info.name for info in model_from_proto(proto).graph.outputs] == ["x", "w"]


def test_a_twenty_thousand_node_chain_imports_in_seconds():
    count = 20_000
    names = ["x"] + [f"v{index}" for index in range(1, count)] + ["y"]
    nodes = [helper.make_node("Identity", [names[i]], [names[i + 1]]) for i in range(count)]
    in_order = make_model(nodes).SerializeToString()
    reversed_order = make_model(nodes[::-1]).SerializeToString()
    for data in (in_order, reversed_order):
        start = time.perf_counter()
        graph = load_model(data).graph
        elapsed = time.perf_counter() - start
        assert elapsed < 5.0
        assert len(graph.nodes) == count
        assert graph.nodes[0].inputs == ("x",) and graph.nodes[-1].outputs == ("y",)


# --- Subgraphs ---------------------------------------------------------------------------------


def if_model(then_reads: str, *, producer_last: bool = False) -> onnx.ModelProto:
    then_branch = helper.make_graph(
        [helper.make_node("Add", [then_reads, "x"], ["t"], name="then_add")],
        "then",
        [],
        [value("t")],
    )
    else_branch = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["e"], name="else_id")], "else", [], [value("e")]
    )
    producer = helper.make_node("Relu", ["x"], ["outer"], name="producer")
    branch = helper.make_node(
        "If", ["flag"], ["y"], name="if", then_branch=then_branch, else_branch=else_branch
    )
    return make_model(
        [branch, producer] if producer_last else [producer, branch],
        inputs=["x", value("flag", TensorProto.BOOL, [])],
    )


def test_subgraphs_read_outer_scope_values():
    proto = if_model("outer")
    onnx.checker.check_model(proto)
    graph = model_from_proto(proto).graph
    branch = graph.nodes[1]
    then_graph, else_graph = branch.attributes["then_branch"], branch.attributes["else_branch"]
    assert sorted(graph.name for graph in branch.subgraphs()) == ["else", "then"]
    assert then_graph.outer_names == ("outer", "x") and else_graph.outer_names == ("x",)
    assert then_graph.inputs == () and then_graph.outputs[0].name == "t"
    assert graph.outer_names == ()


def test_a_node_whose_subgraph_reads_a_later_value_is_moved_after_its_producer():
    graph = model_from_proto(if_model("outer", producer_last=True)).graph
    assert [node.name for node in graph.nodes] == ["producer", "if"]


def test_a_subgraph_reading_an_undefined_value_is_invalid():
    error = import_error(if_model("nowhere"))
    assert (error.node, error.value) == ("then_add", "nowhere")
    assert "graph 'then'" in str(error)


# --- Local functions ---------------------------------------------------------------------------


def scale_function() -> onnx.FunctionProto:
    """local.Scale(X) = X * alpha, with alpha an attribute defaulting to 2."""
    constant = helper.make_node("Constant", [], ["a"])
    constant.attribute.append(
        helper.make_attribute_ref("value_float", AttributeProto.FLOAT, ref_attr_name="alpha")
    )
    return helper.make_function(
        "local",
        "Scale",
        ["X"],
        ["Y"],
        [constant, helper.make_node("Mul", ["X", "a"], ["Y"])],
        [helper.make_opsetid("", OPSET)],
        attribute_protos=[helper.make_attribute("alpha", 2.0)],
    )


def function_model(nodes, functions, outputs=("y",)) -> onnx.ModelProto:
    return make_model(
        nodes, outputs=outputs, functions=functions, opsets=(("", OPSET), ("local", 1))
    )


def constants_of(graph: Graph) -> dict[str, object]:
    return {
        node.name: node.attributes.get("value_float")
        for node in graph.nodes
        if node.op_type == "Constant"
    }


def test_a_function_called_twice_is_inlined_with_unique_names_and_bound_attributes():
    proto = function_model(
        [
            helper.make_node("Scale", ["x"], ["h"], name="first", domain="local", alpha=3.0),
            helper.make_node("Scale", ["h"], ["y"], name="second", domain="local"),
        ],
        [scale_function()],
    )
    onnx.checker.check_model(proto)
    graph = model_from_proto(proto).graph
    assert [(n.name, n.op_type, n.inputs, n.outputs) for n in graph.nodes] == [
        ("first/Constant_0", "Constant", (), ("first/a",)),
        ("first/Mul_1", "Mul", ("x", "first/a"), ("h",)),
        ("second/Constant_0", "Constant", (), ("second/a",)),
        ("second/Mul_1", "Mul", ("h", "second/a"), ("y",)),
    ]
    assert constants_of(graph) == {"first/Constant_0": 3.0, "second/Constant_0": 2.0}
    assert protobuf_objects(graph) == []


def test_an_unbound_attribute_reference_without_default_is_dropped():
    function = scale_function()
    del function.attribute_proto[:]
    function.attribute.append("alpha")
    proto = function_model([helper.make_node("Scale", ["x"], ["y"], domain="local")], [function])
    constant = model_from_proto(proto).graph.nodes[0]
    assert constant.op_type == "Constant" and constant.attributes == {}


def outer_function() -> onnx.FunctionProto:
    """local.Outer(X) = local.Scale(X) with alpha = Outer's attribute beta (no default)."""
    inner_call = helper.make_node("Scale", ["X"], ["Y"], domain="local")
    inner_call.attribute.append(
        helper.make_attribute_ref("alpha", AttributeProto.FLOAT, ref_attr_name="beta")
    )
    return helper.make_function(
        "local",
        "Outer",
        ["X"],
        ["Y"],
        [inner_call],
        [helper.make_opsetid("", OPSET), helper.make_opsetid("local", 1)],
        attributes=["beta"],
    )


def test_nested_functions_are_inlined_with_attributes_passed_through():
    proto = function_model(
        [helper.make_node("Outer", ["x"], ["y"], name="o", domain="local", beta=5.0)],
        [outer_function(), scale_function()],
    )
    onnx.checker.check_model(proto)
    graph = model_from_proto(proto).graph
    assert [node.name for node in graph.nodes] == ["o/Scale_0/Constant_0", "o/Scale_0/Mul_1"]
    assert constants_of(graph) == {"o/Scale_0/Constant_0": 5.0}
    assert graph.nodes[1].inputs == ("x", "o/Scale_0/a") and graph.nodes[1].outputs == ("y",)
    assert not any(isinstance(v, AttributeRef) for n in graph.nodes for v in n.attributes.values())


def test_a_passed_on_attribute_the_caller_omits_takes_the_inner_default():
    proto = function_model(
        [helper.make_node("Outer", ["x"], ["y"], name="o", domain="local")],
        [outer_function(), scale_function()],
    )
    assert constants_of(model_from_proto(proto).graph) == {"o/Scale_0/Constant_0": 2.0}


def test_a_missing_optional_actual_input_becomes_absent():
    clip = helper.make_function(
        "local",
        "Clamp",
        ["X", "Low", "High"],
        ["Y"],
        [helper.make_node("Clip", ["X", "Low", "High"], ["Y"])],
        [helper.make_opsetid("", OPSET)],
    )
    proto = function_model(
        [helper.make_node("Clamp", ["x", "", "hi"], ["y"], domain="local")], [clip]
    )
    proto.graph.input.append(value("hi"))
    assert model_from_proto(proto).graph.nodes[0].inputs == ("x", "", "hi")


def test_subgraphs_in_function_bodies_follow_the_renaming():
    then_branch = helper.make_graph(
        [helper.make_node("Identity", ["n"], ["t"])], "then", [], [value("t")]
    )
    else_branch = helper.make_graph(
        [helper.make_node("Identity", ["X"], ["e"])], "else", [], [value("e")]
    )
    choose = helper.make_function(
        "local",
        "Choose",
        ["C", "X"],
        ["Y"],
        [
            helper.make_node("Neg", ["X"], ["n"]),
            helper.make_node("If", ["C"], ["Y"], then_branch=then_branch, else_branch=else_branch),
        ],
        [helper.make_opsetid("", OPSET)],
    )
    proto = function_model(
        [
            helper.make_node("Choose", ["flag", "x"], ["h"], name="c1", domain="local"),
            helper.make_node("Choose", ["flag", "h"], ["y"], name="c2", domain="local"),
        ],
        [choose],
    )
    proto.graph.input.append(value("flag", TensorProto.BOOL, []))
    graph = model_from_proto(proto).graph
    ifs = [node for node in graph.nodes if node.op_type == "If"]
    assert [node.inputs for node in ifs] == [("flag",), ("flag",)]
    assert ifs[0].attributes["then_branch"].nodes[0].inputs == ("c1/n",)
    assert ifs[0].attributes["then_branch"].outer_names == ("c1/n",)
    assert ifs[1].attributes["then_branch"].outer_names == ("c2/n",)
    assert ifs[1].attributes["else_branch"].outer_names == ("h",)


def test_function_calls_inside_subgraphs_are_inlined():
    then_branch = helper.make_graph(
        [helper.make_node("Scale", ["x"], ["t"], name="inner", domain="local", alpha=4.0)],
        "then",
        [],
        [value("t")],
    )
    else_branch = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["e"])], "else", [], [value("e")]
    )
    proto = function_model(
        [helper.make_node("If", ["flag"], ["y"], then_branch=then_branch, else_branch=else_branch)],
        [scale_function()],
    )
    proto.graph.input.append(value("flag", TensorProto.BOOL, []))
    then_graph = model_from_proto(proto).graph.nodes[0].attributes["then_branch"]
    assert [node.op_type for node in then_graph.nodes] == ["Constant", "Mul"]
    assert constants_of(then_graph) == {"inner/Constant_0": 4.0}


def test_a_function_opset_that_conflicts_with_the_model_is_invalid():
    function = scale_function()
    function.opset_import[0].version = OPSET + 1
    proto = function_model([helper.make_node("Scale", ["x"], ["y"], domain="local")], [function])
    error = import_error(proto)
    assert "local:Scale" in str(error) and f"version {OPSET + 1}" in str(error)


def test_function_opsets_are_merged_into_the_model():
    function = scale_function()
    function.opset_import.append(helper.make_opsetid("com.extra", 2))
    proto = function_model([helper.make_node("Scale", ["x"], ["y"], domain="local")], [function])
    assert model_from_proto(proto).opsets == {"": OPSET, "local": 1, "com.extra": 2}


def test_a_recursive_function_is_invalid():
    loop = helper.make_function(
        "local",
        "Loop",
        ["X"],
        ["Y"],
        [helper.make_node("Loop", ["X"], ["Y"], domain="local")],
        [helper.make_opsetid("local", 1)],
    )
    proto = function_model([helper.make_node("Loop", ["x"], ["y"], domain="local")], [loop])
    message = str(import_error(proto))
    assert "local:Loop" in message and "calls itself" in message


def test_a_default_domain_function_does_not_replace_a_standard_operator():
    relu = helper.make_function(
        "",
        "Relu",
        ["X"],
        ["Y"],
        [helper.make_node("Neg", ["X"], ["Y"])],
        [helper.make_opsetid("", OPSET)],
    )
    custom = helper.make_function(
        "",
        "MyNeg",
        ["X"],
        ["Y"],
        [helper.make_node("Neg", ["X"], ["Y"])],
        [helper.make_opsetid("", OPSET)],
    )
    proto = make_model(
        [helper.make_node("Relu", ["x"], ["h"]), helper.make_node("MyNeg", ["h"], ["y"])],
        functions=[relu, custom],
    )
    assert [node.op_type for node in model_from_proto(proto).graph.nodes] == ["Relu", "Neg"]


def test_a_negative_declared_extent_reads_as_unknown_as_onnxruntime_reads_it():
    """PaddlePaddle writes dim_value -1 for unknown extents: in graph inputs and outputs,
    value_info and subgraph signatures the model loads and runs as onnxruntime runs it."""
    ort = pytest.importorskip("onnxruntime")
    from onemodel import Session

    def branch(name: str, op: str) -> onnx.GraphProto:
        return helper.make_graph(
            [helper.make_node(op, ["t"], [f"{name}_out"])], name, [],
            [value(f"{name}_out", shape=[-1, 2])],
        )  # fmt: skip

    nodes = [
        helper.make_node("Add", ["x", "x"], ["t"]),
        helper.make_node("ReduceMax", ["x"], ["flag_value"], keepdims=0),
        helper.make_node("Greater", ["flag_value", "zero"], ["flag"]),
        helper.make_node(
            "If", ["flag"], ["y"], then_branch=branch("then", "Neg"),
            else_branch=branch("else", "Abs"),
        ),
    ]  # fmt: skip
    graph = helper.make_graph(
        nodes, "paddle_like", [value("x", shape=[-1, 2])], [value("y", shape=[-1, -1])],
        [numpy_helper.from_array(np.array(0, np.float32), "zero")],
        value_info=[value("t", shape=[-1, 2])],
    )  # fmt: skip
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    proto.ir_version = 8
    reference = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    session = Session.load(proto.SerializeToString())
    assert session.inputs[0].dims == tuple(reference.get_inputs()[0].shape) == (None, 2)
    assert session.outputs[0].dims == (None, None)  # onnxruntime shows its inferred (None, 2)
    for x in (np.arange(6, dtype=np.float32).reshape(3, 2), -np.ones((1, 2), np.float32)):
        (expected,) = reference.run(None, {"x": x})
        np.testing.assert_array_equal(session.run(None, {"x": x})[0], expected)
