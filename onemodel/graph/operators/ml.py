"""Operators of the ai.onnx.ml domain: ArrayFeatureExtractor, Binarizer, LabelEncoder, the tree
ensembles (TreeEnsemble, and the older TreeEnsembleRegressor and TreeEnsembleClassifier that
converters such as skl2onnx still write), LinearClassifier, LinearRegressor, Normalizer, Scaler,
OneHotEncoder, Imputer, SVMClassifier, SVMRegressor and ZipMap (whose sequence of maps is a
Python list of dicts). DictVectorizer and CastMap, which take maps, are not written.

Scores are computed in float64 and rounded once into the output type, where onnxruntime keeps
float32 accumulators: results agree to float32 rounding. Where the spec leaves a choice the
behaviour follows onnxruntime, unless a class's docstring says otherwise. String labels and
string tensors live on the host (NumPy object arrays) whatever the backend.

Every operator here has an exact kernel (docs/exact-mode.md's ai.onnx.ml rows): the same steps
from exactly widened inputs, with the products of exact_products, the forests' order-free sums
and the post transforms of onemodel/backends/exact_ml.py (PROBIT there is the normal quantile,
not onnxruntime's float32 approximation that fast mode follows).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from onemodel.backends.exact_arrays import exp64, ordered_sum
from onemodel.backends.exact_elementary import pow64, tanh64
from onemodel.backends.exact_ml import (
    coupled_probabilities,
    exact_sums,
    logistic64,
    probit64,
    softmax64,
    summable,
)
from onemodel.backends.ieee_float32 import store, widen
from onemodel.graph.onnx_proto import TensorProto
from onemodel.graph.operators.base import (
    Array,
    InferContext,
    NodeInfo,
    OpDef,
    Operator,
    RunContext,
    TensorSpec,
)
from onemodel.graph.operators.exact_products import working_product
from onemodel.graph.operators.strings import STRING, fill_from_host, string_array
from onemodel.tensors import DType, numpy_dtype_for_onnx, onnx_code_for_numpy, onnx_name

ML = "ai.onnx.ml"
# The numeric inputs most ai.onnx.ml operators take (they compute in floating point).
NUMBERS = frozenset({DType.FLOAT, DType.DOUBLE, DType.INT64, DType.INT32})


def host(ctx: RunContext, array: Array) -> np.ndarray:
    """A NumPy view or copy of an input, for the parts computed with Python objects."""
    return array if array.dtype == object else np.asarray(ctx.kernels.memory.to_host(array))


def rows_of(node: NodeInfo, shape: tuple[int, ...], value: str) -> tuple[int, int]:
    """[N, F] of a feature input: a 1-D input is one row, as onnxruntime reads it."""
    if len(shape) == 1:
        return 1, shape[0]
    if len(shape) == 2:
        return shape
    raise node.bad_input(
        f"{node.op_type} takes a [N, F] or [F] input, got shape {list(shape)}", value
    )


# -- score transforms ------------------------------------------------------------------------


def logistic(xp: Any, v: Array) -> Array:
    """1 / (1 + e^-v), written so that e^x never overflows."""
    e = xp.exp(-xp.abs(v))
    return xp.where(v < 0, e / (1 + e), 1 / (1 + e))


def softmax(xp: Any, v: Array) -> Array:
    e = xp.exp(v - v.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def softmax_zero(xp: Any, v: Array) -> Array:
    """Softmax over the non-zero scores; zero scores stay zero (|v| <= 1e-7 counts as zero,
    as in onnxruntime)."""
    zero = xp.abs(v) <= 1e-7
    e = xp.where(zero, 0.0, xp.exp(v - v.max(axis=-1, keepdims=True)))
    with np.errstate(invalid="ignore", divide="ignore"):
        return e / e.sum(axis=-1, keepdims=True)


def probit(xp: Any, v: Array) -> Array:
    """sqrt(2) * erfinv(2v - 1) with the approximation of erfinv onnxruntime uses (Winitzki's,
    a = 0.147; relative error about 2e-3), in float32 as there: the approximation is steep
    near 0 and 1, where float64 arithmetic would give visibly different scores."""
    f32 = xp.float32
    y = 2 * v.astype(f32) - f32(1)
    with np.errstate(invalid="ignore", divide="ignore"):
        log = xp.log((f32(1) - y) * (f32(1) + y))
        first = f32(2 / (np.float32(math.pi) * np.float32(0.147))) + f32(0.5) * log
        root = xp.sqrt(xp.sqrt(first * first - f32(f32(1) / f32(0.147)) * log) - first)
    return f32(math.sqrt(2)) * xp.where(y < 0, -root, root)


POST_TRANSFORMS: dict[str, Callable[[Any, Array], Array] | None] = {
    "NONE": None,
    "LOGISTIC": logistic,
    "SOFTMAX": softmax,
    "SOFTMAX_ZERO": softmax_zero,
    "PROBIT": probit,
}


# Exact mode's post transforms (backends/exact_ml.py; PROBIT is the normal quantile by AS241,
# not onnxruntime's float32 approximation).
EXACT_POST_TRANSFORMS: dict[str, Callable[[Any, Array], Array] | None] = {
    "NONE": None,
    "LOGISTIC": logistic64,
    "SOFTMAX": softmax64,
    "SOFTMAX_ZERO": lambda xp, v: softmax64(xp, v, zero_scores=True),
    "PROBIT": probit64,
}


def post_transform_of(node: NodeInfo, name: str) -> str:
    if name not in POST_TRANSFORMS:
        raise node.invalid(
            f"{node.op_type} post_transform must be one of {', '.join(POST_TRANSFORMS)}, "
            f"got {name!r}"
        )
    return name


def transformed(xp: Any, scores: Array, name: str, exact: bool = False) -> Array:
    transform = (EXACT_POST_TRANSFORMS if exact else POST_TRANSFORMS)[name]
    return scores if transform is None else transform(xp, scores)


def regression_transformed(xp: Any, scores: Array, name: str, exact: bool = False) -> Array:
    """The post_transform of the older regressors. With one score per row onnxruntime
    applies PROBIT and no other transform (not even LOGISTIC); followed so that scores agree."""
    if scores.shape[1] == 1 and name != "PROBIT":
        return scores
    return transformed(xp, scores, name, exact)


# -- ArrayFeatureExtractor, Binarizer --------------------------------------------------------


class ArrayFeatureExtractorOp(Operator):
    """The elements at the indices Y (any shape, read flat) of X's last axis:
    X.shape[:-1] + [Y.size], and [1, Y.size] for a 1-D X (onnxruntime's shape). Exact: a
    gather."""

    types = NUMBERS | {STRING}
    supports_exact = True

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        self.check_types(ctx, self.types, 0)
        self.check_types(ctx, frozenset({DType.INT64}), 1)
        shape, count = ctx.shape(0), math.prod(ctx.shape(1))
        if not shape:
            raise self.node.bad_input(
                "ArrayFeatureExtractor needs an input of rank 1 or more", self.node.inputs[0]
            )
        leading = (1,) if len(shape) == 1 else shape[:-1]
        return [ctx.output(ctx.dtype(0), (*leading, count))]

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: list[Array]) -> None:
        x, indices = inputs
        xp = np if x.dtype == object else ctx.xp
        flat = (host(ctx, indices) if xp is np else indices).reshape(-1)
        extent = x.shape[-1]
        outside = (flat < 0) | (flat >= extent)
        if bool(outside.any()):
            first = int(flat[outside][:1][0])
            raise self.node.bad_input(
                f"ArrayFeatureExtractor index {first} is outside [0, {extent})",
                self.node.inputs[1],
            )
        outputs[0][...] = xp.take(x, flat, axis=-1).reshape(outputs[0].shape)


class BinarizerOp(Operator):
    """1 where x > threshold, else 0, in x's type (NaN gives 0; onnxruntime refuses NaN).
    Exact: a comparison, through exact mode's namespace."""

    in_place_input = 0
    supports_exact = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.threshold = float(node.attr("threshold", 0.0))

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        self.check_types(ctx, NUMBERS, 0)
        return [ctx.output(ctx.dtype(0), ctx.shape(0))]

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: list[Array]) -> None:
        ctx.xp.copyto(outputs[0], ctx.xp.greater(inputs[0], self.threshold), casting="unsafe")


# -- LabelEncoder ----------------------------------------------------------------------------

