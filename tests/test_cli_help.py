"""``--help`` of every command: it exits 0, fits an 80-column terminal, leads with the flags most runs need, and
the grouping of the flags changes no flag (the sets below were read from the parser before the flags were grouped).
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from dotformer.cli import build_parser, main
from dotformer.cli.help_layout import fill_help_text

# every flag each command accepts (-h/--help aside)
PREPARE_FLAGS = {"--config", "--data", "--out", "--sample-lines", "--seed"}
EXPECTED_FLAGS: dict[str, set[str]] = {
    "train": {
        "--accumulate",
        "--activation-checkpointing",
        "--lora-alpha",
        "--lora-dropout",
        "--lora-rank",
        "--lora-targets",
        "--no-activation-checkpointing",
        "--amp",
        "--best-metric",
        "--bible-check-alignment",
        "--bible-max-ratio",
        "--block-size",
        "--clip-norm",
        "--compile",
        "--config",
        "--ctc-upsample",
        "--ctc-weight",
        "--data",
        "--delimiter",
        "--device",
        "--dropout",
        "--ema-decay",
        "--ema-start",
        "--empty-lines",
        "--eval-every",
        "--extend-vocab",
        "--header",
        "--hf-cache-dir",
        "--hf-config",
        "--hf-data-files",
        "--hf-split",
        "--hf-test-split",
        "--hf-valid-split",
        "--init-from",
        "--keep-last",
        "--label-smoothing",
        "--limit",
        "--log-every",
        "--lr-cooldown",
        "--lr-peak",
        "--lr-scale",
        "--lr-schedule",
        "--max-epochs",
        "--max-minutes",
        "--max-steps",
        "--max-tokens",
        "--metrics-every",
        "--no-bible-check-alignment",
        "--no-compile",
        "--no-header",
        "--no-packed",
        "--no-progress",
        "--no-shared-vocab",
        "--no-strip-stress",
        "--no-tensorboard",
        "--num-columns",
        "--out",
        "--overwrite",
        "--packed",
        "--patience",
        "--preset",
        "--progress",
        "--resume",
        "--save-every",
        "--seed",
        "--shared-vocab",
        "--source-column",
        "--source-field",
        "--source-module",
        "--src-tokenizer",
        "--src-tokenizer-file",
        "--strip-stress",
        "--sword-path",
        "--synthetic-examples",
        "--synthetic-max-len",
        "--synthetic-min-len",
        "--synthetic-seed",
        "--synthetic-symbols",
        "--target-column",
        "--target-field",
        "--target-module",
        "--task",
        "--tensorboard",
        "--test",
        "--test-books",
        "--test-fraction",
        "--tgt-tokenizer",
        "--tgt-tokenizer-file",
        "--threads",
        "--tokenizer",
        "--valid",
        "--valid-decode-limit",
        "--valid-fraction",
        "--vocab-size",
        "--warmup",
        "--weight-decay",
        "--mlm-unit",
        "--mask-probability",
        "--tag-format",
        "--label-subtokens",
        "--pooling",
    },
    "translate": {
        "--end-token",
        "--no-repeat-ngram-size",
        "--repetition-penalty",
        "--suppress",
        "--engine",
        "--inter-threads",
        "--alignment-layer",
        "--alignments",
        "--batch-size",
        "--beam",
        "--beam-stop",
        "--buffer-size",
        "--checkpoint",
        "--device",
        "--dtype",
        "--inline-prefix",
        "--input",
        "--min-len",
        "--min-len-a",
        "--prefix-file",
        "--replace-unk",
        "--length-penalty",
        "--max-input-length",
        "--max-len-a",
        "--max-len-b",
        "--max-tokens",
        "--n-best",
        "--output",
        "--output-format",
        "--seed",
        "--strategy",
        "--temperature",
        "--threads",
        "--top-k",
        "--top-p",
    },
    "generate": {
        "--end-token",
        "--no-repeat-ngram-size",
        "--repetition-penalty",
        "--suppress",
        "--engine",
        "--inter-threads",
        "--beam",
        "--beam-stop",
        "--length-penalty",
        "--checkpoint",
        "--device",
        "--greedy",
        "--strategy",
        "--max-new-tokens",
        "--n",
        "--no-cache",
        "--prompt",
        "--seed",
        "--temperature",
        "--threads",
        "--top-k",
        "--top-p",
    },
    "evaluate": {
        "--end-token",
        "--no-repeat-ngram-size",
        "--repetition-penalty",
        "--suppress",
        "--engine",
        "--inter-threads",
        "--batch-size",
        "--min-len",
        "--min-len-a",
        "--replace-unk",
        "--beam",
        "--beam-stop",
        "--checkpoint",
        "--data",
        "--delimiter",
        "--device",
        "--dtype",
        "--empty-lines",
        "--header",
        "--hf-cache-dir",
        "--hf-config",
        "--hf-data-files",
        "--hf-split",
        "--hyps",
        "--json",
        "--length-penalty",
        "--limit",
        "--max-len-a",
        "--max-len-b",
        "--no-header",
        "--num-columns",
        "--seed",
        "--source-column",
        "--source-field",
        "--split",
        "--strategy",
        "--stride",
        "--target-column",
        "--target-field",
        "--task",
        "--temperature",
        "--threads",
        "--top-k",
        "--top-p",
    },
    "average": {"--checkpoint", "--last", "--out", "--overwrite"},
    "plot": set(),
    "plot attention": {"--checkpoint", "--device", "--head", "--kind", "--layer", "--out", "--target"},
    "plot positional": {"--d-model", "--length", "--out"},
    "plot masks": {"--out"},
    "plot schedule": {"--config", "--d-model", "--out", "--scale", "--steps", "--warmup"},
    "plot curves": {"--out", "--run"},
    "explain": set(),
    "explain attention": {"--json"},
    "compare": {
        "--batch-size",
        "--count-max-length",
        "--d-model",
        "--device",
        "--gradient-length",
        "--heads",
        "--layers",
        "--lengths",
        "--out",
        "--quiet",
        "--repeats",
        "--seed",
        "--threads",
        "--train-steps",
    },
    "explore": {"--checkpoint", "--device", "--port", "--target", "--text", "--verbose", "--write"},
    "export": {"--checkpoint", "--out", "--quantization", "--to"},
    "serve": {
        "--api-key",
        "--batch-groups",
        "--batch-tokens",
        "--batch-wait-ms",
        "--checkpoint",
        "--device",
        "--dtype",
        "--engine",
        "--host",
        "--inter-threads",
        "--port",
        "--threads",
        "--verbose",
    },
    "import": {"--from"},
    "embed": {
        "--batch-size",
        "--checkpoint",
        "--device",
        "--dtype",
        "--input",
        "--max-seq-length",
        "--max-tokens",
        "--no-normalize",
        "--normalize",
        "--output",
        "--output-format",
        "--pooling",
        "--threads",
    },
    "classify": {
        "--batch-size",
        "--checkpoint",
        "--device",
        "--dtype",
        "--format",
        "--input",
        "--output",
        "--output-format",
        "--threads",
    },
}
EXPECTED_DESTS: dict[str, dict[str, tuple[str, object, bool]]] = {
    "classify": {
        "--batch-size": ("batch_size", 64, False),
        "--checkpoint": ("checkpoint", None, True),
        "--device": ("device", "auto", False),
        "--dtype": ("dtype", "float32", False),
        "--format": ("format", "text", False),
        "--input": ("input", None, False),
        "--output": ("output", None, False),
        "--threads": ("threads", None, False),
        "texts": ("texts", None, True),
    },
    "average": {
        "--last": ("last", None, False),
        "--out": ("out", None, True),
        "--overwrite": ("overwrite", False, False),
        "--checkpoint": ("checkpoint_flags", [], False),
        "checkpoints": ("checkpoints", None, True),
    },
    "compare": {
        "--batch-size": ("batch_size", 1, False),
        "--count-max-length": ("count_max_length", 1024, False),
        "--d-model": ("d_model", 64, False),
        "--device": ("device", "cpu", False),
        "--gradient-length": ("gradient_length", 64, False),
        "--heads": ("heads", 4, False),
        "--layers": ("layers", ["lstm", "gru", "attention", "attention-fused"], False),
        "--lengths": ("lengths", [16, 64, 256, 1024, 2048, 4096], False),
        "--out": ("out", "compare-out", False),
        "--quiet": ("quiet", False, False),
        "--repeats": ("repeats", 3, False),
        "--seed": ("seed", 1, False),
        "--threads": ("threads", None, False),
        "--train-steps": ("train_steps", 100, False),
    },
    "embed": {
        "--batch-size": ("batch_size", 64, False),
        "--checkpoint": ("checkpoint", None, True),
        "--device": ("device", "auto", False),
        "--dtype": ("dtype", "float32", False),
        "--input": ("input", None, False),
        "--max-seq-length": ("max_seq_length", None, False),
        "--max-tokens": ("max_tokens", None, False),
        "--no-normalize": ("normalize", None, False),  # --normalize / --no-normalize; None: the model's own
        "--output": ("output", None, False),
        "--output-format": ("output_format", None, False),
        "--pooling": ("pooling", None, False),  # None: the model's own pooling, else mean
        "--threads": ("threads", None, False),
        "texts": ("texts", None, True),
    },
    "evaluate": {
        "--end-token": ("end_token", None, False),
        "--no-repeat-ngram-size": ("no_repeat_ngram_size", 0, False),
        "--repetition-penalty": ("repetition_penalty", 1.0, False),
        "--suppress": ("suppress", None, False),
        "--engine": ("engine", "auto", False),
        "--inter-threads": ("inter_threads", None, False),
        "--batch-size": ("batch_size", 256, False),
        "--min-len": ("min_len_b", 0, False),
        "--min-len-a": ("min_len_a", 0.0, False),
        "--replace-unk": ("replace_unk", False, False),
        "--beam": ("beam", None, False),
        "--beam-stop": ("beam_stop", None, False),
        "--checkpoint": ("checkpoint", None, True),
        "--data": ("data", None, False),
        "--delimiter": ("opt_delimiter", None, False),
        "--device": ("device", "auto", False),
        "--dtype": ("dtype", "float32", False),
        "--empty-lines": ("opt_empty_lines", None, False),
        "--hf-cache-dir": ("opt_hf_cache_dir", None, False),
        "--hf-config": ("opt_hf_config", None, False),
        "--hf-data-files": ("opt_hf_data_files", None, False),
        "--hf-split": ("opt_hf_split", None, False),
        "--hyps": ("hyps", None, False),
        "--json": ("json", None, False),
        "--length-penalty": ("length_penalty", 0.6, False),
        "--limit": ("limit", None, False),
        "--max-len-a": ("max_len_a", 1.0, False),
        "--max-len-b": ("max_len_b", 50, False),
        "--no-header": ("opt_header", None, False),
        "--num-columns": ("opt_num_columns", None, False),
        "--seed": ("seed", None, False),
        "--source-column": ("opt_source_column", None, False),
        "--source-field": ("opt_source_field", None, False),
        "--split": ("split", None, False),
        "--strategy": ("strategy", "beam", False),
        "--stride": ("stride", None, False),
        "--target-column": ("opt_target_column", None, False),
        "--target-field": ("opt_target_field", None, False),
        "--task": ("opt_task", None, False),
        "--temperature": ("temperature", None, False),
        "--threads": ("threads", None, False),
        "--top-k": ("top_k", None, False),
        "--top-p": ("top_p", None, False),
    },
    "explain": {},
    "explain attention": {"--json": ("json", None, False)},
    "explore": {
        "--checkpoint": ("checkpoint", None, True),
        "--device": ("device", "cpu", False),
        "--port": ("port", 8000, False),
        "--target": ("target", None, False),
        "--text": ("text", [], False),
        "--verbose": ("verbose", False, False),
        "--write": ("write", None, False),
    },
    "export": {
        "--quantization": ("quantization", None, False),
        "--to": ("to", None, True),
        "--checkpoint": ("checkpoint_flag", None, False),
        "--out": ("out_flag", None, False),
        "paths": ("paths", None, True),
    },
    "generate": {
        "--end-token": ("end_token", None, False),
        "--no-repeat-ngram-size": ("no_repeat_ngram_size", 0, False),
        "--repetition-penalty": ("repetition_penalty", 1.0, False),
        "--suppress": ("suppress", None, False),
        "--engine": ("engine", "auto", False),
        "--inter-threads": ("inter_threads", None, False),
        "--beam": ("beam", None, False),
        "--beam-stop": ("beam_stop", None, False),  # None: the default rule, "finished"
        "--length-penalty": ("length_penalty", None, False),  # None: generate's 0, not translate's 0.6
        "--checkpoint": ("checkpoint", None, True),
        "--device": ("device", "auto", False),
        "--greedy": ("greedy", False, False),
        "--max-new-tokens": ("max_new_tokens", 200, False),
        "--n": ("n", 1, False),
        "--no-cache": ("no_cache", False, False),
        "--prompt": ("prompt", None, False),
        "--seed": ("seed", None, False),  # the decoding table's sampling flags: None, not given (default 1)
        "--strategy": ("strategy", None, False),  # None: sample, or beam with --beam K
        "--temperature": ("temperature", None, False),
        "--threads": ("threads", None, False),
        "--top-k": ("top_k", None, False),
        "--top-p": ("top_p", None, False),
    },
    "import": {
        "--from": ("source_format", None, True),
        "output": ("output", None, True),
        "source": ("source", None, True),
    },
    "plot": {},
    "plot attention": {
        "--checkpoint": ("checkpoint", None, True),
        "--device": ("device", "cpu", False),
        "--head": ("head", None, False),
        "--kind": ("kind", None, False),
        "--layer": ("layer", None, False),
        "--out": ("out", "attention.png", False),
        "--target": ("target", None, False),
        "text": ("text", None, True),
    },
    "plot curves": {"--out": ("out", "curves.png", False), "--run": ("run", None, True)},
    "plot masks": {"--out": ("out", "masks.png", False)},
    "plot positional": {
        "--d-model": ("d_model", 128, False),
        "--length": ("length", 100, False),
        "--out": ("out", "positional.png", False),
    },
    "plot schedule": {
        "--config": ("config", None, False),
        "--d-model": ("d_model", None, False),
        "--out": ("out", "schedule.png", False),
        "--scale": ("scale", None, False),
        "--steps": ("steps", None, False),
        "--warmup": ("warmup", None, False),
    },
    "serve": {
        "--api-key": ("api_key", None, False),
        "--batch-groups": ("batch_groups", None, False),
        "--batch-tokens": ("batch_tokens", 4096, False),
        "--batch-wait-ms": ("batch_wait_ms", 5.0, False),
        "--engine": ("engine", "auto", False),
        "--inter-threads": ("inter_threads", None, False),
        "--checkpoint": ("checkpoint", None, True),
        "--device": ("device", "cpu", False),
        "--dtype": ("dtype", "float32", False),
        "--host": ("host", "127.0.0.1", False),
        "--port": ("port", 8080, False),
        "--threads": ("threads", None, False),
        "--verbose": ("verbose", False, False),
    },
    "train": {
        "--accumulate": ("opt_accumulation_steps", None, False),
        "--no-activation-checkpointing": ("opt_activation_checkpointing", None, False),
        "--lora-alpha": ("opt_lora_alpha", None, False),
        "--lora-dropout": ("opt_lora_dropout", None, False),
        "--lora-rank": ("opt_lora_rank", None, False),
        "--lora-targets": ("opt_lora_targets", None, False),
        "--amp": ("opt_amp", None, False),
        "--best-metric": ("opt_best_metric", None, False),
        "--bible-max-ratio": ("opt_bible_max_ratio", None, False),
        "--block-size": ("opt_block_size", None, False),
        "--clip-norm": ("opt_clip_norm", None, False),
        "--ctc-upsample": ("opt_ctc_upsample", None, False),
        "--ctc-weight": ("opt_ctc_weight", None, False),
        "--config": ("config", None, False),
        "--data": ("data", None, False),
        "--delimiter": ("opt_delimiter", None, False),
        "--device": ("opt_device", None, False),
        "--dropout": ("opt_dropout", None, False),
        "--ema-decay": ("opt_ema_decay", None, False),
        "--ema-start": ("opt_ema_start", None, False),
        "--empty-lines": ("opt_empty_lines", None, False),
        "--eval-every": ("opt_eval_every", None, False),
        "--extend-vocab": ("extend_vocab", False, False),
        "--hf-cache-dir": ("opt_hf_cache_dir", None, False),
        "--hf-config": ("opt_hf_config", None, False),
        "--hf-data-files": ("opt_hf_data_files", None, False),
        "--hf-split": ("opt_hf_split", None, False),
        "--hf-test-split": ("opt_hf_test_split", None, False),
        "--hf-valid-split": ("opt_hf_valid_split", None, False),
        "--init-from": ("init_from", None, False),
        "--keep-last": ("opt_keep_last", None, False),
        "--label-smoothing": ("opt_label_smoothing", None, False),
        "--limit": ("opt_limit", None, False),
        "--log-every": ("opt_log_every", None, False),
        "--lr-cooldown": ("opt_lr_cooldown", None, False),
        "--lr-peak": ("opt_lr_peak", None, False),
        "--lr-scale": ("opt_lr_scale", None, False),
        "--lr-schedule": ("opt_lr_schedule", None, False),
        "--max-epochs": ("opt_max_epochs", None, False),
        "--max-minutes": ("opt_max_minutes", None, False),
        "--max-steps": ("opt_max_steps", None, False),
        "--max-tokens": ("opt_max_tokens", None, False),
        "--metrics-every": ("opt_metrics_every", None, False),
        "--no-bible-check-alignment": ("opt_bible_check_alignment", None, False),
        "--no-compile": ("opt_compile", None, False),
        "--no-header": ("opt_header", None, False),
        "--no-packed": ("opt_packed", None, False),
        "--no-progress": ("opt_progress", None, False),
        "--no-shared-vocab": ("opt_shared_vocab", None, False),
        "--no-strip-stress": ("opt_strip_stress", None, False),
        "--no-tensorboard": ("opt_tensorboard", None, False),
        "--num-columns": ("opt_num_columns", None, False),
        "--out": ("out", None, False),
        "--overwrite": ("overwrite", False, False),
        "--patience": ("opt_patience", None, False),
        "--preset": ("opt_preset", None, False),
        "--resume": ("resume", False, False),
        "--save-every": ("opt_save_every", None, False),
        "--seed": ("opt_seed", None, False),
        "--source-column": ("opt_source_column", None, False),
        "--source-field": ("opt_source_field", None, False),
        "--source-module": ("opt_source_module", None, False),
        "--src-tokenizer": ("opt_src_tokenizer", None, False),
        "--src-tokenizer-file": ("opt_src_tokenizer_file", None, False),
        "--sword-path": ("opt_sword_path", None, False),
        "--synthetic-examples": ("opt_synthetic_examples", None, False),
        "--synthetic-max-len": ("opt_synthetic_max_len", None, False),
        "--synthetic-min-len": ("opt_synthetic_min_len", None, False),
        "--synthetic-seed": ("opt_synthetic_seed", None, False),
        "--synthetic-symbols": ("opt_synthetic_symbols", None, False),
        "--target-column": ("opt_target_column", None, False),
        "--target-field": ("opt_target_field", None, False),
        "--target-module": ("opt_target_module", None, False),
        "--task": ("opt_task", None, False),
        "--test": ("opt_test", None, False),
        "--test-books": ("opt_test_books", None, False),
        "--test-fraction": ("opt_test_fraction", None, False),
        "--tgt-tokenizer": ("opt_tgt_tokenizer", None, False),
        "--tgt-tokenizer-file": ("opt_tgt_tokenizer_file", None, False),
        "--threads": ("threads", None, False),
        "--tokenizer": ("opt_tokenizer", None, False),
        "--valid": ("opt_valid", None, False),
        "--valid-decode-limit": ("opt_valid_decode_limit", None, False),
        "--valid-fraction": ("opt_valid_fraction", None, False),
        "--vocab-size": ("opt_vocab_size", None, False),
        "--warmup": ("opt_warmup_steps", None, False),
        "--weight-decay": ("opt_weight_decay", None, False),
        "--mlm-unit": ("opt_mlm_unit", None, False),
        "--mask-probability": ("opt_mask_probability", None, False),
        "--tag-format": ("opt_tag_format", None, False),
        "--label-subtokens": ("opt_label_subtokens", None, False),
        "--pooling": ("opt_pooling", None, False),
    },
    "translate": {
        "--end-token": ("end_token", None, False),
        "--no-repeat-ngram-size": ("no_repeat_ngram_size", 0, False),
        "--repetition-penalty": ("repetition_penalty", 1.0, False),
        "--suppress": ("suppress", None, False),
        "--engine": ("engine", "auto", False),
        "--inter-threads": ("inter_threads", None, False),
        "--batch-size": ("batch_size", 256, False),
        "--beam": ("beam", None, False),
        "--beam-stop": ("beam_stop", None, False),
        "--buffer-size": ("buffer_size", 4096, False),
        "--checkpoint": ("checkpoint", None, True),
        "--device": ("device", "auto", False),
        "--dtype": ("dtype", "float32", False),
        "--input": ("input", None, False),
        "--length-penalty": ("length_penalty", 0.6, False),
        "--max-input-length": ("max_input_length", None, False),
        "--max-len-a": ("max_len_a", 1.0, False),
        "--max-len-b": ("max_len_b", 50, False),
        "--max-tokens": ("max_tokens", None, False),
        "--n-best": ("n_best", 1, False),
        "--alignment-layer": ("alignment_layer", -1, False),
        "--alignments": ("alignments", False, False),
        "--inline-prefix": ("inline_prefix", False, False),
        "--min-len": ("min_len_b", 0, False),
        "--min-len-a": ("min_len_a", 0.0, False),
        "--prefix-file": ("prefix", None, False),
        "--replace-unk": ("replace_unk", False, False),
        "--output": ("output", None, False),
        "--output-format": ("output_format", None, False),
        "--seed": ("seed", None, False),
        "--strategy": ("strategy", "beam", False),
        "--temperature": ("temperature", None, False),
        "--threads": ("threads", None, False),
        "--top-k": ("top_k", None, False),
        "--top-p": ("top_p", None, False),
        "texts": ("texts", None, True),
    },
}


def _parsers() -> dict[str, argparse.ArgumentParser]:
    """Every command and sub-command's parser by its name ("train", "plot attention")."""
    found: dict[str, argparse.ArgumentParser] = {}

    def walk(parser: argparse.ArgumentParser, path: tuple[str, ...]) -> None:
        if path:
            found[" ".join(path)] = parser
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, (*path, name))

    walk(build_parser(), ())
    return found


