"""Real models as the tools people use write them, built from tiny randomly initialised configs
(nothing is downloaded): Hugging Face optimum's ONNX exporter, the TorchScript exporter on
torchvision/timm vision models, onnxruntime's transformer optimizer (its opt levels and fp16
conversion) and onnxruntime-genai's model builder (fp32 and int4 for the CPU).

Each `export_*` function writes into a folder and returns the model path(s). Export tools are
test-time only: `available(tool)` says whether one can run here. optimum's exporter is the
separate `optimum-onnx` package (0.1.0), which pins transformers < 4.58 and optimum 2.1; where
only a newer transformers is installed its import fails and the optimum families skip. To run
them beside a newer stack, install the old one into a folder put first on PYTHONPATH:

    pip install --no-deps --target DIR transformers==4.57.6 optimum==2.1.0 optimum-onnx==0.1.0 \
        "huggingface_hub<1.0" "tokenizers>=0.22,<=0.23.0"
    PYTHONPATH=$PWD:DIR python -m pytest tests/test_real_exports.py

(the sentence-transformer family also wants sentence-transformers 5.1 with scikit-learn).

`python tests/real_exports.py` stores the small goldens tests/test_real_exports.py runs without
any of these tools (tests/models/real/); `python tests/real_exports.py dynamo` stores those of
torch's default (dynamo) exporter only (tests/dynamo_exports.py builds them).
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import onnx

VOCAB = 100
BATCH = 2
GOLDEN = Path(__file__).parent / "models" / "real"


def available(*modules: str) -> str | None:
    """None when every module imports, else why not (the skip reason)."""
    for module in modules:
        try:
            importlib.import_module(module)
        except Exception as error:  # an incompatible install fails with any error
            return f"{module} does not import here: {type(error).__name__}: {error}"
    return None


# -- feeds ------------------------------------------------------------------------------------


def feeds_for(
    model_path: Path | str,
    *,
    length: int = 5,
    past: int = 0,
    image: int = 32,
    padded: bool = True,
    head: int = 16,
    encoder: int = 6,
) -> dict[str, np.ndarray]:
    """Inputs of the model's declared names, types and shapes: token ids in [1, VOCAB),
    attention masks of ones (an encoder's last token of the last row masked when `padded`),
    position ids counting from `past`, past key/values of `past` positions, random floats."""
    rng = np.random.default_rng(0)
    dims = {
        "batch_size": BATCH, "text_batch_size": BATCH, "sequence_length": length,
        "past_sequence_length": past, "past_sequence_length + sequence_length": past + length,
        "total_sequence_length": past + length, "num_channels": 3, "height": image,
        "width": image, "encoder_sequence_length": encoder, "decoder_sequence_length": length,
        "past_decoder_sequence_length": past, "kv_cache_dim": head,
    }  # fmt: skip
    graph = onnx.load(str(model_path), load_external_data=False).graph
    feeds: dict[str, np.ndarray] = {}
    for value in graph.input:
        tensor = value.type.tensor_type
        dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type)
        shape = tuple(
            dim.dim_value if dim.HasField("dim_value") else dims[dim.dim_param]
            for dim in tensor.shape.dim
        )
        name = value.name
        if "mask" in name:
            mask = np.ones(shape, dtype)
            if padded and past == 0 and "encoder" not in name and len(shape) == 2:
                mask[-1, -1] = 0
            feeds[name] = mask
        elif name == "position_ids":
            feeds[name] = np.broadcast_to(np.arange(past, past + shape[1]), shape).astype(dtype)
        elif name == "token_type_ids":
            feeds[name] = rng.integers(0, 2, shape).astype(dtype)
        elif np.issubdtype(dtype, np.integer):
            feeds[name] = rng.integers(1, VOCAB, shape).astype(dtype)
        elif dtype == np.bool_:
            feeds[name] = np.array([past > 0])
        else:
            feeds[name] = rng.standard_normal(shape).astype(dtype)
    return feeds


def has_past(model_path: Path | str) -> bool:
    graph = onnx.load(str(model_path), load_external_data=False).graph
    return any("past" in value.name for value in graph.input)


# -- optimum ----------------------------------------------------------------------------------


def _encoder(**extra: Any) -> dict[str, Any]:
    return dict(
        vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=64, **extra,
    )  # fmt: skip


def _decoder(**extra: Any) -> dict[str, Any]:
    return dict(
        vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=64, max_position_embeddings=64, **extra,
    )  # fmt: skip


def _seq2seq() -> dict[str, Any]:
    """The sizes BART- and Whisper-style encoder-decoder configs share."""
    return dict(
        vocab_size=VOCAB, d_model=32, encoder_layers=2, decoder_layers=2,
        encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=64,
        decoder_ffn_dim=64,
    )  # fmt: skip


def optimum_families() -> dict[str, tuple[Callable[[], Any], str, str]]:
    """Family → (model factory, optimum task)."""
    import transformers as t

    vision = dict(image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=2,
                  num_attention_heads=2, intermediate_size=64)  # fmt: skip
    return {
        "bert": (lambda: t.BertModel(t.BertConfig(**_encoder())), "feature-extraction"),
        "roberta": (
            lambda: t.RobertaModel(t.RobertaConfig(**_encoder(), pad_token_id=1)),
            "feature-extraction",
        ),
        "distilbert": (
            lambda: t.DistilBertModel(
                t.DistilBertConfig(
                    vocab_size=VOCAB,
                    dim=32,
                    n_layers=2,
                    n_heads=2,
                    hidden_dim=64,
                    max_position_embeddings=64,
                )
            ),
            "feature-extraction",
        ),
        "deberta-v2": (
            lambda: t.DebertaV2Model(
                t.DebertaV2Config(
                    **_encoder(),
                    relative_attention=True,
                    position_buckets=16,
                    max_relative_positions=32,
                    pos_att_type=["p2c", "c2p"],
                )
            ),
            "feature-extraction",
        ),
        "bert-sequence-classifier": (
            lambda: t.BertForSequenceClassification(t.BertConfig(**_encoder(), num_labels=3)),
            "text-classification",
        ),
        "gpt2": (
            lambda: t.GPT2LMHeadModel(
                t.GPT2Config(
                    vocab_size=VOCAB,
                    n_embd=32,
                    n_layer=2,
                    n_head=2,
                    n_positions=64,
                    initializer_range=0.2,
                )
            ),
            "text-generation-with-past",
        ),
        "llama": (
            lambda: t.LlamaForCausalLM(t.LlamaConfig(**_decoder(num_key_value_heads=2))),
            "text-generation-with-past",
        ),
        "qwen2": (
            lambda: t.Qwen2ForCausalLM(t.Qwen2Config(**_decoder(num_key_value_heads=2))),
            "text-generation-with-past",
        ),
        "phi": (lambda: t.PhiForCausalLM(t.PhiConfig(**_decoder())), "text-generation-with-past"),
        "t5": (
            lambda: t.T5ForConditionalGeneration(
                t.T5Config(
                    vocab_size=VOCAB,
                    d_model=32,
                    d_kv=16,
                    d_ff=64,
                    num_layers=2,
                    num_heads=2,
                    decoder_start_token_id=0,
                )
            ),
            "text2text-generation-with-past",
        ),
        "whisper": (
            lambda: t.WhisperForConditionalGeneration(
                t.WhisperConfig(
                    **_seq2seq(),
                    num_mel_bins=16,
                    max_source_positions=1500,
                    max_target_positions=32,
                    decoder_start_token_id=1,
                    pad_token_id=0,
                    eos_token_id=2,
                    bos_token_id=1,
                    begin_suppress_tokens=None,
                    suppress_tokens=None,
                )
            ),
            "automatic-speech-recognition-with-past",
        ),
        "vit": (
            lambda: t.ViTForImageClassification(t.ViTConfig(**vision, num_labels=5)),
            "image-classification",
        ),
        "swin": (
            lambda: t.SwinForImageClassification(
                t.SwinConfig(
                    image_size=32,
                    patch_size=4,
                    embed_dim=16,
                    depths=[1, 1],
                    num_heads=[2, 2],
                    window_size=4,
                    num_labels=5,
                )
            ),
            "image-classification",
        ),
        "mobilebert": (
            lambda: t.MobileBertModel(
                t.MobileBertConfig(
                    **_encoder(), embedding_size=16, intra_bottleneck_size=16, true_hidden_size=16
                )
            ),
            "feature-extraction",
        ),
        "albert": (
            lambda: t.AlbertModel(t.AlbertConfig(**_encoder(), embedding_size=16)),
            "feature-extraction",
        ),
        "electra": (
            lambda: t.ElectraModel(t.ElectraConfig(**_encoder(), embedding_size=16)),
            "feature-extraction",
        ),
        "mistral": (
            lambda: t.MistralForCausalLM(
                t.MistralConfig(**_decoder(num_key_value_heads=2), sliding_window=None)
            ),
            "text-generation-with-past",
        ),
        "gemma": (
            lambda: t.GemmaForCausalLM(
                t.GemmaConfig(**_decoder(num_key_value_heads=2), head_dim=8)
            ),
            "text-generation-with-past",
        ),
        "bart": (
            lambda: t.BartForConditionalGeneration(
                t.BartConfig(
                    **_seq2seq(),
                    max_position_embeddings=64,
                )
            ),
            "text2text-generation-with-past",
        ),
        "wav2vec2": (
            # Its convolutional feature extractor takes 400 samples to 47 frames
            # (feeds_for(length=400)).
            lambda: t.Wav2Vec2ForCTC(
                t.Wav2Vec2Config(
                    vocab_size=32,
                    hidden_size=32,
                    num_hidden_layers=2,
                    num_attention_heads=2,
                    intermediate_size=64,
                    conv_dim=(16, 16),
                    conv_stride=(4, 2),
                    conv_kernel=(8, 4),
                    num_conv_pos_embeddings=8,
                    num_conv_pos_embedding_groups=4,
                )
            ),
            "automatic-speech-recognition",
        ),
        "clip": (
            lambda: t.CLIPModel(
                t.CLIPConfig(
                    text_config=dict(
                        vocab_size=VOCAB,
                        hidden_size=32,
                        num_hidden_layers=2,
                        num_attention_heads=2,
                        intermediate_size=64,
                        max_position_embeddings=32,
                    ),
                    vision_config=vision,
                    projection_dim=16,
                )
            ),
            "zero-shot-image-classification",
        ),
    }


def export_optimum(family: str, folder: Path) -> dict[str, Path]:
    """The family's optimum export: {file stem: path} (model, or encoder/decoder files)."""
    import torch
    from optimum.exporters.onnx import main_export

    torch.manual_seed(0)
    source = folder / "source"
    library = "transformers"
    if family == "sentence-transformer":
        _sentence_transformer(source)
        task, library = "feature-extraction", "sentence_transformers"
    else:
        factory, task = optimum_families()[family]
        factory().eval().save_pretrained(source)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        main_export(
            str(source), output=str(folder / "onnx"), task=task, library_name=library,
            do_validation=False,
        )  # fmt: skip
    return {path.stem: path for path in sorted((folder / "onnx").glob("*.onnx"))}


def _sentence_transformer(folder: Path) -> None:
    """A sentence-transformers model: the tiny BERT (with a word-piece vocabulary), mean
    pooling and L2 normalization, saved as the library saves it."""
    import transformers as t
    from sentence_transformers import SentenceTransformer, models

    bert = folder.parent / "bert"
    t.BertModel(t.BertConfig(**_encoder())).save_pretrained(bert)
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(VOCAB - 5)]
    (bert / "vocab.txt").write_text("\n".join(words))
    t.BertTokenizerFast(vocab_file=str(bert / "vocab.txt")).save_pretrained(bert)
    modules = [models.Transformer(str(bert)), models.Pooling(32, "mean"), models.Normalize()]
    SentenceTransformer(modules=modules).save(str(folder))


