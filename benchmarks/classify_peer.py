"""The Bible genre job (scripts/classify.sh) beside its peers: HF BERT of the same size, data, budget and recipe; a
linear classifier on frozen embeddings (the floor); and dotformer trained from scratch (what pretraining adds).

One system after the other (never two at once: they would share the cores), each scored on the same held-out books
(the classifier run's ``data/test.tsv``) with the same metrics (:mod:`dotformer.metrics.labels`: accuracy and
macro-F1 over the six genres):

1. **dotformer, pretrained**, through its command line: ``train --config mlm-bible`` (``--mlm-minutes``), then
   ``train --config classify-bible --init-from`` it (``--minutes``), then ``evaluate --split test``.
2. **dotformer, from scratch**: ``train --config classify-bible`` without ``--init-from``, for the two budgets
   together (the same compute as 1).
3. **the floor**: scikit-learn's ``LogisticRegression`` on the frozen pretrained encoder's mean-pooled vectors
   (``dotformer.load(mlm).embed(texts, pooling="mean")``) of the training verses.
4. **HF BERT** (``transformers``, the ``bench`` extra): ``BertForMaskedLM`` of the run's shape (layers, heads,
   width, feed-forward size, GELU, positions, dropout, tied output), random init, pretrained in this process on
   exactly the MLM run's training examples and masks (the same :class:`~dotformer.data.batch.labelled.LabelledSampler`
   batches: seed, tokens per batch, masking), with dotformer's AdamW settings, learning-rate schedule, cooldown and
   clipping, for the same minutes on the same threads; then ``BertForSequenceClassification`` from its encoder,
   fine-tuned the same way on the classifier run's batches. BERT differs where the lesson does: post-LN layers, a
   pooler (dense + tanh) under its classifier, and a transform (dense + GELU + LayerNorm) and bias in its MLM head.

Figures are comparable only when measured on an idle machine; the smoke run checks that everything runs.

Run::

    python benchmarks/classify_peer.py --mlm-minutes 6 --minutes 3 --out benchmarks/results/classify_peer.json
    python benchmarks/classify_peer.py --mlm-steps 5 --steps 5 --limit 2000 --test-limit 200   # a smoke run
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch
from common import command_line, format_table, git_commit, machine_info, write_json

from dotformer.data.batch.labelled import LabelledSampler
from dotformer.metrics.labels import classification_score
from dotformer.runs.records import read_run_json
from dotformer.runs.run_data import open_run_data
from dotformer.runs.tasks import task_named
from dotformer.training.config import TrainConfig
from dotformer.training.optim import build_optimizer, set_learning_rate
from dotformer.training.schedule import cooldown_factor, learning_rate

COLUMNS = ["system", "pretrain_steps", "steps", "minutes", "accuracy", "macro_f1"]


def dotformer_train(args: argparse.Namespace, config: str, out: Path, minutes: float | None, steps: int | None,
                    *extra: str) -> None:  # fmt: skip
    """``dotformer train --config CONFIG --out OUT`` with the benchmark's budget and threads."""
    command = [sys.executable, "-m", "dotformer", "train", "--config", config, "--out", str(out), "--overwrite"]
    command += ["--threads", str(args.threads), "--no-progress", *extra]
    command += ["--max-minutes", str(minutes)] if minutes else []
    command += ["--max-steps", str(steps)] if steps else []
    command += ["--limit", str(args.limit)] if args.limit else []
    command += ["--eval-every", str(args.eval_every)] if args.eval_every else []
    subprocess.run(command, check=True, env={**os.environ, "OMP_NUM_THREADS": str(args.threads)})


def dotformer_score(args: argparse.Namespace, run: Path) -> dict[str, float]:
    """``dotformer evaluate --split test`` of a classifier run: accuracy and macro-F1."""
    report = run / "test_metrics.json"
    command = [sys.executable, "-m", "dotformer", "evaluate", "--checkpoint", str(run), "--split", "test"]
    command += ["--json", str(report), *(["--limit", str(args.test_limit)] if args.test_limit else [])]
    subprocess.run(command, check=True, env={**os.environ, "OMP_NUM_THREADS": str(args.threads)})
    metrics = json.loads(report.read_text())["metrics"]
    return {"accuracy": round(metrics["accuracy"], 2), "macro_f1": round(metrics["macro_f1"], 2)}


def steps_and_minutes(run: Path) -> tuple[int, float]:
    """The steps and training minutes of a run (its last metrics.jsonl train line)."""
    lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    last = [r for r in lines if r["split"] == "train"][-1]
    return int(last["step"]), round(last["elapsed_s"] / 60, 2)