_KINDS = {"strings": STRING, "int64s": TensorProto.INT64, "floats": TensorProto.FLOAT}
_DEFAULT_NAMES = {
    STRING: "default_string", TensorProto.INT64: "default_int64",
    TensorProto.FLOAT: "default_float",
}  # fmt: skip
_FLOAT_CODES = frozenset({TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16})


def spec_default(dtype: int) -> Any:
    """The default value LabelEncoder's spec gives each value type."""
    if dtype == STRING:
        return "_Unused"
    return -0.0 if dtype in _FLOAT_CODES else -1


@dataclass(frozen=True)
class _Column:
    """Keys or values of a LabelEncoder: their element type and Python values."""

    dtype: int
    items: list


class LabelEncoderOp(Operator):
    """Maps each element through keys -> values (v2+: keys_* / values_*, v4 also as tensors);
    v1 maps strings to their (last) index in classes_strings and integers back to those
    strings. Elements not among the keys get the default. From v4 a repeated key maps to its
    last value and a NaN key matches every NaN; before, as in onnxruntime, to its first value,
    and NaN matches nothing.

    Numeric-to-numeric maps run on the backend (a sorted search of the keys); maps with
    strings on either side run on the host. Exact mode: float keys and inputs are compared as
    float64 copies (so a flushing library keeps subnormals apart); the values are copied."""

    supports_exact = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        if node.opset < 2:
            self.keys = self.values = None
            self.classes = list(node.attr("classes_strings", []))
            self.default_int = int(node.attr("default_int64", -1))
            self.default_string = node.attr("default_string", "_Unused")
            return
        self.keys = self._column("keys")
        self.values = self._column("values")
        if len(self.keys.items) != len(self.values.items):
            raise node.invalid(
                f"LabelEncoder has {len(self.keys.items)} keys but {len(self.values.items)} values"
            )
        self.default = self._default()
        pairs = list(zip(self.keys.items, self.values.items, strict=True))
        mapping = dict(pairs if node.opset >= 4 else reversed(pairs))
        self.nan_value = self.default
        for key in [k for k in mapping if isinstance(k, float) and math.isnan(k)]:
            value = mapping.pop(key)  # NaN keys are distinct objects: the last wins
            self.nan_value = value if node.opset >= 4 else self.default
        self.mapping = mapping
        if STRING not in (self.keys.dtype, self.values.dtype):
            order = sorted(mapping)
            out = numpy_dtype_for_onnx(self.values.dtype)
            self.sorted_keys = np.array(order, dtype=numpy_dtype_for_onnx(self.keys.dtype))
            self.sorted_values = np.array([mapping[k] for k in order], dtype=out)

    def _column(self, prefix: str) -> _Column:
        node = self.node
        given = [
            (kind, node.attributes[f"{prefix}_{kind}"])
            for kind in ("strings", "int64s", "floats", "tensor")
            if f"{prefix}_{kind}" in node.attributes
        ]
        if len(given) != 1 or (given[0][0] == "tensor" and node.opset < 4):
            raise node.invalid(f"LabelEncoder needs exactly one {prefix}_* attribute")
        kind, items = given[0]
        if kind == "tensor":
            return _Column(onnx_code_for_numpy(items.dtype), np.asarray(items).reshape(-1).tolist())
        return _Column(_KINDS[kind], list(items))

    def _default(self) -> Any:
        """default_tensor goes with values_tensor, default_<type> with values_<type>."""
        node, dtype = self.node, self.values.dtype
        if "values_tensor" in node.attributes:
            given = node.attr("default_tensor", None)
            return spec_default(dtype) if given is None else np.asarray(given).reshape(-1)[0].item()
        return node.attr(_DEFAULT_NAMES[dtype], spec_default(dtype))

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        dtype = ctx.dtype(0)
        if self.keys is None:
            if dtype not in (STRING, TensorProto.INT64):
                raise self._refused(dtype)
            result = TensorProto.INT64 if dtype == STRING else STRING
        else:
            if dtype != self.keys.dtype:
                raise self._refused(dtype)
            result = self.values.dtype
        return [ctx.output(result, ctx.shape(0))]

    def _refused(self, dtype: int) -> Exception:
        expected = "STRING or INT64" if self.keys is None else onnx_name(self.keys.dtype)
        return self.node.invalid(
            f"LabelEncoder keys are {expected} but the input is {onnx_name(dtype)}",
            self.node.inputs[0],
        )

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: list[Array]) -> None:
        x, out = inputs[0], outputs[0]
        if self.keys is None:
            self._run_classes(ctx, x, out)
        elif STRING in (self.keys.dtype, self.values.dtype):
            self._run_on_host(ctx, x, out)
        else:
            self._run_search(ctx.kernels.xp if ctx.exact else ctx.xp, x, out, ctx.exact)

    def _run_classes(self, ctx: RunContext, x: Array, out: Array) -> None:
        if x.dtype == object:
            index = {label: i for i, label in enumerate(self.classes)}
            found = [index.get(s, self.default_int) for s in x.reshape(-1).tolist()]
            fill_from_host(ctx, out, np.array(found, dtype=np.int64))
            return
        count = len(self.classes)
        labels = [
            self.classes[i] if 0 <= i < count else self.default_string
            for i in host(ctx, x).reshape(-1).tolist()
        ]
        out[...] = string_array(labels, out.shape)

    def _run_on_host(self, ctx: RunContext, x: Array, out: Array) -> None:
        get, default, nan_value = self.mapping.get, self.default, self.nan_value
        mapped = [
            nan_value if v != v else get(v, default) for v in host(ctx, x).reshape(-1).tolist()
        ]
        if out.dtype == object:
            out[...] = string_array(mapped, out.shape)
        else:
            fill_from_host(ctx, out, np.array(mapped, dtype=out.dtype))

    def _run_search(self, xp: Any, x: Array, out: Array, exact: bool = False) -> None:
        keys, values = xp.asarray(self.sorted_keys), xp.asarray(self.sorted_values)
        if exact and x.dtype.kind == "f":
            keys, x = widen(xp, keys), widen(xp, x)
        if keys.size == 0:
            out[...] = self.default
        else:
            position = xp.minimum(xp.searchsorted(keys, x), keys.size - 1)
            found = keys[position] == x
            xp.copyto(out, xp.where(found, values[position], self.default), casting="unsafe")
        if x.dtype.kind == "f":
            xp.copyto(out, self.nan_value, where=xp.isnan(x), casting="unsafe")


# -- tree ensembles --------------------------------------------------------------------------

# Node comparisons, as TreeEnsemble (ai.onnx.ml 5) numbers them.
LEQ, LT, GTE, GT, EQ, NEQ, MEMBER = range(7)
_OLD_MODES = {
    "BRANCH_LEQ": LEQ, "BRANCH_LT": LT, "BRANCH_GTE": GTE, "BRANCH_GT": GT,
    "BRANCH_EQ": EQ, "BRANCH_NEQ": NEQ,
}  # fmt: skip
_COMPARISONS: dict[int, Callable[[Array, Array], Array]] = {
    LEQ: lambda x, t: x <= t,
    LT: lambda x, t: x < t,
    GTE: lambda x, t: x >= t,
    GT: lambda x, t: x > t,
    EQ: lambda x, t: x == t,
    NEQ: lambda x, t: x != t,
}
_AGGREGATES = ("AVERAGE", "SUM", "MIN", "MAX")
# Elements of the [rows, trees, targets] gathers of one step of a forest's evaluation.
_GATHER_BUDGET = 1 << 22


def leaf(index: int) -> int:
    """A child that is leaf `index`; interior nodes are numbered from 0 up."""
    return -1 - index


