"""LoRA adapters (dotformer.lora) and activation checkpointing: the adapted layer is the formula, starts as its base,
merges to the same logits; only the adapters (and a new head) train, through the one run pipeline of every task;
checkpoints hold the adapters and refer to their base, resume exactly, and decode and export merged; the stacks'
checkpointed layers give the plain step's gradients; ``train --task lm --init-from`` keeps the checkpoint's
tokenizer."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch
from tolerance import logit_sums, logits_tolerance, reordering_bound
from torch import nn

from dotformer.checkpoint import load_checkpoint, load_weights
from dotformer.checkpoint.adapters import LORA_KEY, full_weights, load_adapted
from dotformer.cli import main
from dotformer.config import ModelConfig
from dotformer.errors import CheckpointError, ConfigError
from dotformer.lora import (
    DEFAULT_TARGETS,
    LoRALinear,
    LoRASpec,
    adapter_state,
    add_adapters,
    is_adapted,
    merge_adapters,
    spec_of,
)
from dotformer.model import Transformer
from dotformer.training.config import TrainConfig

V = 13


pytestmark = pytest.mark.usefixtures("one_thread")


def tiny(arch: str = "encoder-decoder", **overrides: Any) -> Transformer:
    config = ModelConfig.preset("tiny", src_vocab_size=V, tgt_vocab_size=V, arch=arch, dropout=0.0, **overrides)
    return Transformer(config).eval()


def logits_of(model: Transformer, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
    """(B, T, V) logits of an encoder-decoder or a decoder-only model (which reads ``tgt`` alone)."""
    if model.config.arch == "decoder-only":
        return model.generator(model.decode(tgt).hidden)
    return model(src, tgt)


def batch() -> tuple[torch.Tensor, torch.Tensor]:
    src = torch.randint(4, V, (3, 9))
    tgt = torch.randint(4, V, (3, 7))
    src[0, 6:] = 0  # right padding
    tgt[1, 5:] = 0
    return src, tgt


def trained_adapters(model: nn.Module) -> None:
    """Give every adapter a non-zero B (as training does), so that merging has something to fold."""
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, LoRALinear):
                module.lora_B.normal_(0.0, 0.2)


# -- the adapted layer -------------------------------------------------------------------------------------------------


@pytest.mark.numerical
def test_an_adapted_linear_is_the_formula() -> None:
    base = nn.Linear(6, 5).double()
    layer = LoRALinear(base, LoRASpec(rank=3, alpha=6.0))
    assert layer.lora_A.shape == (3, 6) and layer.lora_B.shape == (5, 3) and not layer.lora_B.any()
    assert layer.weight is base.weight and layer.bias is base.bias  # the base's own parameters
    with torch.no_grad():
        layer.lora_B.normal_()
    x = torch.randn(2, 4, 6, dtype=torch.float64)
    expected = x @ base.weight.T + base.bias + (6.0 / 3) * (x @ layer.lora_A.T) @ layer.lora_B.T
    tolerance = reordering_bound([6, 3, 6], float(expected.detach().abs().max()), torch.float64)
    torch.testing.assert_close(layer(x), expected, atol=tolerance, rtol=0)
    # A is Kaiming-uniform as nn.Linear's weights: bound 1/sqrt(in)
    assert layer.lora_A.abs().max() <= 1 / math.sqrt(6) and layer.lora_A.std() > 0.1


@pytest.mark.parametrize("arch", ["encoder-decoder", "decoder-only"])
def test_an_adapted_model_starts_as_its_base(arch: str) -> None:
    model = tiny(arch)
    src, tgt = batch()
    with torch.no_grad():
        before = logits_of(model, src, tgt)
        add_adapters(model, LoRASpec(rank=4, targets=("W_q", "W_k", "W_v", "W_o", "W_1", "W_2")))
        after = logits_of(model, src, tgt)
    assert torch.equal(before, after)  # B = 0: the change is exactly zero


@pytest.mark.numerical
@pytest.mark.parametrize("arch", ["encoder-decoder", "decoder-only"])
def test_merged_adapters_give_the_unmerged_logits(arch: str) -> None:
    model = tiny(arch, tie_output=False)
    spec = LoRASpec(rank=4, alpha=8.0, targets=("W_q", "W_v", "W_1", "generator"))
    add_adapters(model, spec)
    trained_adapters(model)
    src, tgt = batch()
    with torch.no_grad():
        unmerged = logits_of(model, src, tgt)
        base_weights = {name: t.clone() for name, t in model.state_dict().items()}
        merged = logits_of(merge_adapters(model), src, tgt)
    assert not is_adapted(model) and all(type(m) is not LoRALinear for m in model.modules())
    # one more sum of r terms per adapted projection, on top of the model's own chain of sums
    adapted_stages = sum(1 for n in base_weights if n.endswith("lora_A"))
    sums = [*logit_sums(model.config, tgt.size(1), src.size(1) if arch != "decoder-only" else 0)]
    tolerance = reordering_bound([*sums, *[spec.rank] * adapted_stages], float(unmerged.abs().max()))
    torch.testing.assert_close(merged, unmerged, atol=tolerance, rtol=0)
    plain = tiny(arch, tie_output=False)
    with torch.no_grad():
        plain_logits = logits_of(plain, src, tgt)
    assert (merged - unmerged).abs().max() < 1e-3 * (merged - plain_logits).abs().max()  # it can tell


def test_only_the_adapters_and_a_head_train() -> None:
    model = Transformer(
        ModelConfig.preset("tiny", src_vocab_size=V, tgt_vocab_size=V, arch="encoder-only", head="sequence",
                           num_labels=3, num_decoder_layers=0)
    )  # fmt: skip
    names = add_adapters(model, LoRASpec(rank=2))
    assert names == [f"encoder.layers.{i}.self_attn.{w}" for i in range(2) for w in DEFAULT_TARGETS]
    trained = {name for name, p in model.named_parameters() if p.requires_grad}
    assert trained == {f"{n}.lora_{m}" for n in names for m in "AB"} | {
        "classifier.proj.weight",
        "classifier.proj.bias",
    }
    assert set(adapter_state(model)) == trained
    assert spec_of(model) == LoRASpec(rank=2)
    odd = tiny()
    add_adapters(odd, LoRASpec(rank=3, alpha=0.1, targets=("W_o",), dropout=0.05))
    assert spec_of(odd) == LoRASpec(rank=3, alpha=0.1, targets=("W_o",), dropout=0.05)  # as given, not recomputed


def test_targets_are_found_by_name_whatever_the_block() -> None:
    class Gated(nn.Module):  # a block of another shape: the wrapper reads only the names
        def __init__(self) -> None:
            super().__init__()
            self.W_gate = nn.Linear(5, 7, bias=False)
            self.W_up = nn.Linear(5, 7, bias=False)

    block = nn.Sequential(Gated(), Gated())
    assert add_adapters(block, LoRASpec(rank=2, targets=("W_gate",))) == ["0.W_gate", "1.W_gate"]
    layer = block[0].W_gate
    assert isinstance(layer, LoRALinear) and layer.lora_A.shape == (2, 5) and layer.lora_B.shape == (7, 2)
    assert layer(torch.randn(3, 5)).shape == (3, 7) and layer.bias is None


def test_what_cannot_be_adapted_is_one_clear_error() -> None:
    with pytest.raises(ConfigError, match="'W_gate' names no linear layer of this model .*W_1, W_2, W_k"):
        add_adapters(tiny(), LoRASpec(rank=2, targets=("W_gate",)))
    with pytest.raises(ConfigError, match="tied to an embedding"):
        add_adapters(tiny(), LoRASpec(rank=2, targets=("generator",)))
    model = tiny()
    add_adapters(model, LoRASpec(rank=2))
    with pytest.raises(ConfigError, match="already"):
        add_adapters(model, LoRASpec(rank=2))
    for bad in ({"rank": 0}, {"rank": 2, "alpha": 0}, {"rank": 2, "targets": ()}, {"rank": 2, "dropout": 1.0}):
        with pytest.raises(ConfigError):
            LoRASpec(**bad)


def test_the_training_config_holds_the_lora_fields() -> None:
    config = TrainConfig.from_dict({"lora_rank": 8, "lora_targets": ["W_q", "W_k"], "lora_alpha": 4})
    assert config.lora == LoRASpec(rank=8, alpha=4, targets=("W_q", "W_k"))
    assert TrainConfig().lora is None and TrainConfig().lora_targets == DEFAULT_TARGETS
    assert TrainConfig.from_dict(json.loads(json.dumps(config.to_dict()))) == config  # run.json and back
    for bad in ({"lora_rank": -1}, {"lora_targets": "W_q"}, {"lora_targets": ["W q"]}, {"lora_dropout": 1.5}):
        with pytest.raises(ConfigError, match="lora_"):
            TrainConfig.from_dict(bad)


# -- activation checkpointing ------------------------------------------------------------------------------------------


@pytest.mark.numerical
@pytest.mark.parametrize("arch", ["encoder-decoder", "decoder-only"])
def test_activation_checkpointing_gives_the_plain_gradients(arch: str) -> None:
    from dotformer.stacks import Decoder, Encoder

    model = tiny(arch).train()  # dropout 0: the recomputed forward is the same function
    src, tgt = batch()

    def gradients() -> dict[str, torch.Tensor]:
        model.zero_grad()
        logits = logits_of(model, src, tgt[:, :-1])
        loss = nn.functional.cross_entropy(logits.flatten(0, 1), tgt[:, 1:].flatten(), ignore_index=0)
        loss.backward()
        return {name: p.grad.clone() for name, p in model.named_parameters()}

    plain = gradients()
    calls = []
    hook = model.decoder.layers[0].register_forward_pre_hook(lambda *_: calls.append(1))
    for module in model.modules():
        if isinstance(module, (Encoder, Decoder)):
            module.checkpointing = True
    checkpointed = gradients()
    hook.remove()
    assert len(calls) == 2  # the layer ran again in the backward pass (its pre-hook: the recomputation stops early)
    tokens = int((tgt[:, 1:] != 0).sum())
    sums = [tokens, *logit_sums(model.config, tgt.size(1) - 1, src.size(1) if arch != "decoder-only" else 0)]
    for name, grad in plain.items():
        tolerance = reordering_bound(sums, float(grad.abs().max()))  # the order of the sums into one gradient
        torch.testing.assert_close(checkpointed[name], grad, atol=tolerance, rtol=0, msg=name)
    with torch.no_grad():  # decoding: no recomputation
        calls.clear()
        model.decoder.layers[0].register_forward_pre_hook(lambda *_: calls.append(1))
        logits_of(model, src, tgt)
    assert len(calls) == 1


# -- through the run pipeline ------------------------------------------------------------------------------------------

WORDS = ["in", "the", "beginning", "god", "created", "heaven", "and", "earth", "light", "darkness", "water", "spirit"]
COMMON = ["--no-progress", "--device", "cpu", "--lr-schedule", "constant", "--lr-peak", "1e-2", "--warmup", "1"]
LORA = ["--lora-rank", "4", "--lora-alpha", "8", "--lora-targets", "W_q,W_v,W_1"]


def run(*argv: Any) -> int:
    torch.set_num_threads(1)
    return main([str(a) for a in argv])


def text_file(path: Path, shift: int, lines: int = 300) -> Path:
    text = "".join(
        " ".join(WORDS[(i * shift + j * 3) % len(WORDS)] for j in range(2 + i % 5)) + "\n" for i in range(lines)
    )
    path.write_text(text, encoding="utf-8")
    return path


def labelled_file(path: Path) -> Path:
    rows = [
        f"{' '.join(WORDS[(i + j) % 6 + (6 if i % 2 else 0)] for j in range(4))}\t{'ab'[i % 2]}\n" for i in range(200)
    ]
    path.write_text("".join(rows), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Bases (a language model, a masked language model, a copy model) and their LoRA fine-tunings: once to 4 steps,
    and to 2 steps then resumed to 4."""
    root = tmp_path_factory.mktemp("lora")
    base_text, own_text, labels = (
        text_file(root / "a.txt", 7),
        text_file(root / "b.txt", 5),
        labelled_file(root / "l.tsv"),
    )
    lm = ["--task", "lm", "--preset", "tiny", "--block-size", "16", "--max-tokens", "64"]
    assert run("train", "--data", base_text, "--out", root / "lm", "--max-steps", "3", *lm, *COMMON) == 0
    enc = ["--preset", "tiny", "--block-size", "24", "--max-tokens", "96", "--tokenizer", "char"]
    assert run("train", "--task", "mlm", "--data", base_text, "--out", root / "mlm", "--max-steps", "3", *enc,
               *COMMON) == 0  # fmt: skip
    copy = ["--data", "copy", "--preset", "tiny", "--max-tokens", "256", "--synthetic-examples", "300"]
    assert run("train", *copy, "--out", root / "copy", "--max-steps", "3", *COMMON) == 0
    jobs = {
        "lm": ["--task", "lm", "--data", own_text, "--max-tokens", "64"],
        "classify": ["--task", "classify", "--data", labels, "--max-tokens", "96"],
        "copy": [*copy],
    }
    bases = {"lm": root / "lm", "classify": root / "mlm", "copy": root / "copy"}
    out = dict(bases.items(), **{f"base:{k}": v for k, v in bases.items()})
    for task, flags in jobs.items():
        fine = [*flags, "--init-from", bases[task], *LORA, *COMMON, "--save-every", "2", "--eval-every", "2"]
        assert run("train", *fine, "--out", root / f"{task}-once", "--max-steps", "4") == 0
        assert run("train", *fine, "--out", root / f"{task}-twice", "--max-steps", "2") == 0
        assert run("train", "--out", root / f"{task}-twice", "--resume", "--max-steps", "4", "--no-progress") == 0
        out[task] = root / f"{task}-once"
        out[f"{task}-twice"] = root / f"{task}-twice"
    return out


