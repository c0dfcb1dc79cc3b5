"""String operators (strings.py), Equal on strings, and the ai.onnx.ml operators (ml.py): the
ONNX backend conformance node cases of these op types, onnxruntime as an oracle where it runs
the op (its known deviations are left out and named in the operators' docstrings), and the
refusals.
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from operator_harness import run_node

from onemodel.errors import ErrorKind, SessionError
from onemodel.onnx_backend import OnemodelBackend

ML = "ai.onnx.ml"
STRING, FLOAT, INT64 = TensorProto.STRING, TensorProto.FLOAT, TensorProto.INT64
RNG = np.random.default_rng(20261130)

# -- the ONNX backend conformance node cases ------------------------------------------------

OP_TYPES = frozenset({
    "StringNormalizer", "StringConcat", "StringSplit", "RegexFullMatch", "TfIdfVectorizer",
    "ArrayFeatureExtractor", "Binarizer", "LabelEncoder", "TreeEnsemble",
})  # fmt: skip
CASE_MODULES = (
    "stringnormalizer", "string_concat", "string_split", "regex_full_match", "tfidfvectorizer",
    "equal", "ai_onnx_ml.array_feature_extractor", "ai_onnx_ml.binarizer",
    "ai_onnx_ml.label_encoder", "ai_onnx_ml.tree_ensemble",
)  # fmt: skip

Case = tuple[onnx.ModelProto, list, list]


def _generated_cases() -> Iterator[tuple[str, Case]]:
    """The cases made in-process by onnx's generators (onnx 1.23 ships no data files)."""
    package = "onnx.backend.test.case.node"
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        for name in CASE_MODULES:
            importlib.import_module(f"{package}.{name}")
    for case in importlib.import_module(package)._NodeTestCases:
        inputs, outputs = case.data_sets[0]
        yield case.name, (case.model, list(inputs), list(outputs))


def _mine(name: str, model: onnx.ModelProto) -> bool:
    (node,) = model.graph.node
    return node.op_type in OP_TYPES or (node.op_type == "Equal" and "string" in name)


CASES = {
    name: case
    for name, case in _generated_cases()
    if "_expanded" not in name and len(case[0].graph.node) == 1 and _mine(name, case[0])
}
EXPECTED_FAILURES: set[str] = set()  # every case passes


def _array(value: object) -> np.ndarray:
    return numpy_helper.to_array(value) if isinstance(value, onnx.TensorProto) else value


def _attribute(value: Any) -> Any:
    """An attribute as the importer gives it: text decoded, tensors as arrays."""
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, onnx.TensorProto):
        return numpy_helper.to_array(value)
    if isinstance(value, list):
        return [_attribute(v) for v in value]
    return value


def assert_same(result: np.ndarray, expected: np.ndarray) -> None:
    assert result.dtype == expected.dtype, (result.dtype, expected.dtype)
    assert result.shape == expected.shape, (result.shape, expected.shape)
    if expected.dtype == object or expected.dtype.kind in "biu":
        np.testing.assert_array_equal(result, expected)
    else:
        np.testing.assert_allclose(
            result.astype(np.float64), expected.astype(np.float64), rtol=1e-3, atol=1e-7
        )


def _canonical(domain: str) -> str:
    return "" if domain == "ai.onnx" else domain


def _run_case(model: onnx.ModelProto, inputs: list, outputs: list) -> None:
    (node,) = model.graph.node
    domain = _canonical(node.domain)
    opset = next(o.version for o in model.opset_import if _canonical(o.domain) == domain)
    given = iter(_array(x) for x in inputs)
    arrays = [np.asarray(next(given)) if name else None for name in node.input]
    attributes = {a.name: _attribute(helper.get_attribute_value(a)) for a in node.attribute}
    results = run_node(
        node.op_type, arrays, attributes, opset=opset, outputs=len(node.output), domain=domain
    )
    for result, expected in zip(results, outputs, strict=True):
        assert_same(result, np.asarray(_array(expected)))


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(n, marks=pytest.mark.xfail(strict=True)) if n in EXPECTED_FAILURES else n
        for n in CASES
    ],
)
def test_conformance(name: str) -> None:
    _run_case(*CASES[name])


def test_every_op_type_has_conformance_cases() -> None:
    covered = {case[0].graph.node[0].op_type for case in CASES.values()}
    assert covered == OP_TYPES | {"Equal"}


# -- helpers ---------------------------------------------------------------------------------


def strings(*values: str) -> np.ndarray:
    result = np.empty(len(values), dtype=object)
    result[:] = values
    return result


def _code(array: np.ndarray) -> int:
    return STRING if array.dtype == object else helper.np_dtype_to_tensor_dtype(array.dtype)


def onnxruntime_outputs(
    op_type: str,
    inputs: list[np.ndarray],
    attributes: dict,
    output_types: list[int],
    *,
    opset: int,
    domain: str = "",
) -> list[np.ndarray]:
    """One node run by onnxruntime (the oracle)."""
    import onnxruntime

    names = [f"in{i}" for i in range(len(inputs))]
    outputs = [f"out{i}" for i in range(len(output_types))]
    typed = zip(names, map(_code, inputs), strict=True)
    results = zip(outputs, output_types, strict=True)
    graph = helper.make_graph(
        [helper.make_node(op_type, names, outputs, domain=domain, **attributes)],
        "oracle",
        [helper.make_tensor_value_info(n, code, None) for n, code in typed],
        [helper.make_tensor_value_info(o, t, None) for o, t in results],
    )
    imports = [helper.make_opsetid("", opset if not domain else 19)]
    if domain:
        imports.append(helper.make_opsetid(domain, opset))
    model = helper.make_model(graph, opset_imports=imports)
    model.ir_version = 10
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    options.log_severity_level = 3
    session = onnxruntime.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    return session.run(None, dict(zip(names, inputs, strict=True)))


