"""Evaluate a checkpoint on held-out pairs: decode every distinct source once, then score by task.

* ``g2p``: WER and PER (:func:`dotformer.metrics.g2p_error_rates`), with stress kept and stripped; the references of
  a word are all its pronunciations in the split (pairs are grouped by source).
* ``translation``: BLEU and chrF with sacrebleu's signatures, on detokenised outputs, one reference per pair.
* ``exact`` (a user's file scored by exact match) and ``synthetic`` (copy / reverse): exact match.
* every task: perplexity from the teacher-forced NLL of the references (no label smoothing), EOS included.

Outputs cut at the maximum length (no EOS before ``max_len_a * S + max_len_b`` tokens) are counted
(:func:`count_unfinished`, ``Evaluation.unfinished``) and reported (:func:`unfinished_warning`): their scores are
not the model's real answer, and a high count means the length limit, not the model, sets the metric.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from dotformer.config import DEFAULT_SEED
from dotformer.data.tokenize.tokenizers import UNK_ID
from dotformer.decoding.config import DecodeConfig
from dotformer.decoding.order import DEFAULT_BATCH_SIZE
from dotformer.decoding.results import Translation
from dotformer.errors import ConfigError, DataError
from dotformer.metrics import (
    bleu,
    chrf,
    exact_match,
    g2p_error_rates,
    has_stress_digits,
    perplexity,
    require_metric_packages,
)

if TYPE_CHECKING:
    from dotformer.config import ModelConfig
    from dotformer.data.read.types import Pair
    from dotformer.data.tokenize.tokenizers import Tokenizer
    from dotformer.decoding.engine import TranslationEngine

TASKS = ("g2p", "translation", "exact", "synthetic")
METRIC_TASKS = {"g2p": "g2p", "translation": "translation", "exact": "exact", "synthetic": "exact"}


class GroupedReferences(NamedTuple):
    """Pairs grouped by source, in order of first appearance.

    Attributes:
        sources: the distinct sources.
        references: per source, every target paired with it (in file order).
    """

    sources: list[str]
    references: list[list[str]]


@dataclass
class Evaluation:
    """The result of :func:`evaluate_pairs`.

    Attributes:
        task: "g2p", "translation", "exact" or "synthetic".
        metrics: name -> value; percentages for rates and BLEU/chrF (see :mod:`dotformer.metrics`).
        signatures: metric name -> sacrebleu signature (translation only).
        num_pairs: pairs evaluated. num_sources: distinct sources decoded.
        examples: the first few (source, output, references) for a look by eye.
        unfinished: distinct sources whose scored output was cut at the maximum length (no EOS).
        unfinished_at_table: of those, the ones cut by the model's learned positional table
            (:func:`count_cut_by_table`).
        hypotheses: the scored output of every pair, in the order of ``pairs`` (a source's output repeated for
            each of its pairs), as ``--hyps`` writes them.
    """

    task: str
    metrics: dict[str, float]
    signatures: dict[str, str] = field(default_factory=dict)
    num_pairs: int = 0
    num_sources: int = 0
    examples: list[dict[str, Any]] = field(default_factory=list)
    unfinished: int = 0
    hypotheses: list[str] = field(default_factory=list)
    unfinished_at_table: int = 0

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict of every field but ``hypotheses`` (written apart, one per line)."""
        return {
            "task": self.task,
            "metrics": self.metrics,
            "signatures": self.signatures,
            "num_pairs": self.num_pairs,
            "num_sources": self.num_sources,
            "unfinished": self.unfinished,
            "unfinished_at_table": self.unfinished_at_table,
            "examples": self.examples,
        }


def group_references(pairs: Sequence[Pair]) -> GroupedReferences:
    """Group targets by source (a G2P word and all its pronunciations), keeping the order of first appearance."""
    by_source: dict[str, list[str]] = {}
    for pair in pairs:
        by_source.setdefault(pair.source, []).append(pair.target)
    return GroupedReferences(list(by_source), list(by_source.values()))


def sample_sources(pairs: Sequence[Pair], limit: int | None, seed: int = DEFAULT_SEED) -> list[Pair]:
    """The pairs of ``limit`` distinct sources drawn at random with ``random.Random(seed)`` (all their references
    kept), in the order of ``pairs``; None, or a limit of at least the number of sources, keeps every pair.

    A seeded sample, not the head of the file: a file sorted alphabetically (CMUdict) has unrepresentative heads.

    Raises:
        ConfigError: ``limit`` < 1.
    """
    if limit is None:
        return list(pairs)
    if limit < 1:
        raise ConfigError(f"limit must be a positive number of sources, got {limit}")
    sources = group_references(pairs).sources  # distinct, in the order of first appearance
    kept = set(sources if limit >= len(sources) else random.Random(seed).sample(sources, limit))
    return [pair for pair in pairs if pair.source in kept]


