"""``train --task lm --init-from IMPORTED``: a released model continued on a user's text through the one run pipeline.

A tiny Llama built by transformers (random weights, no hub) is imported; the text is read as its released tokenizer
reads a document (line ends its own newline pieces, never dotformer's EOS, a row the model holds down; BOS first), so
the first training loss is transformers' loss on the same blocks and ``evaluate``'s on the same file; the continued
checkpoints, with and without LoRA, keep the base's text rules, so ``generate`` (either engine), ``evaluate`` and
``export --to hf`` read them as they read the import.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
import torch
from test_import_hf import CORPUS, save_family
from tolerance import logits_tolerance

transformers = pytest.importorskip("transformers")

COMMON = ["--no-progress", "--device", "cpu", "--block-size", "32", "--max-tokens", "128", "--warmup", "1"]
LORA = ["--lora-rank", "4", "--lora-alpha", "8"]


def run(*argv: Any) -> int:
    from dotformer.cli import main

    return main([str(arg) for arg in argv])


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any, Path]:
    """(the import, the transformers model, a text file of 300 lines of the tokenizer's words)."""
    from dotformer.imports.hf import import_hf

    root = tmp_path_factory.mktemp("continue")
    hf_model = save_family("llama", root / "hf")
    import_hf(root / "hf", root / "ckpt")
    rng = random.Random(0)
    words = " ".join(CORPUS).split()
    lines = [" ".join(rng.choice(words) for _ in range(rng.randint(3, 10))) for _ in range(300)]
    (root / "text.txt").write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return root / "ckpt", hf_model, root / "text.txt"


@pytest.mark.numerical
def test_the_first_loss_is_transformers_and_evaluates(
    imported: tuple[Path, Any, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The training stream is BOS and the training lines as the released tokenizer encodes them (no EOS); the step-1
    loss is transformers' mean cross-entropy on the first batch's blocks (within 2 logit tolerances: a log-sum-exp
    and a target logit), and within 5% of ``evaluate``'s nats per token on the whole file (other blocks)."""
    import torch.nn.functional as F
    from tokenizers import Tokenizer

    from dotformer.checkpoint import load_checkpoint
    from dotformer.data.batch.batching import sampler_for
    from dotformer.data.batch.blocks import prepared_stream
    from dotformer.data.config import LMDataConfig
    from dotformer.runs.run_data import open_run_data

    base, hf_model, text = imported
    out = tmp_path / "run"
    assert run("train", "--task", "lm", "--data", text, "--init-from", base, "--out", out, "--max-steps", "1",
               *COMMON) == 0  # fmt: skip
    first = json.loads((out / "metrics.jsonl").read_text().splitlines()[0])
    assert first["split"] == "train" and first["step"] == 1

    record = json.loads((out / "run.json").read_text())
    data = LMDataConfig.from_section(record["data"])
    assert (data.text_form, data.add_bos) == ("document", True)
    prepared = open_run_data(out, data)
    released = Tokenizer.from_file(str(base.parent / "hf" / "tokenizer.json"))
    train_text = "".join(line + "\n" for line in prepared.training_lines())
    stream = prepared_stream(prepared, "train", data.block_size)
    assert stream.ids.tolist() == [1] + [i + 4 for i in released.encode(train_text, add_special_tokens=False).ids]

    train = record["train"]
    batch = next(iter(sampler_for(stream, train["max_tokens"], train["seed"]).batches(0)))
    theirs = torch.where(batch.tgt_in == 1, 1, batch.tgt_in - 4)  # dotformer's BOS is the released one (id 1)
    with torch.no_grad():
        logits = hf_model(theirs).logits  # (B, T, V)
    nll = F.cross_entropy(logits.flatten(0, 1).double(), (batch.tgt_out - 4).flatten()).item()
    tolerance = 2 * logits_tolerance(load_checkpoint(base).config, logits)
    assert abs(first["loss"] - nll) <= tolerance

    capsys.readouterr()
    assert run("evaluate", "--checkpoint", base, "--data", text, "--json", tmp_path / "score.json") == 0
    evaluated = json.loads((tmp_path / "score.json").read_text())["nats_per_token"]
    assert abs(first["loss"] - evaluated) <= 0.05 * evaluated


def test_a_cache_of_line_text_is_not_reused_for_a_document(imported: tuple[Path, Any, Path]) -> None:
    """The text form is in the fingerprint; a line stream's fingerprint is what it was without the field."""
    from dotformer.data.config import LMDataConfig
    from dotformer.data.prepared.text_kind import TextKind

    base, _, text = imported
    tokenizer = str(base / "tokenizer_tgt.json")
    lines = TextKind(LMDataConfig(dataset=str(text), tokenizer_file=tokenizer))
    document = TextKind(LMDataConfig(dataset=str(text), tokenizer_file=tokenizer, text_form="document"))
    with_bos = TextKind(LMDataConfig(dataset=str(text), tokenizer_file=tokenizer, text_form="document", add_bos=True))
    assert len({kind.fingerprint(1) for kind in (lines, document, with_bos)}) == 3
    assert "text_form" not in lines.settings(1)["data"] and "add_bos" not in lines.settings(1)["data"]


@pytest.mark.slow
@pytest.mark.numerical
@pytest.mark.parametrize("adapters", [False, True], ids=["full", "lora"])
def test_a_continued_model_generates_evaluates_and_exports_as_its_base(
    adapters: bool, imported: tuple[Path, Any, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """5 steps on the text, with and without LoRA: the checkpoint keeps the base's text rules, family and origin;
    ``generate`` gives one greedy text on the torch and CTranslate2 engines; ``evaluate`` scores the text as the
    import reads it; ``export --to hf`` loads in transformers with dotformer's logits."""
    from dotformer.checkpoint import load_checkpoint
    from dotformer.decoding.inputs import encode_prompt, text_rules

    base, _, text = imported
    out = tmp_path / "run"
    argv = ["train", "--task", "lm", "--data", text, "--init-from", base, "--out", out, "--max-steps", "5", *COMMON]
    assert run(*argv, "--lr-schedule", "constant", "--lr-peak", "1e-2", *(LORA if adapters else [])) == 0
    kept = ("text_rules", "family", "imported_from")
    base_info = json.loads((base / "config.json").read_text())
    for checkpoint in ("last", "best"):
        info = json.loads((out / checkpoint / "config.json").read_text())
        assert {key: info.get(key) for key in kept} == {key: base_info[key] for key in kept}
        assert ("lora" in info) == adapters
    loaded = load_checkpoint(out / "last")
    assert not torch.equal(loaded.model.generator.weight, load_checkpoint(base).model.generator.weight) or adapters

    capsys.readouterr()
    texts = {}
    for engine in ("torch", "ctranslate2"):
        if engine == "ctranslate2":
            pytest.importorskip("ctranslate2")
        assert run("generate", "--checkpoint", out / "last", "--engine", engine, "--greedy", "--max-new-tokens", "12",
                   "--prompt", "the cat sat") == 0  # fmt: skip
        texts[engine] = capsys.readouterr().out
    assert texts["torch"] == texts["ctranslate2"] and texts["torch"].startswith("the cat sat")

    assert run("evaluate", "--checkpoint", out / "last", "--data", text, "--json", tmp_path / "score.json") == 0
    score = json.loads((tmp_path / "score.json").read_text())
    assert score["tokens"] + 1 == 1 + len(loaded.tgt_tokenizer.encode(text.read_text()))  # BOS, the text, no EOS

    assert run("export", "--to", "hf", out / "last", tmp_path / "hf") == 0
    hf = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path / "hf"), attn_implementation="eager").eval()
    ids = encode_prompt(loaded.tgt_tokenizer, "the cat sat on the mat\na bird", text_rules(loaded.info))
    with torch.no_grad():
        ours = loaded.model.generator(loaded.model.decode(torch.tensor([ids])).hidden)[..., 4:]  # (1, T, V)
        theirs = hf(torch.tensor([[1 if i == 1 else i - 4 for i in ids]])).logits  # (1, T, V)
    torch.testing.assert_close(theirs, ours, atol=logits_tolerance(loaded.config, ours), rtol=0)