def assert_matches_onnxruntime(
    op_type: str,
    inputs: list[np.ndarray],
    attributes: dict,
    output_types: list[int],
    *,
    opset: int,
    domain: str = "",
    rtol: float = 1e-5,
    atol: float = 1e-6,
) -> list[np.ndarray]:
    expected = onnxruntime_outputs(
        op_type, inputs, attributes, output_types, opset=opset, domain=domain
    )
    mine = {k: _attribute(v) for k, v in attributes.items()}
    results = run_node(op_type, inputs, mine, opset=opset, outputs=len(expected), domain=domain)
    for result, wanted in zip(results, expected, strict=True):
        assert result.dtype == wanted.dtype, (result.dtype, wanted.dtype)
        assert result.shape == wanted.shape, (result.shape, wanted.shape)
        if wanted.dtype == object or wanted.dtype.kind in "biu":
            np.testing.assert_array_equal(result, wanted)
        else:
            np.testing.assert_allclose(result, wanted, rtol=rtol, atol=atol)
    return results


def refused(kind: ErrorKind, op_type: str, inputs: list, attributes: dict | None = None,
            **options: Any) -> SessionError:  # fmt: skip
    with pytest.raises(SessionError) as caught:
        run_node(op_type, inputs, attributes, **options)
    assert caught.value.kind is kind, caught.value
    return caught.value


# -- StringNormalizer, StringConcat, StringSplit, RegexFullMatch, Equal ----------------------


@pytest.mark.parametrize("action", ["NONE", "LOWER", "UPPER"])
@pytest.mark.parametrize("sensitive", [0, 1])
@pytest.mark.parametrize("shape", [(5,), (1, 5)])
def test_string_normalizer_matches_onnxruntime(action: str, sensitive: int, shape: tuple) -> None:
    x = strings("Monday", "monday", "MONDAY", "tuesday", "TUESDAY").reshape(shape)
    # onnxruntime builds the locale it is given; "C" exists on every machine (onemodel ignores it)
    attributes = dict(case_change_action=action, is_case_sensitive=sensitive,
                      stopwords=["monday", "TUESDAY"], locale="C")  # fmt: skip
    assert_matches_onnxruntime("StringNormalizer", [x], attributes, [STRING], opset=10)


def test_string_normalizer_gives_one_empty_string_when_all_are_stop_words() -> None:
    attributes = {"stopwords": ["a"]}
    (flat,) = run_node("StringNormalizer", [strings("a", "A")], attributes, opset=10)
    (row,) = run_node("StringNormalizer", [strings("a").reshape(1, 1)], attributes, opset=10)
    assert flat.tolist() == [""] and row.tolist() == [[""]]


def test_string_normalizer_changes_case_one_character_at_a_time() -> None:
    (result,) = run_node(
        "StringNormalizer", [strings("Straße", "éa")], {"case_change_action": "UPPER"}, opset=10
    )
    assert result.tolist() == ["STRAßE", "ÉA"]  # 'ß' has no one-character upper case


def test_string_normalizer_refusals() -> None:
    refused(
        ErrorKind.INVALID_INPUT, "StringNormalizer", [strings("a", "b").reshape(2, 1)], opset=10
    )
    refused(ErrorKind.INVALID_MODEL, "StringNormalizer", [strings("a")],
            {"case_change_action": "TITLE"}, opset=10)  # fmt: skip


@pytest.mark.parametrize(
    ("a", "b"),
    [((2, 1), (3,)), ((), (3,)), ((2, 3), (2, 3)), ((0, 2), (1, 2))],
)
def test_string_concat_matches_onnxruntime(a: tuple, b: tuple) -> None:
    left = strings(*[f"x{i}" for i in range(int(np.prod(a)))]).reshape(a)
    right = strings(*[f"é{i}" for i in range(int(np.prod(b)))]).reshape(b)
    assert_matches_onnxruntime("StringConcat", [left, right], {}, [STRING], opset=20)


def test_string_concat_refuses_shapes_that_do_not_broadcast() -> None:
    refused(ErrorKind.INVALID_INPUT, "StringConcat", [strings("a", "b"), strings("a", "b", "c")],
            opset=20)  # fmt: skip


@pytest.mark.parametrize("delimiter", [None, "", ",", "ab"])
@pytest.mark.parametrize("maxsplit", [None, 0, 1, 2])
def test_string_split_matches_onnxruntime(delimiter: str | None, maxsplit: int | None) -> None:
    x = strings("a,b,,c", " a  b c ", "", "abab", ",", "xabyabz", "no").reshape(7, 1)
    attributes = {}
    if delimiter is not None:
        attributes["delimiter"] = delimiter
    if maxsplit is not None:
        attributes["maxsplit"] = maxsplit
    assert_matches_onnxruntime("StringSplit", [x], attributes, [STRING, INT64], opset=20)


def test_string_split_of_a_scalar_and_of_nothing() -> None:
    substrings, counts = run_node("StringSplit", [np.array("a b", dtype=object)], opset=20,
                                  outputs=2)  # fmt: skip
    assert substrings.tolist() == ["a", "b"] and counts.shape == () and counts == 2
    substrings, counts = run_node("StringSplit", [strings("", "  ")], opset=20, outputs=2)
    assert substrings.shape == (2, 0) and counts.tolist() == [0, 0]


def test_string_split_whitespace_is_ascii_whitespace() -> None:
    (substrings, counts) = run_node("StringSplit", [strings("a\tb\nc\u3000d")], opset=20, outputs=2)
    assert substrings.tolist() == [["a", "b", "c\u3000d"]] and counts.tolist() == [3]


@pytest.mark.parametrize(
    "pattern",
    [r"a\w+", r"[[:alpha:]]+\d", r"\Qa.b\E.*", r"(?i)abc", r"x*\z", r"[^]a]+", r"[]a]+",
     r".{2,3}", r"\bfoo\b", r"\d\s?\w"],
)  # fmt: skip
def test_regex_full_match_matches_onnxruntime(pattern: str) -> None:
    x = strings("abc", "a_1", "ABC", "a.bxx", "a", "]]", "xxx", "é1", "foo", "a]a", "1 a", "٣a")
    assert_matches_onnxruntime("RegexFullMatch", [x.reshape(3, 4)], {"pattern": pattern},
                               [TensorProto.BOOL], opset=20)  # fmt: skip


