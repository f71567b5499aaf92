"""The language model end to end through the command line and the API: train --task lm (and resume), generate,
evaluate, Translator.generate; one-line errors."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest

import dotformer
from dotformer.cli import main
from dotformer.data.config import LMDataConfig
from dotformer.decoding.inputs import UnknownTokenWarning
from dotformer.runs.config_files import read_config_file
from dotformer.runs.tasks import task_of_section

WORDS = ["in", "the", "beginning", "god", "created", "heaven", "and", "earth", "light", "darkness", "water", "spirit"]
TINY = ["--preset", "tiny", "--block-size", "16", "--max-tokens", "64", "--no-progress", "--eval-every", "2"]


def write_corpus(path: Path, lines: int = 300) -> Path:
    text = "".join(" ".join(WORDS[(i * 7 + j * 3) % len(WORDS)] for j in range(2 + i % 5)) + "\n" for i in range(lines))
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny language model trained 3 steps (then resumed to 4) through the CLI."""
    root = tmp_path_factory.mktemp("lm")
    corpus = write_corpus(root / "corpus.txt")
    out = root / "run"
    assert main(["train", "--task", "lm", "--data", str(corpus), "--out", str(out), "--max-steps", "3", *TINY]) == 0
    assert main(["train", "--task", "lm", "--out", str(out), "--resume", "--max-steps", "4", "--no-progress"]) == 0
    return out


