"""Joint CTC/attention training (dotformer.training.ctc, ``--ctc-weight``): λ = 0 is the paper's objective; the CTC
term is torch's CTC loss on the head's log-probabilities of k frames per source token, with PAD as the blank; its
gradient reaches the encoder and not the decoder; pairs CTC cannot align are counted and cost nothing; a checkpoint
with the head resumes, loads, decodes, averages and exports without it; the flag is refused where it cannot work."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from tolerance import logit_sums, reordering_bound

from dotformer.checkpoint import TRAINING_ONLY, load_checkpoint, load_weights
from dotformer.cli import main
from dotformer.config import ModelConfig
from dotformer.data.batch.batching import EncodedPair, collate
from dotformer.errors import ConfigError, ShapeError
from dotformer.model import Transformer
from dotformer.training.adapting import adapt_model
from dotformer.training.config import TrainConfig
from dotformer.training.ctc import CTC_HEAD, CTCHead, attach_ctc_head, ctc_head_of, feasibility_line, infeasible_pairs
from dotformer.training.loss import ctc_loss_sum, label_smoothed_cross_entropy
from dotformer.training.objective import NEXT_TOKEN, JointCTC

pytestmark = pytest.mark.usefixtures("one_thread")

V = 13
PAD = 0


def tiny(dtype: torch.dtype = torch.float32, **overrides: Any) -> Transformer:
    config = ModelConfig.preset("tiny", src_vocab_size=V, tgt_vocab_size=V, dropout=0.0, **overrides)
    return Transformer(config).to(dtype).eval()


def pairs() -> list[EncodedPair]:
    """Four pairs: longer and shorter targets, a repeated label, and one CTC cannot align at k = 2 (one source token
    and EOS: 4 frames; 3 labels with 2 repeats need 5)."""
    return [
        EncodedPair([4, 5, 6, 7, 8], [9, 10, 11]),
        EncodedPair([4, 4, 9], [5, 5, 6, 7, 12, 12]),
        EncodedPair([10, 11, 12, 4, 5, 6, 7], [8, 9]),
        EncodedPair([6], [7, 7, 7]),
    ]


def with_head(model: Transformer, upsample: int = 2) -> CTCHead:
    head = attach_ctc_head(model, TrainConfig(ctc_weight=0.3, ctc_upsample=upsample))
    assert head is not None
    head.to(next(model.parameters()).dtype)
    return head


def by_hand(model: Transformer, examples: list[EncodedPair], upsample: int) -> torch.Tensor:
    """Σ -log p(target | source) of the head, written out: the encoder's memory, the split into k frames, the
    projection, log-softmax, and F.ctc_loss on the concatenated labels (the 1-D form of its targets)."""
    head = ctc_head_of(model)
    assert head is not None
    batch = collate(examples)
    memory = model.encode(batch.src).memory  # (B, S, D)
    B, S, D = memory.shape
    frames = memory @ head.split.weight.T + head.split.bias  # (B, S, k·D)
    frames = frames.reshape(B, S * upsample, D)  # frame k·s + j: the j-th of position s
    log_probs = torch.log_softmax(frames @ head.proj.weight.T + head.proj.bias, dim=-1)  # (B, k·S, V)
    lengths = torch.tensor([upsample * (len(e.src) + 1) for e in examples])  # source + EOS
    labels = torch.tensor([t for e in examples for t in e.tgt])  # (Σ L,)
    label_lengths = torch.tensor([len(e.tgt) for e in examples])
    return F.ctc_loss(log_probs.transpose(0, 1), labels, lengths, label_lengths, blank=PAD, reduction="none",
                      zero_infinity=True)  # fmt: skip


# -- the objective -----------------------------------------------------------------------------------------------------


def test_without_a_weight_the_model_and_objective_are_the_papers() -> None:
    model = tiny()
    before = {name: t.clone() for name, t in model.state_dict().items()}
    adapt_model(model, TrainConfig(), has_base=False)
    assert ctc_head_of(model) is None and model.state_dict().keys() == before.keys()
    batch = collate(pairs())
    paper = NEXT_TOKEN.loss(NEXT_TOKEN.predict(model, batch, True, PAD), 0.1, PAD)
    with_head(model)
    joint = JointCTC(0.0, PAD)
    ours = joint.loss(joint.predict(model, batch, True, PAD), 0.1, PAD)
    assert torch.equal(ours.loss, paper.loss) and torch.equal(ours.nll, paper.nll)
    assert int(ours.num_tokens) == int(paper.num_tokens)


@pytest.mark.numerical
@pytest.mark.parametrize("packed", [False, True])
@pytest.mark.parametrize("upsample", [2, 3])
def test_the_ctc_term_is_torch_ctc_loss_on_the_heads_log_probs(packed: bool, upsample: int) -> None:
    model = tiny(torch.float64)
    with_head(model, upsample)
    examples, weight = pairs(), 0.3
    batch = collate(examples)
    objective = JointCTC(weight, PAD)
    with torch.no_grad():
        ours = objective.loss(objective.predict(model, batch, packed, PAD), 0.1, PAD)
        attention = label_smoothed_cross_entropy(model(batch.src, batch.tgt_in), batch.tgt_out, 0.1, PAD)
        per_pair = by_hand(model, examples, upsample)
    assert bool((per_pair[:3] > 0).all()) and (per_pair[3] == 0) == (upsample == 2)  # unalignable at k = 2: 0
    expected = (1 - weight) * attention.loss + weight * per_pair.sum()
    S, T = batch.src.size(1), batch.tgt_in.size(1)
    D = model.config.d_model
    sums = [*logit_sums(model.config, T, S), D, D, V, upsample * S]  # the model's, the split, proj, softmax, CTC
    tolerance = reordering_bound(sums, float(expected), torch.float64)
    torch.testing.assert_close(ours.loss, expected, atol=tolerance, rtol=0)
    torch.testing.assert_close(ours.nll, attention.nll, atol=tolerance, rtol=0)  # the decoder's NLL, as reported


def test_the_ctc_gradient_reaches_the_encoder_and_not_the_decoder() -> None:
    model = tiny()
    with_head(model)
    model.train()
    batch = collate(pairs())
    prediction = JointCTC(0.5, PAD).predict(model, batch, True, PAD)
    ctc = ctc_loss_sum(prediction.ctc_scores, prediction.frames, prediction.labels, prediction.label_lengths, PAD)
    ctc.backward()
    grads = {name: p.grad for name, p in model.named_parameters()}
    assert all(grads[n] is not None and grads[n].abs().sum() > 0 for n in grads if n.startswith(("encoder.", CTC_HEAD)))
    assert grads["src_embed.token.lookup.weight"][4:].abs().sum() > 0  # down to the source embeddings
    assert all(grads[n] is None for n in grads if n.startswith(("decoder.", "generator.", "tgt_embed.")))


def test_pad_is_the_blank_and_never_a_label() -> None:
    logits = torch.randn(1, 6, V)
    frames, lengths = torch.tensor([6]), torch.tensor([2])
    ctc_loss_sum(logits, frames, torch.tensor([[5, 6, PAD]]), lengths, PAD)  # PAD past the labels: padding
    with pytest.raises(ShapeError, match="blank"):
        ctc_loss_sum(logits, frames, torch.tensor([[5, PAD, 6]]), lengths, PAD)


def test_the_pairs_ctc_cannot_align_are_those_of_infinite_loss() -> None:
    examples = pairs()
    for upsample in (1, 2, 3):
        model = tiny()
        attach_ctc_head(model, TrainConfig(ctc_weight=0.5, ctc_upsample=upsample))
        with torch.no_grad():
            head = ctc_head_of(model)
            assert head is not None
            log_probs = torch.log_softmax(head(model.encode(collate(examples).src).memory), dim=-1)
        lengths = torch.tensor([upsample * (len(e.src) + 1) for e in examples])
        labels = torch.tensor([t for e in examples for t in e.tgt])
        label_lengths = torch.tensor([len(e.tgt) for e in examples])
        raw = F.ctc_loss(log_probs.transpose(0, 1), labels, lengths, label_lengths, blank=PAD, reduction="none")
        assert infeasible_pairs(examples, upsample) == int(torch.isinf(raw).sum())
    assert infeasible_pairs(examples, 2) == 1 and infeasible_pairs(examples, 1) == 2
    assert feasibility_line(examples, 2).startswith(
        "ctc: training pairs that need more than 2 frames per source token: 1 of 4 (25.00%)"
    )


def test_what_cannot_train_a_ctc_head_is_one_clear_error() -> None:
    with pytest.raises(ConfigError, match="ctc_weight must be in"):
        TrainConfig(ctc_weight=1.0)
    with pytest.raises(ConfigError, match="ctc_upsample"):
        TrainConfig(ctc_weight=0.3, ctc_upsample=0)
    with pytest.raises(ConfigError, match="decoder-only"):
        attach_ctc_head(tiny(arch="decoder-only"), TrainConfig(ctc_weight=0.3))
    with pytest.raises(ConfigError, match="--lora-rank"):
        attach_ctc_head(tiny(), TrainConfig(ctc_weight=0.3, lora_rank=4))
    with pytest.raises(ConfigError, match="without --compile"):
        attach_ctc_head(tiny(), TrainConfig(ctc_weight=0.3, compile=True))
    model = tiny()
    attach_ctc_head(model, TrainConfig(ctc_weight=0.3))
    with pytest.raises(ConfigError, match="ctc_upsample 2, the recipe asks 3"):
        attach_ctc_head(model, TrainConfig(ctc_weight=0.3, ctc_upsample=3))
    assert f"{CTC_HEAD}." in TRAINING_ONLY  # what decoding and export leave out


# -- through the run pipeline ------------------------------------------------------------------------------------------

COMMON = ["--no-progress", "--device", "cpu", "--lr-schedule", "constant", "--lr-peak", "1e-2", "--warmup", "1"]
COPY = ["--data", "copy", "--preset", "tiny", "--max-tokens", "256", "--synthetic-examples", "300"]


def run(*argv: Any) -> int:
    torch.set_num_threads(1)
    return main([str(a) for a in argv])


@pytest.fixture(scope="module")
def ctc_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy model trained with --ctc-weight 0.3 to 2 steps, then resumed to 4."""
    out = tmp_path_factory.mktemp("ctc") / "copy"
    assert run("train", *COPY, *COMMON, "--out", out, "--max-steps", 2, "--save-every", 2, "--ctc-weight", 0.3) == 0
    assert run("train", "--out", out, "--resume", "--max-steps", 4, "--no-progress") == 0
    return out