def test_texts(args: argparse.Namespace, run: Path) -> tuple[list[str], list[str]]:
    """The held-out verses and their genres (the first ``--test-limit`` of a seeded sample, as evaluate draws)."""
    import random

    rows = [line.split("\t") for line in (run / "data" / "test.tsv").read_text(encoding="utf-8").splitlines()]
    if args.test_limit and args.test_limit < len(rows):
        rows = [rows[i] for i in sorted(random.Random(0).sample(range(len(rows)), args.test_limit))]
    return [r[0] for r in rows], [r[1] for r in rows]


def floor(args: argparse.Namespace, mlm: Path, run: Path, names: list[str]) -> dict[str, float]:
    """LogisticRegression on the frozen pretrained encoder's mean-pooled vectors of the training verses."""
    import warnings

    from sklearn.linear_model import LogisticRegression

    import dotformer

    encoder = dotformer.load(mlm, device="cpu")
    rows = list(open_run_data(run).training_texts())  # type: ignore[union-attr]  # read again from the Bible
    texts, labels = test_texts(args, run)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a few verses longer than the encoder reads are cut
        train_vectors = encoder.embed([r[0] for r in rows], pooling="mean")
        test_vectors = encoder.embed(texts, pooling="mean")
    classifier = LogisticRegression(max_iter=2000).fit(train_vectors, [r[1] for r in rows])
    score = classification_score(labels, list(classifier.predict(test_vectors)), names)
    return {"accuracy": round(score.accuracy, 2), "macro_f1": round(score.macro_f1, 2)}


def bert_config(model: dict[str, Any], num_labels: int = 2) -> Any:
    """A ``BertConfig`` of the dotformer run's shape (its run.json ``model``)."""
    from transformers import BertConfig

    return BertConfig(
        vocab_size=model["src_vocab_size"], hidden_size=model["d_model"], num_hidden_layers=model["num_encoder_layers"],
        num_attention_heads=model["num_heads"], intermediate_size=model["d_ff"], hidden_act=model["activation"],
        hidden_dropout_prob=model["dropout"], attention_probs_dropout_prob=model["attention_dropout"],
        max_position_embeddings=model["max_len"], type_vocab_size=1, layer_norm_eps=model["layer_norm_eps"],
        initializer_range=model["init_std"] or 0.02, pad_token_id=0, tie_word_embeddings=model["tie_output"],
        num_labels=num_labels,
    )  # fmt: skip


def train_hf(model: torch.nn.Module, run: Path, minutes: float | None, steps: int | None) -> int:
    """Train an HF model on a dotformer run's training batches with its recipe, under a budget; returns the steps."""
    record = read_run_json(run)
    loaded = task_named(record["task"]).load(run, record)
    config = TrainConfig.from_dict(record["train"], "run.json [train]")
    torch.manual_seed(config.seed)
    optimizer = build_optimizer(model, config)
    sampler = LabelledSampler(loaded.train_data.train, config.max_tokens, config.seed)
    budget_s = minutes * 60 if minutes else math.inf
    model.train()
    step, epoch, started = 0, 0, time.monotonic()
    while True:
        for batch in sampler.iter_batches(epoch):
            left = min(1 - (time.monotonic() - started) / budget_s, 1 - step / steps if steps else 1.0)
            if left <= 0:
                return step
            step += 1
            lr = learning_rate(step, config, record["model"]["d_model"]) * cooldown_factor(left, config.lr_cooldown)
            set_learning_rate(optimizer, lr)
            loss = model(input_ids=batch.src, attention_mask=(batch.src != 0).long(), labels=batch.labels).loss
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if config.clip_norm > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), config.clip_norm)
            optimizer.step()
        epoch += 1


