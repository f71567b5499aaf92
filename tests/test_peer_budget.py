"""benchmarks/peer_budget.py end to end on a tiny budget: dotformer (its CLI) then HF Marian on the same G2P split,
testing the average of the last saved weights of each, then, reusing that dotformer run, the best and the last (the
default for g2p.toml, whose learning rate cools down to 0); and Marian's learning rate against dotformer's schedule."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import CLI_TIMEOUT_S

pytest.importorskip("transformers")
pytest.importorskip("rapidfuzz")

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "peer_budget.py"


def run_benchmark(work: Path, out: Path, *flags: str) -> tuple[str, dict]:
    """Run the script on 6 steps (a checkpoint every 2) of a 3000-pair CMUdict; its stdout and JSON."""
    command = [sys.executable, str(SCRIPT), "--task", "g2p", "--max-steps", "6", "--save-every", "2", "--limit", "20"]
    command += ["--corpus-limit", "3000", "--threads", "1", "--work-dir", str(work), "--out", str(out), *flags]
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=CLI_TIMEOUT_S, env={**os.environ, "OMP_NUM_THREADS": "1"}
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    assert "| dotformer" in done.stdout and "| marian" in done.stdout  # the table
    return done.stdout, json.loads(out.read_text())


def test_peer_budget_runs_both_systems_on_the_same_test_set(tmp_path: Path) -> None:
    out = tmp_path / "peer_budget.json"
    work = tmp_path / "work"
    stdout, result = run_benchmark(work, out, "--average-last", "5")  # of checkpoints at steps 2, 4, 6
    systems = result["systems"]
    assert set(systems) == {"dotformer", "marian"}
    # both tested the mean of their weights at the steps dotformer saved: 2, 4 and 6 (fewer than 5 were saved)
    assert result["weights"]["average_last"] == 5 and result["weights"]["save_every"] == 2
    assert result["weights"]["tested"] == {"dotformer": "averaged last 3", "marian": "averaged last 3"}
    for name, system in systems.items():
        assert system["weights"] == "averaged last 3" and system["averaged_steps"] == [2, 4, 6], name
    assert "| dotformer | averaged last 3" in stdout and "| marian    | averaged last 3" in stdout
    average = result["dotformer_commands"]["average"]  # the command line after the Python executable
    assert average[:5] == ["-m", "dotformer", "average", "--overwrite", "--out"]
    assert [Path(a).name for a in average[6:]] == ["step_0000002", "step_0000004", "step_0000006"]
    assert Path(systems["dotformer"]["extra"]["checkpoint"]).resolve() == (work / "dotformer" / "averaged").resolve()
    assert "averaged_from" in json.loads((work / "dotformer" / "averaged" / "config.json").read_text())
    for name, system in systems.items():
        assert system["steps"] == 6, name
        assert 0 < system["epochs"] < 1 and system["target_tokens"] > 0 and system["seconds"] > 0, name
        metrics = system["metrics"]
        for key in ("wer", "per", "perplexity"):
            assert math.isfinite(metrics[key]), (name, key)
        assert 0.0 <= metrics["wer"] <= 100.0 and metrics["per"] >= 0.0 and metrics["perplexity"] >= 1.0, name
        assert 0 <= system["unfinished"] <= system["num_sources"]
    dotformer, marian = systems["dotformer"], systems["marian"]
    assert dotformer["num_sources"] == marian["num_sources"] == 20
    assert dotformer["num_pairs"] == marian["num_pairs"] >= 20  # a word's pronunciations are all its references
    assert dotformer["epochs"] == pytest.approx(marian["epochs"])  # the same batches, in the same order
    assert marian["extra"]["tied_output"] and marian["extra"]["stopped_by"] == "max_steps"
    assert result["marian_settings"]["warmup_steps"] == 200 and result["marian_settings"]["lr_peak"] == 2e-3
    assert result["target"]["metric"] == "wer" and math.isfinite(result["target"]["dotformer_lead"])
    # both wrote one output line per test pair, for the same pairs
    for name in ("dotformer", "marian"):
        assert len((work / f"{name}_test.hyp").read_text().splitlines()) == dotformer["num_pairs"]

    # --average-last 0: the best weights, as before; the dotformer run is reused, only evaluated again (best/)
    _, best = run_benchmark(work, out, "--average-last", "0", "--reuse-dotformer")
    assert best["dotformer_commands"]["reused"] and not best["dotformer_commands"]["evaluation_reused"]
    assert best["dotformer_commands"]["average"] is None and best["systems"]["marian"]["best_step"] == 6
    for name, system in best["systems"].items():
        assert system["weights"] == "best" and system["averaged_steps"] is None, name
        assert math.isfinite(system["metrics"]["wer"]), name
        assert math.isfinite(system["metrics"]["perplexity"]), name
    assert (
        Path(best["systems"]["dotformer"]["extra"]["checkpoint"]).resolve() == (work / "dotformer" / "best").resolve()
    )

    # the default for g2p.toml (lr_cooldown 0.25): the last weights of both, the run reused
    _, last = run_benchmark(work, out, "--reuse-dotformer")
    assert last["weights"]["average_last"] == 1 and last["dotformer_commands"]["average"] is None
    assert last["marian_settings"]["lr_cooldown"] == 0.25
    for name, system in last["systems"].items():
        assert system["weights"] == "last" and system["averaged_steps"] is None, name
    assert (
        Path(last["systems"]["dotformer"]["extra"]["checkpoint"]).resolve() == (work / "dotformer" / "last").resolve()
    )


def test_marian_learning_rate_is_dotformers_schedule_with_its_cooldown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Marian's rate before each update equals the curve dotformer draws of g2p.toml's schedule at a 400-step budget
    (warmup 200, peak 2e-3, 1/sqrt(step), the cooldown over the last 100 steps: a hundredth of it at the last)."""
    from dotformer.plots.curves import config_curve
    from dotformer.runs.shipped_configs import find_config_file

    peer = load_peer_budget(monkeypatch)
    config = tmp_path / "g2p400.toml"
    config.write_text(find_config_file("g2p").read_text() + "max_steps = 400\n")
    curve = config_curve(config)
    settings = peer.MarianSettings(2e-3, 200, 1.0, 0.1, (0.9, 0.98), 1e-9, 1024, 1, 0, lr_cooldown=0.25)
    budget = peer.Budget(max_steps=400, max_minutes=10.0, max_epochs=100.0)
    ours = [peer.marian_lr(settings, budget, peer.Position(step, 0.0, 0.0)) for step in range(400)]
    assert ours == pytest.approx(list(curve.lrs), rel=1e-12)
    assert ours[199] == pytest.approx(2e-3) and ours[-1] == pytest.approx(2e-3 * (200 / 400) ** 0.5 / 100)
    # by time: half the minutes gone (a quarter of the steps): the cooldown has not begun; 90% gone: 0.4 of the rate
    plain = peer.inverse_sqrt_lr(101, 2e-3, 200)
    assert peer.marian_lr(settings, budget, peer.Position(100, 300.0, 0.0)) == pytest.approx(plain)
    assert peer.marian_lr(settings, budget, peer.Position(100, 540.0, 0.0)) == pytest.approx(0.4 * plain)