@pytest.mark.parametrize("task", ["lm", "classify", "copy"])
def test_only_the_adapters_train_and_are_saved(runs: dict[str, Path], task: str) -> None:
    last = runs[task] / "last"
    info = json.loads((last / "config.json").read_text())
    base = Path(info[LORA_KEY]["base"])
    assert base == (runs[f"base:{task}"] / "best").resolve() and info[LORA_KEY]["rank"] == 4
    saved = load_weights(last / "model.safetensors")
    head = {"classifier.proj.weight", "classifier.proj.bias"} if task == "classify" else set()
    assert {n for n in saved if not n.endswith(("lora_A", "lora_B"))} == head  # the adapters (and a new head)
    assert all(saved[n].any() for n in saved if n.endswith("lora_B"))  # they trained
    before, after = load_weights(base / "model.safetensors"), full_weights(last)  # the base's, the merged
    adapted = {n.removesuffix(".lora_A") + ".weight" for n in saved if n.endswith("lora_A")}
    assert adapted and {n.rsplit(".", 2)[-2] for n in adapted} == {"W_q", "W_v", "W_1"}
    for name, tensor in after.items():
        if name in adapted:
            assert not torch.equal(tensor, before[name]), name
        elif name not in head:
            assert torch.equal(tensor, before[name]), name  # frozen