def _help(args: list[str], columns: int, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> str:
    monkeypatch.setenv("COLUMNS", str(columns))
    with pytest.raises(SystemExit) as exit_info:
        main([*args, "--help"])
    assert exit_info.value.code == 0
    return capsys.readouterr().out


def _lines_outside_examples(text: str) -> list[str]:
    """The help's lines, less the verbatim command lines of its ``examples:`` blocks (up to the next blank line)."""
    kept, in_examples = [], False
    for line in text.splitlines():
        if not line.strip():
            in_examples = False
        elif line.strip().endswith("examples:"):
            in_examples = True
        elif not in_examples:
            kept.append(line)
    return kept


# dotformer prepare takes train's data flags (its data and reader groups) and its own
EXPECTED_FLAGS["prepare"] = PREPARE_FLAGS | {
    flag
    for flag in EXPECTED_FLAGS["train"]
    if flag.removeprefix("--no-").removeprefix("--")
    in {
        *(
            f.removeprefix("--")
            for f in ("--task", "--valid", "--test", "--limit", "--valid-fraction", "--test-fraction")
        ),
        "tokenizer",
        "src-tokenizer",
        "tgt-tokenizer",
        "vocab-size",
        "shared-vocab",
        "src-tokenizer-file",
        "tgt-tokenizer-file",
        "delimiter",
        "source-column",
        "target-column",
        "header",
        "num-columns",
        "empty-lines",
        "strip-stress",
        "source-module",
        "target-module",
        "test-books",
        "sword-path",
        "bible-max-ratio",
        "bible-check-alignment",
        "hf-config",
        "hf-split",
        "hf-valid-split",
        "hf-test-split",
        "source-field",
        "target-field",
        "hf-data-files",
        "hf-cache-dir",
        "synthetic-examples",
        "synthetic-symbols",
        "synthetic-min-len",
        "synthetic-max-len",
        "synthetic-seed",
        "block-size",
        "mlm-unit",
        "mask-probability",
        "tag-format",
        "label-subtokens",
    }
}
EXPECTED_DESTS["prepare"] = {
    "--config": ("config", None, False),
    "--data": ("data", None, False),
    "--out": ("out", None, False),
    "--sample-lines": ("sample_lines", None, False),
    "--seed": ("seed", 1, False),
    **{
        flag: dest
        for flag, dest in EXPECTED_DESTS["train"].items()
        if flag in EXPECTED_FLAGS["prepare"] and flag not in PREPARE_FLAGS
    },
}
COMMANDS = sorted(EXPECTED_FLAGS)


def test_every_command_is_covered() -> None:
    assert set(_parsers()) == set(EXPECTED_FLAGS)


@pytest.mark.parametrize("command", ["", *COMMANDS])
@pytest.mark.parametrize("columns", [80, 120])
def test_help_exits_0_and_fits_the_width(command, columns, monkeypatch, capsys) -> None:
    text = _help(command.split(), columns, monkeypatch, capsys)
    assert text.startswith("usage: dotformer")
    too_long = [line for line in _lines_outside_examples(text) if len(line) > columns]
    assert too_long == []


@pytest.mark.parametrize("command", ["", *COMMANDS])
def test_help_of_a_narrow_terminal_keeps_every_word(command, monkeypatch, capsys) -> None:
    narrow = _help(command.split(), 30, monkeypatch, capsys)
    wide = _help(command.split(), 200, monkeypatch, capsys)
    assert narrow.split() == wide.split()


@pytest.mark.parametrize("command", COMMANDS)
def test_flags_are_unchanged(command) -> None:
    parser = _parsers()[command]
    flags = {s for action in parser._actions for s in action.option_strings} - {"-h", "--help"}
    assert flags == EXPECTED_FLAGS[command]
    dests = {
        (action.option_strings[-1] if action.option_strings else action.dest): (
            action.dest,
            action.default,
            action.required,
        )
        for action in parser._actions
        if not isinstance(action, (argparse._SubParsersAction, argparse._HelpAction))
    }
    assert dests == EXPECTED_DESTS[command]


def _lead_section(text: str) -> str:
    """The help from its "options:" heading to the first titled group's heading."""
    after = text.split("\noptions:\n", 1)[1]
    heading = re.search(r"^\S[^\n]*:$", after, flags=re.MULTILINE)
    assert heading is not None, "no titled group after options:"
    return after[: heading.start()]


def test_train_leads_with_the_most_used_flags(monkeypatch, capsys) -> None:
    lead = _lead_section(_help(["train"], 80, monkeypatch, capsys))
    for flag in ("--data", "--config", "--out", "--max-minutes", "--max-steps"):
        assert re.search(rf"^  {flag}\b", lead, flags=re.MULTILINE), flag
    assert "--lr-schedule" not in lead and "--delimiter" not in lead


@pytest.mark.parametrize(
    ("command", "flags"),
    [
        ("translate", ["--checkpoint", "--n-best", "--input", "--output"]),
        ("evaluate", ["--checkpoint", "--data", "--split"]),
    ],
)
def test_decoding_commands_lead_with_the_checkpoint(command, flags, monkeypatch, capsys) -> None:
    lead = _lead_section(_help([command], 80, monkeypatch, capsys))
    for flag in flags:
        assert re.search(rf"^  {flag}\b", lead, flags=re.MULTILINE), flag


def test_top_level_help_says_where_to_start(monkeypatch, capsys) -> None:
    text = _help([], 80, monkeypatch, capsys)
    examples = text.split("start here, examples:\n", 1)[1].splitlines()
    assert examples[0].startswith("  dotformer train --config g2p --out runs/g2p")
    assert examples[1].startswith("  dotformer evaluate --checkpoint runs/g2p/last")
    assert examples[2].startswith("  dotformer translate --checkpoint runs/g2p/last")
    # the README spells the config and the install as the help does
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    assert "dotformer train --config g2p --out runs/g2p" in readme
    assert 'pip install -c constraints.txt -e ".[g2p,eval]"' in " ".join(text.split())
    assert "--config configs/" not in readme


def test_import_help_names_embed_for_a_bert_checkpoint(monkeypatch, capsys) -> None:
    text = " ".join(_help(["import"], 120, monkeypatch, capsys).split())
    assert "a BERT checkpoint (an encoder alone, nothing to decode) with embed" in text
    assert "dotformer embed --checkpoint runs/imported-bert" in text


def test_fill_keeps_examples_and_hangs_items_under_their_text() -> None:
    text = (
        "input:  one text per line, read as it arrives\n"
        "        and decoded in chunks.\n"
        "  npy    a float32 matrix (N, D)\n"
        "\n"
        "examples:\n"
        "  dotformer translate --checkpoint runs/bible --input verses.es --output verses.en --output-format json\n"
    )
    assert fill_help_text(text, 30) == (
        "input:  one text per line,\n"
        "        read as it arrives and\n"
        "        decoded in chunks.\n"
        "  npy    a float32 matrix (N,\n"
        "         D)\n"
        "\n"
        "examples:\n"
        "  dotformer translate --checkpoint runs/bible --input verses.es --output verses.en --output-format json"
    )


def test_fill_breaks_between_words_only() -> None:
    text = "decode with --max-len-a and --length-penalty set to what the model needs"
    lines = fill_help_text(text, 16).splitlines()
    assert " ".join(lines).split() == text.split()
    assert "--max-len-a" in lines[1] and all(len(line) <= 16 for line in lines if " " in line)


def _action(command: str, flag: str) -> argparse.Action:
    """The action of ``flag`` in ``command``'s parser."""
    (action,) = [a for a in _parsers()[command]._actions if flag in a.option_strings]
    return action


def test_every_seed_has_one_default_and_the_help_says_it() -> None:
    """``--seed`` of every command (train's split and weights, prepare's split, evaluate's --limit sample, the draws
    of translate and generate, compare's layers) defaults to one value, defined once, and its help says which."""
    from dotformer.compare import CompareConfig
    from dotformer.config import DEFAULT_SEED
    from dotformer.decoding import DecodeConfig
    from dotformer.runs.task import EvalRequest
    from dotformer.training.config import TrainConfig

    assert DEFAULT_SEED == 1  # train's: a run's random split and initial weights stay those of earlier versions
    assert DecodeConfig().seed == TrainConfig().seed == CompareConfig().seed == EvalRequest().seed == DEFAULT_SEED
    seeded = {command for command in COMMANDS if "--seed" in EXPECTED_FLAGS[command]}
    assert seeded == {"train", "prepare", "translate", "evaluate", "generate", "compare"}
    for command in sorted(seeded):
        action = _action(command, "--seed")
        assert action.default in (DEFAULT_SEED, None), command  # None: not given, the config's default
        assert f"(default {DEFAULT_SEED}" in action.help, (command, action.help)


def test_translate_and_generate_choose_the_search_with_one_flag_and_say_why_their_defaults_differ(
    monkeypatch, capsys
) -> None:
    from dotformer.decoding.config import STRATEGIES
    from dotformer.decoding.options import strategy_help

    for command in ("translate", "evaluate", "generate"):
        assert tuple(_action(command, "--strategy").choices) == STRATEGIES, command
    assert _action("translate", "--strategy").help == strategy_help("beam") == _action("evaluate", "--strategy").help
    assert _action("generate", "--strategy").help.startswith(strategy_help("sample"))
    translate = " ".join(_help(["translate"], 200, monkeypatch, capsys).split())
    generate = " ".join(_help(["generate"], 200, monkeypatch, capsys).split())
    assert "default beam, as a translation wants the likeliest whole output" in translate
    assert "generate defaults to sample" in translate
    assert "default sample, as open-ended text is drawn" in generate and "translate defaults to beam" in generate
    assert "--greedy and --beam K are its short forms" in generate
    assert "--greedy short for --strategy greedy" in generate and "short for --strategy beam --beam K" in generate
    assert _action("generate", "--beam-stop").help == _action("translate", "--beam-stop").help  # the table's
    assert (
        "generate's default 0: by summed log-probability; translate's is 0.6"
        in _action("generate", "--length-penalty").help
    )


def test_every_device_flag_is_worded_alike() -> None:
    """One wording of ``--device`` on every command (the default aside), and every command takes its names."""
    from dotformer.cli.threads import device_help
    from dotformer.training.config import TrainConfig

    devices = {command for command in COMMANDS if "--device" in EXPECTED_FLAGS[command]}
    assert {"train", "translate", "generate", "serve", "compare", "plot attention", "explore"} <= devices
    for command in sorted(devices):
        action = _action(command, "--device")
        default = TrainConfig().device if action.default is None else action.default  # train's: its config's
        assert action.help == device_help(default), (command, action.help)
    assert device_help("auto") == (
        "where the model runs: auto (CUDA if available, else the CPU), cpu, cuda or cuda:N (default auto)"
    )


def test_compare_takes_the_device_names_of_every_command() -> None:
    import torch

    from dotformer.cli.compare import config_from_args

    parser = _parsers()["compare"]
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert config_from_args(parser.parse_args(["--device", "auto"])).device == expected
    assert config_from_args(parser.parse_args([])).device == "cpu"


def test_top_level_help_names_what_each_command_reports(monkeypatch, capsys) -> None:
    text = " ".join(_help([], 200, monkeypatch, capsys).split())
    assert "evaluate metrics (BLEU/chrF, WER/PER, accuracy/F1, perplexity)" in text
    imported = " ".join(_help(["import"], 200, monkeypatch, capsys).split())
    assert "train --init-from (fine-tuning: --task classify, tag or mlm), plot attention and explore" in imported


def test_top_level_help_names_the_families_import_and_export_handle(capsys: pytest.CaptureFixture[str]) -> None:
    """The top-level help's import and export lines name the released families they read and write, not only the
    first ones (Marian, BERT)."""
    with pytest.raises(SystemExit):
        main(["--help"])
    out = " ".join(capsys.readouterr().out.split())
    for family in ("GPT-2", "Llama", "Qwen", "Gemma", "GGUF"):
        assert family in out.split("import", 1)[1].split("embed", 1)[0], family
    assert "Llama" in out.split("export ", 1)[1].split("serve", 1)[0]