def hf_bert(args: argparse.Namespace, mlm: Path, run: Path, names: list[str]) -> dict[str, Any]:
    """BertForMaskedLM pretrained, then BertForSequenceClassification fine-tuned, as dotformer's runs were."""
    import numpy as np
    from transformers import BertForMaskedLM, BertForSequenceClassification

    from dotformer.data.batch.labelled import encode_texts, labelled_examples
    from dotformer.data.prepared.arrays import LabelledArrays
    from dotformer.data.tokenize.tokenizer_files import load_tokenizer

    started = time.monotonic()
    torch.manual_seed(1)
    pretrained = BertForMaskedLM(bert_config(read_run_json(mlm)["model"]))
    pretrain_steps = train_hf(pretrained, mlm, args.mlm_minutes, args.mlm_steps)
    torch.manual_seed(1)
    classifier = BertForSequenceClassification(bert_config(read_run_json(run)["model"], len(names)))
    classifier.bert.load_state_dict(pretrained.bert.state_dict(), strict=False)  # the encoder; a fresh pooler and head
    steps = train_hf(classifier, run, args.minutes, args.steps)
    texts, labels = test_texts(args, run)
    tokenizer = load_tokenizer(run / "data" / "tokenizer_src.json")
    block = read_run_json(run)["data"]["block_size"]
    examples = labelled_examples(LabelledArrays(encode_texts(texts, tokenizer), np.zeros(len(texts), np.int64)), block)
    predicted = [""] * len(texts)
    classifier.eval()
    with torch.no_grad():
        for batch in LabelledSampler(examples, 8192, shuffle=False).batches(0):
            logits = classifier(input_ids=batch.src, attention_mask=(batch.src != 0).long()).logits
            for row, index in enumerate(batch.indices):
                predicted[index] = names[int(logits[row].argmax())]
    score = classification_score(labels, predicted, names)
    minutes = round((time.monotonic() - started) / 60, 2)
    row = {"pretrain_steps": pretrain_steps, "steps": steps, "minutes": minutes}
    return {**row, "accuracy": round(score.accuracy, 2), "macro_f1": round(score.macro_f1, 2)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mlm-minutes", type=float, default=None, help="pretraining minutes of each system")
    parser.add_argument("--minutes", type=float, default=None, help="fine-tuning minutes of each system")
    parser.add_argument("--mlm-steps", type=int, default=None, help="pretraining steps (also a budget)")
    parser.add_argument("--steps", type=int, default=None, help="fine-tuning steps (also a budget)")
    parser.add_argument("--limit", type=int, default=None, help="train on only N lines / verses (a smoke run)")
    parser.add_argument("--test-limit", type=int, default=None, help="score a seeded sample of N held-out verses")
    parser.add_argument("--eval-every", type=int, default=None, help="validation every N steps (the configs')")
    parser.add_argument("--threads", type=int, default=2, help="CPU threads of each system (2)")
    parser.add_argument("--work-dir", type=Path, default=Path("runs/classify_peer"), help="where the runs go")
    parser.add_argument("--skip-hf", action="store_true", help="leave HF BERT out (no transformers)")
    parser.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    args = parser.parse_args()
    if not ((args.mlm_minutes or args.mlm_steps) and (args.minutes or args.steps)):
        parser.error("give both budgets: --mlm-minutes or --mlm-steps, and --minutes or --steps")
    torch.set_num_threads(args.threads)
    mlm, run, scratch = (args.work_dir / name for name in ("mlm", "pretrained", "scratch"))
    rows: list[dict[str, Any]] = []
    dotformer_train(args, "mlm-bible", mlm, args.mlm_minutes, args.mlm_steps)
    dotformer_train(args, "classify-bible", run, args.minutes, args.steps, "--init-from", str(mlm))
    names = open_run_data(run).labels  # type: ignore[union-attr]  # the training split's, sorted
    pretrain_steps, _ = steps_and_minutes(mlm)
    steps, minutes = steps_and_minutes(run)
    rows.append({"system": "dotformer, pretrained", "pretrain_steps": pretrain_steps, "steps": steps,
                 "minutes": minutes, **dotformer_score(args, run)})  # fmt: skip
    total_minutes = (args.mlm_minutes or 0) + (args.minutes or 0) or None
    total_steps = (args.mlm_steps or 0) + (args.steps or 0) or None
    dotformer_train(args, "classify-bible", scratch, total_minutes, total_steps)
    steps, minutes = steps_and_minutes(scratch)
    rows.append({"system": "dotformer, from scratch", "pretrain_steps": 0, "steps": steps, "minutes": minutes,
                 **dotformer_score(args, scratch)})  # fmt: skip
    rows.append({"system": "logistic regression on frozen vectors", "pretrain_steps": pretrain_steps, "steps": 0,
                 "minutes": None, **floor(args, mlm, run, names)})  # fmt: skip
    if not args.skip_hf:
        rows.append({"system": "HF BERT, pretrained", **hf_bert(args, mlm, run, names)})
    print(format_table(rows, COLUMNS))
    if args.out is not None:
        payload = {"command": command_line(), "commit": git_commit(), "machine": machine_info("cpu"),
                   "threads": args.threads, "rows": rows}  # fmt: skip
        write_json(args.out, payload)
        print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