def load_peer_budget(monkeypatch: pytest.MonkeyPatch):
    """benchmarks/peer_budget.py as a module (it imports benchmarks/common.py, so its folder goes on the path)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("peer_budget", SCRIPT)
    peer = importlib.util.module_from_spec(spec)
    monkeypatch.syspath_prepend(str(SCRIPT.parent))
    monkeypatch.setitem(sys.modules, "peer_budget", peer)
    spec.loader.exec_module(peer)
    return peer


class FixedBatches:
    """The two methods of BatchSampler that ``train_marian`` calls, over a fixed list of batches (each epoch)."""

    def __init__(self, batches: list) -> None:
        self.batches = batches

    def num_batches(self, epoch: int) -> int:
        return len(self.batches)

    def iter_batches(self, epoch: int):
        return iter(self.batches)


def random_batches(count: int, src_vocab: int, tgt_vocab: int, seed: int) -> list:
    """``count`` batches of 4 pairs, right-padded, 2 to 8 tokens a side: src = x + EOS, tgt_in = BOS + y,
    tgt_out = y + EOS."""
    from dotformer.data.batch.batching import Batch
    from dotformer.data.tokenize.tokenizers import BOS_ID, EOS_ID, PAD_ID

    g = torch.Generator().manual_seed(seed)

    def ids(vocab: int) -> torch.Tensor:  # (L,) 2 <= L <= 8, no special ids
        return torch.randint(4, vocab, (int(torch.randint(2, 9, (1,), generator=g)),), generator=g)

    batches = []
    for _ in range(count):
        xs = [ids(src_vocab) for _ in range(4)]
        ys = [ids(tgt_vocab) for _ in range(4)]
        src = torch.full((4, max(len(x) for x in xs) + 1), PAD_ID)
        tgt_in = torch.full((4, max(len(y) for y in ys) + 1), PAD_ID)
        tgt_out = tgt_in.clone()
        for row, (x, y) in enumerate(zip(xs, ys, strict=True)):
            src[row, : len(x)], src[row, len(x)] = x, EOS_ID
            tgt_in[row, 0], tgt_in[row, 1 : len(y) + 1] = BOS_ID, y
            tgt_out[row, : len(y)], tgt_out[row, len(y)] = y, EOS_ID
        sizes = sum(len(x) + 1 for x in xs), sum(len(y) + 1 for y in ys)
        batches.append(Batch(src, tgt_in, tgt_out, sizes[0], sizes[1], list(range(4))))
    return batches


@pytest.mark.numerical
@pytest.mark.parametrize("shared", [False, True], ids=["g2p-like tables", "bible-like shared table"])
def test_marian_from_dotformers_weights_follows_dotformers_training(monkeypatch: pytest.MonkeyPatch, shared) -> None:
    """The peer comparison is fair to the step: HF Marian given dotformer's initial weights (dropout 0, label
    smoothing 0), trained by peer_budget.py's own loop on the same batches, lands where dotformer's ``train_step``
    lands after 12 Adam steps (warmup, 1/sqrt(step), clipping), though training moved the logits by far more; so at
    equal steps the two differ only by the draw of the initial weights and the dropout masks.

    Both train in float64. In float32 the comparison is ill-conditioned, whatever the implementations: Adam's update
    lr · m̂ / (√v̂ + ε) is scale-free, so a gradient that is 0 in exact arithmetic but rounding noise in float32 (the
    key projections' biases: softmax ignores a constant added to a row of scores; rarely active ReLU units) gets
    steps of up to lr in the noise's direction, and where the two implementations' noise differs (another vector
    unit, another summation order) their weights part by up to 12 · lr (from 1e-6 to 3e-3 in these logits,
    depending on the CPU's vector unit). In float64 that noise (≈ 1e-17) stays far below ε = 1e-9."""
    from dotformer.config import ModelConfig
    from dotformer.data.tokenize.tokenizers import PAD_ID
    from dotformer.export.marian import to_marian
    from dotformer.model import Transformer
    from dotformer.training.config import TrainConfig
    from dotformer.training.optim import build_optimizer, set_learning_rate
    from dotformer.training.schedule import learning_rate
    from dotformer.training.step import StepRecipe, train_step

    peer = load_peer_budget(monkeypatch)
    src_vocab, tgt_vocab = (30, 30) if shared else (30, 20)
    config = ModelConfig.preset(
        "tiny", src_vocab_size=src_vocab, tgt_vocab_size=tgt_vocab, dropout=0.0, share_embeddings=shared
    )
    torch.manual_seed(0)
    ours = Transformer(config).double()
    marian = to_marian(ours).double().train()
    batches = random_batches(12, src_vocab, tgt_vocab, seed=1)
    probe = random_batches(1, src_vocab, tgt_vocab, seed=2)[0]

    def our_logits() -> torch.Tensor:
        ours.eval()
        with torch.no_grad():
            return ours(probe.src, probe.tgt_in)  # (B, T, V)

    before = our_logits()
    train = TrainConfig(lr_schedule="inverse_sqrt", lr_peak=3e-3, warmup_steps=4, label_smoothing=0.0, clip_norm=1.0)
    optimizer = build_optimizer(ours, train)
    for step, batch in enumerate(batches, start=1):
        set_learning_rate(optimizer, learning_rate(step, train, config.d_model))
        train_step(ours, optimizer, [batch], StepRecipe.of(train, pad_id=PAD_ID))
    after = our_logits()

    settings = peer.MarianSettings(3e-3, 4, 1.0, 0.0, (0.9, 0.98), 1e-9, 64, 0, 0)
    peer.train_marian(
        marian, FixedBatches(batches), [probe], settings, minutes=60.0, max_steps=12, device="cpu", average_last=1
    )
    with torch.no_grad():
        theirs = peer.marian_logits(marian.eval(), probe)
    real = probe.tgt_out != PAD_ID  # (B, T) the positions the loss reads
    moved = float((after - before)[real].abs().max())
    assert after.dtype == theirs.dtype == torch.float64 and moved > 1.0  # training changed the logits by nats ...
    # ... and both the same way, to within the rounding of float64 (u = 2^-53): each gradient carries a relative
    # error of at most n·u, n = d_ff = 256 the longest sum behind it (a weight's gradient sums the B·T <= 36
    # positions, a projection D = 64 terms); Adam passes a relative gradient error on to its step with a factor of
    # at most 2 (the first moment, and half of it twice through the second) where |g| >> ε, and the gradients that
    # are 0 in exact arithmetic stay at noise far below ε (see above). Twelve steps add their errors, so the logits,
    # moved by `moved` nats, differ by at most 12 · 2 · n·u · moved (about 4e-12 here).
    tolerance = 12 * 2 * config.d_ff * 2.0**-53 * moved
    torch.testing.assert_close(theirs[real], after[real], atol=tolerance, rtol=0)