def test_regex_full_match_refusals() -> None:
    refused(ErrorKind.INVALID_MODEL, "RegexFullMatch", [strings("a")], {"pattern": "(a"}, opset=20)
    refused(ErrorKind.UNSUPPORTED, "RegexFullMatch", [strings("a")], {"pattern": r"\pL"}, opset=20)


def test_equal_compares_strings_with_broadcasting() -> None:
    a, b = strings("a", "b", "c").reshape(3, 1), strings("a", "c")
    (result,) = assert_matches_onnxruntime("Equal", [a, b], {}, [TensorProto.BOOL], opset=19)
    assert result.tolist() == [[True, False], [False, False], [False, True]]
    refused(ErrorKind.INVALID_MODEL, "Equal", [a, b], opset=18)


# -- TfIdfVectorizer -------------------------------------------------------------------------


def random_pool(rng: np.random.Generator, longest: int, vocabulary: int) -> tuple[list, list, int]:
    """A pool of distinct n-grams of lengths 1..longest: (pool, ngram_counts, n-gram count)."""
    pool: list[int] = []
    starts, count = [], 0
    for n in range(1, longest + 1):
        starts.append(len(pool))
        grams = {tuple(rng.integers(0, vocabulary, n).tolist()) for _ in range(4)}
        for gram in grams:
            pool.extend(gram)
        count += len(grams)
    return pool, starts, count


@pytest.mark.parametrize("mode", ["TF", "IDF", "TFIDF"])
@pytest.mark.parametrize("shape", [(12,), (3, 7)])
@pytest.mark.parametrize("kind", ["int32", "int64", "strings"])
def test_tfidf_vectorizer_matches_onnxruntime(mode: str, shape: tuple, kind: str) -> None:
    rng = np.random.default_rng(len(mode) * 7 + len(shape) + len(kind))
    for longest, shortest, skip in ((1, 1, 0), (2, 1, 2), (3, 2, 1)):
        pool, starts, count = random_pool(rng, longest, vocabulary=5)
        attributes: dict[str, Any] = dict(
            mode=mode, min_gram_length=shortest, max_gram_length=longest, max_skip_count=skip,
            ngram_counts=starts, ngram_indexes=rng.permutation(count + 2)[:count].tolist(),
            weights=[float(np.float32(w)) for w in rng.random(count)],
        )  # fmt: skip
        tokens = rng.integers(0, 5, shape)
        if kind == "strings":
            attributes["pool_strings"] = [f"w{v}" for v in pool]
            x = strings(*[f"w{v}" for v in tokens.reshape(-1)]).reshape(shape)
        else:
            attributes["pool_int64s"] = pool
            x = tokens.astype(kind)
        assert_matches_onnxruntime("TfIdfVectorizer", [x], attributes, [FLOAT], opset=9)


def test_tfidf_vectorizer_adds_up_n_grams_sharing_an_output_index() -> None:
    attributes = dict(mode="TF", min_gram_length=1, max_gram_length=2, max_skip_count=1,
                      ngram_counts=[0, 3], ngram_indexes=[0, 0, 2, 3, 6],
                      pool_int64s=[1, 2, 3, 1, 2, 2, 3])  # fmt: skip
    x = np.array([[1, 2, 2, 3]], dtype=np.int64)
    (result,) = assert_matches_onnxruntime("TfIdfVectorizer", [x], attributes, [FLOAT], opset=9)
    assert result.tolist() == [[3, 0, 1, 2, 0, 0, 2]]


def test_tfidf_vectorizer_refusals() -> None:
    base = dict(mode="TF", min_gram_length=1, max_gram_length=2, max_skip_count=0,
                ngram_counts=[0, 2], ngram_indexes=[0, 1, 2], pool_int64s=[1, 2, 1, 2])  # fmt: skip
    x = np.array([1, 2], dtype=np.int64)
    for changes in ({"ngram_counts": [0, 3]}, {"max_gram_length": 3}, {"mode": "BM25"},
                    {"pool_int64s": [1, 1, 1, 2]}, {"ngram_indexes": [0, 1]}):  # fmt: skip
        refused(ErrorKind.INVALID_MODEL, "TfIdfVectorizer", [x], {**base, **changes}, opset=9)
    refused(ErrorKind.INVALID_MODEL, "TfIdfVectorizer", [strings("a")], base, opset=9)
    refused(ErrorKind.INVALID_INPUT, "TfIdfVectorizer", [x.reshape(1, 1, 2)], base, opset=9)


# -- ArrayFeatureExtractor, Binarizer, Normalizer, Scaler, OneHotEncoder, Imputer ------------


@pytest.mark.parametrize(
    ("x", "indices"),
    [
        (np.arange(24.0, dtype=np.float32).reshape(2, 3, 4), [[3, 0]]),
        (np.arange(4.0, dtype=np.float32), [3, 0, 3]),
        (np.arange(6, dtype=np.int32).reshape(2, 3), [2]),
        (strings("a", "b", "c", "d").reshape(2, 2), [1]),
    ],
)
def test_array_feature_extractor_matches_onnxruntime(x: np.ndarray, indices: list) -> None:
    y = np.array(indices, dtype=np.int64)
    assert_matches_onnxruntime("ArrayFeatureExtractor", [x, y], {}, [_code(x)], opset=1, domain=ML)


def test_array_feature_extractor_refuses_indices_outside_the_last_axis() -> None:
    x = np.zeros((2, 3), np.float32)
    for index in (3, -1):
        refused(ErrorKind.INVALID_INPUT, "ArrayFeatureExtractor",
                [x, np.array([index], np.int64)], opset=1, domain=ML)  # fmt: skip


