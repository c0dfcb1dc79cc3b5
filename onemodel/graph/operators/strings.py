"""String operators: StringNormalizer, StringConcat, StringSplit, RegexFullMatch, and the
n-gram counter TfIdfVectorizer (on strings or integers).

String tensors are NumPy object arrays of Python `str` on the host whatever the backend (no
device library holds them), so string kernels are Python code over the elements. Numeric
outputs (StringSplit's counts, RegexFullMatch's booleans, TfIdfVectorizer's floats) are made on
the host and copied into the backend's output array.

Where the spec leaves a choice, onnxruntime's is taken, unless noted in the class.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from onemodel.graph.onnx_proto import TensorProto
from onemodel.graph.operators.axes import INDEX_TYPES
from onemodel.graph.operators.base import (
    Array,
    InferContext,
    NodeInfo,
    OpDef,
    Operator,
    RunContext,
    TensorSpec,
)
from onemodel.graph.operators.broadcast import multidirectional
from onemodel.tensors import DType, onnx_name

STRING = TensorProto.STRING
STRING_ONLY = frozenset({STRING})


def string_array(values: Sequence[str], shape: Sequence[int]) -> np.ndarray:
    """A host object array of `values` in row-major order (np.array would make a str dtype,
    or nest lists)."""
    result = np.empty(len(values), dtype=object)
    result[:] = values
    return result.reshape(tuple(shape))


def fill_from_host(ctx: RunContext, out: Array, host: np.ndarray) -> None:
    """Copy a host result into a preallocated output of the backend."""
    out[...] = ctx.xp.asarray(host.reshape(out.shape))


def check_strings(node: NodeInfo, array: Array, index: int = 0) -> None:
    """Data-dependent string operators see no `infer`: refuse other element types here."""
    if array.dtype != object:
        raise node.invalid(
            f"{node.op_type} needs a STRING input {index}, got NumPy dtype {array.dtype}",
            node.inputs[index],
        )


# -- StringNormalizer ------------------------------------------------------------------------


def one_to_one(change: Callable[[str], str]) -> Callable[[str], str]:
    """`change` (str.upper, str.lower) applied per character, keeping characters whose change
    is not one character ('ß'.upper() is 'SS'): onnxruntime maps each wide character with the
    C++ locale's toupper/tolower, which cannot lengthen a string."""

    def apply(text: str) -> str:
        if text.isascii():
            return change(text)
        return "".join(c if len(mapped := change(c)) != 1 else mapped for c in text)

    return apply


_CASE_CHANGES: dict[str, Callable[[str], str] | None] = {
    "NONE": None,
    "LOWER": one_to_one(str.lower),
    "UPPER": one_to_one(str.upper),
}


class StringNormalizerOp(Operator):
    """Drops the elements of a [C] or [1, C] tensor that are stop words (whole elements, as
    onnxruntime matches them), then changes the case of the others.

    Case-insensitive matching compares both sides in upper case when `case_change_action` is
    UPPER and in lower case otherwise (onnxruntime's choice). When nothing is left the output
    is one empty string, shaped [1] or [1, 1]; an input with no elements (onnxruntime refuses
    it) gives the same. `locale` is accepted and ignored: case changes follow Unicode's simple
    case mappings, which is what en_US gives, and not a locale's special rules (Turkish i)."""

    supports_exact = True  # strings and counts on the host: exact by nature

    outputs_data_dependent = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        action = node.attr("case_change_action", "NONE")
        if action not in _CASE_CHANGES:
            raise node.invalid(
                f"StringNormalizer case_change_action must be NONE, LOWER or UPPER, got {action!r}"
            )
        self.change = _CASE_CHANGES[action]
        case_sensitive = bool(node.attr("is_case_sensitive", 0))
        self.fold = (
            None if case_sensitive else _CASE_CHANGES["UPPER" if action == "UPPER" else "LOWER"]
        )
        stopwords = node.attr("stopwords", [])
        self.stopwords = frozenset(stopwords if self.fold is None else map(self.fold, stopwords))

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: Any) -> list[Array]:
        (x,) = inputs
        check_strings(self.node, x)
        if not (x.ndim == 1 or (x.ndim == 2 and x.shape[0] == 1)):
            raise self.node.bad_input(
                f"StringNormalizer takes a [C] or [1, C] tensor, got shape {list(x.shape)}",
                self.node.inputs[0],
            )
        kept = [s for s in x.reshape(-1).tolist() if not self._is_stopword(s)]
        if self.change is not None:
            kept = [self.change(s) for s in kept]
        kept = kept or [""]
        return [string_array(kept, (*x.shape[:-1], len(kept)))]

    def _is_stopword(self, text: str) -> bool:
        if not self.stopwords:
            return False
        return (text if self.fold is None else self.fold(text)) in self.stopwords