# -- vision (TorchScript exporter) -----------------------------------------------------------


def vision_families() -> dict[str, Callable[[], Any]]:
    import timm
    import torchvision.models as tvm
    from torchvision.models import detection, segmentation

    return {
        "resnet50": lambda: tvm.resnet50(weights=None, num_classes=10),
        "efficientnet-b0": lambda: timm.create_model("efficientnet_b0", num_classes=10),
        "mobilenetv3-small": lambda: tvm.mobilenet_v3_small(weights=None, num_classes=10),
        "convnext-atto": lambda: timm.create_model("convnext_atto", num_classes=10),
        "regnet-y-400mf": lambda: tvm.regnet_y_400mf(weights=None, num_classes=10),
        "lraspp-segmentation": lambda: segmentation.lraspp_mobilenet_v3_large(
            weights=None, weights_backbone=None, num_classes=4
        ),
        "ssdlite-detection": lambda: detection.ssdlite320_mobilenet_v3_large(
            weights=None, weights_backbone=None, num_classes=5
        ),
        "deeplabv3-segmentation": lambda: segmentation.deeplabv3_mobilenet_v3_large(
            weights=None, weights_backbone=None, num_classes=4
        ),
        "fcn-resnet50-segmentation": lambda: segmentation.fcn_resnet50(
            weights=None, weights_backbone=None, num_classes=4
        ),
        "fasterrcnn-detection": lambda: detection.fasterrcnn_mobilenet_v3_large_320_fpn(
            weights=None, weights_backbone=None, num_classes=5
        ),
        "vit-tiny": lambda: timm.create_model("vit_tiny_patch16_224", num_classes=10, img_size=64),
        "swin-tiny": lambda: timm.create_model("swin_tiny_patch4_window7_224", num_classes=10),
        "mobilevit-xxs": lambda: timm.create_model("mobilevit_xxs", num_classes=10),
        "efficientvit-b0": lambda: timm.create_model("efficientvit_b0", num_classes=10),
    }