@pytest.mark.parametrize("task", ["lm", "classify", "copy"])
def test_an_adapted_run_resumes_exactly(runs: dict[str, Path], task: str) -> None:
    once = load_weights(runs[task] / "last" / "model.safetensors")
    twice = load_weights(runs[f"{task}-twice"] / "last" / "model.safetensors")
    assert set(once) == set(twice) and all(torch.equal(once[n], twice[n]) for n in once)
    record = json.loads((runs[f"{task}-twice"] / "run.json").read_text())
    assert record["train"]["lora_rank"] == 4 and len(record["resumes"]) == 1


@pytest.mark.numerical
@pytest.mark.parametrize("task", ["lm", "copy"])
def test_a_loaded_checkpoint_is_its_adapters_merged_on_the_base(runs: dict[str, Path], task: str) -> None:
    loaded = load_checkpoint(runs[task])
    assert not is_adapted(loaded.model)
    model = Transformer(loaded.config).eval()  # unmerged: the base's weights and the adapters, as trained
    add_adapters(model, LoRASpec(rank=4, alpha=8.0, targets=("W_q", "W_v", "W_1")))
    load_adapted(model, loaded.path, loaded.info)
    src, tgt = batch()
    src, tgt = src % loaded.config.src_vocab_size, tgt % loaded.config.tgt_vocab_size
    with torch.no_grad():
        unmerged, merged = logits_of(model, src, tgt), logits_of(loaded.model, src, tgt)
    src_len = 0 if loaded.config.arch == "decoder-only" else src.size(1)
    sums = [*logit_sums(loaded.config, tgt.size(1), src_len), *[4] * 3 * loaded.config.num_decoder_layers * 2]
    torch.testing.assert_close(merged, unmerged, atol=reordering_bound(sums, float(unmerged.abs().max())), rtol=0)