@dataclass
class Forest:
    """Trees in arrays: interior node i tests feature `features[i]` with comparison
    `modes[i]` against `thresholds[i]` (or its row of `members` for MEMBER) and goes on to
    `true_next[i]` or `false_next[i]`: an interior node (>= 0) or a leaf (`leaf(j)` < 0).
    A NaN feature goes the true way where `missing_true[i]`.
    Leaf j adds `leaf_values[j, k]` to target k where `leaf_has[j, k]`."""

    modes: np.ndarray
    features: np.ndarray
    thresholds: np.ndarray
    true_next: np.ndarray
    false_next: np.ndarray
    missing_true: np.ndarray
    members: np.ndarray  # [sets, size] NaN-padded sets of the MEMBER nodes
    member_row: np.ndarray  # each node's row of `members` (0 for other nodes)
    roots: np.ndarray
    leaf_values: np.ndarray  # [leaves, targets] float64
    leaf_has: np.ndarray  # [leaves, targets] bool

    def __post_init__(self) -> None:
        self.present_modes = sorted({int(m) for m in self.modes})
        self.tracks_missing = bool(self.missing_true.any())

    @property
    def targets(self) -> int:
        return self.leaf_values.shape[1]

    def check(self, node: NodeInfo) -> None:
        """Refuse children and roots that point nowhere, and cycles; set `depth`, the most
        interior nodes on a path, which is how many steps evaluation takes."""
        interior, leaves = len(self.modes), len(self.leaf_values)
        if (self.features < 0).any():
            raise node.invalid(f"{node.op_type} has a negative feature id")
        for name in ("true_next", "false_next", "roots"):
            links = getattr(self, name)
            if ((links >= interior) | (links < -leaves)).any():
                raise node.invalid(f"{node.op_type} has a {name} entry outside its nodes")
        level = np.unique(self.roots[self.roots >= 0])
        self.depth = 0
        while level.size:
            self.depth += 1
            if self.depth > interior:
                raise node.invalid(f"{node.op_type} trees have a cycle")
            children = np.concatenate((self.true_next[level], self.false_next[level]))
            level = np.unique(children[children >= 0])

    def evaluate(self, xp: Any, x: Array, aggregate: str) -> tuple[Array, Array]:
        """Per row of x ([N, F] float64) and target: the aggregate of the leaf values the
        trees reach, and whether any tree gave the target a value."""
        rows, targets = x.shape[0], self.targets
        start = {"MIN": np.inf, "MAX": -np.inf}.get(aggregate, 0.0)
        total = xp.full((rows, targets), start)
        has = xp.zeros((rows, targets), dtype=bool)
        values, value_has = xp.asarray(self.leaf_values), xp.asarray(self.leaf_has)
        chunk = max(1, _GATHER_BUDGET // max(1, rows * targets))
        for first in range(0, len(self.roots), chunk):
            roots = xp.asarray(self.roots[first : first + chunk])
            reached = -1 - self._walk(xp, x, roots)
            found = value_has[reached]  # [N, trees, targets]
            if aggregate == "MIN":
                step = xp.where(found, values[reached], np.inf).min(axis=1)
                total = xp.minimum(total, step)
            elif aggregate == "MAX":
                step = xp.where(found, values[reached], -np.inf).max(axis=1)
                total = xp.maximum(total, step)
            else:
                total = total + values[reached].sum(axis=1)
            has |= found.any(axis=1)
        return xp.where(has, total, 0.0), has

    def exact_evaluate(self, xp: Any, x: Array, aggregate: str) -> tuple[Array, Array]:
        """`evaluate` in exact mode (x: exactly widened float64, so every threshold test is
        an exact comparison). SUM and AVERAGE: per row and target the exact sum of the
        weights reached in all trees, rounded to odd at 53 bits (`exact_sums`: order-free);
        MIN and MAX: a selection, its zero made +0 (which zero is met first cannot matter).
        Rows go in blocks, each row's trees all at once."""
        rows, targets, trees = x.shape[0], self.targets, len(self.roots)
        block = max(1, _GATHER_BUDGET // max(1, trees * targets))
        values, value_has = xp.asarray(self.leaf_values), xp.asarray(self.leaf_has)
        roots = xp.asarray(self.roots)
        totals, present = [xp.zeros((0, targets))], [xp.zeros((0, targets), dtype=bool)]
        for first in range(0, rows, block):
            reached = -1 - self._walk(xp, x[first : first + block], roots)
            found = value_has[reached]  # [n, trees, targets]
            if aggregate in ("MIN", "MAX"):
                picked = xp.where(found, values[reached], np.inf if aggregate == "MIN" else -np.inf)
                step = (picked.min(axis=1) if aggregate == "MIN" else picked.max(axis=1)) + 0.0
            else:
                step = exact_sums(xp, xp.moveaxis(values[reached], 1, 2))
            has = found.any(axis=1)
            totals.append(xp.where(has, step, 0.0))
            present.append(has)
        return xp.concatenate(totals), xp.concatenate(present)

    def _walk(self, xp: Any, x: Array, roots: Array) -> Array:
        """The leaf each row reaches in each tree, as `leaf(j)`: [N, trees]."""
        position = xp.broadcast_to(roots, (x.shape[0], roots.size))
        arrays = {
            name: xp.asarray(getattr(self, name))
            for name in ("modes", "features", "thresholds", "true_next", "false_next")
        }
        for _ in range(self.depth):
            inside = position >= 0
            node = xp.where(inside, position, 0)
            value = xp.take_along_axis(x, arrays["features"][node], axis=1)
            go_true = self._test(xp, arrays, node, value)
            following = xp.where(go_true, arrays["true_next"][node], arrays["false_next"][node])
            position = xp.where(inside, following, position)
        return position

    def _test(self, xp: Any, arrays: Mapping[str, Array], node: Array, value: Array) -> Array:
        threshold = arrays["thresholds"][node]
        result = None
        for mode in self.present_modes:
            if mode == MEMBER:
                sets = xp.asarray(self.members)[xp.asarray(self.member_row)[node]]
                test = (value[..., None] == sets).any(axis=-1)
            else:
                test = _COMPARISONS[mode](value, threshold)
            if result is None:
                result = test
            else:
                result = xp.where(arrays["modes"][node] == mode, test, result)
        if self.tracks_missing:
            result = result | (xp.isnan(value) & xp.asarray(self.missing_true)[node])
        return result


def leaf_table(
    leaves: int, targets: int, entries: Sequence[tuple[int, int, float]], aggregate: str
) -> tuple[np.ndarray, np.ndarray]:
    """[leaves, targets] values and presence from (leaf, target, weight) entries; entries of
    one leaf and target combine as the aggregate does."""
    fill = {"MIN": np.inf, "MAX": -np.inf}.get(aggregate, 0.0)
    values = np.full((leaves, targets), fill)
    has = np.zeros((leaves, targets), dtype=bool)
    if entries:
        at = tuple(np.array([e[:2] for e in entries], dtype=np.int64).T)
        weights = np.array([e[2] for e in entries], dtype=np.float64)
        combine = {"MIN": np.minimum, "MAX": np.maximum}.get(aggregate, np.add)
        combine.at(values, at, weights)
        has[at] = True
    return np.where(has, values, 0.0), has


def member_sets(node: NodeInfo, modes: np.ndarray, values: Any) -> tuple[np.ndarray, np.ndarray]:
    """The NaN-delimited `membership_values` as one NaN-padded row per MEMBER node."""
    flat = np.asarray([] if values is None else values, dtype=np.float64).reshape(-1)
    ends = np.flatnonzero(np.isnan(flat))
    count = int((modes == MEMBER).sum())
    if len(ends) < count:
        raise node.invalid(
            f"TreeEnsemble has {count} BRANCH_MEMBER nodes but {len(ends)} membership sets"
        )
    starts = np.concatenate(([0], ends[:-1] + 1))[:count]
    sets = [flat[s:e] for s, e in zip(starts, ends[:count], strict=True)]
    width = max((len(s) for s in sets), default=0)
    members = np.full((max(count, 1), max(width, 1)), np.nan)
    for row, values_of_set in enumerate(sets):
        members[row, : len(values_of_set)] = values_of_set
    member_row = np.zeros(len(modes), dtype=np.int64)
    member_row[modes == MEMBER] = np.arange(count)
    return members, member_row


class TreeOperator(Operator):
    """Shared by the tree ensembles: the input check and the evaluation of `self.forest`.
    Exact mode: `Forest.exact_evaluate`, then base values, the average's division and the
    post transform one float64 operation each (EXACT_POST_TRANSFORMS), rounded once."""

    supports_exact = True

    forest: Forest
    input_types: ClassVar[frozenset[int]] = NUMBERS

    def check_input(self, ctx: InferContext) -> int:
        """The number of rows; refuses features the trees read beyond the input's."""
        self.check_types(ctx, self.input_types, 0)
        rows, features = rows_of(self.node, ctx.shape(0), self.node.inputs[0])
        used = self.forest.features
        if used.size and int(used.max()) >= features:
            raise self.node.bad_input(
                f"{self.node.op_type} trees read feature {int(used.max())} but the input has "
                f"{features} features",
                self.node.inputs[0],
            )
        return rows

    def exact_check(self) -> None:
        """Exact mode takes the forests whose leaf weights `exact_sums` adds (all float32
        weights; float64 ones but the tiniest and the huge)."""
        self.supports_exact = summable(self.forest.leaf_values)  # type: ignore[misc]

    def scores(self, ctx: RunContext, x: Array, aggregate: str) -> tuple[Array, Array]:
        xp = self.namespace(ctx)
        rows = 1 if x.ndim == 1 else x.shape[0]
        features = x.reshape(rows, x.shape[-1])
        if ctx.exact:
            return self.forest.exact_evaluate(xp, widen(xp, features), aggregate)
        return self.forest.evaluate(xp, features.astype(xp.float64), aggregate)

    @staticmethod
    def namespace(ctx: RunContext) -> Any:
        """The library itself in exact mode (float64 work from exactly widened values)."""
        return ctx.kernels.xp if ctx.exact else ctx.xp


class TreeEnsembleOp(TreeOperator):
    """TreeEnsemble (ai.onnx.ml 5): [N, F] -> [N, n_targets] in the input's type.

    AVERAGE divides by the number of trees. A target no tree gives a value to scores 0 (for
    MIN and MAX too, as onnxruntime). post_transform follows the spec's numbering (1 SOFTMAX,
    2 LOGISTIC) and applies with one target too; onnxruntime 1.32 swaps 1 and 2 and, with one
    target, applies PROBIT alone."""

    input_types = frozenset({DType.FLOAT, DType.DOUBLE, DType.FLOAT16})

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        aggregate = int(node.attr("aggregate_function", 1))
        transform = int(node.attr("post_transform", 0))
        if not (0 <= aggregate < 4 and 0 <= transform < 5):
            raise node.invalid(
                f"TreeEnsemble aggregate_function must be 0-3 and post_transform 0-4, got "
                f"{aggregate} and {transform}"
            )
        self.aggregate = _AGGREGATES[aggregate]
        self.transform = ("NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO", "PROBIT")[transform]
        self.forest = self._forest()
        self.forest.check(node)
        self.exact_check()

    def _forest(self) -> Forest:
        node = self.node
        modes = np.asarray(node.attr("nodes_modes")).reshape(-1).astype(np.int64)
        count = len(modes)
        ints = {
            name: np.asarray(node.attr(name), dtype=np.int64).reshape(-1)
            for name in (
                "nodes_featureids", "nodes_truenodeids", "nodes_trueleafs",
                "nodes_falsenodeids", "nodes_falseleafs",
            )
        }  # fmt: skip
        splits = np.asarray(node.attr("nodes_splits"), dtype=np.float64).reshape(-1)
        missing = np.asarray(
            node.attr("nodes_missing_value_tracks_true", None) or [0] * count, dtype=bool
        )
        if any(len(a) != count for a in (*ints.values(), splits, missing)):
            raise node.invalid("TreeEnsemble nodes_* attributes must all have one length")
        if ((modes < 0) | (modes > MEMBER)).any():
            raise node.invalid("TreeEnsemble nodes_modes must be 0-6")
        targets = np.asarray(node.attr("leaf_targetids"), dtype=np.int64).reshape(-1)
        weights = np.asarray(node.attr("leaf_weights"), dtype=np.float64).reshape(-1)
        n_targets = int(node.attr("n_targets", int(targets.max(initial=-1)) + 1))
        if len(targets) != len(weights) or ((targets < 0) | (targets >= n_targets)).any():
            raise node.invalid(
                f"TreeEnsemble leaf_targetids must match leaf_weights and lie in [0, {n_targets})"
            )
        members, member_row = member_sets(node, modes, node.attr("membership_values", None))
        true_next = np.where(ints["nodes_trueleafs"] != 0, -1 - ints["nodes_truenodeids"],
                             ints["nodes_truenodeids"])  # fmt: skip
        false_next = np.where(ints["nodes_falseleafs"] != 0, -1 - ints["nodes_falsenodeids"],
                              ints["nodes_falsenodeids"])  # fmt: skip
        roots = np.asarray(node.attr("tree_roots"), dtype=np.int64).reshape(-1)
        if ((roots < 0) | (roots >= count)).any():
            raise node.invalid("TreeEnsemble tree_roots must index nodes")
        # A tree that is one leaf: a root whose two branches are that same leaf.
        single = (true_next[roots] < 0) & (true_next[roots] == false_next[roots])
        roots = np.where(single, true_next[roots], roots)
        entries = [
            (j, int(t), float(w)) for j, (t, w) in enumerate(zip(targets, weights, strict=True))
        ]
        values, has = leaf_table(len(targets), n_targets, entries, self.aggregate)
        return Forest(
            modes, ints["nodes_featureids"], splits, true_next, false_next, missing, members,
            member_row, roots, values, has,
        )  # fmt: skip

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        if len(ctx.shape(0)) != 2:
            raise self.node.bad_input(
                f"TreeEnsemble takes a [N, F] input, got shape {list(ctx.shape(0))}",
                self.node.inputs[0],
            )
        rows = self.check_input(ctx)
        return [ctx.output(ctx.dtype(0), (rows, self.forest.targets))]

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: list[Array]) -> None:
        xp = self.namespace(ctx)
        scores, _ = self.scores(ctx, inputs[0], self.aggregate)
        if self.aggregate == "AVERAGE":
            scores = scores / len(self.forest.roots)
        store(xp, outputs[0], transformed(xp, scores, self.transform, ctx.exact))


def old_forest(node: NodeInfo, prefix: str, targets: int, aggregate: str) -> Forest:
    """A Forest from the nodes_* attributes of TreeEnsembleRegressor/Classifier (nodes named
    by tree and node id, leaves being nodes of mode LEAF) and their `prefix`_* votes. Each
    tree's root is its first node listed."""
    tree_ids = [int(t) for t in node.attr("nodes_treeids")]
    node_ids = [int(n) for n in node.attr("nodes_nodeids")]
    names = node.attr("nodes_modes")
    count = len(tree_ids)
    thresholds = node.attr("nodes_values_as_tensor", None)
    if thresholds is None:
        thresholds = node.attr("nodes_values", [0.0] * count)
    columns = {
        "features": node.attr("nodes_featureids"),
        "true": node.attr("nodes_truenodeids"),
        "false": node.attr("nodes_falsenodeids"),
        "missing": node.attr("nodes_missing_value_tracks_true", None) or [0] * count,
        "thresholds": np.asarray(thresholds, dtype=np.float64).reshape(-1).tolist(),
    }
    if any(len(c) != count for c in (node_ids, names, *columns.values())):
        raise node.invalid(f"{node.op_type} nodes_* attributes must all have one length")
    if any(m != "LEAF" and m not in _OLD_MODES for m in names):
        raise node.invalid(f"{node.op_type} nodes_modes has an unknown mode")
    # Interior nodes and leaves are numbered apart, each in the order listed.
    numbers: dict[tuple[int, int], int] = {}
    interior = leaves = 0
    for tree, node_id, mode in zip(tree_ids, node_ids, names, strict=True):
        if mode == "LEAF":
            numbers[tree, node_id], leaves = leaf(leaves), leaves + 1
        else:
            numbers[tree, node_id], interior = interior, interior + 1
    if len(numbers) != count:
        raise node.invalid(f"{node.op_type} repeats a (tree, node) id")

    def link(tree: int, node_id: int) -> int:
        found = numbers.get((tree, int(node_id)))
        if found is None:
            raise node.invalid(f"{node.op_type} tree {tree} has no node {node_id}")
        return found

    branch = [i for i, m in enumerate(names) if m != "LEAF"]

    def pick(column: str, kind: Any = np.int64) -> np.ndarray:
        return np.array([columns[column][i] for i in branch], dtype=kind)

    first: dict[int, int] = {}
    for index, tree in enumerate(tree_ids):
        first.setdefault(tree, index)
    roots = np.array([numbers[t, node_ids[i]] for t, i in first.items()], dtype=np.int64)
    votes = [
        node.attr(f"{prefix}_treeids"), node.attr(f"{prefix}_nodeids"),
        node.attr(f"{prefix}_ids"), _weights(node, prefix),
    ]  # fmt: skip
    if len({len(v) for v in votes}) != 1:
        raise node.invalid(f"{node.op_type} {prefix}_* attributes must all have one length")
    entries = []
    for tree, node_id, target, weight in zip(*votes, strict=True):
        position = link(int(tree), int(node_id))
        if position >= 0 or not 0 <= target < targets:
            raise node.invalid(
                f"{node.op_type} {prefix} entry for tree {tree} node {node_id} (target "
                f"{target}) is not on a leaf or outside [0, {targets})"
            )
        entries.append((-1 - position, int(target), float(weight)))
    values, has = leaf_table(leaves, targets, entries, aggregate)
    modes = np.array([_OLD_MODES[names[i]] for i in branch], dtype=np.int64)
    return Forest(
        modes, pick("features"), pick("thresholds", np.float64),
        np.array([link(tree_ids[i], columns["true"][i]) for i in branch], dtype=np.int64),
        np.array([link(tree_ids[i], columns["false"][i]) for i in branch], dtype=np.int64),
        pick("missing", bool), np.full((1, 1), np.nan), np.zeros(len(branch), np.int64),
        roots, values, has,
    )  # fmt: skip


def _weights(node: NodeInfo, prefix: str) -> list[float]:
    weights = node.attr(f"{prefix}_weights_as_tensor", None)
    if weights is None:
        weights = node.attr(f"{prefix}_weights", [])
    return np.asarray(weights, dtype=np.float64).reshape(-1).tolist()


def base_values(node: NodeInfo) -> np.ndarray:
    values = node.attr("base_values_as_tensor", None)
    if values is None:
        values = node.attr("base_values", [])
    return np.asarray(values, dtype=np.float64).reshape(-1)


class TreeEnsembleRegressorOp(TreeOperator):
    """TreeEnsembleRegressor (ai.onnx.ml 1-4): [N, F] -> float [N, n_targets].

    base_values are added after the aggregate when there is one per target; as in
    onnxruntime, with several targets one that no tree votes for scores 0, base value not
    added. Votes of one leaf for one target combine as the aggregate does (onnxruntime takes
    the first alone when there is one target)."""

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.aggregate = node.attr("aggregate_function", "SUM")
        if self.aggregate not in _AGGREGATES:
            raise node.invalid(f"TreeEnsembleRegressor aggregate_function {self.aggregate!r}")
        self.transform = post_transform_of(node, node.attr("post_transform", "NONE"))
        targets = int(node.attr("n_targets", 1))
        self.forest = old_forest(node, "target", targets, self.aggregate)
        self.forest.check(node)
        self.exact_check()
        base = base_values(node)
        self.base = base if len(base) == targets else np.zeros(targets)

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        return [ctx.output(DType.FLOAT, (self.check_input(ctx), self.forest.targets))]

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: list[Array]) -> None:
        xp = self.namespace(ctx)
        scores, has = self.scores(ctx, inputs[0], self.aggregate)
        if self.aggregate == "AVERAGE":
            scores = scores / len(self.forest.roots)
        scores = scores + xp.asarray(self.base)
        if self.forest.targets > 1:
            scores = xp.where(has, scores, 0.0)
        store(xp, outputs[0], regression_transformed(xp, scores, self.transform, ctx.exact))