def test_binarizer_matches_onnxruntime_and_maps_nan_to_zero() -> None:
    x = RNG.normal(size=(3, 4)).astype(np.float32)
    assert_matches_onnxruntime("Binarizer", [x], {"threshold": 0.2}, [FLOAT], opset=1, domain=ML)
    (result,) = run_node("Binarizer", [np.array([np.nan, 2, 1])], {"threshold": 1.0}, domain=ML,
                         opset=1)  # fmt: skip
    assert result.dtype == np.float64 and result.tolist() == [0, 1, 0]


@pytest.mark.parametrize("norm", ["MAX", "L1", "L2"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64])
def test_normalizer_matches_onnxruntime(norm: str, dtype: type) -> None:
    x = np.array([[1, -2, 3], [0, 0, 0], [-1, -2, -3]]).astype(dtype)
    assert_matches_onnxruntime("Normalizer", [x], {"norm": norm}, [FLOAT], opset=1, domain=ML)
    assert_matches_onnxruntime("Normalizer", [x[0]], {"norm": norm}, [FLOAT], opset=1, domain=ML)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
def test_scaler_matches_onnxruntime(dtype: type) -> None:
    x = np.array([[1, 2, 3], [4, 5, 6]]).astype(dtype)
    for offset, scale in (([1.0, 2, 3], [2.0, 3, 4]), ([1.0], [0.5])):
        attributes = {"offset": offset, "scale": scale}
        assert_matches_onnxruntime("Scaler", [x], attributes, [FLOAT], opset=1, domain=ML)
    (result,) = run_node("Scaler", [x], {"offset": [1.0], "scale": [2.0, 3, 4]}, domain=ML, opset=1)
    assert result.tolist() == [[0, 3, 8], [6, 12, 20]]  # each of length 1 or F (the spec)
    refused(ErrorKind.INVALID_INPUT, "Scaler", [x], {"scale": [1.0, 2]}, domain=ML, opset=1)


@pytest.mark.parametrize(
    ("x", "attributes"),
    [
        (np.array([[1, 5], [3, 7]], np.int64), {"cats_int64s": [1, 3, 5]}),
        (np.array([1.7, 3.2, -1, np.nan], np.float32), {"cats_int64s": [1, 3, 5, -1]}),
        (np.array([-1.5, 3.9], np.float64), {"cats_int64s": [-1, 3]}),
        (strings("a", "c", "b").reshape(1, 3), {"cats_strings": ["a", "b"]}),
    ],
)
def test_one_hot_encoder_matches_onnxruntime(x: np.ndarray, attributes: dict) -> None:
    assert_matches_onnxruntime("OneHotEncoder", [x], attributes, [FLOAT], opset=1, domain=ML)


def test_one_hot_encoder_with_zeros_0_refuses_an_unknown_category() -> None:
    refused(ErrorKind.INVALID_INPUT, "OneHotEncoder", [strings("a", "c")],
            {"cats_strings": ["a", "b"], "zeros": 0}, domain=ML, opset=1)  # fmt: skip


def test_imputer_matches_onnxruntime() -> None:
    x = np.array([[1.0, np.nan, -2.0], [0.0, 3.0, 0.0]], np.float32)
    for attributes in ({"imputed_value_floats": [9.0, 8, 7], "replaced_value_float": np.nan},
                       {"imputed_value_floats": [9.0], "replaced_value_float": 0.0}):  # fmt: skip
        assert_matches_onnxruntime("Imputer", [x], attributes, [FLOAT], opset=1, domain=ML)
    integers = np.array([[1, 0], [0, 2]], np.int64)
    attributes = {"imputed_value_int64s": [5, 6], "replaced_value_int64": 0}
    assert_matches_onnxruntime("Imputer", [integers], attributes, [INT64], opset=1, domain=ML)
    (result,) = run_node("Imputer", [integers.astype(np.int32)], attributes, domain=ML, opset=1)
    assert result.dtype == np.int32 and result.tolist() == [[1, 6], [5, 2]]
    refused(ErrorKind.INVALID_MODEL, "Imputer", [integers], {"imputed_value_floats": [1.0]},
            domain=ML, opset=1)  # fmt: skip


# -- LabelEncoder ----------------------------------------------------------------------------

WORDS = strings("a", "b", "d", "c", "g")
NUMBERS = np.array([1.5, np.nan, -0.0, 2.5, 7], np.float32)


@pytest.mark.parametrize(
    ("opset", "x", "attributes", "output"),
    [
        (1, WORDS, {"classes_strings": ["a", "b", "c", "a"], "default_int64": 9}, INT64),
        (1, np.array([0, 2, 5, -1], np.int64), {"classes_strings": ["a", "b", "c"]}, STRING),
        (2, WORDS, {"keys_strings": ["a", "b", "c"], "values_strings": ["x", "y", "z"]}, STRING),
        (2, WORDS, {"keys_strings": ["a", "b", "c"], "values_floats": [1.0, 2, 3]}, FLOAT),
        (2, np.array([1, 2, 7, 3, 1], np.int64),
         {"keys_int64s": [1, 2, 1], "values_int64s": [10, 20, 30]}, INT64),
        (2, NUMBERS, {"keys_floats": [1.5, np.nan, 0.0], "values_int64s": [10, 20, 30],
                      "default_int64": 7}, INT64),
        (4, NUMBERS, {"keys_floats": [1.5, np.nan, 0.0], "values_strings": ["p", "q", "r"]},
         STRING),
        (4, NUMBERS, {"keys_floats": [1.5, np.nan, 0.0], "values_floats": [1.0, 2, 3]}, FLOAT),
        (4, np.array([[1, 2], [7, 3]], np.int64),
         {"keys_int64s": [1, 2, 3], "values_strings": ["p", "q", "r"], "default_string": "-"},
         STRING),
    ],
)  # fmt: skip
def test_label_encoder_matches_onnxruntime(
    opset: int, x: np.ndarray, attributes: dict, output: int
) -> None:
    assert_matches_onnxruntime("LabelEncoder", [x], attributes, [output], opset=opset, domain=ML)


