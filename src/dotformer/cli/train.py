"""``dotformer train``: train a Transformer with the paper's recipe, for every task (pairs, a language model, an
encoder's masked language model, classifier or tagger).

    dotformer train --data cmudict --max-epochs 10
    dotformer train --task lm --data corpus.txt --out runs/lm --max-minutes 10
    dotformer train --task mlm --data corpus.txt --out runs/mlm --max-minutes 10
    dotformer train --task classify --data labelled.tsv --init-from runs/mlm --out runs/cls --max-minutes 5
    dotformer train --data bible --config configs/bible.toml --out runs/bible --max-minutes 60
    dotformer train --data copy --preset tiny --max-steps 300
    dotformer train --data copy --preset tiny --out runs/copy --resume --max-steps 600
    torchrun --nproc_per_node=2 $(which dotformer) train --data cmudict --max-epochs 10   # data parallel

Flags override the config file (``--config FILE.toml`` with sections [model], [train], [data]), which overrides the
task's defaults (the model and recipe of its shipped config: ``g2p`` for g2p and exact, ``bible`` for translation,
``copy`` for copy/reverse, ``lm-bible`` for a language model, ``mlm-bible`` and ``classify-bible`` for an encoder's
tasks), which override the built-in ones; the run itself is
:func:`dotformer.runs.run.train_run`, one pipeline for every task (:mod:`dotformer.runs.tasks`). The run directory
(``--out``, default ``runs/<dataset>-<preset>``) gets run.json, data/ (the split and the tokenizers), metrics.jsonl
and the checkpoints; the last line printed sums the run up.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import warnings
from collections.abc import Iterator
from typing import Any

from dotformer.cli.data_flags import READER_FLAGS, TRAIN_DATA_FLAGS, named_by_flags
from dotformer.cli.threads import add_threads_argument, apply_threads, device_help
from dotformer.config import DEFAULT_SEED


def layer_names(text: str) -> list[str]:
    """``"W_q,W_v"`` -> ``["W_q", "W_v"]`` (--lora-targets)."""
    return [name.strip() for name in text.split(",") if name.strip()]


# (flag, section, field, argparse keywords); every flag defaults to None = "not given", so that only the flags
# given on the command line override the config file.
_FLAGS: list[tuple[str, str, str, dict[str, Any]]] = [
    # model
    ("--preset", "model", "preset", dict(choices=["tiny", "small", "base", "big"], help="model size preset "
     "(paper Table 3 base/big; tiny and small for CPUs); default: the model of the task's shipped config (g2p and "
     "exact: configs/g2p.toml, d_model 128; translation: configs/bible.toml, small), tiny for copy/reverse")),
    ("--dropout", "model", "dropout", dict(type=float, metavar="P", help="dropout on sublayer outputs and embeddings "
     "(paper §5.4: 0.1)")),
    # budgets
    ("--max-steps", "train", "max_steps", dict(type=int, metavar="N", help="stop after N optimizer steps in total "
     "(counted from the start of the run, resumes included)")),
    ("--max-minutes", "train", "max_minutes", dict(type=float, metavar="M", help="stop after M minutes of training "
     "in total (counted from the start of the run)")),
    ("--max-epochs", "train", "max_epochs", dict(type=float, metavar="E", help="stop after E passes over the "
     "training split in total (fractions allowed)")),
    # recipe
    ("--max-tokens", "train", "max_tokens", dict(type=int, metavar="N", help="padded tokens per batch per process "
     "(default: the task's config: 1024 for g2p and exact, 4096 for translation; 4096 for copy/reverse)")),
    ("--accumulate", "train", "accumulation_steps", dict(type=int, metavar="K", help="batches per optimizer step "
     "(gradient accumulation; default 1)")),
    ("--lr-schedule", "train", "lr_schedule", dict(choices=["noam", "inverse_sqrt", "constant", "cosine", "linear"],
     help="noam: the paper's d_model^-0.5·min(step^-0.5, step·warmup^-1.5); inverse_sqrt: --lr-peak after warmup, "
     "then 1/√step; cosine, linear: --lr-peak after warmup, then a cosine or linear fall to 0 by the budget's end")),
    ("--lr-scale", "train", "lr_scale", dict(type=float, metavar="X", help="multiplier of the noam schedule "
     "(default 1)")),
    ("--lr-peak", "train", "lr_peak", dict(type=float, metavar="LR", help="peak learning rate of the inverse_sqrt "
     "and constant schedules (default 5e-4)")),
    ("--warmup", "train", "warmup_steps", dict(type=int, metavar="N", help="linear warmup steps (paper: 4000; "
     "default: the task's config, 200 for g2p, 500 for translation, 100 for --task lm; it never depends on the "
     "budget, so --resume with a larger budget continues as a longer run; a warmup the budget cannot reach is "
     "warned about before step 1)")),
    ("--lr-cooldown", "train", "lr_cooldown", dict(type=float, metavar="F", help="let the learning rate fall "
     "linearly to 0 over the final fraction F of the budget (steps, minutes or epochs; e.g. 0.2; default 0: none)")),
    ("--label-smoothing", "train", "label_smoothing", dict(type=float, metavar="EPS", help="label smoothing ε "
     "(paper §5.4: 0.1; 0 disables)")),
    ("--ctc-weight", "train", "ctc_weight", dict(type=float, metavar="W", help="joint CTC/attention training of "
     "pairs: loss = (1-W)·cross-entropy + W·CTC on the encoder (default 0: off); decoding and export ignore the "
     "CTC head")),
    ("--ctc-upsample", "train", "ctc_upsample", dict(type=int, metavar="K", help="frames per source token the CTC "
     "head reads (default 2): CTC needs at least as many frames as target tokens")),
    ("--ema-decay", "train", "ema_decay", dict(type=float, metavar="D", help="keep an exponential moving average "
     "of the weights, θ_ema ← D·θ_ema + (1-D)·θ after every step (e.g. 0.999; default 0: off): the run validates "
     "and saves the average, so evaluate, translate and export use it; resume continues the trained weights")),
    ("--ema-start", "train", "ema_start", dict(type=int, metavar="N", help="the average follows the weights up "
     "to step N and averages from there (default 0)")),
    ("--clip-norm", "train", "clip_norm", dict(type=float, metavar="X", help="clip the gradient L2 norm to X "
     "(default 1.0; 0 disables)")),
    ("--weight-decay", "train", "weight_decay", dict(type=float, metavar="W", help="AdamW weight decay (default 0, "
     "as in the paper)")),
    ("--amp", "train", "amp", dict(choices=["none", "bf16", "fp16"], help="mixed precision: bf16 autocast (CPU, "
     "CUDA) or fp16 with a gradient scaler (CUDA only); default none")),
    ("--compile", "train", "compile", dict(action=argparse.BooleanOptionalAction, help="torch.compile the model "
     "for training")),
    ("--packed", "train", "packed", dict(action=argparse.BooleanOptionalAction, help="run every layer on the real "
     "tokens only, skipping the padding (default on; --no-packed computes the padded batch)")),
    ("--device", "train", "device", dict(metavar="DEV", help=device_help("auto"))),
    ("--seed", "train", "seed", dict(type=int, metavar="N", help="seed of the split, the initial weights, the data "
     f"order and dropout (default {DEFAULT_SEED})")),
    ("--eval-every", "train", "eval_every", dict(type=int, metavar="N", help="validation loss/perplexity every N "
     "steps (default 500; 0: only at the end)")),
    ("--save-every", "train", "save_every", dict(type=int, metavar="N", help="checkpoint every N steps (default "
     "1000; always at the end)")),
    ("--keep-last", "train", "keep_last", dict(type=int, metavar="N", help="step checkpoints to keep besides best/ "
     "and last/ (default 3)")),
    ("--best-metric", "train", "best_metric", dict(choices=["loss", "bleu", "chrf", "wer", "per", "accuracy", "f1"],
     help="what picks best/ at each validation pass: the valid loss (default, every task); of pairs, BLEU/chrF "
     "(higher is better) or WER/PER (lower is better) of greedy outputs on the validation split; of a classifier "
     "or a tagger (classify, tag), the accuracy or macro-F1 (f1) of its labels on the validation texts (higher is "
     "better)")),
    ("--valid-decode-limit", "train", "valid_decode_limit", dict(type=int, metavar="N", help="decode only a "
     "seeded random sample of N validation sources for --best-metric (the same sample at every pass)")),
    ("--patience", "train", "patience", dict(type=int, metavar="N", help="early stopping: stop when the "
     "--best-metric has not improved for N validation passes (default 0: never)")),
    ("--log-every", "train", "log_every", dict(type=int, metavar="N", help="steps between the progress lines "
     "written when standard error is not a terminal (default 10; metrics.jsonl has --metrics-every)")),
    ("--metrics-every", "train", "metrics_every", dict(type=int, metavar="N", help="steps between the train lines "
     "of RUN/metrics.jsonl and TensorBoard points, what `dotformer plot curves` draws (default 1: every step; "
     "the first step is always logged)")),
    ("--progress", "train", "progress", dict(action=argparse.BooleanOptionalAction, help="show progress against the "
     "budget on standard error: a bar on a terminal, else one line every --log-every steps (default on)")),
    ("--tensorboard", "train", "tensorboard", dict(action=argparse.BooleanOptionalAction, help="also write "
     "TensorBoard logs to RUN/tensorboard (needs the tensorboard package)")),
    ("--activation-checkpointing", "train", "activation_checkpointing", dict(action=argparse.BooleanOptionalAction,
     help="recompute each layer's activations in the backward pass instead of keeping them: less memory, about "
     "one more forward pass of time (default off)")),
    # LoRA adapters
    ("--lora-rank", "train", "lora_rank", dict(type=int, metavar="R", help="fine-tune --init-from CKPT with LoRA "
     "adapters of rank R on its frozen weights (default 0: every weight trains); the checkpoints save the adapters "
     "and refer to CKPT")),
    ("--lora-alpha", "train", "lora_alpha", dict(type=float, metavar="A", help="LoRA's α: the adapters' change is "
     "scaled by A / R (default 16)")),
    ("--lora-targets", "train", "lora_targets", dict(type=layer_names, metavar="W_q,W_v", help="the linear layers "
     "adapted, by name: W_q, W_k, W_v, W_o (attention), W_1, W_2 (feed-forward), generator, or any other the model "
     "names (default W_q,W_v, as the LoRA paper and peft)")),
    ("--lora-dropout", "train", "lora_dropout", dict(type=float, metavar="P", help="dropout on the adapters' input "
     "(default 0)")),
    # data
    ("--tokenizer", "data", "tokenizer", dict(choices=["char", "symbol", "bpe"], help="tokenizer kind of both "
     "sides (default per task: char->symbol for cmudict, bpe for bible and files, symbol for copy/reverse)")),
    ("--src-tokenizer", "data", "src_tokenizer", dict(choices=["char", "symbol", "bpe"], help="tokenizer kind of "
     "the source side")),
    ("--tgt-tokenizer", "data", "tgt_tokenizer", dict(choices=["char", "symbol", "bpe"], help="tokenizer kind of "
     "the target side")),
    ("--vocab-size", "data", "vocab_size", dict(type=int, metavar="N", help="BPE vocabulary size (default 8000)")),
    ("--shared-vocab", "data", "shared_vocab", dict(action=argparse.BooleanOptionalAction, help="one vocabulary "
     "(and shared embeddings) for both sides (default: yes when both sides use BPE)")),
    ("--limit", "data", "limit", dict(type=int, metavar="N", help="use only the first N pairs of the corpus")),
    ("--strip-stress", "data", "strip_stress", dict(action=argparse.BooleanOptionalAction, help="cmudict: drop the "
     "vowels' stress digits (AH0 -> AH)")),
    ("--source-module", "data", "source_module", dict(metavar="MOD", help="bible: SWORD module of the source side "
     "(default SpaRV)")),
    ("--target-module", "data", "target_module", dict(metavar="MOD", help="bible: SWORD module of the target side "
     "(default KJV)")),
    ("--test-books", "data", "test_books", dict(metavar="B1,B2", help="bible: comma-separated books held out as the "
     "test split: OSIS ids, names or abbreviations, e.g. Matt,Mark or Matthew,Mark ('' clears a config's books)")),
    ("--valid-fraction", "data", "valid_fraction", dict(type=float, metavar="F", help="share of pairs in the "
     "validation split (default 0.05)")),
    ("--test-fraction", "data", "test_fraction", dict(type=float, metavar="F", help="share of pairs in the test "
     "split (default 0.05)")),
    ("--block-size", "data", "block_size", dict(type=int, metavar="T", help="--task lm: tokens per training block, "
     "the model's context (default 128); an encoder's task: most tokens of an example, [BOS] and [EOS] included "
     "(default 128)")),
    ("--pooling", "model", "pooling", dict(choices=["cls", "mean"], help="--task classify: the text's vector the "
     "classifier reads: the first token's (BERT's [CLS], the default) or the mean over its tokens")),
]  # fmt: skip
# how to read the files, given valid/test files, tokenizer files, the other corpora's options (cli/data_flags.py)
_FLAGS += [(flag, "data", field, kwargs) for flag, field, kwargs in [*READER_FLAGS, *TRAIN_DATA_FLAGS]]


DATA_FLAGS = [entry for entry in _FLAGS if entry[1] == "data"]  # what dotformer prepare takes too

# the help's layout: the flags most runs need lead (under "options"), the rest follow in titled groups
_LEAD = ("--preset", "--max-minutes", "--max-steps", "--max-epochs", "--device")
_GROUPS: dict[str, tuple[str, ...]] = {
    "data": ("--task", "--valid", "--test", "--limit", "--valid-fraction", "--test-fraction", "--tokenizer",
             "--src-tokenizer", "--tgt-tokenizer", "--vocab-size", "--shared-vocab", "--src-tokenizer-file",
             "--tgt-tokenizer-file"),
    "reading a file of pairs": ("--delimiter", "--source-column", "--target-column", "--header", "--num-columns",
                                "--empty-lines"),
    "an encoder's tasks (mlm, classify, tag)": ("--mlm-unit", "--mask-probability", "--tag-format",
                                                "--label-subtokens"),
    "corpora (cmudict, bible, hf:, copy/reverse)": ("--strip-stress", "--source-module", "--target-module",
        "--test-books", "--sword-path", "--bible-max-ratio", "--bible-check-alignment", "--hf-config", "--hf-split",
        "--hf-valid-split", "--hf-test-split", "--source-field", "--target-field", "--hf-data-files", "--hf-cache-dir",
        "--synthetic-examples", "--synthetic-symbols", "--synthetic-min-len", "--synthetic-max-len",
        "--synthetic-seed"),
    "model": ("--dropout", "--block-size", "--pooling"),
    "schedule": ("--max-tokens", "--accumulate", "--lr-schedule", "--lr-scale", "--lr-peak", "--warmup",
                 "--lr-cooldown", "--label-smoothing", "--clip-norm", "--weight-decay", "--ema-decay", "--ema-start",
                 "--seed"),
    "checkpoints and validation": ("--overwrite", "--init-from", "--extend-vocab", "--eval-every", "--save-every",
                                   "--keep-last", "--best-metric", "--valid-decode-limit", "--patience"),
    "fine-tuning with LoRA adapters (with --init-from)": ("--lora-rank", "--lora-alpha", "--lora-targets",
                                                            "--lora-dropout"),
    "joint CTC/attention training (pairs)": ("--ctc-weight", "--ctc-upsample"),
    "speed": ("--amp", "--compile", "--packed", "--threads"),
    "memory": ("--activation-checkpointing",),
    "output": ("--log-every", "--metrics-every", "--progress", "--tensorboard"),
}  # fmt: skip
_HELP_ORDER = {flag: i for i, flag in enumerate([*_LEAD, *(flag for flags in _GROUPS.values() for flag in flags)])}

EPILOG = """\
Flags override the config file, which overrides the task's defaults (the model and recipe of its shipped config: g2p
for g2p and exact, bible for translation, copy for copy/reverse, lm-bible for --task lm, mlm-bible for --task mlm,
classify-bible for --task classify, classify-pairs and tag). The run directory gets run.json, data/ (the split and
the tokenizers), metrics.jsonl and the checkpoints (best/, last/, checkpoints/step_N/); the last line printed sums
the run up. --init-from fine-tunes a checkpoint of the task's family: an encoder-decoder for pairs, an encoder (a
--task mlm run, an imported BERT) for classify, classify-pairs and tag, whose head starts afresh, a decoder-only
model for --task lm (its tokenizer kept; an imported one reads the text as its released tokenizer does, BOS first
where its family adds it, and its checkpoints keep its text rules); with --lora-rank its weights stay frozen and
only LoRA adapters (and a new head) train.

