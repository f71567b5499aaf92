"""``dotformer translate``, ``evaluate`` and ``average`` end to end, on checkpoints written by the tests."""

from __future__ import annotations

import io
import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from conftest import Cli
from decoding_support import random_model, single_thread, tiny_config
from safetensors.torch import load_file
from scripted_model import copy_model

from dotformer import Transformer
from dotformer.checkpoint import load_checkpoint, save_checkpoint
from dotformer.cli import main
from dotformer.data.tokenize.tokenizer_files import train_tokenizer
from dotformer.data.tokenize.tokenizers import EOS_ID
from dotformer.decoding import DecodeConfig
from dotformer.decoding.translate import translate
from dotformer.metrics import bleu

SYMBOLS = "a0 a1 a2 a3 a4 a5 a6 a7"  # the copy model's 8 symbols get ids 4..11 in this order
COPY_TEXTS = ["a1 a2", "a5 a6 a7", "a3 a3 a0 a4", "a7 a6 a5 a4 a3", "a2 a0 a1 a1", "a4 a7 a2 a5 a6 a1"]


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    with single_thread():
        yield


def write_run(
    root: Path,
    model: Transformer,
    info: dict,
    pairs: list[tuple[str, str]],
    src_texts: str = SYMBOLS,
    tgt_texts: str = SYMBOLS,
    src_kind: str = "symbol",
) -> Path:
    """A run directory with best/ (the checkpoint) and data/test.tsv, valid.tsv."""
    src_tok, tgt_tok = train_tokenizer(src_kind, [src_texts]), train_tokenizer("symbol", [tgt_texts])
    save_checkpoint(root / "best", model, src_tok, tgt_tok, info)
    (root / "data").mkdir(parents=True)
    lines = "".join(f"{s}\t{t}\n" for s, t in pairs)
    (root / "data" / "test.tsv").write_text(lines, encoding="utf-8")
    (root / "data" / "valid.tsv").write_text(lines, encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("runs")
    model = copy_model()  # hand-set: it copies every input exactly, so the copy, translation and g2p runs can assert it
    copy_pairs = [(t, t) for t in COPY_TEXTS]
    g2p_pairs = [("a1 a2", "a1 a2"), ("a1 a2", "a3 a4"), ("a5 a6 a7", "a5 a6")]
    learned = random_model(vocab=12, positional="learned", max_len=8)
    letters, phones = "transformer attention", "T R AE1 N S F AO1 R M ER0 AH0"
    g2p_model = Transformer(tiny_config(4 + len(set(phones.split())), src_vocab_size=4 + len(set(letters)))).eval()
    return {
        "copy": write_run(root / "copy", model, {"task": "synthetic", "dataset": "copy"}, copy_pairs),
        "g2p": write_run(root / "g2p", model, {"task": "g2p", "dataset": "cmudict"}, g2p_pairs),
        "translation": write_run(root / "translation", model, {"task": "translation"}, copy_pairs),
        "learned": write_run(root / "learned", learned, {"task": "synthetic"}, copy_pairs),
        "cmudict": write_run(
            root / "cmudict",
            g2p_model,
            {"task": "g2p", "dataset": "cmudict"},
            [("a", "AH0")],
            src_texts=letters,
            tgt_texts=phones,
            src_kind="char",
        ),
    }


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_translate_prints_one_output_per_argument(runs: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run_cli(capsys, "translate", "--checkpoint", str(runs["copy"]), "a1 a2", "a5 a6 a7")
    assert status == 0 and err == ""
    assert out == "a1 a2\na5 a6 a7\n"


def test_translate_reads_stdin_lines(
    runs: dict[str, Path], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO("a1 a2\n\na5 a6 a7\n"))
    status, out, _ = run_cli(capsys, "translate", "--checkpoint", str(runs["copy"] / "best"), "--strategy", "greedy")
    assert status == 0
    assert out.split("\n")[0] == "a1 a2" and out.split("\n")[2] == "a5 a6 a7"
    assert out.count("\n") == 3  # the empty line is an input too


def test_translate_n_best_prints_id_text_score_lines(runs: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--engine", "torch", "--n-best", "3", "a1 a2", "a5 a6"]  # the library's n-best (the engines': test_engines)
    status, out, _ = run_cli(capsys, "translate", "--checkpoint", str(runs["copy"]), *argv)
    assert status == 0
    rows = [line.split(" ||| ") for line in out.splitlines()]
    assert [row[0] for row in rows] == ["0", "0", "0", "1", "1", "1"]  # N lines per input, 0-based ids, no blank line
    expected = translate(load_checkpoint(runs["copy"]), ["a1 a2", "a5 a6"], DecodeConfig(n_best=3))
    for row, hyp in zip(rows, [h for hyps in expected for h in hyps], strict=True):
        assert row[1] == hyp.text and float(row[2]) == pytest.approx(hyp.score, abs=5e-5)
    assert rows[0][1] == "a1 a2" and rows[3][1] == "a5 a6"
    status, _, err = run_cli(
        capsys, "translate", "--checkpoint", str(runs["copy"]), "--n-best", "2", "--output-format", "text", "a1"
    )
    assert status == 2 and err.count("\n") == 1 and "with --n-best 2 use nbest or json" in err


def test_translate_sampling_flags(runs: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["translate", "--checkpoint", str(runs["copy"]), "--strategy", "sample", "--top-k", "1", "a1 a2 a3"]
    status, out, _ = run_cli(capsys, *argv)
    assert status == 0 and out == "a1 a2 a3\n"
    status, _, err = run_cli(capsys, "translate", "--checkpoint", str(runs["copy"]), "--top-k", "5", "a1")
    assert status == 2 and err.count("\n") == 1 and "--strategy sample" in err


def test_unknown_symbols_give_one_warning_not_a_crash(
    runs: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, err = run_cli(capsys, "translate", "--checkpoint", str(runs["copy"]), "a1 zz", "qq a2 qq", "a3")
    assert status == 0 and out.count("\n") == 3
    assert err.count("\n") == 1 and "warning" in err and "3 input symbol(s) in 2 of 3 input(s)" in err


def test_g2p_translate_reads_words_as_the_dictionary_did(
    runs: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, err = run_cli(capsys, "translate", "--checkpoint", str(runs["cmudict"]), "Transformer", "attention")
    assert status == 0 and "symbol" not in err  # upper case is read in lower case, as CMUdict words were
    # the untrained model never ends its outputs: both are cut at the maximum length, one warning line says so
    assert err == (
        "dotformer translate: warning: 2 of 2 output(s) reached the maximum output length (--max-len-a 1 x input "
        "length + --max-len-b 50) before the model ended them and are cut (first: input 1)\n"
    )
    phones = {"T", "R", "AE1", "N", "S", "F", "AO1", "M", "ER0", "AH0"}
    lines = out.splitlines()
    assert len(lines) == 2 and all(set(line.split()) <= phones for line in lines)


@pytest.mark.parametrize(
    ("which", "argv", "message"),
    [
        ("missing", [], "does not exist"),
        ("learned", ["a1 " * 12], "input 1: the input has 13 tokens (EOS included), more than --max-input-length 8"),
        ("learned", ["--max-input-length", "9", "a1"], "--max-input-length 9 exceeds this model's learned positional"),
        ("copy", ["--buffer-size", "0", "a1"], "--buffer-size must be a positive integer"),
        ("copy", ["--input", "nothing.txt"], "nothing.txt: no such file"),
        ("copy", ["--input", "x.txt", "a1"], "either as TEXT arguments or with --input"),
        ("copy", ["a1", "a\udcff"], "input 2: byte 0xff at byte offset 1 is not valid UTF-8 (invalid start byte)"),
        ("copy", ["--n-best", "5", "a1"], "--n-best=5 cannot exceed --beam=4"),
        ("copy", ["--device", "tpu:x", "a1"], "device 'tpu:x' is not a device"),
    ],
)
def test_user_mistakes_are_one_line_errors(
    runs: dict[str, Path], capsys: pytest.CaptureFixture[str], tmp_path: Path, which: str, argv: list[str], message: str
) -> None:
    checkpoint = tmp_path / "nothing" if which == "missing" else runs[which]
    status, out, err = run_cli(capsys, "translate", "--checkpoint", str(checkpoint), *argv)
    assert status == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("dotformer translate: error:") and message in err


def test_an_empty_input_is_named_by_translate_and_evaluate(
    runs: dict[str, Path], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """``evaluate --data /dev/null`` said "no such file"; ``translate --input`` of an empty file said nothing (classify
    and embed refuse it)."""
    empty = tmp_path / "empty.tsv"
    empty.write_bytes(b"")
    for path in (os.devnull, str(empty)):
        status, out, err = run_cli(capsys, "translate", "--checkpoint", str(runs["copy"]), "--input", path)
        assert (status, out, err) == (2, "", f"dotformer translate: error: {path}: no input lines to translate\n")
    status, out, err = run_cli(capsys, "evaluate", "--checkpoint", str(runs["copy"]), "--data", os.devnull)
    assert status == 2 and out == "" and err.count("\n") == 1
    assert err.startswith(f"dotformer evaluate: error: {os.devnull} is not a regular file (a device, a pipe or a ")
    status, out, err = run_cli(capsys, "evaluate", "--checkpoint", str(runs["copy"]), "--data", str(empty))
    assert status == 2 and out == "" and err == f"dotformer evaluate: error: {empty}:1: the file is empty\n"


def test_evaluate_names_the_task_flag_of_another_kind_of_data(
    runs: dict[str, Path], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """``evaluate --checkpoint G2P --data f.tsv --task lm`` said "DataConfig.task must be one of ..."."""
    data = tmp_path / "f.tsv"
    data.write_text("a1 a2\ta1 a2\n", encoding="utf-8")
    for asked, title in (("lm", "a language model"), ("classify", "a classifier")):
        argv = ["evaluate", "--checkpoint", str(runs["g2p"]), "--data", str(data), "--task", asked]
        status, out, err = run_cli(capsys, *argv)
        assert status == 2 and out == "" and err.count("\n") == 1 and "DataConfig" not in err
        checkpoint = runs["g2p"] / "best"
        assert err.startswith(f"dotformer evaluate: error: --task {asked}: {checkpoint} is a g2p model (task g2p)")
        assert err.endswith(f"leave --task out, or evaluate with {title}\n")
    argv = ["evaluate", "--checkpoint", str(runs["g2p"]), "--data", str(data), "--task", "translation"]
    status, out, err = run_cli(capsys, *argv)
    assert status == 2 and err.endswith(
        "evaluate it with a translation checkpoint, or leave --task out (a file is read as its checkpoint's task)\n"
    )


def test_bfloat16_decoding_translates_like_float32(runs: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    checkpoint = str(runs["copy"])
    status, out, err = run_cli(capsys, "translate", "--checkpoint", checkpoint, "--dtype", "bfloat16", *COPY_TEXTS)
    assert status == 0 and err == ""
    assert out.splitlines() == COPY_TEXTS  # the copy model's margin outlasts bf16 rounding
    status, out, _ = run_cli(capsys, "evaluate", "--checkpoint", str(runs["copy"]), "--dtype", "bfloat16")
    assert status == 0 and "exact match" in out and "100.00%" in out and "bfloat16 weights" in out
    if not torch.cuda.is_available():
        status, out, err = run_cli(capsys, "translate", "--checkpoint", str(runs["copy"]), "--dtype", "float16", "a1")
        assert status == 2 and out == "" and "dtype float16 needs a CUDA device" in err and err.count("\n") == 1


def test_int8_decoding_translates_like_float32(runs: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    checkpoint = str(runs["copy"])
    status, out, err = run_cli(capsys, "translate", "--checkpoint", checkpoint, "--dtype", "int8", *COPY_TEXTS)
    assert status == 0 and err == ""
    assert out.splitlines() == COPY_TEXTS  # int8 rounding does not undo a margin of 4 logits
    status, out, _ = run_cli(capsys, "evaluate", "--checkpoint", checkpoint, "--dtype", "int8", "--strategy", "greedy")
    assert status == 0 and "100.00%" in out and "int8 weights" in out
    if torch.cuda.is_available():
        status, out, err = run_cli(capsys, "translate", "--checkpoint", checkpoint, "--dtype", "int8", "a1")
        assert status == 2 and out == "" and "dtype int8 is for CPU decoding" in err and err.count("\n") == 1


def test_help_states_the_output_format(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "120")  # the help is filled to the terminal's width: fix it, so no phrase is split
    with pytest.raises(SystemExit):
        main(["translate", "--help"])
    out = capsys.readouterr().out
    for words in (
        "ID ||| TEXT ||| SCORE",
        '"finished"',
        "--buffer-size",
        "--max-input-length",
        "U+2028",
        "<stdin>:LINE",
    ):
        assert words in out


def test_evaluate_synthetic_reports_exact_match_and_writes_json(
    runs: dict[str, Path], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    loaded = load_checkpoint(runs["copy"])
    outputs = translate(loaded, COPY_TEXTS, DecodeConfig())
    expected = 100 * sum(o[0].text == t for o, t in zip(outputs, COPY_TEXTS, strict=True)) / len(COPY_TEXTS)
    json_path = tmp_path / "metrics.json"
    status, out, _ = run_cli(capsys, "evaluate", "--checkpoint", str(runs["copy"]), "--json", str(json_path))
    assert status == 0
    assert "exact match" in out and f"{expected:.2f}%" in out and "perplexity" in out
    payload = json.loads(json_path.read_text())
    assert payload["task"] == "synthetic" and payload["split"] == "test" and payload["num_pairs"] == 6
    assert payload["dtype"] == "float32"
    assert payload["metrics"]["exact_match"] == pytest.approx(expected)
    assert 1.0 <= payload["metrics"]["perplexity"] < 3.0  # the copy model gives its answer p > 0.8


def test_evaluate_g2p_groups_references_by_word(
    runs: dict[str, Path], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    loaded = load_checkpoint(runs["g2p"])
    assert [o[0].text for o in translate(loaded, ["a1 a2", "a5 a6 a7"])] == ["a1 a2", "a5 a6 a7"]
    json_path = tmp_path / "g2p.json"
    status, out, _ = run_cli(capsys, "evaluate", "--checkpoint", str(runs["g2p"]), "--json", str(json_path))
    assert status == 0 and "WER, stress kept" in out and "PER, stress stripped" in out
    metrics = json.loads(json_path.read_text())["metrics"]
    # word "a1 a2" matches its first pronunciation; "a5 a6 a7" is 1 insertion from its only one ("a5 a6")
    assert metrics["wer"] == pytest.approx(50.0)
    assert metrics["per"] == pytest.approx(100 * 1 / 4)  # (0 + 1) / (2 + 2)
    assert metrics["wer_no_stress"] == pytest.approx(50.0) and metrics["per_no_stress"] == pytest.approx(25.0)


def test_evaluate_translation_reports_bleu_chrf_with_signatures(
    runs: dict[str, Path], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    loaded = load_checkpoint(runs["translation"])
    outputs = [o[0].text for o in translate(loaded, COPY_TEXTS[:4], DecodeConfig(strategy="greedy"))]
    json_path = tmp_path / "bleu.json"
    argv = ["--strategy", "greedy", "--limit", "4", "--split", "valid", "--json", str(json_path)]
    status, out, _ = run_cli(capsys, "evaluate", "--checkpoint", str(runs["translation"]), *argv)
    assert status == 0 and "BLEU signature: nrefs:1" in out and "chrF signature:" in out
    payload = json.loads(json_path.read_text())
    assert payload["num_pairs"] == 4
    assert payload["metrics"]["bleu"] == pytest.approx(bleu(outputs, COPY_TEXTS[:4]).score)


def test_evaluate_stride_is_refused_by_a_task_that_scores_no_text(
    runs: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, err = run_cli(capsys, "evaluate", "--checkpoint", str(runs["g2p"]), "--stride", "4")
    assert status == 2 and out == ""
    assert err == (
        "dotformer evaluate: error: --stride moves the sliding window of a language model's evaluation; "
        "a g2p model's has none: leave it out\n"
    )


def test_average_writes_the_mean_of_the_weights(
    runs: dict[str, Path], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    first = load_checkpoint(runs["copy"])
    second = load_checkpoint(runs["copy"])
    with torch.no_grad():
        for p in second.model.parameters():
            p.add_(1.0)
    save_checkpoint(tmp_path / "shifted", second.model, second.src_tokenizer, second.tgt_tokenizer, first.info)
    out_dir = tmp_path / "averaged"
    status, out, _ = run_cli(capsys, "average", "--out", str(out_dir), str(runs["copy"]), str(tmp_path / "shifted"))
    assert status == 0 and "averaged 2 checkpoint(s)" in out
    averaged = load_file(out_dir / "model.safetensors")
    original = first.model.state_dict()
    for name, tensor in averaged.items():
        assert torch.allclose(tensor, original[name] + 0.5, atol=1e-6), name
    assert load_checkpoint(out_dir).info["averaged_from"][0].endswith("best")


def test_average_last_warns_when_fewer_checkpoints_are_there(
    runs: dict[str, Path], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    loaded = load_checkpoint(runs["copy"])
    save_checkpoint(tmp_path / "run" / "checkpoints" / "step_0000010", loaded.model, loaded.src_tokenizer,
                    loaded.tgt_tokenizer, loaded.info)  # fmt: skip
    status, out, err = run_cli(capsys, "average", "--last", "2", "--out", str(tmp_path / "avg"), str(tmp_path / "run"))
    assert status == 0 and out == f"averaged 1 checkpoint(s) into {tmp_path / 'avg'}\n"
    assert err == (
        f"dotformer average: warning: {tmp_path / 'run'}/checkpoints holds 1 step checkpoint(s): averaging 1 of the 2 "
        f"asked for by --last 2\n"
    )


def test_average_refuses_a_checkpoint_given_twice_and_names_what_differs(
    runs: dict[str, Path], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """``average A A`` averaged A with itself without a word; checkpoints of two models said only "differs"."""
    run = runs["copy"]
    status, out, err = run_cli(capsys, "average", "--out", str(tmp_path / "a"), str(run), str(run / "best"))
    assert (status, out) == (2, "") and not (tmp_path / "a").exists()
    assert err == (
        f"dotformer average: error: checkpoint {run / 'best'} is given twice (as {run} and {run / 'best'}): give "
        f"each checkpoint once\n"
    )
    status, _, err = run_cli(capsys, "average", "--out", str(tmp_path / "b"), str(run), str(runs["learned"]))
    assert status == 2 and err.count("\n") == 1
    ours, theirs = load_checkpoint(runs["learned"]).model.config, load_checkpoint(run).model.config
    assert f"model config differs from that of {run / 'best'} (d_model {ours.d_model} against {theirs.d_model}, " in err
    assert err.endswith(" more): not checkpoints of one model\n")


def test_reader_flags_out_of_range_are_named_as_flags(
    runs: dict[str, Path], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """``evaluate --delimiter xy`` and ``train --num-columns 0`` named the fields: "DataConfig.delimiter", ...; a blank
    line under ``--empty-lines error`` named "CorpusOptions.empty_lines"."""
    data = tmp_path / "pairs.tsv"
    data.write_text("a1\ta1\n\t\n", encoding="utf-8")
    for command, flags, expected in (
        ("evaluate", ["--delimiter", "xy"], "--delimiter must be one character (not a line break) or one of tab,"),
        ("evaluate", ["--num-columns", "0"], "--num-columns must be at least 2 (a source and a target), got 0"),
        ("train", ["--num-columns", "0"], "--num-columns must be at least 2 (a source and a target), got 0"),
        ("train", ["--valid-fraction", "2"], "--valid-fraction must be in [0, 1), got 2.0"),
        ("evaluate", ["--empty-lines", "error"], f"{data}:2: blank line (--empty-lines skip skips"),
    ):
        out_dir = ["--max-steps", "1", "--out", str(tmp_path / "r")]
        where = ["--checkpoint", str(runs["copy"])] if command == "evaluate" else out_dir
        status, out, err = run_cli(capsys, command, *where, "--data", str(data), *flags)
        assert (status, out) == (2, "") and err.startswith(f"dotformer {command}: error: {expected}"), err
        assert err.count("\n") == 1 and "Config" not in err and not (tmp_path / "r").exists()


def test_an_empty_data_path_or_side_is_named(
    runs: dict[str, Path], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """``--data ""`` (an unset shell variable) and ``--data src.txt,`` said ". is a directory; give a file";
    ``evaluate --json ""`` wrote no JSON without a word."""
    source = tmp_path / "src.txt"
    source.write_text("a1\n", encoding="utf-8")
    cases = [
        (["evaluate", "--checkpoint", str(runs["copy"]), "--data", ""], "--data is empty: give a path\n"),
        (["train", "--task", "lm", "--data", " ", "--max-steps", "1"], "--data is empty: give a path\n"),
        (["evaluate", "--checkpoint", str(runs["copy"]), "--json", ""], "--json is empty: give a path\n"),
        (["translate", "--checkpoint", str(runs["copy"]), "--checkpoint", "", "a1"], "--checkpoint is empty"),
        (["average", "--out", str(tmp_path / "a"), str(runs["copy"]), ""], "CHECKPOINT is empty: give a path\n"),
        (["evaluate", "--checkpoint", str(runs["copy"]), "--data", f"{source},"], f"{source},: parallel files are"),
        (["evaluate", "--checkpoint", str(runs["copy"]), "--data", f",{source}"], f",{source}: parallel files are"),
    ]
    for argv, expected in cases:
        status, out, err = run_cli(capsys, *argv, *(["--out", str(tmp_path / "r")] if argv[0] == "train" else []))
        assert (status, out) == (2, "") and err.startswith(f"dotformer {argv[0]}: error: {expected}"), err
        assert err.count("\n") == 1 and "directory" not in err and not (tmp_path / "r").exists()


def test_evaluate_names_limit_below_one_for_every_task(
    runs: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """``evaluate --limit 0`` of a translation model said "limit must be a positive number of sources"."""
    for limit in ("0", "-3"):
        status, out, err = run_cli(capsys, "evaluate", "--checkpoint", str(runs["copy"]), "--limit", limit)
        assert (status, out, err) == (
            2,
            "",
            f"dotformer evaluate: error: --limit must be a positive integer, got {limit}\n",
        )


def test_translate_refuses_a_language_model_naming_it_and_generate(
    runs: dict[str, Path], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    copy = load_checkpoint(runs["copy"])
    lm_model = Transformer(copy.model.config.replace(arch="decoder-only")).eval()
    lm = save_checkpoint(tmp_path / "lm", lm_model, copy.tgt_tokenizer, copy.tgt_tokenizer, {"task": "lm"})
    status, out, err = run_cli(capsys, "translate", "--checkpoint", str(lm), "a1 a2")
    assert (status, out) == (2, "")
    assert err == f"dotformer translate: error: {lm} is a language model: use dotformer generate (translate needs an "\
        "encoder-decoder model)\n"  # fmt: skip
    status, out, err = run_cli(capsys, "translate", "--checkpoint", str(runs["copy"]), "--checkpoint", str(lm), "a1")
    assert (status, out) == (2, "")
    assert err == f"dotformer translate: error: {lm} is a language model: use dotformer generate (an ensemble "\
        "decodes encoder-decoder models)\n"  # fmt: skip


def test_translate_and_classify_name_what_an_encoder_or_a_translation_model_is(
    runs: dict[str, Path], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """``translate`` of an encoder said "alignment layer -1 does not exist"; ``classify`` of a translation model said
    "its head is the generator"."""
    copy = load_checkpoint(runs["copy"])
    encoder_model = Transformer(copy.model.config.replace(arch="encoder-only", num_decoder_layers=0)).eval()
    encoder = save_checkpoint(tmp_path / "mlm", encoder_model, copy.src_tokenizer, copy.src_tokenizer, {"task": "mlm"})
    for engine in ("auto", "torch"):
        status, out, err = run_cli(capsys, "translate", "--checkpoint", str(encoder), "--engine", engine, "a1")
        assert (status, out) == (2, "")
        assert err == (
            f"dotformer translate: error: {encoder} is an encoder-only model: translate needs an encoder-decoder "
            f"model; classify or embed texts with it: dotformer classify, dotformer embed\n"
        )
    status, out, err = run_cli(capsys, "classify", "--checkpoint", str(runs["copy"]), "a1")
    assert (status, out) == (2, "")
    assert err == (
        f"dotformer classify: error: {runs['copy'] / 'best'} has no classifier: it is an encoder-decoder model "
        f"(dotformer translate); train one with dotformer train --task classify or --task tag\n"
    )


# -- translate's input and output: line splitting, encodings, files, formats, streaming, pipes, signals ----------------


def feed_stdin(monkeypatch: pytest.MonkeyPatch, data: bytes) -> None:
    """Replace standard input by a binary-backed text stream holding ``data``, as a real pipe would be."""
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(data), encoding="utf-8"))


def test_only_newlines_split_lines_and_a_bom_is_dropped(
    runs: dict[str, Path], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # every character str.splitlines() splits on, inside lines; the symbol tokenizer reads them as spaces
    separators = ["\f", "\v", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"]
    lines = [f"a1{sep}a2" for sep in separators]
    data = "\ufeff" + "\r\n".join(lines[:2]) + "\r\n" + "\n".join(lines[2:]) + "\n"
    feed_stdin(monkeypatch, data.encode("utf-8"))
    status, out, err = run_cli(capsys, "translate", "--checkpoint", str(runs["copy"]), "--strategy", "greedy")
    assert status == 0 and err == ""  # the BOM is not read as a symbol (no <unk> warning)
    assert out == "a1 a2\n" * len(separators)  # one output line per input line
    feed_stdin(monkeypatch, b"a1 a2\na3")  # a last line without "\n" is a line
    status, out, _ = run_cli(capsys, "translate", "--checkpoint", str(runs["copy"]), "--strategy", "greedy")
    assert status == 0 and out == "a1 a2\na3\n"


def test_invalid_utf8_names_the_line_after_writing_the_lines_before(
    runs: dict[str, Path], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    feed_stdin(monkeypatch, b"a1 a2\na3 \xff a4\na5\n")
    status, out, err = run_cli(capsys, "translate", "--checkpoint", str(runs["copy"]), "--strategy", "greedy")
    assert status == 2 and out == "a1 a2\n"
    assert err == (
        "dotformer translate: error: <stdin>:2: byte 0xff at byte offset 9 (byte 4 of the line) is not valid UTF-8 "
        "(invalid start byte) (the outputs of the 1 input(s) before it are written)\n"
    )
    source = tmp_path / "bad.txt"
    source.write_bytes(b"\xc3(\n")
    status, out, err = run_cli(capsys, "translate", "--checkpoint", str(runs["copy"]), "--input", str(source))
    assert status == 2 and out == "" and err.count("\n") == 1 and f"{source}:1: byte 0xc3 at byte offset 0" in err


def test_input_and_output_files(runs: dict[str, Path], capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    source, target = tmp_path / "in.txt", tmp_path / "sub" / "out.txt"
    source.write_text("\n".join(COPY_TEXTS) + "\n", encoding="utf-8")
    argv = ["translate", "--checkpoint", str(runs["copy"]), "--input", str(source), "--output", str(target)]
    status, out, err = run_cli(capsys, *argv, "--buffer-size", "4")
    assert status == 0 and out == "" and err == ""
    expected = [o[0].text for o in translate(load_checkpoint(runs["copy"]), COPY_TEXTS)]
    assert target.read_text(encoding="utf-8").split("\n") == [*expected, ""]
    status, _, err = run_cli(capsys, *argv[:-1], str(source))  # --output is --input: refused before any work
    assert status == 2 and "is a file this command reads" in err and source.read_text(encoding="utf-8").count("\n") == 6
    status, _, err = run_cli(capsys, *argv[:-1], str(tmp_path))
    assert status == 2 and "is a directory" in err and err.count("\n") == 1


def test_json_lines_carry_what_the_api_returns(
    runs: dict[str, Path], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import dotformer

    texts = ["a1 a2", "a3 zz", ""]
    feed_stdin(monkeypatch, ("\n".join(texts) + "\n").encode("utf-8"))
    argv = ["translate", "--checkpoint", str(runs["copy"]), "--output-format", "json", "--n-best", "2"]
    status, out, err = run_cli(capsys, *argv)  # one chunk: batched as the API call below, so scores are equal
    assert status == 0 and err.count("\n") == 1 and "(first: <stdin>:2, 'a3 zz')" in err
    rows = [json.loads(line) for line in out.splitlines()]
    with pytest.warns(UserWarning, match="read as <unk>"):
        expected = dotformer.load(runs["copy"], device="cpu").translate(texts, n_best=2, details=True)
    tokenizer = load_checkpoint(runs["copy"]).tgt_tokenizer
    assert [row["id"] for row in rows] == [0, 1, 2] and [row["source"] for row in rows] == texts
    for row, result in zip(rows, expected, strict=True):
        assert set(row) == {"id", "source", "hypotheses"}
        assert len(row["hypotheses"]) == (1 if row["source"] == "" else 2)  # an empty source has one, empty output
        for got, hyp in zip(row["hypotheses"], result.hypotheses, strict=True):
            assert set(got) == {"text", "tokens", "token_ids", "score", "finished"}
            assert got["text"] == hyp.text and got["token_ids"] == hyp.tokens and got["finished"] == hyp.finished
            assert got["score"] == hyp.score  # exactly: JSON keeps every digit of a float
            assert got["tokens"] == [tokenizer.id_to_token(t) for t in hyp.tokens]
            assert " ".join(got["tokens"]) == got["text"]  # the symbol tokenizer joins its tokens with spaces


def test_long_inputs_are_errors_naming_their_line_after_the_lines_before(
    runs: dict[str, Path], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    feed_stdin(monkeypatch, b"a1\na2 a3\na1 a2 a3 a4\na5\n")
    argv = ["translate", "--checkpoint", str(runs["copy"]), "--strategy", "greedy", "--max-input-length", "3"]
    status, out, err = run_cli(capsys, *argv, "--buffer-size", "2")  # the long line opens the second chunk
    assert status == 2 and out == "a1\na2 a3\n"
    assert err == (
        "dotformer translate: error: <stdin>:3: the input has 5 tokens (EOS included), more than --max-input-length "
        "3 (default: the model's max_len); shorten it (the outputs of the 2 input(s) before it are written)\n"
    )


def test_translate_streams_each_answer_before_the_next_line_is_written(runs: dict[str, Path], cli: Cli) -> None:
    import subprocess

    command = cli.command("translate", "--checkpoint", str(runs["copy"]), "--strategy", "greedy")
    with subprocess.Popen(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=cli.env()
    ) as process:
        try:
            for text in ["a1 a2", "a3 a4 a5", "a7"]:
                assert process.stdin is not None and process.stdout is not None
                process.stdin.write((text + "\n").encode())
                process.stdin.flush()  # the input stays open: the answer must come before end of input
                answer = read_line_within(process.stdout, cli.timeout_s)
                assert answer == (text + "\n").encode()
            process.stdin.close()
            assert process.wait(timeout=cli.timeout_s) == 0
            assert process.stderr is not None and process.stderr.read() == b""
        finally:
            process.kill()


def read_line_within(stream: io.BufferedReader, timeout: float) -> bytes:
    """One line from a subprocess's pipe, or a failed test after ``timeout`` seconds (never a hang)."""
    import threading

    box: list[bytes] = []
    reader = threading.Thread(target=lambda: box.append(stream.readline()), daemon=True)
    reader.start()
    reader.join(timeout)
    if not box:
        pytest.fail(f"no answer within {timeout} s: translate waits for the end of its input")
    return box[0]


def test_a_closed_pipe_and_ctrl_c_end_cleanly(runs: dict[str, Path], tmp_path: Path, cli: Cli) -> None:
    import signal
    import subprocess

    many = tmp_path / "many.txt"
    many.write_text("a1 a2 a3\n" * 5000, encoding="utf-8")
    command = cli.command("translate", "--checkpoint", str(runs["copy"]), "--strategy", "greedy", "--buffer-size", "16")
    with many.open("rb") as source:  # as `dotformer translate < many.txt | head -1`
        process = subprocess.Popen(command, stdin=source, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=cli.env())
        try:
            assert process.stdout is not None and process.stderr is not None
            assert read_line_within(process.stdout, cli.timeout_s) == b"a1 a2 a3\n"
            process.stdout.close()  # the reader goes away
            assert process.wait(timeout=cli.timeout_s) in (0, 141)
            assert process.stderr.read() == b""  # no traceback, no "Exception ignored"
        finally:
            process.kill()
            process.wait()

    # Ctrl-C reaches a foreground job; a shell starts a background job (`pytest ... &`) with SIGINT ignored, and
    # Python keeps an ignored SIGINT ignored: the child gets the terminal's default, whatever this process has.
    with subprocess.Popen(
        command,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=cli.env(),
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # noqa: PLW1509 (no threads in the child)
    ) as process:
        try:
            assert process.stdin is not None and process.stdout is not None and process.stderr is not None
            for text in ["a1 a2", "a3"]:
                process.stdin.write((text + "\n").encode())
                process.stdin.flush()
                assert read_line_within(process.stdout, cli.timeout_s) == (text + "\n").encode()
            process.send_signal(signal.SIGINT)  # Ctrl-C while it waits for more input
            assert process.wait(timeout=cli.timeout_s) == 130
            assert process.stdout.read() == b""  # everything decoded was already written
            assert (
                process.stderr.read()
                == b"dotformer translate: interrupted after 2 input(s); their outputs are written\n"
            )
        finally:
            process.kill()


def test_plot_attention_reads_words_as_translate_does(
    runs: dict[str, Path], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    pytest.importorskip("matplotlib")
    argv = ["plot", "attention", "--checkpoint", str(runs["cmudict"]), "--out", str(tmp_path / "a.svg")]
    argv += ["--layer", "0", "--head", "0", "--kind", "encoder"]  # one small panel: quick to draw
    status, out, _ = run_cli(capsys, *argv, "Transformer")
    translated = translate(load_checkpoint(runs["cmudict"]), ["Transformer"], DecodeConfig(strategy="greedy"))
    assert status == 0 and out.splitlines()[0] == f"transformer -> {translated[0][0].text}"
    status, out, err = run_cli(capsys, *argv, "Trans!")
    assert status == 0 and out.startswith("trans! -> ")
    assert err == (  # the line translate would print
        "dotformer plot: warning: 1 input symbol(s) in 1 of 1 input(s) are not in the source vocabulary and were "
        "read as <unk> (first: input 1, 'trans!')\n"
    )


class Trickle(io.RawIOBase):
    """A stream that returns ``step`` bytes per read, as a slow pipe would."""

    def __init__(self, data: bytes, step: int) -> None:
        self.data, self.step = data, step

    def readable(self) -> bool:
        return True

    def read1(self, size: int = -1) -> bytes:
        piece, self.data = self.data[: self.step], self.data[self.step :]
        return piece


@pytest.mark.parametrize("step", [1, 2, 3, 7, 1 << 16])
def test_stream_lines_do_not_depend_on_how_the_bytes_arrive(step: int) -> None:
    from dotformer.cli.translate import StreamLines
    from dotformer.errors import DataError

    text = "\ufeffa1 a2\r\n\u2028é\x85\n\n\x0cend\r"
    expected = ["a1 a2", "\u2028é\x85", "", "\x0cend"]  # a "\r" at the very end is a line ending too
    lines = StreamLines(Trickle(text.encode("utf-8"), step), "<stdin>")  # type: ignore[arg-type]
    chunks = list(lines.chunks(2))
    assert [line for _, chunk in chunks for line in chunk] == expected
    assert all(1 <= len(chunk) <= 2 for _, chunk in chunks)
    assert [first for first, _ in chunks] == sorted({first for first, _ in chunks})  # 1-based, increasing
    data = "a1\nb2\nc3 é".encode() + b"\xe9" + b"\n"
    bad = StreamLines(Trickle(data, step), "in.txt")  # type: ignore[arg-type]
    assert bad.read_chunk(10) == ["a1", "b2"]  # the lines before the bad one first
    with pytest.raises(DataError, match=r"^in\.txt:3: byte 0xe9 at byte offset 11 \(byte 6 of the line\)"):
        bad.read_chunk(10)


def test_empty_and_blank_lines_give_empty_outputs_in_every_format(
    runs: dict[str, Path], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    lines = ["art", "", "   ", "tea"]
    argv = ["translate", "--checkpoint", str(runs["cmudict"]), "--max-len-b", "4"]  # an untrained, random model
    from dotformer.decoding.batch import decode_batch
    from dotformer.decoding.translate import pad_batch

    loaded = load_checkpoint(runs["cmudict"])
    outputs = [o[0].text for o in translate(loaded, ["art", "tea"], DecodeConfig(max_len_b=4))]
    (made_up,) = decode_batch(loaded.model, pad_batch([[EOS_ID]]), DecodeConfig(max_len_b=4))  # the model on ""
    assert made_up[0].tokens and made_up[0].score < 0  # so the outputs below cannot come from the model

    def not_cut(err: str) -> bool:  # no <unk>; at most "art" and "tea" cut at 4 steps, never the empty lines
        return "<unk>" not in err and ("" if err == "" else "2 of 4 output(s) reached") in err

    feed_stdin(monkeypatch, ("\n".join(lines) + "\n").encode("utf-8"))
    status, out, err = run_cli(capsys, *argv)
    assert status == 0 and not_cut(err)
    assert out == f"{outputs[0]}\n\n\n{outputs[1]}\n"
    feed_stdin(monkeypatch, ("\n".join(lines) + "\n").encode("utf-8"))
    status, out, err = run_cli(capsys, *argv, "--n-best", "2")
    assert status == 0 and not_cut(err)
    rows = [line for line in out.splitlines() if line.startswith(("1 |||", "2 |||"))]
    assert rows == ["1 |||  ||| 0.0000", "2 |||  ||| 0.0000"]
    feed_stdin(monkeypatch, ("\n".join(lines) + "\n").encode("utf-8"))
    status, out, err = run_cli(capsys, *argv, "--output-format", "json")
    assert status == 0 and not_cut(err)
    rows = [json.loads(line) for line in out.splitlines()]
    assert [row["source"] for row in rows] == lines
    for row in rows[1:3]:
        assert row["hypotheses"] == [{"text": "", "tokens": [], "token_ids": [], "score": 0.0, "finished": True}]