def test_label_encoder_4_takes_tensors_and_lets_the_last_repeated_key_win() -> None:
    keys = numpy_helper.from_array(np.array([1, 3, 1], np.int32), "keys")
    values = numpy_helper.from_array(np.array([5.0, 6, 7]), "values")
    attributes = {"keys_tensor": _attribute(keys), "values_tensor": _attribute(values)}
    x = np.array([1, 2, 3], np.int32)
    (result,) = run_node("LabelEncoder", [x], attributes, opset=4, domain=ML)
    assert result.dtype == np.float64 and result.tolist() == [7, -0.0, 6]
    assert np.signbit(result[1])  # the default of float values is -0.0
    default = {"default_tensor": np.array([-9.0])}
    (result,) = run_node("LabelEncoder", [x], {**attributes, **default}, opset=4, domain=ML)
    assert result.tolist() == [7, -9, 6]


def test_label_encoder_refusals() -> None:
    attributes = {"keys_strings": ["a"], "values_int64s": [1]}
    refused(ErrorKind.INVALID_MODEL, "LabelEncoder", [np.array([1], np.int64)], attributes,
            opset=2, domain=ML)  # fmt: skip
    refused(ErrorKind.INVALID_MODEL, "LabelEncoder", [WORDS], {**attributes, "keys_int64s": [1]},
            opset=2, domain=ML)  # fmt: skip
    refused(ErrorKind.INVALID_MODEL, "LabelEncoder", [WORDS], {**attributes, "values_int64s": []},
            opset=2, domain=ML)  # fmt: skip


# -- tree ensembles --------------------------------------------------------------------------

MODES = ("BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ")


def random_forest(rng: np.random.Generator, trees: int, features: int, targets: int, *,
                  modes: tuple = MODES, votes_per_leaf: int = 1,
                  missing: bool = True) -> tuple[dict, list]:  # fmt: skip
    """nodes_* attributes of TreeEnsembleRegressor/Classifier, and the leaves' votes as
    (tree, node, target, weight); some trees are a single leaf."""
    nodes: dict[str, list] = {
        key: []
        for key in ("nodes_treeids", "nodes_nodeids", "nodes_featureids", "nodes_modes",
                    "nodes_values", "nodes_truenodeids", "nodes_falsenodeids",
                    "nodes_missing_value_tracks_true")
    }  # fmt: skip
    votes = []
    for tree in range(trees):
        counter = iter(range(1 << 20))

        def grow(depth: int, tree: int = tree, counter: Iterator = counter) -> int:
            node = next(counter)
            row = {"nodes_treeids": tree, "nodes_nodeids": node, "nodes_featureids": 0,
                   "nodes_modes": "LEAF", "nodes_values": 0.0, "nodes_truenodeids": 0,
                   "nodes_falsenodeids": 0, "nodes_missing_value_tracks_true": 0}  # fmt: skip
            index = len(nodes["nodes_treeids"])
            for key, value in row.items():
                nodes[key].append(value)
            if depth == 0 or rng.random() < 0.15:
                for _ in range(votes_per_leaf):
                    weight = float(np.float32(rng.normal()))
                    votes.append((tree, node, int(rng.integers(targets)), weight))
                return node
            nodes["nodes_modes"][index] = str(rng.choice(modes))
            nodes["nodes_featureids"][index] = int(rng.integers(features))
            nodes["nodes_values"][index] = float(np.float32(np.round(rng.normal(), 1)))
            nodes["nodes_missing_value_tracks_true"][index] = int(missing and rng.integers(2))
            nodes["nodes_truenodeids"][index] = grow(depth - 1)
            nodes["nodes_falsenodeids"][index] = grow(depth - 1)
            return node

        grow(4)
    return nodes, votes


def with_votes(nodes: dict, votes: list, prefix: str) -> dict:
    columns = zip(*votes, strict=True) if votes else ([], [], [], [])
    names = (f"{prefix}_treeids", f"{prefix}_nodeids", f"{prefix}_ids", f"{prefix}_weights")
    return {**nodes, **{name: list(column) for name, column in zip(names, columns, strict=True)}}


_MODE_CODES = {mode: code for code, mode in enumerate(MODES)}


def as_tree_ensemble(nodes: dict, votes: list, targets: int, dtype: type) -> dict:
    """The TreeEnsemble (ai.onnx.ml 5) attributes of a forest with one vote per leaf."""
    ids = zip(nodes["nodes_treeids"], nodes["nodes_nodeids"], strict=True)
    where = {key: i for i, key in enumerate(ids)}
    leaves = [i for i, m in enumerate(nodes["nodes_modes"]) if m == "LEAF"]
    branches = [i for i, m in enumerate(nodes["nodes_modes"]) if m != "LEAF"]
    leaf_number = {i: j for j, i in enumerate(leaves)}
    branch_number = {i: j for j, i in enumerate(branches)}
    vote = {(tree, node): (target, weight) for tree, node, target, weight in votes}
    rows: list[dict] = []

    def child(i: int, side: str) -> tuple[int, int]:
        j = where[nodes["nodes_treeids"][i], nodes[side][i]]
        return (leaf_number[j], 1) if j in leaf_number else (branch_number[j], 0)

    for i in branches:
        rows.append({"mode": _MODE_CODES[nodes["nodes_modes"][i]],
                     "feature": nodes["nodes_featureids"][i], "split": nodes["nodes_values"][i],
                     "true": child(i, "nodes_truenodeids"), "false": child(i, "nodes_falsenodeids"),
                     "missing": nodes["nodes_missing_value_tracks_true"][i]})  # fmt: skip
    roots = []
    for tree in sorted(set(nodes["nodes_treeids"])):
        root = where[tree, 0]
        if root in branch_number:
            roots.append(branch_number[root])
        else:  # a tree that is one leaf: a node whose branches both lead to it
            roots.append(len(rows))
            single = (leaf_number[root], 1)
            rows.append({"mode": 0, "feature": 0, "split": 0.0, "true": single,
                         "false": single, "missing": 0})  # fmt: skip

    def tensor(name: str, values: list, kind: Any) -> TensorProto:
        return numpy_helper.from_array(np.array(values, dtype=kind), name)

    return dict(
        n_targets=targets, tree_roots=roots,
        nodes_modes=tensor("nodes_modes", [r["mode"] for r in rows], np.uint8),
        nodes_featureids=[r["feature"] for r in rows],
        nodes_splits=tensor("nodes_splits", [r["split"] for r in rows], dtype),
        nodes_truenodeids=[r["true"][0] for r in rows],
        nodes_trueleafs=[r["true"][1] for r in rows],
        nodes_falsenodeids=[r["false"][0] for r in rows],
        nodes_falseleafs=[r["false"][1] for r in rows],
        nodes_missing_value_tracks_true=[r["missing"] for r in rows],
        leaf_targetids=[vote[nodes["nodes_treeids"][i], nodes["nodes_nodeids"][i]][0]
                        for i in leaves],
        leaf_weights=tensor("leaf_weights", [vote[nodes["nodes_treeids"][i],
                                                  nodes["nodes_nodeids"][i]][1]
                                             for i in leaves], dtype),
    )  # fmt: skip