# Image sizes other than 64: Swin's windows tile 224; Faster R-CNN's transform resizes to 320
# (at 320 it keeps the image as it is).
VISION_SIZES = {"swin-tiny": 224, "fasterrcnn-detection": 320}


def _lively(model: Any) -> Any:
    """Random batch-norm statistics and affine terms, and unit-scale linear layers, so that a
    randomly initialised network's outputs are of order one (zero-initialised last norms and
    tiny classifier weights would otherwise make every logit ~1e-10 and any tolerance void)."""
    import torch

    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.modules.batchnorm._BatchNorm):
                size = module.num_features
                module.weight.copy_(torch.rand(size, generator=generator) + 0.5)
                module.bias.copy_(torch.randn(size, generator=generator) * 0.1)
                module.running_mean.copy_(torch.randn(size, generator=generator) * 0.1)
                module.running_var.copy_(torch.rand(size, generator=generator) + 0.5)
            elif isinstance(module, torch.nn.Linear):
                fan_in = module.weight.shape[1]
                module.weight.copy_(torch.randn(module.weight.shape, generator=generator)
                                    / fan_in**0.5)  # fmt: skip
    return model.eval()


def export_vision(family: str, folder: Path, size: int = 64) -> Path:
    import torch

    torch.manual_seed(0)
    model = _lively(vision_families()[family]())
    path = folder / f"{family}.onnx"
    folder.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            model, (torch.randn(1, 3, size, size),), str(path), dynamo=False, opset_version=17,
            input_names=["images"],
        )  # fmt: skip
    return path