# -- StringConcat ----------------------------------------------------------------------------


class StringConcatOp(Operator):
    """Element-wise concatenation, broadcast multidirectionally."""

    supports_exact = True  # strings and counts on the host: exact by nature

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        self.check_types(ctx, STRING_ONLY, 0, 1)
        return [ctx.output(STRING, multidirectional(ctx, (0, 1)))]

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: list[Array]) -> None:
        a, b = inputs
        np.add(a, b, out=outputs[0])  # object arrays: str.__add__ per element


# -- StringSplit -----------------------------------------------------------------------------

# C's isspace in the "C" locale; onnxruntime splits on spaces only (a tab is not a separator
# there), the spec says whitespace.
_WHITESPACE = " \t\n\v\f\r"
_WHITESPACE_RUN = re.compile(f"[{re.escape(_WHITESPACE)}]+")


class StringSplitOp(Operator):
    """Each element split into substrings: [..., M] strings padded with "" to the most
    substrings M of any element, and the int64 counts.

    Without a delimiter (or with ""), runs of whitespace separate and leading and trailing
    whitespace is dropped; with one, every delimiter separates (empty substrings included).
    At most `maxsplit` splits (negative or absent: no limit). An empty string has no
    substrings, as in onnxruntime (Python's str.split would give [""])."""

    supports_exact = True  # strings and counts on the host: exact by nature

    outputs_data_dependent = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.delimiter = node.attr("delimiter", "") or None
        maxsplit = node.attr("maxsplit", None)
        self.maxsplit = -1 if maxsplit is None or maxsplit < 0 else int(maxsplit)

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: Any) -> list[Array]:
        (x,) = inputs
        check_strings(self.node, x)
        pieces = [self.split(s) for s in x.reshape(-1).tolist()]
        width = max(map(len, pieces), default=0)
        padded = [p + [""] * (width - len(p)) for p in pieces]
        substrings = string_array([s for row in padded for s in row], (*x.shape, width))
        counts = np.array([len(p) for p in pieces], dtype=np.int64).reshape(x.shape)
        return [substrings, ctx.xp.asarray(counts)]

    def split(self, text: str) -> list[str]:
        if not text:
            return []
        if self.delimiter is not None:
            return text.split(self.delimiter, self.maxsplit)
        stripped = text.strip(_WHITESPACE)
        if not stripped:
            return []
        if self.maxsplit == 0:
            return [stripped]
        return _WHITESPACE_RUN.split(stripped, max(self.maxsplit, 0))


# -- RegexFullMatch --------------------------------------------------------------------------

# RE2's POSIX classes, as ASCII ranges for a Python character class.
_POSIX_CLASSES = {
    "alnum": "0-9A-Za-z", "alpha": "A-Za-z", "ascii": "\\x00-\\x7f", "blank": "\\t ",
    "cntrl": "\\x00-\\x1f\\x7f", "digit": "0-9", "graph": "!-~", "lower": "a-z",
    "print": " -~", "punct": "!-/:-@\\[-`{-~", "space": "\\t\\n\\v\\f\\r ", "upper": "A-Z",
    "word": "0-9A-Za-z_", "xdigit": "0-9A-Fa-f",
}  # fmt: skip
# RE2 syntax Python's re has no equivalent for.
_UNTRANSLATABLE = re.compile(r"\\[pPC]|\(\?[a-zA-Z]*U")