def features_with_nan(rows: int, columns: int, dtype: type = np.float32) -> np.ndarray:
    x = np.round(RNG.normal(size=(rows, columns)), 1).astype(dtype)  # ties with the splits
    x[0, 0] = x[3, 2] = np.nan
    return x


@pytest.mark.parametrize("aggregate", [0, 1, 2, 3])
@pytest.mark.parametrize("targets", [1, 3])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_tree_ensemble_matches_onnxruntime(aggregate: int, targets: int, dtype: type) -> None:
    rng = np.random.default_rng(aggregate * 10 + targets)
    x = features_with_nan(20, 4, dtype)
    # onnxruntime swaps SOFTMAX (1) and LOGISTIC (2) (see below), and with one target it
    # applies PROBIT alone
    for transform in (0, 3, 4) if targets > 1 else (0, 4):
        nodes, votes = random_forest(rng, 6, 4, targets)
        if transform == 4:  # PROBIT wants scores in (0, 1)
            votes = [(t, n, c, w * 0.05 + 0.5 / 6) for t, n, c, w in votes]
        attributes = as_tree_ensemble(nodes, votes, targets, dtype)
        attributes.update(aggregate_function=aggregate, post_transform=transform)
        code = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
        # both compute PROBIT's approximation in float32, which cancels near 0.5
        atol = 1e-4 if transform == 4 else 1e-5
        assert_matches_onnxruntime("TreeEnsemble", [x], attributes, [code], opset=5, domain=ML,
                                   rtol=1e-4, atol=atol)  # fmt: skip


def test_tree_ensemble_numbers_softmax_1_and_logistic_2_as_the_spec() -> None:
    nodes, votes = random_forest(np.random.default_rng(1), 4, 3, 3)
    attributes = {
        k: _attribute(v) for k, v in as_tree_ensemble(nodes, votes, 3, np.float32).items()
    }
    x = features_with_nan(8, 3)
    (raw,) = run_node("TreeEnsemble", [x], attributes, opset=5, domain=ML)
    (soft,) = run_node("TreeEnsemble", [x], {**attributes, "post_transform": 1}, opset=5, domain=ML)
    (logit,) = run_node(
        "TreeEnsemble", [x], {**attributes, "post_transform": 2}, opset=5, domain=ML
    )
    e = np.exp(raw - raw.max(axis=1, keepdims=True))
    np.testing.assert_allclose(soft, e / e.sum(axis=1, keepdims=True), rtol=1e-6)
    np.testing.assert_allclose(logit, 1 / (1 + np.exp(-raw)), rtol=1e-6)


def test_tree_ensemble_set_membership_and_a_single_leaf_tree() -> None:
    def tensor(values: list, kind: Any) -> np.ndarray:
        return np.array(values, dtype=kind)

    attributes = dict(
        n_targets=2, tree_roots=[0, 1], aggregate_function=1,
        nodes_modes=tensor([6, 0], np.uint8), nodes_featureids=[0, 0],
        nodes_splits=tensor([0, 0], np.float32), nodes_truenodeids=[0, 2],
        nodes_trueleafs=[1, 1], nodes_falsenodeids=[1, 2], nodes_falseleafs=[1, 1],
        membership_values=tensor([1, 3, np.nan], np.float32),
        leaf_targetids=[0, 1, 1], leaf_weights=tensor([10, 20, 5], np.float32),
    )  # fmt: skip
    x = np.array([[1.0], [2.0], [3.0], [np.nan]], np.float32)
    (result,) = run_node("TreeEnsemble", [x], attributes, opset=5, domain=ML)
    assert result.tolist() == [[10, 5], [0, 25], [10, 5], [0, 25]]


def test_tree_ensemble_refusals() -> None:
    attributes = dict(
        n_targets=1, tree_roots=[0], nodes_modes=np.array([0, 0], np.uint8),
        nodes_featureids=[0, 1], nodes_splits=np.array([0, 0], np.float32),
        nodes_truenodeids=[1, 0], nodes_trueleafs=[0, 0], nodes_falsenodeids=[0, 0],
        nodes_falseleafs=[1, 1], leaf_targetids=[0], leaf_weights=np.array([1], np.float32),
    )  # fmt: skip
    x = np.zeros((2, 2), np.float32)
    refused(ErrorKind.INVALID_MODEL, "TreeEnsemble", [x], attributes, opset=5, domain=ML)  # cycle
    acyclic = {**attributes, "nodes_trueleafs": [0, 1]}
    run_node("TreeEnsemble", [x], acyclic, opset=5, domain=ML)
    refused(ErrorKind.INVALID_INPUT, "TreeEnsemble", [x[:, :1]], acyclic, opset=5, domain=ML)
    refused(ErrorKind.INVALID_MODEL, "TreeEnsemble", [x], {**acyclic, "leaf_targetids": [1]},
            opset=5, domain=ML)  # fmt: skip