class Classifier(Operator):
    """Shared by the classifiers: labels (classlabels_strings or an integer list) and the
    label output, an index into them made on the backend."""

    def labels_of(self, node: NodeInfo, ints_name: str) -> None:
        strings, ints = node.attr("classlabels_strings", None), node.attr(ints_name, None)
        if (strings is None) == (ints is None):
            raise node.invalid(
                f"{node.op_type} needs exactly one of classlabels_strings, {ints_name}"
            )
        self.labels: list = list(strings if strings is not None else map(int, ints))
        self.label_type = STRING if strings is not None else TensorProto.INT64

    def write_labels(self, ctx: RunContext, chosen: Array, out: Array, labels: list) -> None:
        """out[i] = labels[chosen[i]]."""
        if self.label_type == STRING:
            picked = np.asarray(ctx.kernels.memory.to_host(chosen)).tolist()
            out[...] = string_array([labels[i] for i in picked], out.shape)
        else:
            ctx.xp.copyto(out, ctx.xp.asarray(np.array(labels, dtype=np.int64))[chosen])


class TreeEnsembleClassifierOp(TreeOperator, Classifier):
    """TreeEnsembleClassifier (ai.onnx.ml 1-4): the top label [N] and the class scores
    [N, classes] (float).

    Class votes add up, plus base_values (one per class), then the post_transform; the label
    is the top score's. Two-class models whose votes all name one class follow onnxruntime,
    as converters write such models: with s the sum of the votes, the label is the second
    one when s > 0.5 (votes all >= 0) or s > 0 (mixed signs). When the votes name the first
    class, s takes a single base value, and the scores are [probit(s), s] (PROBIT; onnxruntime
    leaves the second column unwritten), [logistic(-s), logistic(s)] (LOGISTIC), else
    [1 - s, s] (votes all >= 0) or [-s, s]; when they name the second, base values are left
    out and the scores are the post-transformed [0, s]. Where onnxruntime differs: two
    classes that both get votes (it gives labels 1 / 0 by the sign of the second score), and
    two base values with votes for one class (it drops the votes)."""

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.labels_of(node, "classlabels_int64s")
        self.transform = post_transform_of(node, node.attr("post_transform", "NONE"))
        classes = len(self.labels)
        self.forest = old_forest(node, "class", classes, "SUM")
        self.forest.check(node)
        self.exact_check()
        self.base = base_values(node)
        voted = {int(c) for c in node.attr("class_ids")}
        self.single_class = voted.pop() if classes == 2 and len(voted) == 1 else None
        if len(self.base) == 2:
            self.single_class = None
        self.all_positive = all(w >= 0 for w in _weights(node, "class"))

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        rows = self.check_input(ctx)
        return [
            ctx.output(self.label_type, (rows,)),
            ctx.output(DType.FLOAT, (rows, len(self.labels))),
        ]

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: list[Array]) -> None:
        xp = self.namespace(ctx)
        scores, has = self.scores(ctx, inputs[0], "SUM")
        if self.single_class is not None:
            chosen, scores = self._single_class(xp, scores[:, self.single_class], ctx.exact)
        else:
            if len(self.base) == len(self.labels):
                scores, has = scores + xp.asarray(self.base), xp.ones_like(has)
            chosen = xp.where(has, scores, -np.inf).argmax(axis=1)
            scores = transformed(xp, scores, self.transform, ctx.exact)
        self.write_labels(ctx, chosen, outputs[0], self.labels)
        store(xp, outputs[1], scores)

    def _single_class(self, xp: Any, s: Array, exact: bool) -> tuple[Array, Array]:
        """Labels and scores of a two-class model voting for one class (see the class)."""
        if self.single_class == 0 and len(self.base) == 1:
            s = s + float(self.base[0])
        chosen = (s > (0.5 if self.all_positive else 0.0)).astype(xp.int64)
        if self.single_class == 1:
            pair = xp.stack([xp.zeros_like(s), s], axis=1)
            return chosen, transformed(xp, pair, self.transform, exact)
        if self.transform == "PROBIT":
            first, second = transformed(xp, s, "PROBIT", exact), s
        elif self.transform == "LOGISTIC":
            first, second = (transformed(xp, v, "LOGISTIC", exact) for v in (-s, s))
        else:
            first, second = (1 - s if self.all_positive else -s), s
        return chosen, xp.stack([first, second], axis=1)


