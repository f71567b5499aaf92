"""Tests of dotformer.plots: every picture's numbers equal what the library computes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from dotformer import ModelConfig, Transformer, causal_mask, padding_mask, sinusoidal_positional_encoding
from dotformer.checkpoint import LoadedCheckpoint, load_checkpoint, save_checkpoint
from dotformer.cli import main
from dotformer.data.tokenize.tokenizer_files import train_tokenizer
from dotformer.data.tokenize.tokenizers import BOS_ID, EOS_ID, PAD_ID, Tokenizer
from dotformer.decoding import DecodeConfig, greedy_decode
from dotformer.decoding.attention_maps import attention_weights
from dotformer.errors import ConfigError, DataError, MissingDataError
from dotformer.plots import (
    config_curve,
    mask_data,
    noam_curve,
    plot_attention,
    plot_loss_curves,
    plot_masks,
    plot_positional,
    plot_schedule,
    positional_data,
    read_loss_curves,
)
from dotformer.plots.curves import schedule_title
from dotformer.plots.positional import WAVE_SAMPLES

WORDS = ["cat", "dog", "bird", "attention", "head"]
PHONES = ["K AE1 T", "D AO1 G", "B ER1 D", "AH0 T EH1 N SH AH0 N", "HH EH1 D"]


def fit_briefly(model: Transformer, src_tok: Tokenizer, tgt_tok: Tokenizer, steps: int = 150) -> None:
    """Teacher-forced cross-entropy on the five pairs, so that greedy outputs are short (end with EOS)."""
    src = [[*src_tok.encode(w), EOS_ID] for w in WORDS]
    tgt = [tgt_tok.encode(p) for p in PHONES]
    S, T = max(map(len, src)), max(map(len, tgt)) + 1
    src_ids = torch.tensor([row + [PAD_ID] * (S - len(row)) for row in src])
    tgt_in = torch.tensor([[BOS_ID, *row] + [PAD_ID] * (T - 1 - len(row)) for row in tgt])
    tgt_out = torch.tensor([[*row, EOS_ID] + [PAD_ID] * (T - 1 - len(row)) for row in tgt])
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    model.train()
    for _ in range(steps):
        logits = model(src_ids, tgt_in)
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), tgt_out.flatten(), ignore_index=PAD_ID)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()


def tiny_checkpoint(directory: Path, seed: int = 0) -> LoadedCheckpoint:
    """A 2-layer, 2-head G2P model fitted briefly to five words, saved and loaded back as a real checkpoint."""
    src_tok = train_tokenizer("char", WORDS)
    tgt_tok = train_tokenizer("symbol", PHONES)
    torch.manual_seed(seed)
    config = ModelConfig(
        src_vocab_size=src_tok.vocab_size,
        tgt_vocab_size=tgt_tok.vocab_size,
        d_model=16,
        num_heads=2,
        d_ff=32,
        num_encoder_layers=2,
        num_decoder_layers=2,
        dropout=0.0,
    )
    model = Transformer(config)
    fit_briefly(model, src_tok, tgt_tok)
    save_checkpoint(directory, model, src_tok, tgt_tok, {"task": "g2p"})
    return load_checkpoint(directory)


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


@pytest.fixture(scope="module")
def loaded(one_thread: None, tmp_path_factory: pytest.TempPathFactory) -> LoadedCheckpoint:
    return tiny_checkpoint(tmp_path_factory.mktemp("ckpt") / "model")


@pytest.mark.numerical
def test_attention_maps_equal_the_models_weights(loaded: LoadedCheckpoint) -> None:
    maps = attention_weights(loaded, "cat")
    model = loaded.model
    src = torch.tensor([[*loaded.src_tokenizer.encode("cat"), EOS_ID]])
    hyp = greedy_decode(model, src, DecodeConfig(strategy="greedy"))[0][0]
    tgt = torch.tensor([[BOS_ID, *hyp.tokens]])
    with torch.no_grad():
        enc = model.encode(src, need_weights=True)
        dec = model.decode(tgt, enc.memory, src_mask=model.source_mask(src), need_weights=True)
    L, H, S, T = 2, 2, 4, len(hyp.tokens) + 1
    assert maps.encoder.shape == (L, H, S, S)
    assert maps.decoder_self.shape == (L, H, T, T)
    assert maps.cross.shape == (L, H, T, S)
    for layer in range(L):
        np.testing.assert_array_equal(maps.encoder[layer], enc.self_weights[layer][0].numpy())
        np.testing.assert_array_equal(maps.decoder_self[layer], dec.self_weights[layer][0].numpy())
        np.testing.assert_array_equal(maps.cross[layer], dec.cross_weights[layer][0].numpy())
    assert maps.src_tokens == ["c", "a", "t", "</s>"]
    assert maps.tgt_tokens == ["<s>", *(loaded.tgt_tokenizer.id_to_token(i) for i in hyp.tokens)]
    assert maps.output_text == loaded.tgt_tokenizer.decode(hyp.tokens)
    # teacher forcing on the greedy output predicts the greedy output again
    assert maps.out_tokens[: len(hyp.tokens)] == maps.tgt_tokens[1:]
    assert maps.out_tokens[-1] == "</s>" and hyp.finished
    assert maps.output_text == "K AE1 T"  # the fitted model has learnt the word
    # rows are distributions; the decoder never looks ahead
    np.testing.assert_allclose(maps.cross.sum(-1), 1.0, rtol=1e-5)
    assert np.all(np.triu(maps.decoder_self, k=1) == 0)


@pytest.mark.numerical
def test_attention_with_a_given_target_is_teacher_forced(
    loaded: LoadedCheckpoint, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    maps = attention_weights(loaded, "dog", target="K AE1 T")  # a reference the model would not choose
    assert maps.tgt_tokens == ["<s>", "K", "AE1", "T"]
    assert maps.output_text == "K AE1 T" and maps.forced
    assert maps.cross.shape[2:] == (4, 4)
    src = torch.tensor([[*loaded.src_tokenizer.encode("dog"), EOS_ID]])
    tgt = torch.tensor([[BOS_ID, *loaded.tgt_tokenizer.encode("K AE1 T")]])
    with torch.no_grad():  # teacher forcing, computed here: the same weights and logits
        enc = loaded.model.encode(src, need_weights=True)
        dec = loaded.model.decode(tgt, enc.memory, src_mask=loaded.model.source_mask(src), need_weights=True)
        logits = loaded.model(src, tgt)[0]
    for layer in range(2):
        np.testing.assert_array_equal(maps.cross[layer], dec.cross_weights[layer][0].numpy())
    np.testing.assert_allclose(maps.logits, logits.numpy(), rtol=1e-5, atol=1e-5)
    assert maps.next_ids == (*loaded.tgt_tokenizer.encode("K AE1 T"), EOS_ID)
    result = plot_attention(maps, tmp_path / "forced.png", kinds=("cross",))
    assert all(p.row_labels == ["K", "AE1", "T", "</s>"] for p in result.panels)  # rows: the reference, then EOS
    out = tmp_path / "cli.png"
    args = ["plot", "attention", "--checkpoint", str(loaded.path), "dog", "--target", "K AE1 T", "--out", str(out)]
    assert main(args) == 0 and out.is_file()
    assert "dog -> K AE1 T (forced" in capsys.readouterr().out


def test_plot_attention_draws_exactly_the_returned_weights(loaded: LoadedCheckpoint, tmp_path: Path) -> None:
    maps = attention_weights(loaded, "bird")
    result = plot_attention(maps, tmp_path / "all.png")
    assert result.path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(result.panels) == 3 * 2 * 2
    for panel in result.panels:
        np.testing.assert_array_equal(panel.weights, maps.kind(panel.kind)[panel.layer, panel.head])
        rows, cols = maps.labels(panel.kind)
        assert (panel.row_labels, panel.col_labels) == (rows, cols)
        assert panel.weights.shape == (len(rows), len(cols))
    one = plot_attention(maps, tmp_path / "one.svg", layer=1, head=0, kinds=("cross",))
    assert [(p.kind, p.layer, p.head) for p in one.panels] == [("cross", 1, 0)]
    assert one.path.read_text().lstrip().startswith("<?xml")
    with pytest.raises(ConfigError, match="layer 2 is out of range"):
        plot_attention(maps, tmp_path / "bad.png", layer=2)
    with pytest.raises(ConfigError, match=r"\.png, \.svg or \.pdf"):
        plot_attention(maps, tmp_path / "bad.jpg")


def test_many_layers_and_heads_draw_the_last_layer_unless_one_is_chosen(tmp_path: Path) -> None:
    """A 6-layer, 12-head encoder (a BERT) would be 72 heatmaps in one unreadable picture: its last layer's 12 are
    drawn; --layer picks another; --head one head of every layer."""
    from dotformer.decoding.attention_maps import ENCODER_MAP_KINDS, AttentionMaps

    weights = np.random.default_rng(0).dirichlet(np.ones(4), size=(6, 12, 4)).astype(np.float32)  # (L, H, S, S)
    maps = AttentionMaps("a b", "x", ["<s>", "a", "b", "</s>"], [], [], weights, np.zeros((6, 12, 0, 0)),
                         np.zeros((6, 12, 0, 4)))  # fmt: skip
    last = plot_attention(maps, tmp_path / "last.png", kinds=ENCODER_MAP_KINDS)
    assert [(p.layer, p.head) for p in last.panels] == [(5, h) for h in range(12)]
    np.testing.assert_array_equal(last.panels[3].weights, weights[5, 3])
    chosen = plot_attention(maps, tmp_path / "two.png", layer=2, kinds=ENCODER_MAP_KINDS)
    assert [(p.layer, p.head) for p in chosen.panels] == [(2, h) for h in range(12)]
    column = plot_attention(maps, tmp_path / "head.png", head=7, kinds=ENCODER_MAP_KINDS)
    assert [(p.layer, p.head) for p in column.panels] == [(layer, 7) for layer in range(6)]


def test_attention_rejects_empty_input(loaded: LoadedCheckpoint) -> None:
    with pytest.raises(DataError, match="no tokens"):
        attention_weights(loaded, "")


def test_positional_data_is_the_library_encoding(tmp_path: Path) -> None:
    result = plot_positional(32, 50, tmp_path / "pe.png")
    data = result.data
    np.testing.assert_array_equal(data.encoding, sinusoidal_positional_encoding(50, 32, dtype=torch.float64).numpy())
    # PE(p)·PE(p+k) = Σ_i cos(k·ω_i), the same for every start p
    omega = 1.0 / 10000 ** (np.arange(0, 32, 2) / 32)
    expected = np.cos(np.outer(np.arange(50), omega)).sum(axis=1)
    for row in data.dot_products:
        np.testing.assert_allclose(row, expected, atol=1e-9)
    assert data.dot_products[0, 0] == pytest.approx(16.0)  # |PE(p)|² = D / 2
    assert data.max_curve_difference < 1e-9  # the curves coincide: the figure says so
    # the waves are the formula sampled finely; at integer positions they are the library's encoding
    step = data.wave_positions[1] - data.wave_positions[0]
    assert step == pytest.approx(1 / WAVE_SAMPLES)
    integer = np.arange(0, data.wave_positions.size, WAVE_SAMPLES)
    np.testing.assert_allclose(data.wave_positions[integer], np.arange(50))
    for dim, values in zip(data.wave_dims, data.waves, strict=True):
        np.testing.assert_allclose(values[integer], data.encoding[:, dim], atol=1e-12)
        omega = 10000.0 ** (-(dim - dim % 2) / 32)
        assert np.abs(np.diff(values)).max() <= omega * step + 1e-12  # smooth: no jump larger than the slope allows
    assert data.wave_dims[:2] == (0, 1)
    assert plot_positional(8, 10, tmp_path / "pe.pdf").path.read_bytes()[:5] == b"%PDF-"
    assert all(0 <= d < 32 for d in data.wave_dims)
    with pytest.raises(ConfigError):
        positional_data(0, 10)
    with pytest.raises(ConfigError):
        positional_data(8, 10, wave_dims=(8,))


def test_mask_data_comes_from_dotformer_masks(tmp_path: Path) -> None:
    result = plot_masks(tmp_path / "masks.svg")
    data = result.data
    assert data.src_tokens[1] == ["hello", "</s>", "<pad>", "<pad>", "<pad>"]
    np.testing.assert_array_equal(data.padding, padding_mask(torch.from_numpy(data.src), 0)[:, 0, 0].numpy())
    np.testing.assert_array_equal(data.padding[1], [True, True, False, False, False])
    np.testing.assert_array_equal(data.causal, causal_mask(data.tgt_in.shape[1]).numpy())
    np.testing.assert_array_equal(data.causal, np.tril(np.ones((5, 5), dtype=bool)))
    # sentence 1 ("<s> bonjour" + 3 pads): causal AND key is a real token
    expected = np.tril(np.ones((5, 5), dtype=bool)) & np.array([True, True, False, False, False])[None, :]
    np.testing.assert_array_equal(data.decoder[1], expected)
    with pytest.raises(ConfigError):
        mask_data([("", "x")])


def test_schedule_curve_is_the_papers_formula(tmp_path: Path) -> None:
    curve = noam_curve(512, 4000, steps=8000)
    for step in (1, 100, 4000, 8000):
        expected = 512**-0.5 * min(step**-0.5, step * 4000**-1.5)
        assert curve.lrs[step - 1] == pytest.approx(expected, rel=1e-12)
    assert curve.peak_step == 4000
    assert curve.lrs.max() == pytest.approx((512 * 4000) ** -0.5)
    result = plot_schedule([curve, noam_curve(64, 400, steps=8000)], tmp_path / "schedule.png")
    assert result.path.is_file()
    assert "Eq. 3" in schedule_title(result.curves)
    assert plot_schedule([curve], tmp_path / "schedule.pdf").path.read_bytes()[:5] == b"%PDF-"
    config = tmp_path / "run.toml"
    config.write_text('[model]\npreset = "tiny"\n[train]\nwarmup_steps = 50\nmax_steps = 200\n')
    from_file = config_curve(config)
    assert from_file.steps.size == 200 and from_file.peak_step == 50
    assert from_file.lrs[49] == pytest.approx((64 * 50) ** -0.5)  # tiny: d_model = 64
    config.write_text('[train]\nlr_schedule = "inverse_sqrt"\nlr_peak = 1e-3\nwarmup_steps = 10\nmax_steps = 40\n')
    inverse = config_curve(config)
    assert inverse.schedule == "inverse_sqrt" and "inverse_sqrt" in inverse.label and "d_model" not in inverse.label
    assert inverse.lrs[9] == pytest.approx(1e-3) and inverse.lrs[39] == pytest.approx(1e-3 * (10 / 40) ** 0.5)
    assert "Eq. 3" not in schedule_title([inverse]) and "Eq. 3" not in schedule_title([inverse, curve])
    config.write_text(
        '[train]\nlr_schedule = "constant"\nlr_peak = 1e-3\nwarmup_steps = 0\nmax_steps = 40\nlr_cooldown = 0.25\n'
    )
    cooled = config_curve(config)  # the trainer's rates (tests/test_training_loop.py checks those in metrics.jsonl)
    assert "cooldown 0.25" in cooled.label and cooled.lrs[29] == pytest.approx(1e-3)  # step 30: 11/40 left
    assert cooled.lrs[30:].tolist() == pytest.approx([1e-3 * (40 - s) / 10 for s in range(30, 40)])  # 10/40 ... 1/40
    config.write_text("[train]\nwarmup = 3\n")
    with pytest.raises(ConfigError, match="warmup"):
        config_curve(config)


def test_loss_curves_read_the_training_log(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    lines = [
        {"split": "train", "step": 10, "loss": 3.0, "nll": 2.9, "lr": 1e-4},
        {"split": "train", "step": 20, "loss": 2.5, "nll": 2.4, "lr": 2e-4},
        {"split": "valid", "step": 20, "loss": 2.7, "nll": 2.6, "ppl": 13.5},
        {"split": "train", "step": 30, "loss": None, "nll": None},  # a non-finite loss logged as null
        {"split": "train", "step": 40, "loss": 2.0, "nll": 1.9},
    ]
    (run / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    result = plot_loss_curves(run, tmp_path / "curves.png")
    curves = result.curves
    np.testing.assert_array_equal(curves.train_steps, [10, 20, 40])
    np.testing.assert_array_equal(curves.train_loss, [3.0, 2.5, 2.0])
    np.testing.assert_array_equal(curves.valid_steps, [20])
    np.testing.assert_array_equal(curves.valid_nll, [2.6])
    assert curves.field == "loss"
    (run / "metrics.jsonl").write_text(json.dumps(lines[0]) + "\nnot json\n")
    with pytest.raises(DataError, match=r"metrics.jsonl:2"):
        read_loss_curves(run)
    with pytest.raises(MissingDataError):
        read_loss_curves(tmp_path / "nothing")


def test_curves_of_several_runs_have_lr_and_perplexity(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    runs = []
    for name, scale in (("a", 1.0), ("b", 2.0)):
        run = tmp_path / name
        run.mkdir()
        lines = [
            {"split": "train", "step": 1, "loss": 4.0 * scale, "nll": 3.0, "ppl": 20.0, "lr": 1e-4 * scale},
            {"split": "train", "step": 2, "loss": 3.5 * scale, "nll": 2.0, "lr": 2e-4 * scale},  # no ppl: exp(nll)
            {"split": "train", "step": 3, "loss": 3.0 * scale},  # neither lr nor nll
            {"split": "valid", "step": 3, "loss": 3.2 * scale, "nll": 1.5},
        ]
        (run / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
        runs.append(run)
    result = plot_loss_curves(runs, tmp_path / "both.png")
    assert result.path.is_file() and [c.label for c in result.runs] == ["a", "b"]
    a, b = result.runs
    np.testing.assert_allclose(a.train_ppl, [20.0, np.exp(2.0), np.nan])
    np.testing.assert_allclose(a.valid_ppl, [np.exp(1.5)])
    np.testing.assert_allclose(b.train_lr, [2e-4, 4e-4, np.nan])
    np.testing.assert_allclose(b.train_loss, [8.0, 7.0, 6.0])
    assert result.curves is a  # the single-run view is the first run
    assert main(["plot", "curves", "--run", str(runs[0]), "--run", str(runs[1]), "--out", str(tmp_path / "c.svg")]) == 0
    out = capsys.readouterr().out
    assert "a: 3 train points, 1 validation point; b: 3 train points, 1 validation point" in out
    same_name = tmp_path / "x" / "a"
    same_name.mkdir(parents=True)
    (same_name / "metrics.jsonl").write_text((runs[0] / "metrics.jsonl").read_text())
    labels = [c.label for c in plot_loss_curves([runs[0], same_name], tmp_path / "d.png").runs]
    assert labels == [str(runs[0]), str(same_name)]  # two runs named "a": whole paths tell them apart


def test_curves_of_a_language_model_add_bits_per_character(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from dotformer.plots import curves as curves_module

    figures: list = []
    monkeypatch.setattr(curves_module, "save_figure", lambda fig, path: figures.append(fig) or Path(path))
    lm, pairs = tmp_path / "lm", tmp_path / "pairs"
    for run, extra in ((lm, {"bits_per_char": 2.5}), (pairs, {})):
        run.mkdir()
        lines = [{"split": "train", "step": 1, "loss": 3.0}, {"split": "valid", "step": 1, "loss": 2.0, **extra}]
        (run / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert len(plot_loss_curves(pairs, tmp_path / "p.png").curves.valid_bpc) == 1
    assert np.isnan(read_loss_curves(pairs).valid_bpc).all() and len(figures[0].axes) == 3  # translation: 3 panels
    result = plot_loss_curves([pairs, lm], tmp_path / "both.png")
    np.testing.assert_array_equal(result.runs[1].valid_bpc, [2.5])
    panel = figures[1].axes[3]
    assert panel.get_title() == "bits per character (validation)"
    assert [list(line.get_ydata()) for line in panel.lines] == [[2.5]]  # only the language model's


def test_importing_plots_does_not_import_matplotlib() -> None:
    code = "import sys, dotformer.plots, dotformer.explore, dotformer.compare; print('matplotlib' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_cli_plots(loaded: LoadedCheckpoint, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plot", "positional", "--d-model", "16", "--length", "20", "--out", str(tmp_path / "p.svg")]) == 0
    assert main(["plot", "masks", "--out", str(tmp_path / "m.png")]) == 0
    assert main(["plot", "schedule", "--warmup", "100", "--out", str(tmp_path / "s.png")]) == 0
    out = tmp_path / "a.png"
    assert main(["plot", "attention", "--checkpoint", str(loaded.path), "cat", "--head", "1", "--out", str(out)]) == 0
    assert out.is_file() and (tmp_path / "p.svg").is_file() and (tmp_path / "m.png").is_file()
    auto = ["plot", "attention", "--checkpoint", str(loaded.path), "cat", "--device", "auto", "--out", str(out)]
    assert main(auto) == 0  # every command's device names (auto: CUDA if available)
    assert "wrote" in capsys.readouterr().out
    assert main(["plot", "attention", "--checkpoint", str(loaded.path), "cat", "--head", "5", "--out", str(out)]) == 2
    assert main(["plot", "curves", "--run", str(tmp_path / "none"), "--out", str(tmp_path / "c.png")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(line.startswith("dotformer plot: error:") for line in err)


def stressless_checkpoint(directory: Path, strip_stress: bool = True) -> LoadedCheckpoint:
    """An untrained CMUdict-like checkpoint whose target vocabulary has no stress digits (a --strip-stress run)."""
    src_tok = train_tokenizer("char", ["transformer read"])
    tgt_tok = train_tokenizer("symbol", ["T R AE N S F AO M ER", "R IY D"])
    torch.manual_seed(0)
    config = ModelConfig(
        src_vocab_size=src_tok.vocab_size,
        tgt_vocab_size=tgt_tok.vocab_size,
        d_model=16,
        num_heads=2,
        d_ff=32,
        num_encoder_layers=1,
        num_decoder_layers=1,
        dropout=0.0,
    )
    info = {"task": "g2p", "dataset": "cmudict", "data": {"dataset": "cmudict", "strip_stress": strip_stress}}
    save_checkpoint(directory, Transformer(config).eval(), src_tok, tgt_tok, info)
    return load_checkpoint(directory)


def test_forced_targets_are_normalised_as_the_training_targets_and_unknown_symbols_shown(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import warnings

    from dotformer.decoding.inputs import UnknownTokenWarning

    loaded = stressless_checkpoint(tmp_path / "g2p")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # AE1 is read as AE: nothing unknown
        maps = attention_weights(loaded, "trans", target="T R AE1 N S")
    assert maps.tgt_tokens == ["<s>", "T", "R", "AE", "N", "S"] and maps.output_text == "T R AE N S"
    assert maps.next_ids == (*loaded.tgt_tokenizer.encode("T R AE N S"), EOS_ID)
    with pytest.warns(UnknownTokenWarning, match=r"2 target symbol\(s\) .* <unk>: ZH, Q ") as record:
        maps = attention_weights(loaded, "trans", target="T ZH1 AE1 Q")
    assert len([w for w in record if w.category is UnknownTokenWarning]) == 1
    assert maps.tgt_tokens == ["<s>", "T", "<unk>", "AE", "<unk>"] and maps.output_text == "T <unk> AE <unk>"
    assert maps.labels("cross")[0] == ["T", "<unk>", "AE", "<unk>", "</s>"]  # never dropped
    kept = stressless_checkpoint(tmp_path / "kept", strip_stress=False)  # a run that kept stress: AE1 is unknown
    with pytest.warns(UnknownTokenWarning, match=r"1 target symbol\(s\) .*: AE1 "):
        assert attention_weights(kept, "trans", target="T AE1").output_text == "T <unk>"
    out = tmp_path / "cross.png"
    argv = ["plot", "attention", "--checkpoint", str(tmp_path / "g2p"), "trans", "--kind", "cross", "--out", str(out)]
    assert main([*argv, "--target", "T R AE1 N S"]) == 0
    captured = capsys.readouterr()
    assert "trans -> T R AE N S (forced" in captured.out and "warning" not in captured.err
    assert main([*argv, "--target", "T R ZH1 N S"]) == 0
    captured = capsys.readouterr()
    assert "trans -> T R <unk> N S (forced" in captured.out
    assert captured.err.count("target vocabulary") == 1 and "<unk>: ZH " in captured.err
