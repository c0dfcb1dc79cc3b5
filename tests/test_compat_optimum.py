"""optimum's ORTModel classes run through `python -m onemodel.compat`, with `use_io_binding` on
and off, and give onnxruntime's outputs: feature extraction with a BERT-style encoder, greedy
generation with a GPT-2-style decoder with past key values. The models are built from tiny
transformers configs with random weights, saved locally and exported with optimum (no
downloads); the test skips where torch, transformers or optimum's ORTModel classes are missing.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("optimum.onnxruntime")
pytest.importorskip("onnxruntime")

ROOT = Path(__file__).resolve().parents[1]

EXPORT = """
    import sys
    from pathlib import Path
    import torch
    from transformers import BertConfig, BertModel, BertTokenizerFast, GPT2Config, GPT2LMHeadModel
    from optimum.onnxruntime import ORTModelForCausalLM, ORTModelForFeatureExtraction

    folder = Path(sys.argv[1])
    torch.manual_seed(0)
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(59)]
    (folder / "vocab.txt").write_text("\\n".join(words) + "\\n")
    tokenizer = BertTokenizerFast(vocab_file=str(folder / "vocab.txt"))
    bert = BertModel(BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=2,
                                num_attention_heads=4, intermediate_size=64,
                                max_position_embeddings=64)).eval()
    bert.save_pretrained(folder / "bert")
    tokenizer.save_pretrained(folder / "bert")
    # Weights wide enough that greedy decoding does not repeat one token.
    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=64, n_embd=32, n_layer=2, n_head=4,
                                      n_positions=64, initializer_range=0.5)).eval()
    gpt2.save_pretrained(folder / "gpt2")
    ORTModelForFeatureExtraction.from_pretrained(folder / "bert", export=True).save_pretrained(
        folder / "bert-onnx")
    tokenizer.save_pretrained(folder / "bert-onnx")
    decoder = ORTModelForCausalLM.from_pretrained(folder / "gpt2", export=True, use_cache=True)
    decoder.save_pretrained(folder / "gpt2-onnx")
"""

RUN = """
    import sys
    from pathlib import Path
    import numpy as np
    import onnxruntime
    from transformers import AutoTokenizer, pipeline
    from optimum.onnxruntime import ORTModelForCausalLM, ORTModelForFeatureExtraction

    folder, out, io_binding = Path(sys.argv[1]), sys.argv[2], sys.argv[3] == "on"
    tokenizer = AutoTokenizer.from_pretrained(folder / "bert-onnx")
    encoder = ORTModelForFeatureExtraction.from_pretrained(
        folder / "bert-onnx", use_io_binding=io_binding)
    extract = pipeline("feature-extraction", model=encoder, tokenizer=tokenizer)
    features = np.asarray(extract("w1 w2 w3 w4 w5 w6 w7"), np.float32)
    decoder = ORTModelForCausalLM.from_pretrained(folder / "gpt2-onnx", use_io_binding=io_binding)
    prompt = __import__("torch").tensor([[5, 9, 17, 3]])
    tokens = decoder.generate(prompt, max_new_tokens=12, do_sample=False, pad_token_id=0)
    np.savez(out, features=features, tokens=tokens.numpy(), runtime=onnxruntime.__name__,
             version=onnxruntime.__version__, binding=decoder.use_io_binding)
"""


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    folder = tmp_path_factory.mktemp("optimum")
    script = folder / "export.py"
    script.write_text(textwrap.dedent(EXPORT))
    _python([str(script), str(folder)], shim=False)
    return folder


def _python(args: list[str], *, shim: bool) -> None:
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *sys.path[1:]])}
    command = [sys.executable, *(["-m", "onemodel.compat"] if shim else []), *args]
    completed = subprocess.run(command, capture_output=True, text=True, env=environment)
    assert completed.returncode == 0, completed.stderr[-4000:]


def _run(folder: Path, io_binding: str, *, shim: bool) -> dict:
    script = folder / "run.py"
    script.write_text(textwrap.dedent(RUN))
    out = folder / f"{'shim' if shim else 'ort'}-{io_binding}.npz"
    _python([str(script), str(folder), str(out), io_binding], shim=shim)
    with np.load(out) as saved:
        return {key: saved[key] for key in saved.files}


@pytest.mark.parametrize("io_binding", ["off", "on"])
def test_optimum_pipelines_give_onnxruntimes_outputs(exported, io_binding):
    theirs = _run(exported, io_binding, shim=False)
    ours = _run(exported, io_binding, shim=True)
    assert str(theirs["runtime"]) == "onnxruntime"
    assert str(ours["runtime"]) == "onemodel.compat.onnxruntime"
    assert bool(ours["binding"]) == bool(theirs["binding"])
    assert ours["features"].shape == theirs["features"].shape == (1, 9, 32)
    np.testing.assert_allclose(ours["features"], theirs["features"], rtol=1e-4, atol=1e-5)
    assert ours["tokens"].shape == (1, 16)
    assert len(set(theirs["tokens"][0, 4:].tolist())) > 3  # a sequence worth comparing
    np.testing.assert_array_equal(ours["tokens"], theirs["tokens"])