# -- linear models ---------------------------------------------------------------------------


class LinearModel(Operator):
    """X [N, F] (or [F]) times the coefficients ([targets, F], row-major) plus intercepts.
    Exact mode: `linear`, then the exact post transforms (EXACT_POST_TRANSFORMS)."""

    supports_exact = True

    def linear_setup(self, node: NodeInfo, targets: int) -> None:
        self.coefficients = np.asarray(node.attr("coefficients"), dtype=np.float64)
        intercepts = node.attr("intercepts", None)
        self.intercepts = (
            np.zeros(targets) if not intercepts else np.asarray(intercepts, dtype=np.float64)
        )
        if targets <= 0 or len(self.intercepts) != targets or self.coefficients.size % targets:
            raise node.invalid(
                f"{node.op_type} has {self.coefficients.size} coefficients and "
                f"{len(self.intercepts)} intercepts, which do not make {targets} targets"
            )
        self.coefficients = self.coefficients.reshape(targets, -1)

    def check_features(self, ctx: InferContext) -> int:
        self.check_types(ctx, NUMBERS, 0)
        rows, features = rows_of(self.node, ctx.shape(0), self.node.inputs[0])
        if features != self.coefficients.shape[1]:
            raise self.node.bad_input(
                f"{self.node.op_type} coefficients expect {self.coefficients.shape[1]} "
                f"features, the input has {features}",
                self.node.inputs[0],
            )
        return rows

    def linear(self, ctx: RunContext, x: Array) -> Array:
        """X·Cᵀ + intercepts in float64. Exact mode: the product is working_product's for X's
        type (float64: the ordered float64 sum over the features; other types: X rounded to
        float32, each score the exact dot product rounded once into float32), then one add."""
        xp = ctx.kernels.xp if ctx.exact else ctx.xp
        rows = 1 if x.ndim == 1 else x.shape[0]
        features = x.reshape(rows, x.shape[-1])
        coefficients = xp.asarray(self.coefficients.T)
        if ctx.exact:
            product = working_product(ctx.kernels, x.dtype)(widen(xp, features), coefficients)
        else:
            product = features.astype(xp.float64) @ coefficients
        return product + xp.asarray(self.intercepts)