def test_the_head_is_saved_and_resumed(ctc_run: Path) -> None:
    saved = load_weights(ctc_run / "last" / "model.safetensors")
    head = {n for n in saved if n.startswith(CTC_HEAD)}
    assert head == {f"{CTC_HEAD}.{layer}.{p}" for layer in ("split", "proj") for p in ("weight", "bias")}
    first = load_weights(ctc_run / "checkpoints" / "step_0000002" / "model.safetensors")
    assert not torch.equal(first[f"{CTC_HEAD}.proj.weight"], saved[f"{CTC_HEAD}.proj.weight"])  # it trained on
    info = json.loads((ctc_run / "last" / "config.json").read_text())
    assert info["train"]["ctc_weight"] == 0.3 and info["train"]["ctc_upsample"] == 2


def test_a_checkpoint_with_the_head_loads_decodes_and_exports_without_it(
    ctc_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    loaded = load_checkpoint(ctc_run / "last")
    assert ctc_head_of(loaded.model) is None
    saved = load_weights(ctc_run / "last" / "model.safetensors")
    state = loaded.model.state_dict()
    assert set(state) == {n for n in saved if not n.startswith(CTC_HEAD)}
    assert all(torch.equal(state[n], saved[n]) for n in state)
    source = tmp_path / "in.txt"
    source.write_text("a b c\nd e\n", encoding="utf-8")
    capsys.readouterr()
    assert run("translate", "--checkpoint", ctc_run / "last", "--input", source) == 0
    assert len(capsys.readouterr().out.splitlines()) == 2
    assert run("evaluate", "--checkpoint", ctc_run / "last", "--split", "valid") == 0
    assert run("average", "--last", 2, "--out", tmp_path / "avg", ctc_run) == 0
    assert not any(n.startswith(CTC_HEAD) for n in load_weights(tmp_path / "avg" / "model.safetensors"))
    for target in ("ct2", "marian"):
        pytest.importorskip({"ct2": "ctranslate2", "marian": "transformers"}[target])
        assert run("export", "--to", target, ctc_run / "last", tmp_path / target) == 0


def test_ctc_weight_is_refused_where_it_cannot_train(
    ctc_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = tmp_path / "t.txt"
    text.write_text("in the beginning\n" * 50, encoding="utf-8")
    capsys.readouterr()
    argv = ["train", "--task", "lm", "--data", text, "--preset", "tiny", "--out", tmp_path / "lm", *COMMON]
    assert run(*argv, "--max-steps", 1, "--ctc-weight", 0.3) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "--ctc-weight" in lines[0] and "a language model has none" in lines[0]
    assert not (tmp_path / "lm").exists()
    assert run("train", "--out", ctc_run, "--resume", "--max-steps", 5, "--ctc-weight", 0, "--no-progress") == 2
    assert "trained with a CTC head" in capsys.readouterr().err


def test_a_run_counts_the_pairs_ctc_cannot_align_before_step_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    flags = [flag for flag in COMMON if flag != "--no-progress"]
    assert run("train", *COPY, *flags, "--out", tmp_path / "r", "--max-steps", 1, "--ctc-weight", 0.3) == 0
    err = capsys.readouterr().err
    assert "ctc: training pairs that need more than 2 frames per source token: 0 of " in err  # copies always fit