def test_training_writes_a_decoder_only_run(run_dir: Path) -> None:
    record = json.loads((run_dir / "run.json").read_text())
    assert record["task"] == "lm" and record["model"]["arch"] == "decoder-only"
    assert record["model"]["max_len"] == 16 and record["data"]["block_size"] == 16
    assert record["train"]["label_smoothing"] == 0.0 and len(record["resumes"]) == 1
    reference = json.loads((run_dir / "data" / "data.json").read_text())  # the run refers to its prepared text
    counts = {name: split["examples"] for name, split in reference["report"]["splits"].items()}
    assert sum(counts.values()) == 300 and all(counts.values())
    for name in ("valid", "test"):  # the held-out lines are kept beside it, for evaluate --split
        assert len((run_dir / "data" / f"{name}.txt").read_text().splitlines()) == counts[name]
    assert not (run_dir / "data" / "train.txt").exists()  # the corpus is never copied
    steps = [json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert max(steps) == 4
    config = json.loads((run_dir / "last" / "config.json").read_text())
    assert config["task"] == "lm"


def test_generate_cli_is_seeded_and_equals_the_api(run_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["generate", "--checkpoint", str(run_dir), "--prompt", "in the", "--max-new-tokens", "12", "--seed", "4"]
    assert main(argv) == 0
    first = capsys.readouterr().out
    assert main(argv) == 0
    assert capsys.readouterr().out == first
    lm = dotformer.load(run_dir, device="cpu")
    assert first == "in the" + lm.generate("in the", max_new_tokens=12, seed=4) + "\n"
    samples = lm.generate("god", n=3, max_new_tokens=8, top_k=3, seed=1)
    assert isinstance(samples, list) and len(samples) == 3
    assert lm.generate("god", strategy="greedy", max_new_tokens=8) == lm.generate(
        "god", strategy="greedy", max_new_tokens=8, use_cache=False
    )


def test_generate_reads_prompts_from_stdin(
    run_dir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import io

    monkeypatch.setattr("sys.stdin", io.StringIO("light\nwater\n"))
    assert main(["generate", "--checkpoint", str(run_dir), "--greedy", "--max-new-tokens", "5"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("light") and "\nwater" in out
    assert main(["generate", "--checkpoint", str(run_dir), "--prompt", "in", "--beam", "3", "--n", "2"]) == 0
    assert capsys.readouterr().out.splitlines()[:1] == ["# beam 1"]


def test_evaluate_reports_bits_per_character(run_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    metrics = run_dir / "m.json"
    assert main(["evaluate", "--checkpoint", str(run_dir), "--split", "valid", "--json", str(metrics)]) == 0
    out = capsys.readouterr().out
    assert "bits/char" in out and "perplexity" in out
    scored = json.loads(metrics.read_text())
    assert scored["bits_per_character"] == pytest.approx(scored["nats_per_token"] / math.log(2))  # char tokens
    best = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    valid = [r for r in best if r["split"] == "valid" and r["best"]][-1]
    assert scored["nats_per_token"] == pytest.approx(valid["nll"], rel=1e-5)  # the training loop's figure
    assert scored["bits_per_character"] == pytest.approx(valid["bits_per_char"], rel=1e-5)
    assert scored["bits_per_token"] == pytest.approx(valid["bits_per_token"], rel=1e-5)


def test_the_training_log_and_curves_show_bits_per_character(
    run_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from dotformer.plots import curves as curves_module

    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    valid = [r for r in records if r["split"] == "valid"]
    assert valid and all(r["bits_per_token"] == pytest.approx(r["nll"] / math.log(2)) for r in valid)
    assert all("bits_per_char" not in r for r in records if r["split"] == "train")
    figures = []
    monkeypatch.setattr(curves_module, "save_figure", lambda fig, path: figures.append(fig) or Path(path))
    assert main(["plot", "curves", "--run", str(run_dir), "--out", str(tmp_path / "c.png")]) == 0
    panel = figures[0].axes[3]
    assert panel.get_title().startswith("bits per character")
    drawn = panel.lines[0].get_ydata()
    assert list(drawn) == pytest.approx([r["bits_per_char"] for r in valid])


def test_the_data_line_counts_tokens_and_blocks(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    corpus = write_corpus(tmp_path / "c.txt")
    argv = ["train", "--task", "lm", "--data", str(corpus), "--out", str(tmp_path / "r"), "--max-steps", "1"]
    with caplog.at_level("INFO", logger="dotformer.training.loop"):
        assert main([*argv, *[a for a in TINY if a != "--no-progress"]]) == 0
    (line,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("data: ")]
    train = json.loads((tmp_path / "r" / "run.json").read_text())
    assert "valid tokens, blocks of 16 tokens;" in line and "pairs" not in line and "0.0% padding" in line
    assert train["model"]["tgt_vocab_size"] and f"vocabulary {train['model']['tgt_vocab_size']};" in line
    summary = capsys.readouterr().out.strip().splitlines()[-1]  # the run's last line: the valid bits per character
    (valid,) = [json.loads(r) for r in (tmp_path / "r" / "metrics.jsonl").read_text().splitlines() if '"valid"' in r]
    assert summary.endswith(f"; valid {valid['bits_per_char']:.3f} bits/char")
    assert " batches of 4 blocks (64 tokens) per epoch" in line  # --max-tokens 64, blocks of 16
    # a budget below one block trains on one block a batch, and the line says so (it said "<= 8 tokens")
    caplog.clear()
    with caplog.at_level("INFO", logger="dotformer.training.loop"):
        argv = [*argv[:5], "--out", str(tmp_path / "small"), "--max-steps", "1", "--max-tokens", "8"]
        assert main([*argv, *[a for a in TINY if a not in ("--no-progress", "--max-tokens", "64")]]) == 0
    (line,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("data: ")]
    assert " batches of 1 block (16 tokens; max_tokens 8 is less than one block) per epoch" in line


def test_bad_input_exits_2_with_one_line(run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    corpus = write_corpus(tmp_path / "c.txt", 40)
    blank = tmp_path / "blank.txt"
    blank.write_text("\n\n  \n", encoding="utf-8")
    cases = [
        (["generate", "--checkpoint", str(run_dir), "--prompt", "x", "--top-p", "0"], "--top-p"),
        (["generate", "--checkpoint", str(run_dir), "--max-new-tokens", "0", "--prompt", "x"], "--max-new-tokens"),
        (["generate", "--checkpoint", str(run_dir), "--checkpoint", str(run_dir), "--prompt", "x"], "2 --checkpoint"),
        (["generate", "--checkpoint", str(run_dir), "--end-token", "zz", "--prompt", "x"], "--end-token: 'zz' is not"),
        (["generate", "--checkpoint", str(run_dir), "--suppress", "qq", "--prompt", "x"], "--suppress: 'qq' is not"),
        (["generate", "--checkpoint", str(run_dir), "--prompt", "a\udcff"], "--prompt: byte 0xff at byte offset 1 is"),
        (["evaluate", "--checkpoint", str(run_dir), "--data", os.devnull], f"{os.devnull} is not a regular file"),
        (["train", "--task", "lm", "--data", str(corpus), "--delimiter", "tab", "--max-steps", "1"], "delimiter"),
        (["train", "--task", "lm", "--data", str(tmp_path / "none.txt"), "--max-steps", "1"], "no such file"),
        (
            ["train", "--task", "lm", "--data", str(blank), "--max-steps", "1"],
            f"{blank}:1: the file holds only blank lines (no text)",
        ),
        (["train", "--task", "lm", "--data", str(corpus), "--out", str(run_dir), "--max-steps", "1"], "--resume"),
        (
            ["train", "--task", "lm", "--data", str(corpus), "--block-size", "1", "--max-steps", "1"],
            "--block-size must",
        ),
    ]
    for argv, words in cases:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and words in err[0], (argv, err)


def test_generate_refuses_a_translation_checkpoint(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "copy"
    assert main(["train", "--data", "copy", "--preset", "tiny", "--max-steps", "1", "--out", str(out),
                 "--no-progress", "--synthetic-examples", "50"]) == 0  # fmt: skip
    capsys.readouterr()
    assert main(["generate", "--checkpoint", str(out), "--prompt", "a1"]) == 2
    assert "dotformer translate" in capsys.readouterr().err


def test_the_shipped_config_is_a_language_model() -> None:
    sections = read_config_file("lm-bible")
    assert task_of_section(sections.data).name == "lm" and task_of_section(read_config_file("bible").data).name != "lm"
    data = LMDataConfig.from_section(sections.data)
    assert data.tokenizer == "char" and 64 <= data.block_size <= 128 and data.test_books
    assert sections.model["d_model"] == 128 and sections.model["num_decoder_layers"] == 4
    assert sections.model["num_heads"] == 4 and sections.train["max_minutes"] == 10


def test_attention_maps_of_a_language_model_are_causal(run_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import numpy as np
    import torch

    from dotformer.checkpoint import load_checkpoint
    from dotformer.decoding.attention_maps import lm_attention_weights

    loaded = load_checkpoint(run_dir, device="cpu")
    maps = lm_attention_weights(loaded, "in the")
    assert maps.decoder_self.shape == (2, 4, 7, 7) and maps.tgt_tokens[0] == "</s>"  # a line end, then 6 chars
    assert np.allclose(np.triu(maps.decoder_self, k=1), 0.0)  # the causal mask: nothing above the diagonal
    assert np.allclose(maps.decoder_self.sum(-1), 1.0, atol=1e-5)
    with torch.no_grad():
        ids = torch.tensor([[2, *loaded.tgt_tokenizer.encode("in the")]])
        expected = loaded.model.decode(ids, need_weights=True).self_weights[1][0]
    assert np.allclose(maps.decoder_self[1], expected.numpy(), atol=1e-6)
    out = run_dir / "attention.png"
    assert main(["plot", "attention", "--checkpoint", str(run_dir), "in the", "--out", str(out)]) == 0
    assert out.is_file() and "(8 maps)" in capsys.readouterr().out  # 2 layers × 4 heads
    capsys.readouterr()
    assert main(["plot", "attention", "--checkpoint", str(run_dir), "in", "--target", "x", "--out", str(out)]) == 2
    assert "is a language model: it reads one text, so --target does not apply" in capsys.readouterr().err
    assert main(["plot", "attention", "--checkpoint", str(run_dir), "in", "--kind", "cross", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "is a language model: its only attention is decoder_self, not cross (--kind decoder_self" in err


@pytest.mark.numerical
@pytest.mark.parametrize("family", ["llama", "gemma2"])
def test_attention_maps_of_an_imported_language_model_are_transformers(
    family: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """plot attention on an imported model (a tiny Llama; a Gemma 2, with sliding-window layers and soft-capped
    scores): the text read as generate reads it (BOS first), its maps transformers' attention weights for the same
    ids, within two logit tolerances (a weight is a softmax of scores, which go through fewer sums than a logit)."""
    pytest.importorskip("transformers")
    import numpy as np
    import torch
    from test_import_hf import import_dir, save_family
    from tolerance import logits_tolerance

    from dotformer.decoding.attention_maps import lm_attention_weights

    hf_model = save_family(family, tmp_path / "hf")
    loaded = import_dir(tmp_path / "hf", tmp_path / "ckpt")
    text = "a bird sings at night"
    maps = lm_attention_weights(loaded, text)
    ids = [hf_model.config.bos_token_id, *(i - 4 for i in loaded.tgt_tokenizer.encode(text))]  # the released ids
    assert maps.tgt_tokens[0] == "<s>" and len(maps.tgt_tokens) == len(ids) > 5  # longer than Gemma's window
    with torch.no_grad():
        theirs = hf_model(torch.tensor([ids]), output_attentions=True)
    expected = np.stack([weights[0].numpy() for weights in theirs.attentions])  # (L, H, T, T)
    assert maps.decoder_self.shape == expected.shape == (2, 4, len(ids), len(ids))
    assert np.abs(maps.decoder_self - expected).max() <= 2 * logits_tolerance(loaded.config, theirs.logits)
    out = tmp_path / "attention.png"
    assert main(["plot", "attention", "--checkpoint", str(tmp_path / "ckpt"), text, "--out", str(out)]) == 0
    assert out.is_file() and "(8 maps)" in capsys.readouterr().out  # 2 layers × 4 heads


def test_resuming_continues_exactly(tmp_path: Path) -> None:
    """2 steps, then a resume to 4, end with the weights of 4 steps in one go (the same blocks, RNG and schedule)."""
    from safetensors.torch import load_file

    corpus = write_corpus(tmp_path / "c.txt")
    common = ["--task", "lm", "--data", str(corpus), *TINY, "--dropout", "0.1"]
    assert main(["train", *common, "--out", str(tmp_path / "a"), "--max-steps", "4"]) == 0
    assert main(["train", *common, "--out", str(tmp_path / "b"), "--max-steps", "2"]) == 0
    assert main(["train", "--out", str(tmp_path / "b"), "--resume", "--max-steps", "4"]) == 0  # the task: run.json's
    a, b = (load_file(str(tmp_path / run / "last" / "model.safetensors")) for run in ("a", "b"))
    assert a.keys() == b.keys() and all(bool((a[k] == b[k]).all()) for k in a)


def test_a_bpe_language_model(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    corpus = write_corpus(tmp_path / "c.txt")
    out = tmp_path / "bpe"
    argv = ["train", "--task", "lm", "--data", str(corpus), "--tokenizer", "bpe", "--vocab-size", "300"]
    assert main([*argv, *TINY, "--out", str(out), "--max-steps", "2"]) == 0
    assert json.loads((out / "run.json").read_text())["data"]["tokenizer"] == "bpe"
    capsys.readouterr()
    assert main(["evaluate", "--checkpoint", str(out), "--split", "valid", "--json", str(out / "m.json")]) == 0
    scored = json.loads((out / "m.json").read_text())
    assert scored["characters"] > scored["tokens"]  # a BPE token spells several characters
    assert scored["bits_per_character"] < scored["bits_per_token"]
    (valid,) = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if '"valid"' in line]
    assert valid["bits_per_char"] == pytest.approx(scored["bits_per_character"], rel=1e-5)  # C counted the same


def test_export_to_onnx_writes_the_cached_step(run_dir: Path, tmp_path: Path) -> None:
    pytest.importorskip("onnx")
    out = tmp_path / "onnx"
    assert main(["export", "--to", "onnx", str(run_dir), str(out)]) == 0
    assert (out / "lm_step.onnx").is_file() and (out / "tokenizer_tgt.json").is_file()
    assert json.loads((out / "onnx_config.json").read_text())["lm_step"]["inputs"][:2] == ["tokens", "offset"]


def test_streamed_pieces_add_up_to_the_text(run_dir: Path) -> None:
    from dotformer.api.generation import generate_text, generation_settings
    from dotformer.checkpoint import load_checkpoint
    from dotformer.engines.torch import TorchEngine

    loaded = load_checkpoint(run_dir, device="cpu")
    pieces: list[str] = []
    config = generation_settings(30, "sample", seed=2)
    (text,) = generate_text(TorchEngine(loaded), "light", config, on_text=pieces.append)
    assert len(pieces) > 1 and "".join(pieces) == text


def test_a_run_json_error_names_the_file_once(
    run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(run_dir, copy)
    record = json.loads((copy / "run.json").read_text())
    (copy / "run.json").write_text(json.dumps({**record, "task": "g2p"}))  # read as a run of pairs
    assert main(["train", "--out", str(copy), "--resume", "--max-steps", "5", "--no-progress"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"dotformer train: error: {copy / 'run.json'}: unknown key(s) block_size, tokenizer, ")
    assert line.count("run.json") == 1


def test_generate_refuses_what_translate_refuses(run_dir: Path) -> None:
    from dotformer.api import ArgumentTypeError
    from dotformer.errors import ConfigError

    lm = dotformer.load(run_dir, device="cpu")
    for prompt, kind in [(123, "int"), (None, "NoneType"), (["a"], "list")]:
        with pytest.raises(ArgumentTypeError) as caught:
            lm.generate(prompt)
        assert str(caught.value) == f"generate() takes a string, got {kind}"
    with pytest.raises(ArgumentTypeError) as caught:
        lm.generate("in", foo=1)
    assert str(caught.value) == (
        "generate(): unknown argument(s) foo; the settings are max_new_tokens, strategy, temperature, top_k, top_p, "
        "seed, beam_size, length_penalty, beam_stop, use_cache, repetition_penalty, no_repeat_ngram_size, end_token, "
        "suppress"
    )
    refused = [
        ({"beam_size": 4}, "generate(): beam_size only applies to strategy='beam', not strategy='sample'"),
        ({"strategy": "greedy", "top_k": 5}, "generate(): top_k only applies to strategy='sample', not "
         "strategy='greedy'"),
        ({"strategy": "beam", "temperature": 0.5}, "generate(): temperature only applies to strategy='sample', not "
         "strategy='beam'"),
        ({"strategy": "greedy", "length_penalty": 1.0, "beam_stop": "exact"}, "generate(): length_penalty, beam_stop "
         "only apply to strategy='beam', not strategy='greedy'"),
        ({"beam_stop": "exact"}, "generate(): beam_stop only applies to strategy='beam', not strategy='sample'"),
        ({"strategy": "beam", "length_penalty": -1.0}, "DecodeConfig.length_penalty must be a finite number >= 0, got "
         "-1.0"),
        ({"strategy": "beam", "beam_stop": "best"}, "DecodeConfig.beam_stop must be one of finished, exact, got "
         "'best'"),
    ]  # fmt: skip
    for settings, message in refused:
        with pytest.raises(ConfigError) as caught:
            lm.generate("in", max_new_tokens=2, **settings)
        assert str(caught.value) == message


def test_generate_cli_refuses_flags_of_another_strategy(run_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cases = [
        (["--greedy", "--top-k", "5"], "--top-k only applies to sampling (the default), not --greedy"),
        (["--beam", "4", "--temperature", "0.5"], "--temperature only applies to sampling (the default), not --beam"),
        (
            ["--greedy", "--top-k", "5", "--seed", "3"],
            "--top-k, --seed only apply to sampling (the default), not --greedy",
        ),
        (
            ["--greedy", "--length-penalty", "1"],
            "--length-penalty only applies to beam search (--strategy beam), not --greedy",
        ),
        (
            ["--temperature", "0.5", "--length-penalty", "1", "--beam-stop", "exact"],
            "--length-penalty, --beam-stop only apply to beam search (--strategy beam), not --strategy sample",
        ),
        (["--beam", "2", "--length-penalty", "-1"], "--length-penalty must be a finite number >= 0, got -1.0"),
        (["--beam", "2", "--length-penalty", "1000"], "--length-penalty must be at most 10, got 1000.0"),
    ]
    for flags, message in cases:
        assert main(["generate", "--checkpoint", str(run_dir), "--prompt", "in", *flags]) == 2
        assert capsys.readouterr().err == f"dotformer generate: error: {message}\n"


def test_generate_chooses_its_search_with_strategy_and_its_short_forms(
    run_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--strategy`` chooses generate's search as it chooses translate's (default: sample); ``--greedy`` and
    ``--beam K`` are its short forms; every sampling draw without ``--seed`` draws with the one default seed."""

    def generated(*flags: str) -> str:
        argv = ["generate", "--checkpoint", str(run_dir), "--prompt", "in", "--max-new-tokens", "10", *flags]
        assert main([*argv, "--engine", "torch"]) == 0
        return capsys.readouterr().out

    assert generated("--strategy", "greedy") == generated("--greedy")
    assert generated("--strategy", "beam", "--beam", "3", "--n", "2") == generated("--beam", "3", "--n", "2")
    assert generated("--strategy", "beam") == generated("--beam", "4")  # K: 4 when not given
    sampled = generated()
    assert sampled == generated("--strategy", "sample") == generated("--seed", "1")  # the default seed, 1
    assert sampled != generated("--seed", "0")
    refused = [
        (["--strategy", "greedy", "--beam", "3"], "--beam only applies to beam search (--strategy beam), not "
         "--strategy greedy"),
        (["--greedy", "--beam", "3"], "--beam only applies to beam search (--strategy beam), not --greedy"),
        (["--strategy", "beam", "--top-p", "0.5"], "--top-p only applies to sampling (the default), not --strategy "
         "beam"),
        (["--strategy", "sample", "--beam", "2"], "--beam only applies to beam search (--strategy beam), not "
         "--strategy sample"),
    ]  # fmt: skip
    for flags, message in refused:
        assert main(["generate", "--checkpoint", str(run_dir), "--prompt", "in", *flags]) == 2
        assert capsys.readouterr().err == f"dotformer generate: error: {message}\n"
    with pytest.raises(SystemExit) as exit_info:  # two ways to say one thing: argparse refuses the pair
        main(["generate", "--checkpoint", str(run_dir), "--prompt", "in", "--greedy", "--strategy", "beam"])
    assert exit_info.value.code == 2
    assert "--strategy: not allowed with argument --greedy" in capsys.readouterr().err


def test_generate_reads_stdin_as_translate_does(
    run_dir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import io

    class Stdin:
        buffer = io.BytesIO(b"in\ncaf\xe9\n")

    monkeypatch.setattr("sys.stdin", Stdin())
    assert main(["generate", "--checkpoint", str(run_dir), "--greedy", "--max-new-tokens", "2"]) == 2
    captured = capsys.readouterr()
    assert captured.out.startswith("in") and "caf" not in captured.out  # the line before the bad one is continued
    assert captured.err == (
        "dotformer generate: error: <stdin>:2: byte 0xe9 at byte offset 6 (byte 4 of the line) is not valid UTF-8 "
        "(unexpected end of data)\n"
    )
    argv = ["generate", "--checkpoint", str(run_dir), "--prompt", "in\u20acx\u20ac", "--max-new-tokens", "2"]
    assert main(argv) == 0
    assert capsys.readouterr().err == (
        "dotformer generate: warning: 3 prompt symbol(s) are not in the model's vocabulary and were read as <unk>: "
        "\u20ac, x (--prompt)\n"
    )
    with pytest.warns(UnknownTokenWarning) as caught:
        dotformer.load(run_dir, device="cpu").generate("in\u20ac", max_new_tokens=2)
    assert str(caught[0].message) == (
        "1 prompt symbol(s) are not in the model's vocabulary and were read as <unk>: \u20ac (prompt 'in\u20ac')"
    )


def test_evaluate_limits_the_lines_and_refuses_decoding_flags(
    run_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from dotformer.training.scoring import score_text

    valid = (run_dir / "data" / "valid.txt").read_text().splitlines()
    argv = [
        "evaluate",
        "--checkpoint",
        str(run_dir),
        "--split",
        "valid",
        "--limit",
        "3",
        "--json",
        str(run_dir / "l.json"),
    ]
    assert main(argv) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert f"(the first 3 of {len(valid):,} lines, " in first
    lm = dotformer.load(run_dir, device="cpu")
    expected = score_text(lm.model, valid[:3], lm.tgt_tokenizer, 16, 256 * 16)
    scored = json.loads((run_dir / "l.json").read_text())
    assert scored["limit"] == 3 and scored["tokens"] == expected.tokens
    assert scored["nats_per_token"] == pytest.approx(expected.nats_per_token, rel=1e-6)
    assert main(["evaluate", "--checkpoint", str(run_dir), "--split", "valid", "--beam", "4", "--max-len-b", "9"]) == 2
    assert capsys.readouterr().err == (
        "dotformer evaluate: error: --beam, --max-len-b set how outputs are decoded; a language model's evaluation "
        "decodes nothing (it scores the text itself): leave them out\n"
    )
    assert main(["evaluate", "--checkpoint", str(run_dir), "--split", "valid", "--repetition-penalty", "1.2"]) == 2
    assert capsys.readouterr().err == (
        "dotformer evaluate: error: --repetition-penalty sets how outputs are decoded; a language model's evaluation "
        "decodes nothing (it scores the text itself): leave it out\n"
    )


def test_evaluate_stride_scores_in_a_sliding_window_and_says_so(
    run_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from dotformer.runs.task import EvalRequest
    from dotformer.runs.tasks import task_named
    from dotformer.training.scoring import score_text

    valid = (run_dir / "data" / "valid.txt").read_text().splitlines()
    argv = ["evaluate", "--checkpoint", str(run_dir), "--split", "valid", "--batch-size", "3"]
    assert main([*argv, "--stride", "5", "--json", str(run_dir / "s.json")]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert ", task lm, windows of 16 tokens moved by 5, float32 weights" in first
    lm = dotformer.load(run_dir, device="cpu", engine="torch")  # the torch engine scores text
    expected = score_text(lm.model, valid, lm.tgt_tokenizer, 16, 3 * 16, stride=5)
    scored = json.loads((run_dir / "s.json").read_text())
    assert scored["stride"] == 5 and scored["block_size"] == 16 and scored["tokens"] == expected.tokens
    assert scored["nats_per_token"] == pytest.approx(expected.nats_per_token, rel=1e-6)
    assert scored["nats_per_token"] != pytest.approx(score_text(lm.model, valid, lm.tgt_tokenizer, 16).nats_per_token)
    task = task_named("lm")  # the same request from Python
    report = task.evaluate(lm.translation_engine(), EvalRequest(split="valid", batch_size=3, stride=5))
    assert report.payload == {key: scored[key] for key in report.payload}
    assert main([*argv, "--json", str(run_dir / "b.json")]) == 0  # without --stride: blocks, as before
    assert ", task lm, blocks of 16 tokens, float32 weights" in capsys.readouterr().out
    assert json.loads((run_dir / "b.json").read_text())["stride"] is None
    for stride in ("0", "17"):
        assert main([*argv, "--stride", stride]) == 2
        assert capsys.readouterr().err == (
            "dotformer evaluate: error: --stride must be between 1 and the model's block size 16 tokens, "
            f"got {stride}\n"
        )


def test_evaluate_of_a_one_character_line_scores_one_token(
    run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A line of one character is two tokens (it and the line end), the second scored: "1 token", as "1 line"."""
    text = tmp_path / "one.txt"
    text.write_text("a\n", encoding="utf-8")
    for flags, reading in (([], "blocks of 16 tokens"), (["--stride", "5"], "windows of 16 tokens moved by 5")):
        assert main(["evaluate", "--checkpoint", str(run_dir), "--data", str(text), *flags]) == 0
        assert f" (1 line, 1 token scored), task lm, {reading}, " in capsys.readouterr().out
    scores = tmp_path / "scores.json"  # --limit N reads the first N lines: no seed draws them
    assert (
        main(["evaluate", "--checkpoint", str(run_dir), "--data", str(text), "--limit", "1", "--json", str(scores)])
        == 0
    )
    assert json.loads(scores.read_text())["limit"] == 1 and json.loads(scores.read_text())["seed"] is None


def test_evaluate_refuses_reader_flags_a_language_model_would_not_read(
    run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The reader flags set how a file of pairs is read; a language model's --data is running text, so each is
    refused by name (it was silently ignored: --header scored the header line), and --task names the model's own."""
    text = tmp_path / "text.txt"
    text.write_text("in the beginning\n", encoding="utf-8")
    argv = ["evaluate", "--checkpoint", str(run_dir), "--data", str(text)]
    refused = [
        (["--header"], "--header sets how a file of pairs is read", "it"),
        (["--delimiter", ",", "--source-column", "1"], "--delimiter, --source-column set how a file of pairs is read",
         "them"),
    ]  # fmt: skip
    for flags, message, them in refused:
        assert main([*argv, *flags]) == 2
        assert capsys.readouterr().err == (
            f"dotformer evaluate: error: {message}; a language model's evaluation reads its --data file as its own "
            f"kind of data: leave {them} out\n"
        )
    assert main([*argv, "--task", "g2p"]) == 2
    assert capsys.readouterr().err == (
        f"dotformer evaluate: error: --task g2p: {run_dir / 'best'} is a language model (task lm), which evaluates "
        "its own kind of data: leave --task out\n"
    )
    assert main([*argv, "--task", "lm"]) == 0  # the model's own task: nothing to refuse


def test_evaluate_refuses_a_batch_size_below_one(run_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--batch-size counts blocks (or windows) a batch: 0 or less is refused naming the flag, with or without
    --stride (it was read as one window a batch, or as "max_tokens ... got -80")."""
    for flags in ([], ["--stride", "5"]):
        for size in ("0", "-5"):
            argv = ["evaluate", "--checkpoint", str(run_dir), "--split", "valid", "--batch-size", size, *flags]
            assert main(argv) == 2
            assert capsys.readouterr().err == (
                f"dotformer evaluate: error: --batch-size must be a positive integer, got {size}\n"
            )


def test_a_tokenizer_that_does_not_know_the_text_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from dotformer.data.tokenize.tokenizer_files import train_tokenizer

    corpus = write_corpus(tmp_path / "c.txt", 60)  # with --valid given, every line of it is a training line
    valid = write_corpus(tmp_path / "v.txt", 5)
    tokenizer_file = tmp_path / "digits.json"
    train_tokenizer("char", ["0123456789 e"]).save(tokenizer_file)  # of the text's characters, knows " " and "e"
    text = corpus.read_text().replace("\n", "")
    unknown = 1 - (text.count(" ") + text.count("e")) / len(text)  # one token per character
    argv = ["train", "--task", "lm", "--data", str(corpus), "--valid", str(valid), "--tgt-tokenizer-file"]
    assert main([*argv, str(tokenizer_file), "--out", str(tmp_path / "r"), "--max-steps", "1", *TINY]) == 2
    assert capsys.readouterr().err == (
        f"dotformer train: error: {tokenizer_file}: {unknown:.0%} of the training text's tokens are unknown to this "
        "tokenizer (<unk>): is it the tokenizer of this text?\n"
    )
    assert not (tmp_path / "r" / "data" / "train.txt").exists()