@pytest.mark.parametrize("aggregate", ["SUM", "AVERAGE", "MIN", "MAX"])
@pytest.mark.parametrize("transform", ["NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO", "PROBIT"])
@pytest.mark.parametrize("targets", [1, 3])
def test_tree_ensemble_regressor_matches_onnxruntime(
    aggregate: str, transform: str, targets: int
) -> None:
    rng = np.random.default_rng(len(aggregate) * 100 + len(transform) * 10 + targets)
    # onnxruntime takes only the first vote of a leaf when there is one target
    nodes, votes = random_forest(rng, 5, 4, targets, votes_per_leaf=1 if targets == 1 else 2)
    if transform == "PROBIT":
        votes = [(t, n, c, w * 0.05 + 0.1) for t, n, c, w in votes]
    attributes = with_votes(nodes, votes, "target")
    attributes.update(n_targets=targets, aggregate_function=aggregate, post_transform=transform,
                      base_values=[0.25] * targets)  # fmt: skip
    assert_matches_onnxruntime("TreeEnsembleRegressor", [features_with_nan(20, 4)], attributes,
                               [FLOAT], opset=3, domain=ML, rtol=1e-4, atol=1e-5)  # fmt: skip


def test_tree_ensemble_regressor_takes_double_thresholds_and_integer_inputs() -> None:
    nodes, votes = random_forest(np.random.default_rng(5), 4, 3, 1)
    attributes = {**with_votes(nodes, votes, "target"), "n_targets": 1}
    values = attributes.pop("nodes_values")
    attributes["nodes_values_as_tensor"] = numpy_helper.from_array(np.array(values), "values")
    x = np.round(RNG.normal(size=(10, 3)), 1)
    assert_matches_onnxruntime("TreeEnsembleRegressor", [x], attributes, [FLOAT], opset=3,
                               domain=ML, rtol=1e-5)  # fmt: skip
    (floats,) = run_node("TreeEnsembleRegressor", [x.round()], {**_attributes(attributes)},
                         opset=3, domain=ML)  # fmt: skip
    (ints,) = run_node("TreeEnsembleRegressor", [x.round().astype(np.int64)],
                       _attributes(attributes), opset=3, domain=ML)  # fmt: skip
    np.testing.assert_array_equal(floats, ints)


def _attributes(attributes: dict) -> dict:
    return {k: _attribute(v) for k, v in attributes.items()}


@pytest.mark.parametrize("classes", [3, 5])
@pytest.mark.parametrize("transform", ["NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO"])
@pytest.mark.parametrize("labels", ["ints", "strings"])
def test_tree_ensemble_classifier_matches_onnxruntime(classes: int, transform: str,
                                                      labels: str) -> None:  # fmt: skip
    rng = np.random.default_rng(classes * 10 + len(transform) + len(labels))
    for base in (False, True):
        nodes, votes = random_forest(rng, 6, 4, classes, votes_per_leaf=3)
        attributes = with_votes(nodes, votes, "class")
        attributes["post_transform"] = transform
        if labels == "ints":
            attributes["classlabels_int64s"] = list(range(10, 10 + classes))
        else:
            attributes["classlabels_strings"] = [f"class {i}" for i in range(classes)]
        if base:
            attributes["base_values"] = [float(np.float32(b)) for b in rng.normal(size=classes)]
        assert_matches_onnxruntime(
            "TreeEnsembleClassifier", [features_with_nan(30, 4)], attributes,
            [INT64 if labels == "ints" else STRING, FLOAT], opset=3, domain=ML, rtol=1e-4,
            atol=1e-5,
        )  # fmt: skip


@pytest.mark.parametrize("voted", [0, 1])
@pytest.mark.parametrize("weights", [[0.3, 0.8], [-1.0, 2.0]])
@pytest.mark.parametrize("transform", ["NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO", "PROBIT"])
@pytest.mark.parametrize("base", [None, [0.25]])
def test_binary_tree_classifier_voting_for_one_class_matches_onnxruntime(
    voted: int, weights: list, transform: str, base: list | None
) -> None:
    """Converters write binary models as votes for one class; onnxruntime's reading is the
    de facto definition."""
    attributes = dict(
        nodes_treeids=[0, 0, 0], nodes_nodeids=[0, 1, 2], nodes_featureids=[0, 0, 0],
        nodes_modes=["BRANCH_LEQ", "LEAF", "LEAF"], nodes_values=[0.5, 0, 0],
        nodes_truenodeids=[1, 0, 0], nodes_falsenodeids=[2, 0, 0], class_treeids=[0, 0],
        class_nodeids=[1, 2], class_ids=[voted, voted], class_weights=weights,
        post_transform=transform, classlabels_strings=["no", "yes"],
    )  # fmt: skip
    if base:
        attributes["base_values"] = base
    x = np.array([[0.0], [1.0], [2.0]], np.float32)
    expected = onnxruntime_outputs("TreeEnsembleClassifier", [x], attributes, [STRING, FLOAT],
                                   opset=3, domain=ML)  # fmt: skip
    labels, scores = run_node("TreeEnsembleClassifier", [x], attributes, opset=3, domain=ML,
                              outputs=2)  # fmt: skip
    np.testing.assert_array_equal(labels, expected[0])
    # with PROBIT onnxruntime writes the first column alone when the first class is voted for
    columns = slice(0, 1) if transform == "PROBIT" and voted == 0 else slice(None)
    np.testing.assert_allclose(scores[:, columns], expected[1][:, columns], rtol=1e-5)