def python_pattern(pattern: str) -> str:
    """An RE2 pattern rewritten for Python's re: \\Q...\\E quoting, \\z, and POSIX classes
    ([[:alpha:]]) inside bracket expressions. Everything else is written alike in both."""
    out: list[str] = []
    i, in_class = 0, False
    while i < len(pattern):
        c = pattern[i]
        if c == "\\" and pattern.startswith("\\Q", i):
            end = pattern.find("\\E", i + 2)
            end = len(pattern) if end < 0 else end
            out.append(re.escape(pattern[i + 2 : end]))
            i = end + 2
        elif c == "\\":
            escape = pattern[i : i + 2]
            out.append("\\Z" if escape == "\\z" and not in_class else escape)
            i += 2
        elif in_class and pattern.startswith("[:", i) and (end := pattern.find(":]", i)) > 0:
            name = pattern[i + 2 : end]
            if name not in _POSIX_CLASSES:
                raise ValueError(f"unknown POSIX class [:{name}:]")
            out.append(_POSIX_CLASSES[name])
            i = end + 2
        elif c == "[" and not in_class:
            in_class = True
            start = i + 1 + pattern.startswith("^", i + 1)
            start += pattern.startswith("]", start)  # a leading ] is a literal
            out.append(pattern[i:start])
            i = start
        else:
            in_class = in_class and c != "]"
            out.append(c)
            i += 1
    return "".join(out)


class RegexFullMatchOp(Operator):
    """Whether each element matches `pattern` as a whole, with Python's re standing in for
    RE2: the pattern is rewritten where the two spell a thing differently (see
    `python_pattern`) and compiled with re.ASCII, so that \\w, \\d, \\s and \\b are ASCII as in
    RE2. Remaining differences: \\s also matches \\v; (?i) folds ASCII letters only; Python
    accepts backreferences and lookaround, which RE2 refuses; Unicode classes (\\pL) and the
    (?U) flag are unsupported."""

    supports_exact = True  # strings and counts on the host: exact by nature

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        pattern = node.attr("pattern")
        if _UNTRANSLATABLE.search(pattern):
            raise node.unsupported(
                f"RegexFullMatch pattern {pattern!r} uses RE2 syntax (\\p, \\C or (?U)) that "
                "onemodel does not translate"
            )
        try:
            self.regex = re.compile(python_pattern(pattern), re.ASCII)
        except (re.error, ValueError) as error:
            raise node.invalid(f"RegexFullMatch pattern {pattern!r} is invalid: {error}") from None

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        self.check_types(ctx, STRING_ONLY, 0)
        return [ctx.output(DType.BOOL, ctx.shape(0))]

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: list[Array]) -> None:
        matches = [self.regex.fullmatch(s) is not None for s in inputs[0].reshape(-1).tolist()]
        fill_from_host(ctx, outputs[0], np.array(matches, dtype=np.bool_))


# -- TfIdfVectorizer -------------------------------------------------------------------------

_MODES = ("TF", "IDF", "TFIDF")