examples:
  dotformer train --data cmudict --max-epochs 10
  dotformer train --data bible --config configs/bible.toml --out runs/bible --max-minutes 60
  dotformer train --data pairs.tsv --out runs/mine --max-minutes 30
  dotformer train --data copy --preset tiny --out runs/copy --resume --max-steps 600
  dotformer train --task lm --data corpus.txt --out runs/lm --max-minutes 10
  dotformer train --task mlm --data corpus.txt --out runs/mlm --max-minutes 10
  dotformer train --task classify --data reviews.tsv --init-from runs/mlm --out runs/cls --max-minutes 5
  dotformer train --task tag --data ner.conll --init-from runs/bert --out runs/ner --max-epochs 3
  dotformer train --task lm --data mine.txt --init-from runs/lm --lora-rank 8 --out runs/lm-mine --max-minutes 5
  torchrun --nproc_per_node=2 $(which dotformer) train --data cmudict --max-epochs 10
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of ``dotformer train``: the most used first, the rest in the titled groups of :data:`_GROUPS`."""
    parser.usage = "%(prog)s [--data DATASET] [--config FILE] [--out DIR] [...]"
    parser.epilog = EPILOG
    groups = {title: parser.add_argument_group(title) for title in _GROUPS}
    group_of = {flag: groups[title] for title, flags in _GROUPS.items() for flag in flags}
    from dotformer.runs.shipped_configs import shipped_config_names

    parser.add_argument(
        "--data",
        metavar="DATASET",
        help="cmudict, bible, copy, reverse, a TSV/CSV file of pairs, SRC,TGT parallel files, hf:NAME (a Hugging Face "
        "dataset), a directory of dotformer prepare, a text file (--task lm or mlm) or labelled texts (--task "
        "classify or tag) (required unless the config file sets [data] dataset)",
    )
    parser.add_argument(
        "--config",
        metavar="FILE.toml",
        help="config file with [model], [train], [data] sections, or the name of a shipped one: "
        f"{', '.join(shipped_config_names())} (see configs/)",
    )
    parser.add_argument("--out", metavar="DIR", help="run directory (default runs/<dataset>-<preset>)")
    parser.add_argument(
        "--resume", action="store_true", help="continue the run in --out from its last checkpoint (exactly)"
    )
    group_of["--overwrite"].add_argument(
        "--overwrite",
        action="store_true",
        help="start afresh in --out even if it holds a run: its run.json, data/, checkpoints and metrics are deleted "
        "first (needed after a run stopped before its first checkpoint)",
    )
    group_of["--init-from"].add_argument(
        "--init-from",
        metavar="CKPT",
        help="fine-tune: start from this checkpoint's (or run's) weights, tokenizers and model config, with a fresh "
        "optimizer and learning-rate schedule",
    )
    group_of["--extend-vocab"].add_argument(
        "--extend-vocab",
        action="store_true",
        help="with --init-from: add the symbols of the data that the checkpoint's char/symbol vocabulary does not "
        "know, with new embedding and output rows (without it such data is an error)",
    )
    add_threads_argument(group_of["--threads"])
    for flag, _, field, kwargs in sorted(_FLAGS, key=lambda entry: _HELP_ORDER.get(entry[0], len(_HELP_ORDER))):
        group_of.get(flag, parser).add_argument(flag, dest=f"opt_{field}", default=None, **kwargs)


def run(args: argparse.Namespace) -> int:
    """Build the configs from the file and the flags, train, print a one-line summary."""
    from dotformer.cli.outputs import check_output_dir
    from dotformer.errors import ConfigError
    from dotformer.runs.config_files import ConfigSections
    from dotformer.runs.run import train_run
    from dotformer.runs.tasks import read_task_config_file
    from dotformer.training.stopping import TrainingInterrupted

    apply_threads(args.threads)
    flags: dict[str, dict[str, Any]] = {"model": {}, "train": {}, "data": data_section(args)}
    for _, section, field, _ in _FLAGS:
        value = getattr(args, f"opt_{field}")
        if value is not None and section != "data":
            flags[section][field] = value
    data = flags["data"]
    if args.data is not None:
        data["dataset"] = args.data
    if args.out is not None:
        check_output_dir(args.out, "--out")
    file_sections = read_task_config_file(args.config) if args.config else ConfigSections()
    flag_sections = ConfigSections(**flags, source="command line", origins=flag_origins(args, flags))
    try:
        with _warnings_as_lines():
            result = train_run(
                file_sections,
                flag_sections,
                args.out,
                resume=args.resume,
                command=sys.argv,
                overwrite=args.overwrite,
                init_from=args.init_from,
                extend_vocab=args.extend_vocab,
            )
    except ConfigError as exc:  # a value a flag gave, named as that flag
        given = {field: flag for flag, section, field, _ in _FLAGS if field in flags.get(section, {})}
        raise ConfigError(named_by_flags(str(exc), given)) from None
    except TrainingInterrupted as exc:  # a checkpoint was saved first; the message says where and how to go on
        print(f"dotformer train: {exc}", file=sys.stderr)
        return 130
    if result.is_main:
        print(result.summary())
    return 0


def data_section(args: argparse.Namespace) -> dict[str, Any]:
    """The ``[data]`` values of the data flags given on the command line (``--tokenizer K`` sets both sides' kinds,
    ``--test-books A,B`` a list); the flags of :data:`DATA_FLAGS` must have been added with ``dest="opt_FIELD"``."""
    data = {field: getattr(args, f"opt_{field}") for _, _, field, _ in DATA_FLAGS}
    data = {field: value for field, value in data.items() if value is not None}
    kind = data.pop("tokenizer", None)
    if kind is not None:
        data.setdefault("src_tokenizer", kind)
        data.setdefault("tgt_tokenizer", kind)
    if "test_books" in data:
        data["test_books"] = tuple(book.strip() for book in data["test_books"].split(",") if book.strip())
    return data


def flag_origins(args: argparse.Namespace, flags: dict[str, dict[str, Any]]) -> dict[str, str]:
    """The flag that set each ``[model]`` and ``[data]`` value of ``flags`` (``"data.src_tokenizer"`` ->
    ``--tokenizer`` or ``--src-tokenizer``), for messages that name where a value came from."""
    origins = {
        f"{section}.{field}": flag
        for flag, section, field, _ in _FLAGS
        if section in ("model", "data") and field in flags[section]
    }
    if args.opt_tokenizer is not None:  # --tokenizer K sets the kind of each side no side flag set
        for side in ("src_tokenizer", "tgt_tokenizer"):
            if getattr(args, f"opt_{side}") is None:
                origins[f"data.{side}"] = "--tokenizer"
    return origins


@contextlib.contextmanager
def _warnings_as_lines() -> Iterator[None]:
    """Show the library's warnings as ``dotformer train: warning: ...`` lines on standard error, as they come."""
    from dotformer.checkpoint import CheckpointWarning

    def show(message: Warning | str, category: type[Warning], *args: Any, **kwargs: Any) -> None:
        print(f"dotformer train: warning: {message}", file=sys.stderr)

    with warnings.catch_warnings():
        warnings.simplefilter("always", CheckpointWarning)
        warnings.showwarning = show
        yield