def test_generate_translate_and_classify_load_the_adapted_runs(
    runs: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    import dotformer

    capsys.readouterr()
    assert run("generate", "--checkpoint", runs["lm"], "--prompt", "in the", "--greedy", "--max-new-tokens", "5") == 0
    assert capsys.readouterr().out.startswith("in the")
    source = " ".join(dotformer.load(runs["copy"]).src_tokenizer.id_to_token(i) for i in (5, 6, 7))
    assert run("translate", "--checkpoint", runs["copy"], source) == 0
    assert len(capsys.readouterr().out.splitlines()) == 1
    translator = dotformer.load(runs["copy"])
    assert len(translator.translate([source])) == 1
    assert run("classify", "--checkpoint", runs["classify"], "in the beginning god") == 0
    label, score = capsys.readouterr().out.strip().split("\t")[-2:]
    assert label in ("a", "b") and 0.5 <= float(score) <= 1.0
    assert run("evaluate", "--checkpoint", runs["classify"], "--split", "valid") == 0


@pytest.mark.numerical
def test_export_merges_the_adapters(runs: dict[str, Path], tmp_path: Path) -> None:
    ctranslate2 = pytest.importorskip("ctranslate2")
    import numpy as np

    from dotformer.export.ct2 import ids_to_tokens

    assert run("export", "--to", "ct2", runs["lm"], tmp_path / "ct2") == 0
    vocabulary = json.loads((tmp_path / "ct2" / "vocabulary.json").read_text())
    loaded = load_checkpoint(runs["lm"])
    prompt = [2, *loaded.tgt_tokenizer.encode("in the")]
    generator = ctranslate2.Generator(str(tmp_path / "ct2"), device="cpu")
    theirs = np.array(generator.forward_batch([ids_to_tokens(prompt, vocabulary)]))  # (1, T, V)
    with torch.no_grad():
        ours = logits_of(loaded.model, torch.tensor([prompt]), torch.tensor([prompt]))
    real = list(range(4, ours.size(-1)))  # PAD, BOS, EOS, UNK may be suppressed by the export
    np.testing.assert_allclose(theirs[..., real], ours.numpy()[..., real], atol=logits_tolerance(loaded.config, ours))


def test_the_base_must_stay_as_it_was(runs: dict[str, Path], tmp_path: Path) -> None:
    import shutil

    moved = tmp_path / "run"
    shutil.copytree(runs["lm"] / "last", moved)
    info = json.loads((moved / "config.json").read_text())
    info[LORA_KEY]["base_sha256"] = "0" * 64
    (moved / "config.json").write_text(json.dumps(info))
    (moved / "manifest.json").unlink()
    with pytest.warns(UserWarning), pytest.raises(CheckpointError, match="trained on other weights"):
        load_checkpoint(moved)
    info[LORA_KEY]["base"] = str(tmp_path / "gone")
    (moved / "config.json").write_text(json.dumps(info))
    with pytest.warns(UserWarning), pytest.raises(CheckpointError, match="which is missing"):
        load_checkpoint(moved)


def test_lora_flags_without_a_checkpoint_are_one_line(
    runs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = runs["lm"].parent / "b.txt"
    capsys.readouterr()
    assert run("train", "--task", "lm", "--data", text, "--out", tmp_path / "r", "--max-steps", "1", *LORA) == 2
    assert "--init-from" in capsys.readouterr().err and not (tmp_path / "r").exists()
    argv = ["train", "--task", "lm", "--data", text, "--init-from", runs["base:lm"], "--max-steps", "1", *COMMON]
    assert run(*argv, "--out", tmp_path / "s", "--lora-rank", "2", "--lora-targets", "W_gate") == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "W_gate" in err
    assert run("train", "--out", runs["lm-twice"], "--resume", "--max-steps", "5", "--lora-rank", "2") == 2
    assert "LoRA" in capsys.readouterr().err


# -- a language model continued from a checkpoint ----------------------------------------------------------------------


def test_a_language_model_continues_with_its_checkpoints_tokenizer(runs: dict[str, Path], tmp_path: Path) -> None:
    base = runs["base:lm"]
    other = text_file(tmp_path / "other.txt", 11)
    out = tmp_path / "cont"
    assert run("train", "--task", "lm", "--data", other, "--init-from", base, "--out", out, "--max-steps", "2",
               *COMMON) == 0  # fmt: skip
    record = json.loads((out / "run.json").read_text())
    assert record["model"] == json.loads((base / "run.json").read_text())["model"]
    assert record["data"]["block_size"] == 16  # the blocks the checkpoint trained on, not the default 128
    assert (out / "data" / "tokenizer_tgt.json").read_text() == (base / "best" / "tokenizer_tgt.json").read_text()
    assert json.loads((out / "last" / "config.json").read_text())["init_from"] == str(base / "best")
    assert run("train", "--task", "lm", "--data", other, "--init-from", base, "--out", tmp_path / "x",
               "--max-steps", "1", "--tokenizer", "bpe", *COMMON) == 2  # fmt: skip


def test_averaged_adapted_checkpoints_are_their_merged_weights(runs: dict[str, Path], tmp_path: Path) -> None:
    steps = sorted((runs["lm"] / "checkpoints").iterdir())[-2:]
    assert run("average", *steps, "--out", tmp_path / "avg") == 0
    info = json.loads((tmp_path / "avg" / "config.json").read_text())
    assert LORA_KEY not in info  # a plain checkpoint: the merged weights averaged
    averaged = load_weights(tmp_path / "avg" / "model.safetensors")
    first, second = (full_weights(step) for step in steps)
    name = "decoder.layers.0.self_attn.W_q.weight"
    assert not torch.equal(first[name], second[name])
    torch.testing.assert_close(averaged[name], (first[name].double() + second[name].double()).div(2).float())


@pytest.mark.numerical
def test_a_run_with_activation_checkpointing_takes_the_plain_steps(runs: dict[str, Path], tmp_path: Path) -> None:
    """Through the training step (packed layers, dropout on: the recomputation replays the same masks)."""
    text = runs["lm"].parent / "a.txt"
    flags = ["--task", "lm", "--data", text, "--preset", "tiny", "--block-size", "16", "--max-tokens", "64",
             "--max-steps", "2", "--eval-every", "0", *COMMON]  # fmt: skip
    assert run("train", *flags, "--out", tmp_path / "plain") == 0
    assert run("train", *flags, "--out", tmp_path / "recomputed", "--activation-checkpointing") == 0
    plain, recomputed = (
        [json.loads(line) for line in (tmp_path / name / "metrics.jsonl").read_text().splitlines()]
        for name in ("plain", "recomputed")
    )
    config = ModelConfig.from_dict(json.loads((tmp_path / "plain" / "run.json").read_text())["model"])
    first, again = plain[0], recomputed[0]
    assert first["step"] == again["step"] == 1 and first["loss"] == again["loss"]  # the same forward
    tolerance = reordering_bound([first["tokens"], *logit_sums(config, 16)], first["grad_norm"])
    assert abs(again["grad_norm"] - first["grad_norm"]) <= tolerance
    record = json.loads((tmp_path / "recomputed" / "run.json").read_text())
    assert record["train"]["activation_checkpointing"] is True


def test_a_checkpoint_without_a_run_is_continued_with_lora(runs: dict[str, Path], tmp_path: Path) -> None:
    """As an imported model: a decoder-only checkpoint with its tokenizer and no record of its training data."""
    from dotformer.checkpoint import save_checkpoint

    tokenizer = load_checkpoint(runs["base:lm"]).tgt_tokenizer
    config = ModelConfig.preset("tiny", src_vocab_size=tokenizer.vocab_size, tgt_vocab_size=tokenizer.vocab_size,
                                arch="decoder-only", max_len=48, norm_first=True, tie_output=False)  # fmt: skip
    save_checkpoint(tmp_path / "imported", Transformer(config), tokenizer, tokenizer, {})
    text = runs["lm"].parent / "b.txt"
    out = tmp_path / "tuned"
    lora = ["--lora-rank", "2", "--lora-targets", "W_q,W_k,W_v,W_o,generator"]
    argv = ["--task", "lm", "--data", text, "--init-from", tmp_path / "imported", "--max-steps", "2", *lora, *COMMON]
    assert run("train", *argv, "--out", out) == 0
    assert json.loads((out / "run.json").read_text())["data"]["block_size"] == 48  # within its positions
    saved = load_weights(out / "last" / "model.safetensors")
    assert {n.rsplit(".", 2)[-2] for n in saved} == {"W_q", "W_k", "W_v", "W_o", "generator"}
    assert run("generate", "--checkpoint", out, "--prompt", "in", "--greedy", "--max-new-tokens", "3") == 0
