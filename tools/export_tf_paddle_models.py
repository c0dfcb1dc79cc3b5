"""Export Keras models with tf2onnx and Paddle models with paddle2onnx (random weights, nothing
downloaded), check them against onnxruntime, and store the small ones as goldens.

TensorFlow and Paddle are not project dependencies, and neither belongs in the project's
environment (their protobuf and onnx pins fight it), so each exporter gets a venv of its own:

    python -m venv /work/venv-tf && /work/venv-tf/bin/pip install tensorflow-cpu tf2onnx
    python -m venv /work/venv-paddle && /work/venv-paddle/bin/pip install \\
        paddlepaddle paddle2onnx packaging

(tested with tensorflow-cpu 2.21, keras 3.15, tf2onnx 1.17; paddlepaddle 3.3, paddle2onnx 2.1,
on Python 3.11). Then, from the repository root:

    /work/venv-tf/bin/python tools/export_tf_paddle_models.py keras OUT
    /work/venv-paddle/bin/python tools/export_tf_paddle_models.py paddle OUT
    python tools/export_tf_paddle_models.py check OUT     # the project's env: onemodel vs ort
    python tools/export_tf_paddle_models.py golden OUT    # writes tests/models/real/

An optional third argument names the models to export, separated by commas (crnn,unet).

An export writes OUT/<name>.onnx and OUT/<name>.feeds.npz (its random inputs: token ids in
range for an embedding). `check` loads every model in fast and exact mode and compares each
with onnxruntime's CPU provider (rtol 1e-3, atol 1e-4; integers equal). `golden` copies the
models named in GOLDENS into tests/models/real/ with onnxruntime's outputs
(tests/real_exports.py store_golden), which tests/test_real_exports.py runs everywhere.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from output_difference import first_difference

SEED = 0
KERAS_OPSETS = (13, 15, 18)
PADDLE_OPSETS = (11, 13, 17)
ONLY = set(sys.argv[3].split(",")) if len(sys.argv) > 3 else set()  # optional: names to export
# Small exports stored as goldens (tests/models/real/<name>.onnx), each well under 300 KB.
GOLDENS = {
    "tf2onnx-textcnn-op13": "keras-textcnn-op13",
    "tf2onnx-stacked-rnn-op15": "keras-stacked-rnn-op15",
    "tf2onnx-masked-rnn-op15": "keras-masked-rnn-op15",
    "tf2onnx-mobilenetv3-op18": "keras-tiny-mobilenetv3-op18",
    "tf2onnx-unet-op15": "keras-unet-op15",
    "tf2onnx-convs-op13": "keras-convs-op13",
    "tf2onnx-cnn-fp16-op18": "keras-float16-op18",
    "tf2onnx-while-loop-op17": "tf-while-loop-op17",
    "paddle2onnx-db-detector-op11": "paddle-db-detector-op11",
    "paddle2onnx-crnn-op13": "paddle-crnn-op13",
    "paddle2onnx-svtr-rec-op17": "paddle-svtr-rec-op17",
}


def _rng() -> np.random.Generator:
    return np.random.default_rng(SEED)


def _save_feeds(out: Path, name: str, feeds: dict[str, np.ndarray]) -> None:
    np.savez(out / f"{name}.feeds.npz", **feeds)


# -- Keras (tf2onnx) ---------------------------------------------------------------------------


def _legacy() -> bool:
    """TF_USE_LEGACY_KERAS=1 (with tf_keras installed) builds the models with Keras 2, whose
    graphs tf2onnx has converted for longest (its LSTM/GRU while loops differ from Keras 3's)."""
    return os.environ.get("TF_USE_LEGACY_KERAS") == "1"


def _keras() -> Any:
    import importlib

    return importlib.import_module("tf_keras" if _legacy() else "keras")


def keras_models() -> dict[str, tuple[Callable[[], Any], dict[str, tuple[tuple, str]]]]:
    """name → (build the model, {input name: (shape with None, dtype)})."""
    import tensorflow as tf

    keras = _keras()
    layers = keras.layers

    def gelu(t: Any) -> Any:
        """Keras' exact gelu is written with Erfc, which tf2onnx passes on as an operator
        ONNX lacks (onnxruntime and onemodel both refuse it): the tanh form."""
        return keras.activations.gelu(t, approximate=True)

    def seq_input(shape: tuple, dtype: str = "float32", name: str = "x") -> Any:
        return keras.Input(shape[1:], batch_size=None, dtype=dtype, name=name)

    def textcnn() -> Any:
        x = seq_input((None, 20), "int32", "tokens")
        h = layers.Embedding(50, 12)(x)
        h = layers.Conv1D(16, 3, activation="relu", padding="same")(h)
        h = layers.Conv1D(8, 5, strides=2, padding="same", activation="swish")(h)
        h = layers.GlobalMaxPooling1D()(h)
        h = layers.Dropout(0.3)(h)
        return keras.Model(x, layers.Dense(4, activation="softmax")(h))

    def onehot_cnn() -> Any:
        x = seq_input((None, 24), "int32", "tokens")
        hot = layers.Lambda(lambda t: tf.one_hot(t, 21), output_shape=(24, 21))(x)
        eq = layers.Lambda(
            lambda t: tf.cast(tf.equal(t[..., None], tf.range(21, dtype=t.dtype)), tf.float32),
            output_shape=(24, 21),
        )(x)
        h = layers.Concatenate()([hot, eq])
        h = layers.Conv1D(10, 4, padding="valid", dilation_rate=2, activation=gelu)(h)
        h = layers.GlobalAveragePooling1D()(h)
        return keras.Model(x, layers.Dense(3)(h))

    def rnn(kind: str) -> Callable[[], Any]:
        def build() -> Any:
            x = seq_input((None, 7, 6))
            if kind == "lstm":
                h = layers.LSTM(8)(x)
            elif kind == "gru":
                h = layers.GRU(8)(x)
            elif kind == "gru-v1":
                h = layers.GRU(8, reset_after=False)(x)
            elif kind == "simplernn":
                h = layers.SimpleRNN(8)(x)
            elif kind == "bilstm":
                h = layers.Bidirectional(layers.LSTM(6, return_sequences=True))(x)
                h = layers.Dense(5)(h)
            else:  # stacked
                h = layers.LSTM(8, return_sequences=True)(x)
                h = layers.GRU(6, return_sequences=True)(h)
                h = layers.LSTM(4)(h)
            return keras.Model(x, h)

        return build

    def application(factory: str, **kwargs: Any) -> Callable[[], Any]:
        def build() -> Any:
            cls = getattr(keras.applications, factory)
            return cls(input_shape=(32, 32, 3), weights=None, classes=10, **kwargs)

        return build

    def tiny_mobilenetv3() -> Any:
        """MobileNetV3's blocks (hard-swish, squeeze-excite, depthwise) at a few KB."""

        def hard_swish(t: Any) -> Any:
            return layers.Multiply()([t, layers.Activation("hard_sigmoid")(t)])

        x = seq_input((None, 32, 32, 3), name="image")
        h = layers.Conv2D(8, 3, strides=2, padding="same", use_bias=False)(x)
        h = layers.BatchNormalization()(h)
        h = hard_swish(h)
        for filters, stride in ((8, 2), (12, 1), (16, 2)):
            d = layers.DepthwiseConv2D(3, strides=stride, padding="same")(h)
            d = layers.BatchNormalization()(d)
            d = layers.ReLU(6.0)(d)
            s = layers.GlobalAveragePooling2D(keepdims=True)(d)
            s = layers.Conv2D(4, 1, activation="relu")(s)
            s = layers.Conv2D(d.shape[-1], 1, activation="hard_sigmoid")(s)
            d = layers.Multiply()([d, s])
            h = layers.Conv2D(filters, 1)(d)
            h = hard_swish(layers.BatchNormalization()(h))
        h = layers.GlobalAveragePooling2D()(h)
        return keras.Model(x, layers.Dense(5, activation="softmax")(h))

    def unet() -> Any:
        x = seq_input((None, 32, 32, 3), name="image")
        c1 = layers.Conv2D(8, 3, padding="same", activation="relu")(x)
        p1 = layers.MaxPooling2D()(c1)
        c2 = layers.Conv2D(12, 3, padding="same", activation="relu")(p1)
        p2 = layers.Conv2D(16, 3, strides=2, padding="same")(c2)
        b = layers.SeparableConv2D(16, 3, padding="same", activation="relu")(p2)
        u2 = layers.Conv2DTranspose(12, 2, strides=2, padding="same")(b)
        u2 = layers.Concatenate()([u2, c2])
        u1 = layers.UpSampling2D(interpolation="nearest")(u2)
        u1 = layers.Concatenate()([u1, c1])
        u1 = layers.Conv2D(8, 3, padding="same", activation="relu")(u1)
        return keras.Model(x, layers.Conv2D(2, 1, activation="sigmoid")(u1))

    def convs() -> Any:
        x = seq_input((None, 30, 30, 4), name="image")
        h = layers.Conv2D(8, 3, strides=2, padding="same")(x)  # pads 0 before, 1 after
        h = layers.BatchNormalization()(h)
        h = layers.Activation(gelu)(h)
        h = layers.Conv2D(8, 3, dilation_rate=2, padding="same", activation="swish")(h)
        h = layers.DepthwiseConv2D(3, depth_multiplier=2, padding="same")(h)
        h = layers.SeparableConv2D(8, 3, strides=2, padding="same", activation="hard_sigmoid")(h)
        a = layers.Resizing(12, 12, interpolation="bilinear")(h)
        b = layers.Resizing(12, 12, interpolation="nearest")(h)
        c = layers.Lambda(
            lambda t: tf.image.resize(t, (16, 16), method="bilinear"), output_shape=(16, 16, 8)
        )(h)
        c = layers.AveragePooling2D(padding="same", strides=1, pool_size=5)(c)
        c = layers.Resizing(12, 12)(c)
        h = layers.Concatenate()([a, b, c])
        h = layers.Conv2D(6, 1)(h)
        h = layers.Softmax(axis=-1)(h)
        return keras.Model(x, layers.GlobalAveragePooling2D()(h))

    def transformer() -> Any:
        x = seq_input((None, 9, 16))
        a = layers.MultiHeadAttention(num_heads=2, key_dim=8)(x, x)
        h = layers.LayerNormalization()(x + a)
        f = layers.Dense(32, activation=gelu)(h)
        f = layers.Dense(16)(f)
        h = layers.LayerNormalization(epsilon=1e-5)(h + f)
        return keras.Model(x, layers.Dense(3)(layers.GlobalAveragePooling1D()(h)))

    def mixed_float16() -> Any:
        keras.mixed_precision.set_global_policy("mixed_float16")
        try:
            x = seq_input((None, 16, 16, 3), name="image")
            h = layers.Conv2D(8, 3, padding="same", activation="relu")(x)
            h = layers.GlobalAveragePooling2D()(h)
            h = layers.Dense(4)(h)
            return keras.Model(x, layers.Activation("softmax", dtype="float32")(h))
        finally:
            keras.mixed_precision.set_global_policy("float32")

    def masked_lstm() -> Any:
        x = seq_input((None, 12), "int32", "tokens")
        h = layers.Embedding(20, 8, mask_zero=True)(x)
        h = layers.Bidirectional(layers.GRU(6, return_sequences=True))(h)
        h = layers.LSTM(5, go_backwards=True)(h)
        return keras.Model(x, layers.Dense(2)(h))

    def layer_zoo() -> Any:
        x = seq_input((None, 10, 12, 4), name="image")
        h = layers.ZeroPadding2D(((1, 2), (0, 1)))(x)
        h = layers.Conv2D(6, (3, 2), strides=(2, 1), padding="valid")(h)
        h = layers.PReLU(shared_axes=[1, 2])(h)
        h = layers.Cropping2D(((0, 1), (1, 1)))(h)
        h = layers.LeakyReLU(0.2)(h)
        h = layers.ELU()(h)
        h = layers.UnitNormalization()(h)
        h = layers.GroupNormalization(groups=3)(h)
        t = layers.Reshape((-1, 6))(h)
        t = layers.Permute((2, 1))(t)
        t = layers.TimeDistributed(layers.Dense(4, activation="tanh"))(t)
        a = layers.Attention(use_scale=True)([t, t])
        v = layers.Conv3D(2, 2, padding="same")(layers.Reshape((6, 4, 1, 1))(a))
        return keras.Model(x, [layers.Flatten()(v), layers.Rescaling(0.5, 0.1)(a)])

    def float16_policy() -> Any:
        keras.mixed_precision.set_global_policy("float16")
        try:
            x = seq_input((None, 8, 8, 3), "float16", "image")
            h = layers.Conv2D(6, 3, strides=2, padding="same", activation="relu")(x)
            h = layers.BatchNormalization()(h)
            h = layers.DepthwiseConv2D(3, padding="same", activation="swish")(h)
            h = layers.GlobalAveragePooling2D()(h)
            return keras.Model(x, layers.Dense(3, activation="softmax")(h))
        finally:
            keras.mixed_precision.set_global_policy("float32")

    def resampling() -> Any:
        x = seq_input((None, 9, 11, 3), name="image")
        outs = [
            layers.Conv2DTranspose(3, 3, strides=2, padding="same")(x),
            # output_padding with padding="valid" makes tf2onnx write negative pads
            layers.Conv2DTranspose(3, 3, strides=2, padding="valid")(x),
            layers.UpSampling2D(interpolation="bilinear")(x),
            layers.Resizing(18, 22, interpolation="bicubic")(x),
            layers.Resizing(18, 22, interpolation="nearest")(x),
            layers.Resizing(18, 22, interpolation="bilinear", crop_to_aspect_ratio=True)(x),
        ]
        outs = [layers.Cropping2D(((0, o.shape[1] - 18), (0, o.shape[2] - 22)))(o) for o in outs]
        sequence = layers.Reshape((9, 33))(x)
        causal = layers.Conv1D(4, 3, padding="causal", dilation_rate=2)(sequence)
        up = layers.Conv1DTranspose(4, 3, strides=2, padding="same")(causal)
        return keras.Model(x, [layers.Concatenate()(outs), layers.UpSampling1D(2)(up)])

    floats = {"x": ((None, 7, 6), "float32")}
    image32 = {"image": ((None, 32, 32, 3), "float32")}
    applied = {"input": ((None, 32, 32, 3), "float32")}
    return {
        "textcnn": (textcnn, {"tokens": ((None, 20), "int32")}),
        "onehot-cnn": (onehot_cnn, {"tokens": ((None, 24), "int32")}),
        "lstm": (rnn("lstm"), floats),
        "gru": (rnn("gru"), floats),
        "gru-v1": (rnn("gru-v1"), floats),
        "simplernn": (rnn("simplernn"), floats),
        "bilstm": (rnn("bilstm"), floats),
        "stacked-rnn": (rnn("stacked"), floats),
        "tiny-mobilenetv3": (tiny_mobilenetv3, image32),
        "unet": (unet, image32),
        "convs": (convs, {"image": ((None, 30, 30, 4), "float32")}),
        "transformer": (transformer, {"x": ((None, 9, 16), "float32")}),
        "resampling": (resampling, {"image": ((None, 9, 11, 3), "float32")}),
        "masked-rnn": (masked_lstm, {"tokens": ((None, 12), "int32")}),
        "layer-zoo": (layer_zoo, {"image": ((None, 10, 12, 4), "float32")}),
        "float16": (float16_policy, {"image": ((None, 8, 8, 3), "float16")}),
        "mixed-float16": (mixed_float16, {"image": ((None, 16, 16, 3), "float32")}),
        "mobilenetv2": (application("MobileNetV2", alpha=0.35), applied),
        "mobilenetv3small": (application("MobileNetV3Small", alpha=0.75), applied),
        "efficientnetb0": (application("EfficientNetB0"), applied),
        "resnet50": (application("ResNet50"), applied),
    }  # fmt: skip


def _feeds(inputs: dict[str, tuple[tuple, str]], batch: int = 2) -> dict[str, np.ndarray]:
    rng = _rng()
    feeds = {}
    for name, (shape, dtype) in inputs.items():
        dims = [batch if d is None else d for d in shape]
        if dtype.startswith("int"):
            feeds[name] = rng.integers(0, 20, dims).astype(dtype)
        else:
            feeds[name] = rng.standard_normal(dims).astype(dtype)
    return feeds


def tf_functions() -> dict[str, tuple[Callable[..., Any], dict[str, tuple[tuple, str]]]]:
    """Graphs a tf.function writes: Einsum, Where/Cast, shape arithmetic, a while loop."""
    import tensorflow as tf

    rng = _rng()
    weights = rng.standard_normal((8, 5)).astype(np.float32)

    def shapes_and_einsum(x: Any) -> Any:
        y = tf.einsum("btc,cd->btd", x, tf.constant(weights))  # a constant, not a capture
        steps = tf.shape(x)[1]
        half = tf.cast(steps // 2, tf.int64)
        mask = tf.sequence_mask(tf.fill([tf.shape(x)[0]], half), tf.cast(steps, tf.int64))
        y = tf.where(mask[..., None], y, tf.nn.leaky_relu(y)) + y * (1.0 + tf.math.erf(y * 0.7071))
        y = tf.squeeze(tf.reduce_mean(y[:, 1:, None, :], axis=1), axis=1)
        return tf.nn.softmax(y) * tf.cast(steps, tf.float32)

    def while_loop(x: Any) -> Any:
        n = tf.shape(x)[1]

        def body(i: Any, acc: Any) -> tuple[Any, Any]:
            return i + 1, acc * 0.5 + tf.tanh(x[:, i])

        _, acc = tf.while_loop(lambda i, acc: i < n, body, (0, tf.zeros_like(x[:, 0])))
        return acc

    def scan(x: Any) -> Any:
        return tf.scan(lambda a, t: a * 0.9 + t, tf.transpose(x, [1, 0, 2]))

    def indexing(x: Any) -> Any:
        top = tf.math.top_k(x, k=3)
        picked = tf.gather(x, tf.argmax(x, axis=-1, output_type=tf.int64), axis=2, batch_dims=2)
        y = tf.reverse(tf.math.cumsum(x, axis=1, exclusive=True), axis=[1])[..., ::2]
        y = y[:, tf.newaxis, 1:-1, ...]
        z = tf.tile(tf.reduce_sum(top.values, axis=-1, keepdims=True), [1, 1, 2])
        ends = tf.gather_nd(x, [[0, 0], [1, 2]])
        return y, z + picked[..., None], ends, tf.cast(top.indices, tf.int64)

    def blocks(x: Any) -> Any:
        image = tf.reshape(x, [-1, 4, 4, 3])  # 48 values per row of x's 6x8
        depth = tf.nn.space_to_depth(image, 2)
        back = tf.nn.depth_to_space(depth * 2.0, 2)
        pooled = tf.nn.avg_pool2d(back, 3, 2, "SAME") + tf.nn.max_pool2d(back, 2, 2, "SAME")
        return tf.math.reduce_logsumexp(pooled, axis=[1, 2]), tf.clip_by_value(back, -0.5, 0.5)

    def numerics(x: Any) -> Any:
        ints = tf.cast(x * 10.0, tf.int32)
        div = tf.math.floordiv(ints, 3) + tf.math.floormod(ints, 4)
        banded = tf.linalg.band_part(tf.matmul(x, x, transpose_b=True), 1, 0)
        spread = tf.math.reduce_std(x, axis=-1) + tf.norm(x, axis=-1)
        ranked = tf.argsort(x, axis=-1, direction="DESCENDING")
        rounded = tf.math.round(x * 2.0) + tf.sign(x) + tf.math.squared_difference(x, 0.5)
        normed = tf.nn.l2_normalize(x, axis=-1) + tf.math.reciprocal_no_nan(x)
        return div, banded, spread, tf.cast(ranked, tf.int64), rounded + normed

    def spectrum(x: Any) -> Any:
        frames = tf.signal.frame(x[:, 0, :], 4, 2)
        return tf.abs(tf.signal.rfft(frames))

    dynamic = {"x": ((None, None, 8), "float32")}
    return {
        "tf-numerics": (numerics, {"x": ((None, 6, 8), "float32")}),
        "tf-spectrum": (spectrum, {"x": ((None, 6, 8), "float32")}),
        "tf-indexing": (indexing, {"x": ((2, None, 8), "float32")}),
        "tf-blocks": (blocks, {"x": ((None, 6, 8), "float32")}),
        "tf-shapes-einsum": (shapes_and_einsum, dynamic),
        "tf-while-loop": (while_loop, dynamic),
        "tf-scan": (scan, dynamic),
    }


def export_keras(out: Path) -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow as tf
    import tf2onnx

    keras = _keras()
    family = "keras2" if _legacy() else "keras"

    def signature(inputs: dict[str, tuple[tuple, str]]) -> tuple:
        return tuple(tf.TensorSpec(s, getattr(tf, d), name=n) for n, (s, d) in inputs.items())

    for name, (build, inputs) in keras_models().items():
        if ONLY and name not in ONLY:
            continue
        keras.utils.set_random_seed(SEED)
        try:
            model = build()
        except Exception as error:
            print(f"{family}-{name}: build failed: {error}")
            continue
        for opset in KERAS_OPSETS:
            target = f"{family}-{name}-op{opset}"
            try:
                tf2onnx.convert.from_keras(
                    model, input_signature=signature(inputs), opset=opset,
                    output_path=str(out / f"{target}.onnx"),
                )  # fmt: skip
                _save_feeds(out, target, _feeds(inputs))
                print(f"{target}: exported")
            except Exception as error:
                print(f"{target}: exporter failed: {type(error).__name__}: {error}")
        if name in ("textcnn", "tiny-mobilenetv3", "lstm"):
            _export_saved_model(model, inputs, out / f"{family}-{name}-savedmodel")
    for name, (function, inputs) in tf_functions().items():
        if (ONLY and name not in ONLY) or _legacy():
            continue
        for opset in (13, 17):
            target = f"{name}-op{opset}"
            try:
                tf2onnx.convert.from_function(
                    tf.function(function), input_signature=signature(inputs), opset=opset,
                    output_path=str(out / f"{target}.onnx"),
                )  # fmt: skip
                feeds = _feeds({k: ((None, 6, 8), d) for k, (_, d) in inputs.items()})
                _save_feeds(out, target, feeds)
                print(f"{target}: exported")
            except Exception as error:
                print(f"{target}: exporter failed: {type(error).__name__}: {error}")


def _export_saved_model(model: Any, inputs: dict[str, tuple[tuple, str]], folder: Path) -> None:
    """Keras 3's SavedModel export, converted by tf2onnx's command line as users run it."""
    import subprocess

    try:
        if _legacy():
            model.export(str(folder))
        else:
            model.export(str(folder), format="tf_saved_model", verbose=False)
    except Exception as error:
        print(f"{folder.name}: SavedModel export failed: {error}")
        return
    target = f"{folder.name}-op17"
    command = [sys.executable, "-m", "tf2onnx.convert", "--saved-model", str(folder),
               "--opset", "17", "--output", str(folder.parent / f"{target}.onnx")]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode:
        print(f"{target}: exporter failed: {done.stderr[-400:]}")
        return
    import onnx

    model_proto = onnx.load(str(folder.parent / f"{target}.onnx"))
    names = [value.name for value in model_proto.graph.input]
    shapes = list(inputs.values())
    _save_feeds(folder.parent, target, _feeds(dict(zip(names, shapes, strict=True))))
    print(f"{target}: exported")


# -- Paddle (paddle2onnx) ----------------------------------------------------------------------


def paddle_models() -> dict[str, tuple[Callable[[], Any], list[tuple[str, list, str]], list]]:
    """name → (build the layer, [(input name, shape with None, dtype)], feed shape per input)."""
    import paddle
    import paddle.nn.functional as F
    from paddle import nn

    class ConvBNAct(nn.Layer):
        def __init__(self, cin: int, cout: int, k: int, s: int = 1, act: str | None = "hs",
                     groups: int = 1) -> None:  # fmt: skip
            super().__init__()
            self.conv = nn.Conv2D(cin, cout, k, s, padding=(k - 1) // 2, groups=groups,
                                  bias_attr=False)  # fmt: skip
            self.bn = nn.BatchNorm2D(cout)
            self.act = act

        def forward(self, x: Any) -> Any:
            x = self.bn(self.conv(x))
            if self.act == "hs":
                return F.hardswish(x)
            if self.act == "relu":
                return F.relu(x)
            return x

    class SE(nn.Layer):
        def __init__(self, c: int) -> None:
            super().__init__()
            self.pool = nn.AdaptiveAvgPool2D(1)
            self.c1 = nn.Conv2D(c, max(c // 4, 4), 1)
            self.c2 = nn.Conv2D(max(c // 4, 4), c, 1)

        def forward(self, x: Any) -> Any:
            s = F.relu(self.c1(self.pool(x)))
            # PaddleOCR's SE: hardsigmoid with slope 0.2, offset 0.5
            s = F.hardsigmoid(self.c2(s), slope=0.2, offset=0.5)
            return paddle.multiply(x, s)

    class Backbone(nn.Layer):
        """MobileNetV3-small-like, returning four scales as PaddleOCR's det backbone does."""

        def __init__(self) -> None:
            super().__init__()
            self.stem = ConvBNAct(3, 8, 3, 2)
            self.stages = nn.LayerList()
            self.channels = []
            cin = 8
            for cout, stride in ((8, 2), (12, 2), (16, 2), (24, 2)):
                self.stages.append(nn.Sequential(
                    ConvBNAct(cin, cin * 2, 1),
                    ConvBNAct(cin * 2, cin * 2, 3, stride, groups=cin * 2),
                    SE(cin * 2),
                    ConvBNAct(cin * 2, cout, 1, act=None),
                ))  # fmt: skip
                self.channels.append(cout)
                cin = cout

        def forward(self, x: Any) -> list[Any]:
            x = self.stem(x)
            outs = []
            for stage in self.stages:
                x = stage(x)
                outs.append(x)
            return outs

    def by_size(x: Any, factor: int) -> Any:
        """Nearest upsampling to a size read from the input's shape (Shape → Mul → Resize
        sizes). paddle2onnx 2.1 refuses PaddleOCR's own F.upsample(scale_factor=2) (a float
        attribute its PIR parser does not read), so the FPN is written the two ways it takes."""
        shape = paddle.shape(x)
        return F.interpolate(x, size=[shape[2] * factor, shape[3] * factor], mode="nearest")

    def by_scale(x: Any, factor: float, mode: str = "nearest") -> Any:
        """Upsampling by a scale tensor (Resize scales)."""
        scale = paddle.to_tensor([factor, factor])
        return F.interpolate(x, scale_factor=scale, mode=mode, align_corners=False)

    class DBDetector(nn.Layer):
        """Backbone + DB FPN (nearest upsampling two ways) + DB head (Conv2DTranspose, sigmoid)."""

        def __init__(self) -> None:
            super().__init__()
            self.backbone = Backbone()
            inner = 16
            self.ins = nn.LayerList([nn.Conv2D(c, inner, 1, bias_attr=False)
                                     for c in self.backbone.channels])  # fmt: skip
            self.ps = nn.LayerList([nn.Conv2D(inner, inner // 4, 3, padding=1, bias_attr=False)
                                    for _ in self.backbone.channels])  # fmt: skip
            self.head = nn.Sequential(
                nn.Conv2D(inner, 4, 3, padding=1, bias_attr=False), nn.BatchNorm2D(4), nn.ReLU(),
                nn.Conv2DTranspose(4, 4, 2, 2), nn.BatchNorm2D(4), nn.ReLU(),
                nn.Conv2DTranspose(4, 1, 2, 2),
            )  # fmt: skip

        def forward(self, x: Any) -> Any:
            c2, c3, c4, c5 = self.backbone(x)
            lateral = zip(self.ins[::-1], (c5, c4, c3, c2), strict=True)
            in5, in4, in3, in2 = (conv(c) for conv, c in lateral)
            out4 = in4 + by_size(in5, 2)
            out3 = in3 + by_scale(out4, 2.0)
            out2 = in2 + by_size(out3, 2)
            smoothing = zip(self.ps[::-1], (in5, out4, out3, out2), strict=True)
            p5, p4, p3, p2 = (conv(o) for conv, o in smoothing)
            p5 = by_scale(p5, 8.0)
            p4 = by_size(p4, 4)
            p3 = by_scale(p3, 2.0, "bilinear")
            fuse = paddle.concat([p5, p4, p3, p2], axis=1)
            return F.sigmoid(self.head(fuse))

    class CRNN(nn.Layer):
        """PaddleOCR's rec shape: conv stack to height 1, bidirectional LSTM, Linear, softmax."""

        def __init__(self) -> None:
            super().__init__()
            self.convs = nn.Sequential(
                ConvBNAct(3, 8, 3, 1, act="relu"), nn.MaxPool2D(2, 2),
                ConvBNAct(8, 12, 3, 1, act="hs"), nn.MaxPool2D(2, 2),
                ConvBNAct(12, 16, 3, 1, act="hs"), nn.MaxPool2D((2, 1), (2, 1)),
                ConvBNAct(16, 16, 3, 1, act="relu"), nn.AvgPool2D((4, 1), (4, 1)),
            )  # fmt: skip
            self.rnn = nn.LSTM(16, 12, num_layers=2, direction="bidirectional")
            self.fc = nn.Linear(24, 11)

        def forward(self, x: Any) -> Any:
            f = self.convs(x)  # N, C, 1, W
            f = paddle.squeeze(f, axis=2).transpose([0, 2, 1])  # N, W, C
            f, _ = self.rnn(f)
            return F.softmax(self.fc(f), axis=2)

    class GRUTagger(nn.Layer):
        def __init__(self) -> None:
            super().__init__()
            self.emb = nn.Embedding(30, 8)
            self.gru = nn.GRU(8, 6, direction="bidirect")
            self.fc = nn.Linear(12, 4)

        def forward(self, ids: Any) -> Any:
            h, _ = self.gru(self.emb(ids))
            return paddle.scale(self.fc(h), scale=0.5, bias=1.0)

    class SVTRRecogniser(nn.Layer):
        """PP-OCRv3/v4 rec's shape: conv stem, SVTR mixing blocks (LayerNorm, attention from a
        Reshape with 0 dims, GELU by Erf), height pooled away, a CTC Linear head."""

        def __init__(self, dim: int = 16, heads: int = 2) -> None:
            super().__init__()
            self.stem = nn.Sequential(ConvBNAct(3, 8, 3, 2, act="hs"),
                                      ConvBNAct(8, dim, 3, 2, act="hs"))  # fmt: skip
            self.heads = heads
            self.norm1 = nn.LayerNorm(dim, epsilon=1e-6)
            self.qkv = nn.Linear(dim, dim * 3)
            self.proj = nn.Linear(dim, dim)
            self.norm2 = nn.LayerNorm(dim, epsilon=1e-6)
            self.mlp = nn.Sequential(nn.Linear(dim, dim * 2), nn.GELU(), nn.Linear(dim * 2, dim))
            self.pool = nn.AvgPool2D((8, 1))
            self.head = nn.Linear(dim, 9)

        def forward(self, x: Any) -> Any:
            z = self.stem(x)  # N, C, 8, W/4
            c, h = z.shape[1:3]
            t = z.flatten(2).transpose([0, 2, 1])  # N, HW, C
            q = self.qkv(self.norm1(t)).reshape([0, -1, 3, self.heads, c // self.heads])
            q = q.transpose([2, 0, 3, 1, 4])
            attn = F.softmax(paddle.matmul(q[0] * (c // self.heads) ** -0.5, q[1],
                                           transpose_y=True), axis=-1)  # fmt: skip
            mixed = paddle.matmul(attn, q[2]).transpose([0, 2, 1, 3]).reshape([0, -1, c])
            t = t + self.proj(mixed)
            t = t + self.mlp(self.norm2(t))
            z = t.transpose([0, 2, 1]).reshape([0, c, h, -1])
            z = F.hardswish(self.pool(z)).squeeze(2).transpose([0, 2, 1])
            return F.softmax(self.head(z), axis=-1)

    class Activations(nn.Layer):
        """The ways Paddle writes its activations and scales, each a branch of one sum."""

        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2D(4, 6, 3, padding=1)
            self.prelu = nn.PReLU(6)

        def forward(self, x: Any) -> Any:
            y = self.conv(x)
            parts = [
                nn.Hardswish()(y),
                F.hardsigmoid(y),
                F.relu6(y + 3.0) / 6.0 * y,
                paddle.clip(y, -1.0, 1.0),
                F.swish(y),
                F.mish(y),
                F.leaky_relu(y, 0.1),
                self.prelu(y),
                F.elu(y),
                F.selu(y),
                F.silu(y),
                F.tanhshrink(y),
                paddle.scale(y, scale=2.0, bias=0.5, bias_after_scale=False),
                F.gelu(y, approximate=True),
                F.hardtanh(y),
                F.thresholded_relu(y, 0.5),
                paddle.pow(paddle.abs(y), 1.5),
                paddle.rsqrt(paddle.abs(y) + 1.0),
            ]
            total = paddle.add_n(parts)
            total = total + paddle.mean(y, axis=[2, 3], keepdim=True) * paddle.max(
                y, axis=1, keepdim=True
            )
            return F.log_softmax(paddle.flatten(total, 1), axis=-1)

    class TensorOps(nn.Layer):
        """Indexing and shape habits: argmax/topk ints, gather, flips, pixel shuffle, norms,
        grid sampling, cumulative sums, where/masks, one-hot, einsum."""

        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2D(4, 8, 3, padding=1)
            self.inorm = nn.InstanceNorm2D(8)
            self.gnorm = nn.GroupNorm(2, 8)

        def forward(self, x: Any) -> Any:
            y = self.conv(x)
            y = self.inorm(y) + self.gnorm(y)
            shuffled = F.pixel_shuffle(y, 2)  # N, 2, 2H, 2W
            grid = paddle.tanh(paddle.transpose(y[:, :2], [0, 2, 3, 1]))
            sampled = F.grid_sample(x, grid, mode="bilinear", padding_mode="zeros",
                                    align_corners=False)  # fmt: skip
            flat = paddle.flatten(y, 2)  # N, 8, HW
            best = paddle.argmax(flat, axis=-1)
            values, indices = paddle.topk(flat, 3, axis=-1)
            picked = paddle.index_select(flat, paddle.to_tensor([0, 3, 5]), axis=1)
            cum = paddle.cumsum(paddle.flip(flat, [2]), axis=-1)
            masked = paddle.where(flat > 0, flat, paddle.zeros_like(flat))
            hot = F.one_hot(best % 5, 5)
            mixed = paddle.einsum("nct,nkt->nck", flat, picked)
            normed = F.normalize(flat, axis=-1)
            rolled = paddle.roll(flat, 2, axis=-1)
            lower = paddle.tril(mixed)
            return (shuffled, sampled, best, values, indices, cum + masked + normed + rolled,
                    hot, lower)  # fmt: skip

    class Resampling(nn.Layer):
        """Paddle's interpolation modes and align settings, transposed convolutions."""

        def __init__(self) -> None:
            super().__init__()
            self.up = nn.Conv2DTranspose(3, 3, 3, stride=2, padding=1, output_padding=1)
            self.grouped = nn.Conv2DTranspose(3, 6, 4, stride=2, padding=1, groups=3)

        def forward(self, x: Any) -> Any:
            shape = paddle.shape(x)
            size = [shape[2] * 2, shape[3] * 2]
            outs = [self.up(x), self.grouped(x)[:, :3]]
            for mode, corners, align in (("bilinear", False, 0), ("bilinear", False, 1),
                                         ("bilinear", True, 0), ("bicubic", False, 0),
                                         ("bicubic", True, 0), ("nearest", False, 0)):  # fmt: skip
                outs.append(F.interpolate(x, size=size, mode=mode, align_corners=corners,
                                          align_mode=align))  # fmt: skip
            return paddle.concat(outs, 1)  # all 2H x 2W

    from paddle.vision import models as vision

    image = [("x", [None, 3, 64, 64], "float32")]
    return {
        "mobilenet-v3-small": (lambda: vision.mobilenet_v3_small(scale=0.5, num_classes=10),
                               image, [[1, 3, 64, 64]]),
        "mobilenet-v3-large": (lambda: vision.mobilenet_v3_large(scale=0.35, num_classes=10),
                               image, [[1, 3, 64, 64]]),
        "mobilenet-v2": (lambda: vision.mobilenet_v2(scale=0.25, num_classes=10),
                         image, [[1, 3, 64, 64]]),
        "resnet18": (lambda: vision.resnet18(num_classes=10), image, [[1, 3, 64, 64]]),
        "db-detector": (DBDetector, [("x", [None, 3, None, None], "float32")], [[1, 3, 64, 96]]),
        "crnn": (CRNN, [("x", [None, 3, 32, None], "float32")], [[2, 3, 32, 40]]),
        "svtr-rec": (SVTRRecogniser, [("x", [None, 3, 32, None], "float32")], [[2, 3, 32, 48]]),
        "activations": (Activations, [("x", [None, 4, 8, 8], "float32")], [[2, 4, 8, 8]]),
        "tensor-ops": (TensorOps, [("x", [None, 4, 6, 6], "float32")], [[2, 4, 6, 6]]),
        "resampling": (Resampling, [("x", [None, 3, None, None], "float32")], [[1, 3, 7, 10]]),
        "gru-tagger": (GRUTagger, [("ids", [None, None], "int64")], [[2, 9]]),
    }  # fmt: skip


def export_paddle(out: Path) -> None:
    import paddle

    paddle.set_device("cpu")
    for name, (build, inputs, feed_shapes) in paddle_models().items():
        if ONLY and name not in ONLY:
            continue
        paddle.seed(SEED)
        layer = build()
        layer.eval()
        spec = [paddle.static.InputSpec(shape, dtype, name) for name, shape, dtype in inputs]
        for opset in PADDLE_OPSETS:
            target = f"paddle-{name}-op{opset}"
            try:
                paddle.onnx.export(layer, str(out / target), input_spec=spec,
                                   opset_version=opset)  # fmt: skip
            except (Exception, SystemExit) as error:  # paddle2onnx exits on failure
                print(f"{target}: exporter failed: {type(error).__name__}: {error}")
                continue
            rng = _rng()
            feeds = {}
            for (input_name, _, dtype), shape in zip(inputs, feed_shapes, strict=True):
                if dtype.startswith("int"):
                    feeds[input_name] = rng.integers(0, 30, shape).astype(dtype)
                else:
                    feeds[input_name] = rng.standard_normal(shape).astype(dtype)
            _save_feeds(out, target, feeds)
            print(f"{target}: exported")


# -- checking against onnxruntime ---------------------------------------------------------------


def _other_feeds(path: Path, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The feeds again at other extents of the dynamic dims (batch 3; a multiple of 32 grown
    by 32, other lengths by 3), to run one session at two shapes."""
    import onnx

    rng = _rng()
    others = {}
    for value in onnx.load(str(path), load_external_data=False).graph.input:
        if value.name not in feeds:
            continue
        feed = feeds[value.name]
        dims = value.type.tensor_type.shape.dim
        shape = [
            size if (d.HasField("dim_value") and d.dim_value > 0)
            else 3 if axis == 0 else size + (32 if size % 32 == 0 else 3)
            for axis, (size, d) in enumerate(zip(feed.shape, dims, strict=True))
        ]  # fmt: skip
        if feed.dtype.kind in "iu":
            others[value.name] = rng.integers(0, int(feed.max()) + 1, shape).astype(feed.dtype)
        else:
            others[value.name] = rng.standard_normal(shape).astype(feed.dtype)
    return others


def _load(path: Path) -> str:
    """What onemodel says when loading a model onnxruntime refuses."""
    import onemodel

    try:
        onemodel.Session.load(str(path))
    except Exception as error:
        return f"{type(error).__name__}: {str(error)[:300]}"
    return "loads"


def check(out: Path) -> None:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    for path in sorted(out.glob("*.onnx")):
        try:
            _check_one(path, out, options)
        except Exception as error:
            print(f"{path.name}: check failed: {type(error).__name__}: {str(error)[:300]}")


def _check_one(path: Path, out: Path, options: Any) -> None:
    import onnxruntime as ort

    import onemodel

    name = path.name.removesuffix(".onnx")
    with np.load(out / f"{name}.feeds.npz") as data:
        feeds = {key: data[key] for key in data.files}
    runs = [feeds, _other_feeds(path, feeds)]
    try:
        reference = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    except Exception as error:
        print(f"{name}: onnxruntime failed: {str(error)[:200]}; onemodel: {_load(path)}")
        return
    try:
        wants = [reference.run(None, feeds) for feeds in runs]
    except Exception:  # the model fixes what the second shape changes
        runs, wants = runs[:1], [reference.run(None, runs[0])]
    results = []
    for mode in ("fast", "exact"):
        settings = onemodel.SessionOptions()
        if mode == "exact":
            settings = onemodel.SessionOptions(mode=onemodel.ExecutionMode.EXACT)
        try:
            session = onemodel.Session.load(str(path), settings)
        except Exception as error:
            results.append(f"{mode}: load failed: {type(error).__name__}: {str(error)[:300]}")
            continue
        verdicts = []
        for feeds, want in zip(runs, wants, strict=True):
            try:
                wrong = first_difference(session.run(None, feeds), want)
                verdicts.append("WRONG " + wrong if wrong else "ok")
            except Exception as error:
                verdicts.append(f"run failed: {type(error).__name__}: {str(error)[:300]}")
        results.append(f"{mode}: {', '.join(verdicts)}")
    print(f"{name}: " + "; ".join(results), flush=True)


def store_goldens(out: Path) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    import real_exports

    for golden, source in GOLDENS.items():
        if ONLY and golden not in ONLY:
            continue
        with np.load(out / f"{source}.feeds.npz") as data:
            feeds = {key: data[key] for key in data.files}
        real_exports.store_golden(golden, out / f"{source}.onnx", feeds)
        print(f"{golden}: stored from {source}")


def main() -> None:
    command, folder = sys.argv[1], Path(sys.argv[2])
    folder.mkdir(parents=True, exist_ok=True)
    {"keras": export_keras, "paddle": export_paddle, "check": check,
     "golden": store_goldens}[command](folder)  # fmt: skip


if __name__ == "__main__":
    main()