def to_float16(source: Path, out: Path) -> Path:
    """onnxconverter-common's float16 conversion, keeping float32 inputs and outputs (Casts
    where they enter and leave), as its users write float16 vision models."""
    from onnxconverter_common import float16

    onnx.save(float16.convert_float_to_float16(onnx.load(str(source)), keep_io_types=True), out)
    return out


# -- onnxruntime's transformer optimizer ------------------------------------------------------

OPTIMIZER_TYPES = {"bert": "bert", "distilbert": "bert", "roberta": "bert", "gpt2": "gpt2"}


def optimize(
    source: Path, model_type: str, level: int, fp16: bool, out: Path, multi_head: bool = False
) -> Path:
    """onnxruntime.transformers.optimizer.optimize_model at `level` (and its float16
    conversion, keeping float32 inputs and outputs), on the CPU; `multi_head` sets its
    use_multi_head_attention option (MultiHeadAttention instead of Attention)."""
    from onnxruntime.transformers.fusion_options import FusionOptions
    from onnxruntime.transformers.optimizer import optimize_model

    fusions = FusionOptions(model_type)
    fusions.use_multi_head_attention = multi_head
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = optimize_model(
            str(source), model_type=model_type, num_heads=2, hidden_size=32, opt_level=level,
            use_gpu=False, optimization_options=fusions,
        )  # fmt: skip
        if fp16:
            model.convert_float_to_float16(keep_io_types=True)
    model.save_model_to_file(str(out))
    return out