def test_binary_tree_classifier_voting_for_both_classes_takes_the_top_label() -> None:
    """onnxruntime 1.32 gives labels 1 / 0 by the sign of the second score here."""
    attributes = dict(
        nodes_treeids=[0, 0, 0], nodes_nodeids=[0, 1, 2], nodes_featureids=[0, 0, 0],
        nodes_modes=["BRANCH_LEQ", "LEAF", "LEAF"], nodes_values=[0.5, 0, 0],
        nodes_truenodeids=[1, 0, 0], nodes_falsenodeids=[2, 0, 0],
        class_treeids=[0, 0, 0, 0], class_nodeids=[1, 1, 2, 2], class_ids=[0, 1, 0, 1],
        class_weights=[0.8, 0.2, 0.3, 0.7], classlabels_int64s=[5, 9],
    )  # fmt: skip
    labels, scores = run_node("TreeEnsembleClassifier", [np.array([[0.0], [1.0]], np.float32)],
                              attributes, opset=3, domain=ML, outputs=2)  # fmt: skip
    assert labels.tolist() == [5, 9]
    np.testing.assert_allclose(scores, [[0.8, 0.2], [0.3, 0.7]], rtol=1e-6)


# -- linear models ---------------------------------------------------------------------------


@pytest.mark.parametrize("classes", [1, 3])
@pytest.mark.parametrize("transform", ["NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO"])
@pytest.mark.parametrize("labels", ["ints", "strings"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_linear_classifier_matches_onnxruntime(
    classes: int, transform: str, labels: str, dtype: type
) -> None:
    rng = np.random.default_rng(classes + len(transform) + len(labels))
    count = 2 if classes == 1 else classes
    attributes: dict[str, Any] = dict(
        coefficients=[float(np.float32(v)) for v in rng.normal(size=classes * 3)],
        intercepts=[float(np.float32(v)) for v in rng.normal(size=classes)],
        post_transform=transform,
    )
    if labels == "ints":
        attributes["classlabels_ints"] = list(range(5, 5 + count))
    else:
        attributes["classlabels_strings"] = [f"c{i}" for i in range(count)]
    x = rng.normal(size=(10, 3)).astype(dtype)
    assert_matches_onnxruntime("LinearClassifier", [x], attributes,
                               [INT64 if labels == "ints" else STRING, FLOAT], opset=1,
                               domain=ML, rtol=1e-5)  # fmt: skip


@pytest.mark.parametrize("targets", [1, 2])
@pytest.mark.parametrize("transform", ["NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO", "PROBIT"])
def test_linear_regressor_matches_onnxruntime(targets: int, transform: str) -> None:
    rng = np.random.default_rng(targets * 10 + len(transform))
    coefficients = [float(np.float32(v)) for v in rng.normal(size=targets * 3) * 0.1]
    attributes = dict(coefficients=coefficients, intercepts=[0.4] * targets, targets=targets,
                      post_transform=transform)  # fmt: skip
    x = rng.normal(size=(6, 3)).astype(np.float32) * 0.1
    assert_matches_onnxruntime("LinearRegressor", [x], attributes, [FLOAT], opset=1, domain=ML,
                               rtol=1e-5)  # fmt: skip
    assert_matches_onnxruntime("LinearRegressor", [x[0]], attributes, [FLOAT], opset=1, domain=ML,
                               rtol=1e-5)  # fmt: skip


def test_linear_models_refuse_mismatched_coefficients() -> None:
    x = np.zeros((2, 3), np.float32)
    refused(ErrorKind.INVALID_INPUT, "LinearRegressor", [x], {"coefficients": [1.0, 2]},
            opset=1, domain=ML)  # fmt: skip
    refused(ErrorKind.INVALID_MODEL, "LinearClassifier", [x],
            {"coefficients": [1.0, 2, 3], "intercepts": [0.0], "classlabels_ints": [1, 2, 3]},
            opset=1, domain=ML)  # fmt: skip


# -- whole models ----------------------------------------------------------------------------


def test_a_scaler_and_tree_classifier_pipeline_with_string_labels_runs_in_a_session() -> None:
    nodes, votes = random_forest(np.random.default_rng(9), 5, 3, 3, votes_per_leaf=3)
    attributes = with_votes(nodes, votes, "class")
    attributes.update(classlabels_strings=["cat", "dog", "eel"], post_transform="SOFTMAX")
    graph = helper.make_graph(
        [
            helper.make_node("Scaler", ["x"], ["scaled"], domain=ML, offset=[1.0], scale=[2.0]),
            helper.make_node("TreeEnsembleClassifier", ["scaled"], ["label", "probabilities"],
                             domain=ML, **attributes),
            helper.make_node("LabelEncoder", ["label"], ["code"], domain=ML,
                             keys_strings=["cat", "dog", "eel"], values_int64s=[1, 2, 3]),
        ],
        "pipeline",
        [helper.make_tensor_value_info("x", FLOAT, ["N", 3])],
        [helper.make_tensor_value_info("label", STRING, ["N"]),
         helper.make_tensor_value_info("probabilities", FLOAT, ["N", 3]),
         helper.make_tensor_value_info("code", INT64, ["N"])],
    )  # fmt: skip
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 19), helper.make_opsetid(ML, 3)]
    )
    model.ir_version = 10
    x = RNG.normal(size=(7, 3)).astype(np.float32)
    label, probabilities, code = OnemodelBackend.run_model(model, [x])
    scaled = (x - 1) * 2
    expected = onnxruntime_outputs("TreeEnsembleClassifier", [scaled], attributes,
                                   [STRING, FLOAT], opset=3, domain=ML)  # fmt: skip
    np.testing.assert_array_equal(label, expected[0])
    np.testing.assert_allclose(probabilities, expected[1], rtol=1e-5)
    assert code.tolist() == [{"cat": 1, "dog": 2, "eel": 3}[s] for s in label]
