"""``dotformer translate``, ``evaluate`` and ``average`` end to end, on checkpoints written by the tests."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from decoding_support import copy_model, random_model, single_thread, tiny_config
from safetensors.torch import load_file

from dotformer import Transformer
from dotformer.checkpoint import load_checkpoint, save_checkpoint
from dotformer.cli import main
from dotformer.data.tokenizers import train_tokenizer
from dotformer.decoding import DecodeConfig, translate
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
    model = copy_model()
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


def test_translate_n_best_prints_score_tab_text_groups(
    runs: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, _ = run_cli(capsys, "translate", "--checkpoint", str(runs["copy"]), "--n-best", "3", "a1 a2", "a5 a6")
    assert status == 0
    groups = out.split("\n\n")
    assert groups[-1] == ""  # the output ends with the blank line of the last group
    assert len(groups) == 3
    for group, text in zip(groups, ["a1 a2", "a5 a6"], strict=False):
        lines = [line.split("\t") for line in group.split("\n")]
        assert len(lines) == 3 and lines[0][1] == text
        scores = [float(score) for score, _ in lines]
        assert scores == sorted(scores, reverse=True) and all(s < 0 for s in scores)


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
    assert status == 0 and err == ""  # upper case is read in lower case, as CMUdict words were
    phones = {"T", "R", "AE1", "N", "S", "F", "AO1", "M", "ER0", "AH0"}
    lines = out.splitlines()
    assert len(lines) == 2 and all(set(line.split()) <= phones for line in lines)


@pytest.mark.parametrize(
    ("which", "argv", "message"),
    [
        ("missing", [], "does not exist"),
        ("learned", ["a1 " * 12], "at most 8"),
        ("copy", ["--n-best", "5", "a1"], "n_best=5 cannot exceed beam_size=4"),
        ("copy", ["--device", "tpu:x", "a1"], "--device"),
    ],
)
def test_user_mistakes_are_one_line_errors(
    runs: dict[str, Path], capsys: pytest.CaptureFixture[str], tmp_path: Path, which: str, argv: list[str], message: str
) -> None:
    checkpoint = tmp_path / "nothing" if which == "missing" else runs[which]
    status, out, err = run_cli(capsys, "translate", "--checkpoint", str(checkpoint), *argv)
    assert status == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("dotformer translate: error:") and message in err


def test_bfloat16_decoding_translates_like_float32(runs: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    checkpoint = str(runs["copy"])
    status, out, err = run_cli(capsys, "translate", "--checkpoint", checkpoint, "--dtype", "bfloat16", *COPY_TEXTS)
    assert status == 0 and err == ""
    assert out.splitlines() == COPY_TEXTS  # the trained copy model is confident enough for bf16 weights
    status, out, _ = run_cli(capsys, "evaluate", "--checkpoint", str(runs["copy"]), "--dtype", "bfloat16")
    assert status == 0 and "exact match" in out and "100.00%" in out and "bfloat16 weights" in out
    if not torch.cuda.is_available():
        status, out, err = run_cli(capsys, "translate", "--checkpoint", str(runs["copy"]), "--dtype", "float16", "a1")
        assert status == 2 and out == "" and "--dtype float16 needs a CUDA device" in err and err.count("\n") == 1


def test_int8_decoding_translates_like_float32(runs: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    checkpoint = str(runs["copy"])
    status, out, err = run_cli(capsys, "translate", "--checkpoint", checkpoint, "--dtype", "int8", *COPY_TEXTS)
    assert status == 0 and err == ""
    assert out.splitlines() == COPY_TEXTS  # int8 rounding does not change a confident model's outputs
    status, out, _ = run_cli(capsys, "evaluate", "--checkpoint", checkpoint, "--dtype", "int8", "--strategy", "greedy")
    assert status == 0 and "100.00%" in out and "int8 weights" in out
    if torch.cuda.is_available():
        status, out, err = run_cli(capsys, "translate", "--checkpoint", checkpoint, "--dtype", "int8", "a1")
        assert status == 2 and out == "" and "--dtype int8 is for CPU decoding" in err and err.count("\n") == 1


def test_help_states_the_output_format(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["translate", "--help"])
    assert "SCORE<TAB>TEXT" in capsys.readouterr().out


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
    assert 1.0 <= payload["metrics"]["perplexity"] < 3.0  # a trained copy model is nearly certain


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