# -- onnxruntime-genai's model builder --------------------------------------------------------

GENAI_FAMILIES = ("llama", "qwen2", "phi3")


def genai_source(family: str, folder: Path) -> Path:
    """A tiny randomly initialised causal LM and a word-level tokenizer, save_pretrained."""
    import torch
    import transformers as t
    from tokenizers import Tokenizer, models, pre_tokenizers

    shape = dict(
        vocab_size=128, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, intermediate_size=128, max_position_embeddings=128,
    )  # fmt: skip
    config, model_class = {
        "llama": (t.LlamaConfig(**shape), t.LlamaForCausalLM),
        "qwen2": (t.Qwen2Config(**shape), t.Qwen2ForCausalLM),
        "phi3": (
            t.Phi3Config(**shape, pad_token_id=0, original_max_position_embeddings=128),
            t.Phi3ForCausalLM,
        ),
    }[family]
    torch.manual_seed(0)
    source = folder / f"{family}-source"
    model_class(config).eval().save_pretrained(source)
    words = Tokenizer(models.WordLevel({f"t{i}": i for i in range(128)}, unk_token="t0"))
    words.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = t.PreTrainedTokenizerFast(
        tokenizer_object=words, unk_token="t0", bos_token="t1", eos_token="t2", pad_token="t0"
    )
    tokenizer.save_pretrained(source)
    return source


def export_genai(family: str, precision: str, folder: Path) -> Path:
    """`python -m onnxruntime_genai.models.builder` for the CPU; the model.onnx it writes.

    The builder runs on the interpreter's own packages, without PYTHONPATH: it wants a
    transformers (≥ 5) newer than the one optimum-onnx pins, which PYTHONPATH may put first."""
    source = folder / f"{family}-source"
    if not source.exists():
        genai_source(family, folder)
    out = folder / f"{family}-{precision}"
    command = [
        sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", str(source), "-o",
        str(out), "-p", precision, "-e", "cpu", "-c", str(folder / "cache"),
    ]  # fmt: skip
    environment = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    done = subprocess.run(command, capture_output=True, text=True, env=environment)
    if done.returncode:
        raise RuntimeError(f"model builder failed: {done.stderr[-2000:]}")
    return out / "model.onnx"


def _static(dim: Any, otherwise: int) -> int:
    return dim if isinstance(dim, int) else otherwise


# -- the decode loop ------------------------------------------------------------------------

PROMPT = (5, 17, 42, 8)


def greedy_tokens(
    run: Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]],
    inputs: Mapping[str, tuple[Any, ...]],
    prompt: tuple[int, ...] = PROMPT,
    steps: int = 32,
    head: int = 16,
) -> list[int]:
    """What a user writes: an empty cache, then feed the tokens, take the argmax of the last
    logits, hand present.* back as past_key_values.*, and feed the new token alone."""
    past = {
        name: np.zeros((1, shape[1], 0, _static(shape[3], head)), np.float32)
        for name, shape in inputs.items()
        if name.startswith("past_key_values.")
    }  # fmt: skip
    ids = np.array([prompt], np.int64)
    done = 0
    tokens: list[int] = []
    for _ in range(steps):
        total = done + ids.shape[1]
        feeds = {"input_ids": ids, **past}
        if "attention_mask" in inputs:
            feeds["attention_mask"] = np.ones((1, total), np.int64)
        if "position_ids" in inputs:
            feeds["position_ids"] = np.arange(done, total, dtype=np.int64)[None]
        outputs = run(feeds)
        token = int(np.argmax(np.asarray(outputs["logits"])[0, -1]))
        tokens.append(token)
        past = {name: np.asarray(outputs[name.replace("past_key_values", "present")])
                for name in past}  # fmt: skip
        done, ids = total, np.array([[token]], np.int64)
    return tokens