class LinearRegressorOp(LinearModel):
    """float [N, targets] = X @ coefficients^T + intercepts, then the post_transform (PROBIT
    alone with one target: see `regression_transformed`)."""

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.linear_setup(node, int(node.attr("targets", 1)))
        self.transform = post_transform_of(node, node.attr("post_transform", "NONE"))

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        rows = self.check_features(ctx)
        return [ctx.output(DType.FLOAT, (rows, self.coefficients.shape[0]))]

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: list[Array]) -> None:
        xp = ctx.kernels.xp if ctx.exact else ctx.xp
        scores = self.linear(ctx, inputs[0])
        scores = regression_transformed(xp, scores, self.transform, ctx.exact)
        store(xp, outputs[0], scores)


class LinearClassifierOp(LinearModel, Classifier):
    """Labels [N] and scores of a linear model. The number of classes scored is the number of
    intercepts. With one score s and two labels (a binary model) the label is the second one
    when s > 0 and the scores are [1 - t, t], t being s after LOGISTIC or PROBIT (SOFTMAX and
    SOFTMAX_ZERO leave one score alone), as in onnxruntime (whose PROBIT output is
    scrambled)."""

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.labels_of(node, "classlabels_ints")
        intercepts = node.attr("intercepts", None)
        count = len(intercepts) if intercepts else len(self.labels)
        self.linear_setup(node, count)
        self.transform = post_transform_of(node, node.attr("post_transform", "NONE"))
        self.binary = count == 1
        if (self.binary and len(self.labels) != 2) or (
            not self.binary and len(self.labels) != count
        ):
            raise node.invalid(
                f"LinearClassifier scores {count} classes but has {len(self.labels)} labels "
                "(one score needs two labels)"
            )

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        rows = self.check_features(ctx)
        columns = 2 if self.binary else self.coefficients.shape[0]
        return [ctx.output(self.label_type, (rows,)), ctx.output(DType.FLOAT, (rows, columns))]

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: list[Array]) -> None:
        xp = ctx.kernels.xp if ctx.exact else ctx.xp
        scores = self.linear(ctx, inputs[0])
        if scores.shape[1] == 1:
            chosen = (scores[:, 0] > 0).astype(xp.int64)
        else:
            chosen = scores.argmax(axis=1)  # the first largest: a selection
        if self.binary:
            s = scores[:, 0]
            if self.transform in ("LOGISTIC", "PROBIT"):
                s = transformed(xp, s, self.transform, ctx.exact)
            scores = xp.stack([1 - s, s], axis=1)
        else:
            scores = transformed(xp, scores, self.transform, ctx.exact)
        self.write_labels(ctx, chosen, outputs[0], self.labels)
        store(xp, outputs[1], scores)


# -- Normalizer, Scaler, OneHotEncoder, Imputer ----------------------------------------------


class NormalizerOp(Operator):
    """Each row ([N, C], or the whole of [C]) divided by its max (MAX), its sum of absolute
    values (L1) or its Euclidean norm (L2), signs kept; a row whose divisor is 0 is copied.
    Output float. Exact mode: in float64 from exactly widened values, the sums ordered
    (exact_arrays.ordered_sum), rounded once."""

    supports_exact = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.norm = node.attr("norm", "MAX")
        if self.norm not in ("MAX", "L1", "L2"):
            raise node.invalid(f"Normalizer norm must be MAX, L1 or L2, got {self.norm!r}")

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        self.check_types(ctx, NUMBERS, 0)
        rows_of(self.node, ctx.shape(0), self.node.inputs[0])
        return [ctx.output(DType.FLOAT, ctx.shape(0))]

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: list[Array]) -> None:
        xp = ctx.kernels.xp if ctx.exact else ctx.xp
        x = widen(xp, inputs[0]) if ctx.exact else inputs[0].astype(xp.float64)
        if x.shape[-1] == 0:
            return
        total = (lambda v: ordered_sum(xp, v, (v.ndim - 1,))[..., None]) if ctx.exact else (
            lambda v: v.sum(axis=-1, keepdims=True)
        )  # fmt: skip
        if self.norm == "MAX":
            divisor = x.max(axis=-1, keepdims=True)
        elif self.norm == "L1":
            divisor = total(xp.abs(x))
        else:
            divisor = xp.sqrt(total(x * x))
        safe = xp.where(divisor == 0, 1.0, divisor)
        store(xp, outputs[0], x / safe)


class ScalerOp(Operator):
    """(x - offset) * scale along the last axis, each of length 1 or the feature count.
    Output float. Exact mode: the same two float64 operations on exactly widened values,
    rounded once."""

    supports_exact = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.offset = np.asarray(node.attr("offset", [0.0]), dtype=np.float64)
        self.scale = np.asarray(node.attr("scale", [1.0]), dtype=np.float64)

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        self.check_types(ctx, NUMBERS, 0)
        shape = ctx.shape(0)
        features = shape[-1] if shape else 1
        for name in ("offset", "scale"):
            if len(getattr(self, name)) not in (1, features):
                raise self.node.bad_input(
                    f"Scaler {name} has {len(getattr(self, name))} values, not 1 or the "
                    f"{features} features of input shape {list(shape)}",
                    self.node.inputs[0],
                )
        return [ctx.output(DType.FLOAT, shape)]

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: list[Array]) -> None:
        xp = ctx.kernels.xp if ctx.exact else ctx.xp
        x = widen(xp, inputs[0]) if ctx.exact else inputs[0].astype(xp.float64)
        store(xp, outputs[0], (x - xp.asarray(self.offset)) * xp.asarray(self.scale))


class OneHotEncoderOp(Operator):
    """float [..., categories]: 1 at each element's category. Numeric inputs are truncated to
    integers and looked up in cats_int64s; strings in cats_strings. An unknown element gives
    zeros (zeros=1) or is refused (zeros=0). Exact: host lookups."""

    supports_exact = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        strings, ints = node.attr("cats_strings", None), node.attr("cats_int64s", None)
        if (strings is None) == (ints is None):
            raise node.invalid("OneHotEncoder needs exactly one of cats_strings, cats_int64s")
        self.strings = strings is not None
        categories = list(strings) if self.strings else [int(c) for c in ints]
        self.position = {c: i for i, c in reversed(list(enumerate(categories)))}
        self.count = len(categories)
        self.zeros = bool(node.attr("zeros", 1))

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        allowed = frozenset({STRING}) if self.strings else NUMBERS
        self.check_types(ctx, allowed, 0)
        return [ctx.output(DType.FLOAT, (*ctx.shape(0), self.count))]

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: list[Array]) -> None:
        values = host(ctx, inputs[0]).reshape(-1).tolist()
        if inputs[0].dtype.kind == "f":  # truncated; NaN and infinities match no category
            values = [int(v) if math.isfinite(v) else None for v in values]
        found = [self.position.get(v, -1) for v in values]
        if not self.zeros and -1 in found:
            unknown = values[found.index(-1)]
            raise self.node.bad_input(
                f"OneHotEncoder got {unknown!r}, not a category, with zeros = 0",
                self.node.inputs[0],
            )
        encoded = np.zeros((len(found), self.count), dtype=np.float32)
        hit = np.array(found, dtype=np.int64)
        rows = np.flatnonzero(hit >= 0)
        encoded[rows, hit[rows]] = 1
        fill_from_host(ctx, outputs[0], encoded)