def metric_task(task: str) -> str:
    """The metric family of a task: g2p, translation, or exact (for ``exact`` and the synthetic copy/reverse).

    Raises:
        ConfigError: unknown task.
    """
    if task not in METRIC_TASKS:
        raise ConfigError(f"unknown task {task!r}; expected one of {', '.join(TASKS)}")
    return METRIC_TASKS[task]


def check_same_task(checkpoint_task: str, data_task: str, data_name: str, checkpoint: str, asked: bool = False) -> None:
    """Raise DataError when test data of one task meets a checkpoint of another (a g2p file, a translation model).

    Args:
        asked: the data's task was asked for (``--task``), rather than a named corpus's own.

    Raises:
        DataError: naming both tasks, the data and the checkpoint.
    """
    if metric_task(checkpoint_task) != metric_task(data_task):
        remedy = (
            "leave --task out (a file is read as its checkpoint's task)"
            if asked
            else f"give --data a file of {checkpoint_task} pairs"
        )
        raise DataError(
            f"{data_name} is {data_task} data, but the checkpoint {checkpoint} was trained for {checkpoint_task}: "
            f"evaluate it with a {data_task} checkpoint, or {remedy}"
        )


def unknown_fraction(tokenizer: Tokenizer, texts: Sequence[str]) -> float:
    """The share of the tokens of ``texts`` that ``tokenizer`` reads as UNK (0.0 for no tokens)."""
    total = unknown = 0
    for ids in tokenizer.encode_batch(list(texts)):
        total += len(ids)
        unknown += sum(index == UNK_ID for index in ids)
    return unknown / total if total else 0.0


def count_unfinished(outputs: Sequence[Sequence[Translation]]) -> int:
    """How many inputs' best output was cut at the maximum length (no EOS): ``not outputs[i][0].finished``."""
    return sum(1 for hyps in outputs if hyps and not hyps[0].finished)


def count_cut_by_table(outputs: Sequence[Sequence[Translation]], model_config: ModelConfig) -> int:
    """How many inputs' best output was cut at the model's positions (its ``max_len``: the rows of a learned
    positional table, the positions a sinusoidal model was built for; every search stops there): unfinished with
    as many tokens as the model has positions, so that no --max-len-a/--max-len-b lengthens it."""
    table = model_config.max_len
    return sum(1 for hyps in outputs if hyps and not hyps[0].finished and len(hyps[0].tokens) >= table)


def positions_phrase(table: int | None, positional: str = "learned") -> str:
    """How a warning names the model's ``table`` positions: ``this model's learned positional table (8 positions)``
    or, for sinusoidal positions, ``this model's 1024 positions (its max_len)``."""
    if positional == "learned":
        return f"this model's learned positional table ({table} positions)"
    return f"this model's {table} positions (its max_len)"


def unfinished_warning(
    count: int,
    total: int,
    config: DecodeConfig,
    at_table: int = 0,
    table: int | None = None,
    positional: str = "learned",
) -> str | None:
    """One line for standard error when ``count`` of ``total`` outputs were cut at the maximum length, else None.

    Example: ``3 of 200 outputs (1.5%) were cut at the maximum length (1.0 * source length + 50 tokens) without an
    end of sentence; raise --max-len-a/--max-len-b to let them finish``. ``at_table`` of the ``count`` were cut at
    the model's ``table`` positions (``positional``: "learned" or "sinusoidal"; :func:`count_cut_by_table`): the line
    says so, since no flag lengthens those.
    """
    if not count:
        return None
    where = positions_phrase(table, positional)
    by_table = (
        f"{at_table:,} of them reached {where}, the most any output can have: --max-len-a/--max-len-b cannot "
        f"lengthen them"
    )
    if at_table == count:
        return (
            f"{count:,} of {total:,} outputs ({count / total:.1%}) were cut without an end of sentence: they reached "
            f"{where}, the most any output can have (--max-len-a/--max-len-b cannot lengthen them)"
        )
    line = (
        f"{count:,} of {total:,} outputs ({count / total:.1%}) were cut at the maximum length "
        f"({config.max_len_a:g} * source length + {config.max_len_b} tokens) without an end of sentence; raise "
        f"--max-len-a/--max-len-b to let them finish"
    )
    return f"{line} ({by_table})" if at_table else line