# -- goldens ----------------------------------------------------------------------------------


def store_golden(
    name: str, model_path: Path, feeds: dict[str, np.ndarray], decoder: bool = False
) -> None:
    """The model as one file (weights inside) and, beside it, the feeds, onnxruntime's
    outputs under `output:<name>` and, for a decoder, its greedy tokens under `tokens:greedy`."""
    import onnxruntime as ort

    GOLDEN.mkdir(parents=True, exist_ok=True)
    model = onnx.load(str(model_path))
    onnx.save(model, str(GOLDEN / f"{name}.onnx"))
    session = ort.InferenceSession(str(GOLDEN / f"{name}.onnx"), providers=["CPUExecutionProvider"])
    names = [output.name for output in session.get_outputs()]
    outputs = dict(zip(names, session.run(None, feeds), strict=True))
    arrays = {**feeds, **{f"output:{key}": value for key, value in outputs.items()}}
    if decoder:
        shapes = {value.name: tuple(value.shape) for value in session.get_inputs()}
        output_names = [output.name for output in session.get_outputs()]

        def run(step: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
            return dict(zip(output_names, session.run(None, step), strict=True))

        arrays["tokens:greedy"] = np.array(greedy_tokens(run, shapes), np.int64)
    np.savez_compressed(GOLDEN / f"{name}.inputs.npz", **arrays)


# name → (case of tests/dynamo_exports.py, export options, batch of the stored feeds): each
# reaches other operators or paths of the dynamo exporter (a dynamic export runs at another
# batch and length than it was traced at).
DYNAMO_GOLDENS: dict[str, tuple[str, dict[str, Any], int]] = {
    "dynamo-llama-dynamic": ("hf-llama", {"dynamic": True}, 3),
    "dynamo-lstm": ("lstm-bidirectional-2layer", {}, 2),
    "dynamo-attention-opset23": ("sdpa-float-mask-scale", {"opset": 23}, 2),
    "dynamo-norms-opset23": ("norms", {"opset": 23}, 2),
    "dynamo-interpolate": ("interpolate", {}, 2),
    "dynamo-cond": ("cond-branches", {}, 2),
    "dynamo-stft": ("fft-stft", {}, 2),
    "dynamo-pad-opset18": ("pad-modes", {"opset": 18}, 2),  # wrap, though ONNX adds it in 19
}


def store_dynamo_goldens(folder: Path) -> None:
    """DYNAMO_GOLDENS, exported by torch's default exporter and stored as `store_golden` does."""
    import dynamo_exports as dx

    for name, (case, options, batch) in DYNAMO_GOLDENS.items():
        path, args = dx.export_dynamo(case, folder / name, **options)
        if batch != 2:
            args = dx.args_for(case, batch)
        store_golden(name, path, dx.feeds_for_args(path, args))


def main() -> None:
    import tempfile

    if sys.argv[1:] == ["dynamo"]:
        with tempfile.TemporaryDirectory() as scratch:
            store_dynamo_goldens(Path(scratch))
        return
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        bert = export_optimum("bert", root / "bert")["model"]
        store_golden("optimum-bert", bert, feeds_for(bert))
        gpt2 = export_optimum("gpt2", root / "gpt2")["model"]
        store_golden("optimum-gpt2", gpt2, feeds_for(gpt2, past=4, length=1), decoder=True)
        optimized = optimize(bert, "bert", 99, False, root / "bert-o99.onnx")
        store_golden("ortopt-bert-o99", optimized, feeds_for(optimized))
        half = optimize(bert, "bert", 99, True, root / "bert-o99-fp16.onnx")
        store_golden("ortopt-bert-o99-fp16", half, feeds_for(half))
        heads = optimize(bert, "bert", 1, False, root / "bert-o1-mha.onnx", multi_head=True)
        store_golden("ortopt-bert-o1-mha", heads, feeds_for(heads))
        for precision in ("fp32", "int4"):
            llama = export_genai("llama", precision, root)
            feeds = feeds_for(llama, past=4, length=1, padded=False)
            store_golden(f"genai-llama-{precision}", llama, feeds, decoder=precision == "fp32")


if __name__ == "__main__":
    main()