class ImputerOp(Operator):
    """Elements equal to the replaced value (NaN matches NaN) take the imputed value of their
    feature (last axis; one value for all, or one per feature). Floats use the *_float(s)
    attributes, integers the *_int64(s) ones. Exact: a comparison and a selection, through
    exact mode's namespace."""

    supports_exact = True

    in_place_input = 0

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        floats, ints = (
            node.attr("imputed_value_floats", None),
            node.attr("imputed_value_int64s", None),
        )
        if (floats is None) == (ints is None):
            raise node.invalid(
                "Imputer needs exactly one of imputed_value_floats, imputed_value_int64s"
            )
        self.floats = floats is not None
        self.imputed = np.asarray(floats if self.floats else ints)
        if self.imputed.size == 0:
            raise node.invalid("Imputer needs at least one imputed value")
        if self.floats:
            self.replaced: float = float(node.attr("replaced_value_float", 0.0))
        else:
            self.replaced = int(node.attr("replaced_value_int64", 0))

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        floats = frozenset({DType.FLOAT, DType.DOUBLE})
        self.check_types(ctx, floats if self.floats else NUMBERS - floats, 0)
        shape = ctx.shape(0)
        features = shape[-1] if shape else 1
        if self.imputed.size not in (1, features):
            raise self.node.bad_input(
                f"Imputer has {self.imputed.size} imputed values, not 1 or the {features} "
                f"features of input shape {list(shape)}",
                self.node.inputs[0],
            )
        return [ctx.output(ctx.dtype(0), shape)]

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: list[Array]) -> None:
        xp, x = ctx.xp, inputs[0]
        if isinstance(self.replaced, float) and math.isnan(self.replaced):
            replace = xp.isnan(x)
        else:
            replace = xp.equal(x, self.replaced)
        imputed = xp.broadcast_to(xp.asarray(self.imputed.astype(x.dtype)), x.shape)
        xp.copyto(outputs[0], xp.where(replace, imputed, x))


# -- support vector machines -----------------------------------------------------------------


class SupportVectorModel(Operator):
    """Shared by SVMClassifier and SVMRegressor: kernel_params [gamma, coef0, degree] and the
    kernel of kernel_type between the rows of X and a matrix of vectors (float64 here; onnxruntime
    computes in float32). Exact mode: `exact_kernel_matrix`, the weighted sums of the kernels
    by `weighted`, then the post transforms of EXACT_POST_TRANSFORMS, rounded once."""

    supports_exact = True
    KERNELS: ClassVar[tuple[str, ...]] = ("LINEAR", "POLY", "RBF", "SIGMOID")

    def kernel_setup(self, node: NodeInfo) -> None:
        self.kernel = node.attr("kernel_type", "LINEAR")
        if self.kernel not in self.KERNELS:
            raise node.invalid(
                f"{node.op_type} kernel_type must be one of {', '.join(self.KERNELS)}, "
                f"got {self.kernel!r}"
            )
        params = [float(v) for v in node.attr("kernel_params", [])] + [0.0, 0.0, 0.0]
        self.gamma, self.coef0, self.degree = params[:3]
        self.coefficients = np.asarray(node.attr("coefficients", []), dtype=np.float64)
        self.rho = np.asarray(node.attr("rho", []), dtype=np.float64)
        if self.rho.size == 0:
            raise node.invalid(f"{node.op_type} needs rho")
        self.transform = post_transform_of(node, node.attr("post_transform", "NONE"))

    def vectors_of(self, node: NodeInfo, count: int) -> np.ndarray:
        """support_vectors as [count, F]."""
        vectors = np.asarray(node.attr("support_vectors", []), dtype=np.float64)
        if count <= 0 or vectors.size % count:
            raise node.invalid(
                f"{node.op_type} has {vectors.size} support vector values, which do not make "
                f"{count} vectors"
            )
        return vectors.reshape(count, -1)

    def check_features(self, ctx: InferContext, features: int) -> int:
        self.check_types(ctx, NUMBERS, 0)
        rows, given = rows_of(self.node, ctx.shape(0), self.node.inputs[0])
        if given != features:
            raise self.node.bad_input(
                f"{self.node.op_type} expects {features} features, the input has {given}",
                self.node.inputs[0],
            )
        return rows

    def kernel_matrix(self, ctx: RunContext, x: Array, vectors: np.ndarray, kernel: str) -> Array:
        """[N, V]: kernel(x_n, vector_v)."""
        if ctx.exact:
            return self.exact_kernel_matrix(ctx, x, vectors, kernel)
        xp = ctx.xp
        rows = 1 if x.ndim == 1 else x.shape[0]
        features = x.reshape(rows, x.shape[-1]).astype(xp.float64)
        v = xp.asarray(vectors)
        if kernel == "RBF":
            squares = (features * features).sum(axis=1, keepdims=True) + (v * v).sum(axis=1)
            distance = xp.maximum(squares - 2 * (features @ v.T), 0.0)
            return xp.exp(-self.gamma * distance)
        dot = features @ v.T
        if kernel == "POLY":
            return (self.gamma * dot + self.coef0) ** self.degree
        if kernel == "SIGMOID":
            return xp.tanh(self.gamma * dot + self.coef0)
        return dot

    def exact_kernel_matrix(
        self, ctx: RunContext, x: Array, vectors: np.ndarray, kernel: str
    ) -> Array:
        """kernel_matrix in exact mode, float64 from exactly widened X: the dot products by
        working_product (X rounded to float32, each the exact dot product rounded once into
        float32; float64 X: the ordered float64 sum over the features); POLY pow64(γ·d + c₀,
        degree), SIGMOID tanh64(γ·d + c₀); RBF exp64(−(γ·s)) with s the float64 sum from +0
        over the features in order of (x_f − v_f)·(x_f − v_f)."""
        xp = ctx.kernels.xp
        rows = 1 if x.ndim == 1 else x.shape[0]
        features = widen(xp, x.reshape(rows, x.shape[-1]))
        v = xp.asarray(vectors)
        if kernel == "RBF":
            squares = xp.zeros((rows, v.shape[0]))
            for f in range(v.shape[1]):
                difference = features[:, f : f + 1] - v[:, f]
                squares += difference * difference
            return exp64(xp, -(squares * self.gamma))
        dot = working_product(ctx.kernels, x.dtype)(features, v.T)
        if kernel == "LINEAR":
            return dot
        base = dot * self.gamma + self.coef0
        if kernel == "POLY":
            return pow64(xp, base, xp.full(base.shape, self.degree))
        return tanh64(xp, base)

    def weighted(self, ctx: RunContext, kernels: Array, weights: np.ndarray, x: Array) -> Array:
        """kernels @ weights ([N, V] by [V, S]); exact mode: working_product for X's type
        (the kernels rounded to float32, each score the exact dot product rounded once into
        float32; float64 X: the ordered float64 sum over the vectors)."""
        if ctx.exact:
            return working_product(ctx.kernels, x.dtype)(kernels, ctx.kernels.xp.asarray(weights))
        return kernels @ ctx.xp.asarray(weights)


class SVMRegressorOp(SupportVectorModel):
    """float [N, 1]: the sum over the n_supports support vectors of coefficient * kernel, plus
    rho[0]; with no support vectors, X @ coefficients + rho[0] (a linear model). one_class
    turns the score into 1 (> 0) or -1. post_transform as the tree regressors (PROBIT only)."""

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.kernel_setup(node)
        supports = int(node.attr("n_supports", 0))
        self.one_class = bool(node.attr("one_class", 0))
        if supports > 0:
            self.vectors = self.vectors_of(node, supports)
            if self.coefficients.size != supports:
                raise node.invalid(
                    f"SVMRegressor has {self.coefficients.size} coefficients for {supports} "
                    "support vectors"
                )
        else:
            self.vectors, self.kernel = self.coefficients.reshape(1, -1), "LINEAR"
            self.coefficients = np.ones(1)

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        rows = self.check_features(ctx, self.vectors.shape[1])
        return [ctx.output(DType.FLOAT, (rows, 1))]

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: list[Array]) -> None:
        xp = ctx.kernels.xp if ctx.exact else ctx.xp
        kernels = self.kernel_matrix(ctx, inputs[0], self.vectors, self.kernel)
        scores = self.weighted(ctx, kernels, self.coefficients[:, None], inputs[0])
        scores = scores + float(self.rho[0])
        if self.one_class:
            scores = xp.where(scores > 0, 1.0, -1.0)
        store(xp, outputs[0], regression_transformed(xp, scores, self.transform, ctx.exact))