def evaluate_pairs(
    engine: TranslationEngine,
    pairs: Sequence[Pair],
    task: str,
    config: DecodeConfig | None = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
    progress: bool | None = None,
    num_examples: int = 5,
) -> Evaluation:
    """Decode the distinct sources of ``pairs`` and compute the task's metrics (see the module docstring).

    Args:
        engine: what decodes and scores: :class:`~dotformer.engines.torch.TorchEngine` over a loaded checkpoint, or
            the CTranslate2 engine (:mod:`dotformer.engines`).
        pairs: held-out (source, target) pairs.
        task: "g2p", "translation", "exact" or "synthetic".
        config: decoding settings (default: beam 4, α = 0.6); only the 1-best output is scored.
        batch_size: sentences decoded (and scored) together.
        progress: progress bar on stderr (None: automatic, see :func:`translate`).
        num_examples: how many examples to keep in the result.

    Returns:
        :class:`Evaluation` with metrics: g2p ``wer``, ``per`` and, when the references or outputs hold stress
        digits, ``wer_no_stress``, ``per_no_stress``; translation
        ``bleu``, ``chrf``; exact and synthetic ``exact_match``; always ``perplexity`` and ``nll_per_token``; the
        count of outputs cut at the maximum length (``unfinished``) and every pair's output (``hypotheses``).

    Raises:
        ConfigError: unknown task. DataError: no pairs. ShapeError: an input too long for the model.
    """
    if task not in TASKS:
        raise ConfigError(f"unknown task {task!r}; expected one of {', '.join(TASKS)}")
    if not pairs:
        raise DataError("no pairs to evaluate")
    require_metric_packages(metric_task(task))  # a missing [eval] package fails now, not after the decoding
    from dotformer.decoding.inputs import encode_sources, warn_unknown

    config = config or DecodeConfig()
    grouped = group_references(pairs)
    encoded = encode_sources(engine.checkpoint, grouped.sources, engine.checkpoint.config.max_len)
    warn_unknown(encoded)
    outputs = engine.decode(encoded, config, batch_size, progress, None, scores=False)
    best = [hyps[0].text if hyps else "" for hyps in outputs]
    output_of = dict(zip(grouped.sources, best, strict=True))
    hyps = [output_of[pair.source] for pair in pairs]
    metrics: dict[str, float] = {}
    signatures: dict[str, str] = {}
    if task == "g2p":
        kept = g2p_error_rates(best, grouped.references, strip_stress=False)
        metrics.update(wer=kept.wer, per=kept.per)
        if has_stress_digits([*best, *(r for refs in grouped.references for r in refs)]):
            stripped = g2p_error_rates(best, grouped.references, strip_stress=True)
            metrics.update(wer_no_stress=stripped.wer, per_no_stress=stripped.per)
    else:
        refs = [pair.target for pair in pairs]
        if task == "translation":
            bleu_result, chrf_result = bleu(hyps, refs), chrf(hyps, refs)
            metrics.update(bleu=bleu_result.score, chrf=chrf_result.score)
            signatures.update(bleu=bleu_result.signature, chrf=chrf_result.signature)
        else:
            metrics["exact_match"] = exact_match(hyps, refs)
    nll = engine.reference_nll(pairs, batch_size)
    metrics["perplexity"] = perplexity(nll.total_nll, nll.num_tokens)
    metrics["nll_per_token"] = nll.total_nll / nll.num_tokens
    examples = [
        {"source": s, "output": o, "references": r}
        for s, o, r in zip(grouped.sources[:num_examples], best, grouped.references, strict=False)
    ]
    unfinished = count_unfinished(outputs)
    at_table = count_cut_by_table(outputs, engine.checkpoint.config)
    return Evaluation(task, metrics, signatures, len(pairs), len(grouped.sources), examples, unfinished, hyps, at_table)


METRIC_LABELS = {
    "wer": ("WER, stress kept", "%"),
    "per": ("PER, stress kept", "%"),
    "wer_no_stress": ("WER, stress stripped", "%"),
    "per_no_stress": ("PER, stress stripped", "%"),
    "bleu": ("BLEU", ""),
    "chrf": ("chrF", ""),
    "exact_match": ("exact match", "%"),
    "perplexity": ("perplexity", ""),
    "nll_per_token": ("NLL per token (nats)", ""),
}


def format_evaluation(evaluation: Evaluation) -> str:
    """A plain-text table of the metrics (Markdown syntax), then the sacrebleu signatures if any.

    WER and PER are labelled "stress kept" and "stress stripped" only when both are there (the data or the outputs
    hold stress digits); otherwise they are plain "WER" and "PER".
    """
    rows = [("metric", "value")]
    stress = "wer_no_stress" in evaluation.metrics
    for key, value in evaluation.metrics.items():
        label, unit = METRIC_LABELS.get(key, (key, ""))
        if key in ("wer", "per") and not stress:
            label = label.split(",")[0]
        rows.append((label, f"{value:.2f}{unit}"))
    width = max(len(name) for name, _ in rows)
    value_width = max(len(value) for _, value in rows)
    lines = [f"| {name.ljust(width)} | {value.rjust(value_width)} |" for name, value in rows]
    lines.insert(1, f"|{'-' * (width + 2)}|{'-' * (value_width + 1)}:|")
    for key, signature in evaluation.signatures.items():
        lines.append(f"{METRIC_LABELS.get(key, (key, ''))[0]} signature: {signature}")
    return "\n".join(lines)