class TfIdfVectorizerOp(Operator):
    """Counts the pool's n-grams in each row of a [C] or [B, C] input: Y[..., ngram_indexes[i]]
    adds up the i-th pool n-gram's score (n-grams sharing an output index add up).

    An n-gram of length n >= 2 is taken with every skip 0..max_skip_count between its items,
    each skip counted on its own; unigrams are counted once per position. TF scores the
    count, IDF the weight when the count is not 0, TFIDF the count times the weight (weights
    default to 1). Counting runs on the host (dictionary look-ups of n-grams)."""

    supports_exact = True  # strings and counts on the host: exact by nature

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.mode = node.attr("mode")
        if self.mode not in _MODES:
            raise node.invalid(f"TfIdfVectorizer mode must be TF, IDF or TFIDF, got {self.mode!r}")
        self.min_gram = int(node.attr("min_gram_length"))
        self.max_gram = int(node.attr("max_gram_length"))
        self.max_skip = int(node.attr("max_skip_count"))
        starts = [int(s) for s in node.attr("ngram_counts")]
        self.indexes = np.asarray(node.attr("ngram_indexes"), dtype=np.int64)
        strings, ints = node.attr("pool_strings", None), node.attr("pool_int64s", None)
        if (strings is None) == (ints is None):
            raise node.invalid("TfIdfVectorizer needs exactly one of pool_strings, pool_int64s")
        self.pool_type = STRING if strings is not None else TensorProto.INT64
        pool = list(strings if strings is not None else map(int, ints))
        if not 1 <= self.min_gram <= self.max_gram <= len(starts) or self.max_skip < 0:
            raise node.invalid(
                f"TfIdfVectorizer needs 1 <= min_gram_length ({self.min_gram}) <= "
                f"max_gram_length ({self.max_gram}) <= len(ngram_counts) ({len(starts)}) and "
                f"max_skip_count >= 0 ({self.max_skip})"
            )
        self.grams = self._pool_grams(pool, starts)
        count = sum(len(g) for g in self.grams.values())
        weights = node.attr("weights", None)
        self.weights = np.ones(count) if weights is None else np.asarray(weights, np.float64)
        if len(self.indexes) != count or len(self.weights) != count or (self.indexes < 0).any():
            raise node.invalid(
                f"TfIdfVectorizer pool holds {count} n-grams but ngram_indexes has "
                f"{len(self.indexes)} (none negative) and weights {len(self.weights)}"
            )
        self.width = int(self.indexes.max()) + 1 if count else 0

    def _pool_grams(self, pool: list, starts: list[int]) -> dict[int, dict[tuple, int]]:
        """For each n-gram length, each n-gram of the pool and its position among them all."""
        grams: dict[int, dict[tuple, int]] = {}
        ends = [*starts[1:], len(pool)]
        position = 0
        for n, (start, end) in enumerate(zip(starts, ends, strict=True), start=1):
            if not 0 <= start <= end <= len(pool) or (end - start) % n:
                raise self.node.invalid(
                    f"TfIdfVectorizer ngram_counts {starts} do not split a pool of {len(pool)} "
                    f"items into whole {n}-grams"
                )
            table = grams.setdefault(n, {})
            for offset in range(start, end, n):
                gram = tuple(pool[offset : offset + n])
                if gram in table:
                    raise self.node.invalid(f"TfIdfVectorizer pool repeats the n-gram {gram}")
                table[gram] = position
                position += 1
        return grams

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        allowed = STRING_ONLY if self.pool_type == STRING else INDEX_TYPES
        if ctx.dtype(0) not in allowed:
            pool = "pool_strings" if self.pool_type == STRING else "pool_int64s"
            raise self.node.invalid(
                f"TfIdfVectorizer with {pool} does not take {onnx_name(ctx.dtype(0))} input",
                self.node.inputs[0],
            )
        shape = ctx.shape(0)
        if len(shape) not in (1, 2):
            raise self.node.bad_input(
                f"TfIdfVectorizer takes a [C] or [B, C] input, got shape {list(shape)}",
                self.node.inputs[0],
            )
        return [ctx.output(DType.FLOAT, (*shape[:-1], self.width))]

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: list[Array]) -> None:
        x = inputs[0]
        host = x if x.dtype == object else ctx.kernels.memory.to_host(x)
        host = np.asarray(host)
        rows = host.reshape(int(np.prod(host.shape[:-1])), host.shape[-1]).tolist()
        counts = np.array([self._counts(row) for row in rows], dtype=np.float64).reshape(
            len(rows), len(self.weights)
        )
        if self.mode == "IDF":
            counts = (counts > 0) * self.weights
        elif self.mode == "TFIDF":
            counts = counts * self.weights
        result = np.zeros((len(rows), self.width), dtype=np.float64)
        np.add.at(result.T, self.indexes, counts.T)
        fill_from_host(ctx, outputs[0], result.astype(np.float32))

    def _counts(self, row: list) -> list[int]:
        """How often each pool n-gram occurs in one row."""
        counts = [0] * len(self.weights)
        for n in range(self.min_gram, self.max_gram + 1):
            table = self.grams.get(n)
            if not table:
                continue
            for skip in range(self.max_skip + 1 if n > 1 else 1):
                step = skip + 1
                span = (n - 1) * step
                for start in range(len(row) - span):
                    position = table.get(tuple(row[start : start + span + 1 : step]))
                    if position is not None:
                        counts[position] += 1
        return counts


DEFS: tuple[OpDef, ...] = (
    OpDef("StringNormalizer", 10, StringNormalizerOp),
    OpDef("StringConcat", 20, StringConcatOp),
    OpDef("StringSplit", 20, StringSplitOp),
    OpDef("RegexFullMatch", 20, RegexFullMatchOp),
    OpDef("TfIdfVectorizer", 9, TfIdfVectorizerOp),
)