class SVMClassifierOp(SupportVectorModel, Classifier):
    """Labels [N] and scores of a support vector classifier, as onnxruntime computes them.

    With vectors_per_class (libsvm's one-vs-one): each pair of classes i < j scores
    rho[pair] + the coefficients of both classes' support vectors times their kernels, a vote
    for i when > 0 and for j otherwise; the label is the most voted class (the first on ties)
    and the scores are the pair scores [N, pairs] post-transformed, or with two classes
    [-s, s] (NONE) or [1 - t, t] (t = s after LOGISTIC or PROBIT). Without support vectors
    (liblinear): X @ coefficients^T + rho[0] per class, post-transformed, the label the top
    score's, except that two classes give the second label when that top score is > 0 (or
    >= 0.5 when the coefficients are all >= 0). With Platt's prob_a and prob_b (one-vs-one
    only, as in onnxruntime) the scores are the class probabilities of libsvm's pairwise
    coupling (`coupled_probabilities`) post-transformed, [N, classes]; the label still the
    most voted class."""

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.labels_of(node, "classlabels_ints")
        self.kernel_setup(node)
        self.prob_a = np.asarray(node.attr("prob_a", []), dtype=np.float64)
        self.prob_b = np.asarray(node.attr("prob_b", []), dtype=np.float64)
        classes = len(self.labels)
        self.per_class = [int(c) for c in node.attr("vectors_per_class", [])]
        self.all_positive = bool((self.coefficients >= 0).all())
        self.pairs = [(i, j) for i in range(classes) for j in range(i + 1, classes)]
        count = sum(self.per_class)
        if count > 0:
            if len(self.per_class) != classes or len(self.rho) < len(self.pairs):
                raise node.invalid(
                    f"SVMClassifier has {classes} labels, {len(self.per_class)} "
                    f"vectors_per_class and {len(self.rho)} rho values"
                )
            self.vectors = self.vectors_of(node, count)
            if self.coefficients.size < (classes - 1) * count:
                raise node.invalid(
                    f"SVMClassifier has {self.coefficients.size} coefficients, not "
                    f"{classes - 1} rows of {count}"
                )
            self.pair_weights = self._pair_weights(count)
            if self.prob_a.size and not (self.prob_a.size == self.prob_b.size == len(self.pairs)):
                raise node.invalid(
                    f"SVMClassifier has {self.prob_a.size} prob_a and {self.prob_b.size} "
                    f"prob_b values for {len(self.pairs)} pairs of classes"
                )
        else:
            if classes == 0 or self.coefficients.size % classes:
                raise node.invalid(
                    f"SVMClassifier has {self.coefficients.size} coefficients for {classes} classes"
                )
            self.vectors, self.kernel = self.coefficients.reshape(classes, -1), "LINEAR"
            self.pair_weights = None

    def _pair_weights(self, count: int) -> np.ndarray:
        """[V, pairs]: the coefficient each support vector has in each pair's score (zero
        for the vectors of other classes), so that all pair scores are one product."""
        rows = self.coefficients[: (len(self.labels) - 1) * count].reshape(-1, count)
        starts = np.concatenate([[0], np.cumsum(self.per_class)])
        weights = np.zeros((count, len(self.pairs)))
        for pair, (i, j) in enumerate(self.pairs):
            of_i, of_j = slice(starts[i], starts[i + 1]), slice(starts[j], starts[j + 1])
            weights[of_i, pair] = rows[j - 1, of_i]
            weights[of_j, pair] = rows[i, of_j]
        return weights

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        rows = self.check_features(ctx, self.vectors.shape[1])
        columns = len(self.labels)
        if self.pair_weights is not None and not self.prob_a.size:
            columns = 2 if columns <= 2 else len(self.pairs)
        return [ctx.output(self.label_type, (rows,)), ctx.output(DType.FLOAT, (rows, columns))]

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: list[Array]) -> None:
        xp, exact = (ctx.kernels.xp if ctx.exact else ctx.xp), ctx.exact
        kernels = self.kernel_matrix(ctx, inputs[0], self.vectors, self.kernel)
        if self.pair_weights is None:
            chosen, scores = self._linear(xp, kernels + float(self.rho[0]), exact)
        else:
            pairs = self.weighted(ctx, kernels, self.pair_weights, inputs[0])
            chosen, scores = self._one_vs_one(xp, pairs, exact)
        self.write_labels(ctx, chosen, outputs[0], self.labels)
        store(xp, outputs[1], scores)

    def _linear(self, xp: Any, scores: Array, exact: bool) -> tuple[Array, Array]:
        chosen = scores.argmax(axis=1)
        if len(self.labels) == 2:
            top = scores.max(axis=1)
            second = top >= 0.5 if self.all_positive else top > 0
            chosen = xp.where(second, 1, chosen)
        return chosen, transformed(xp, scores, self.transform, exact)

    def _one_vs_one(self, xp: Any, scores: Array, exact: bool) -> tuple[Array, Array]:
        scores = scores + xp.asarray(self.rho[: len(self.pairs)])
        classes = len(self.labels)
        votes = xp.zeros((scores.shape[0], classes), dtype=xp.int64)
        for pair, (i, j) in enumerate(self.pairs):
            positive = scores[:, pair] > 0
            votes[:, i] += positive
            votes[:, j] += ~positive
        chosen = votes.argmax(axis=1)
        if self.prob_a.size:
            logistic_of = logistic64 if exact else logistic
            probabilities = coupled_probabilities(
                xp, scores, self.prob_a, self.prob_b, classes, logistic_of
            )
            return chosen, transformed(xp, probabilities, self.transform, exact)
        if classes > 2:
            return chosen, transformed(xp, scores, self.transform, exact)
        s = scores[:, 0] if scores.shape[1] else xp.zeros(scores.shape[0])
        if self.transform == "NONE":
            return chosen, xp.stack([-s, s], axis=1)
        if self.transform in ("LOGISTIC", "PROBIT"):
            s = transformed(xp, s, self.transform, exact)
        return chosen, xp.stack([1 - s, s], axis=1)


# -- ZipMap ----------------------------------------------------------------------------------


class ZipMapOp(Operator):
    """The rows of a float [N, C] (or [C]) tensor as a sequence of maps: a Python list of N
    dicts {label: probability}, labels from classlabels_int64s (int) or classlabels_strings
    (str), probabilities Python floats. Maps are not tensors: the list is made on the host
    and its size only known when run."""

    supports_exact = True  # host data movement

    outputs_data_dependent = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        strings, ints = (
            node.attr("classlabels_strings", None),
            node.attr("classlabels_int64s", None),
        )
        if (strings is None) == (ints is None):
            raise node.invalid(
                "ZipMap needs exactly one of classlabels_strings, classlabels_int64s"
            )
        self.labels: list = list(strings) if strings is not None else [int(c) for c in ints]

    def run(self, ctx: RunContext, inputs: Sequence[Any], outputs: Any) -> list:
        x = inputs[0]
        if x.dtype != np.float32:
            raise self.node.bad_input(f"ZipMap takes float, got {x.dtype}", self.node.inputs[0])
        rows, columns = rows_of(self.node, tuple(x.shape), self.node.inputs[0])
        if columns != len(self.labels):
            raise self.node.bad_input(
                f"ZipMap has {len(self.labels)} labels but the input has {columns} columns",
                self.node.inputs[0],
            )
        values = host(ctx, x).reshape(rows, columns).tolist()
        return [[dict(zip(self.labels, row, strict=True)) for row in values]]


DEFS: tuple[OpDef, ...] = (
    OpDef("ArrayFeatureExtractor", 1, ArrayFeatureExtractorOp, domain=ML),
    OpDef("Binarizer", 1, BinarizerOp, domain=ML),
    OpDef("LabelEncoder", 1, LabelEncoderOp, domain=ML),
    OpDef("TreeEnsemble", 5, TreeEnsembleOp, domain=ML),
    OpDef("TreeEnsembleRegressor", 1, TreeEnsembleRegressorOp, until=4, domain=ML),
    OpDef("TreeEnsembleClassifier", 1, TreeEnsembleClassifierOp, until=4, domain=ML),
    OpDef("LinearRegressor", 1, LinearRegressorOp, domain=ML),
    OpDef("LinearClassifier", 1, LinearClassifierOp, domain=ML),
    OpDef("Normalizer", 1, NormalizerOp, domain=ML),
    OpDef("Scaler", 1, ScalerOp, domain=ML),
    OpDef("OneHotEncoder", 1, OneHotEncoderOp, domain=ML),
    OpDef("Imputer", 1, ImputerOp, domain=ML),
    OpDef("SVMClassifier", 1, SVMClassifierOp, domain=ML),
    OpDef("SVMRegressor", 1, SVMRegressorOp, domain=ML),
    OpDef("ZipMap", 1, ZipMapOp, domain=ML),
)
