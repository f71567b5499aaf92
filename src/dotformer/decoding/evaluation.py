"""Evaluate a checkpoint on held-out pairs: decode every distinct source once, then score by task.

* ``g2p``: WER and PER (:func:`dotformer.metrics.g2p_error_rates`), with stress kept and stripped; the references of
  a word are all its pronunciations in the split (pairs are grouped by source).
* ``translation``: BLEU and chrF with sacrebleu's signatures, on detokenised outputs, one reference per pair.
* ``synthetic`` (copy / reverse): exact match.
* every task: perplexity from the teacher-forced NLL of the references (no label smoothing), EOS included.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from dotformer.decoding.config import DecodeConfig
from dotformer.decoding.translate import length_sorted_batches, translate
from dotformer.errors import ConfigError, DataError
from dotformer.metrics import bleu, chrf, exact_match, g2p_error_rates, perplexity

if TYPE_CHECKING:
    from dotformer.checkpoint import LoadedCheckpoint
    from dotformer.data.corpora import Pair

TASKS = ("g2p", "translation", "synthetic")


class GroupedReferences(NamedTuple):
    """Pairs grouped by source, in order of first appearance.

    Attributes:
        sources: the distinct sources.
        references: per source, every target paired with it (in file order).
    """

    sources: list[str]
    references: list[list[str]]


class NLLResult(NamedTuple):
    """Teacher-forced negative log-likelihood of the references.

    Attributes:
        total_nll: summed NLL in nats over all target tokens (EOS included).
        num_tokens: number of target tokens scored.
    """

    total_nll: float
    num_tokens: int


@dataclass
class Evaluation:
    """The result of :func:`evaluate_pairs`.

    Attributes:
        task: "g2p", "translation" or "synthetic".
        metrics: name -> value; percentages for rates and BLEU/chrF (see :mod:`dotformer.metrics`).
        signatures: metric name -> sacrebleu signature (translation only).
        num_pairs: pairs evaluated. num_sources: distinct sources decoded.
        examples: the first few (source, output, references) for a look by eye.
    """

    task: str
    metrics: dict[str, float]
    signatures: dict[str, str] = field(default_factory=dict)
    num_pairs: int = 0
    num_sources: int = 0
    examples: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict of every field."""
        return {
            "task": self.task,
            "metrics": self.metrics,
            "signatures": self.signatures,
            "num_pairs": self.num_pairs,
            "num_sources": self.num_sources,
            "examples": self.examples,
        }


def group_references(pairs: Sequence[Pair]) -> GroupedReferences:
    """Group targets by source (a G2P word and all its pronunciations), keeping the order of first appearance."""
    by_source: dict[str, list[str]] = {}
    for pair in pairs:
        by_source.setdefault(pair.source, []).append(pair.target)
    return GroupedReferences(list(by_source), list(by_source.values()))


def limit_sources(pairs: Sequence[Pair], limit: int | None) -> list[Pair]:
    """The pairs of the first ``limit`` distinct sources (all their references kept); None keeps every pair.

    Raises:
        ConfigError: ``limit`` < 1.
    """
    if limit is None:
        return list(pairs)
    if limit < 1:
        raise ConfigError(f"limit must be a positive number of sources, got {limit}")
    kept = set(group_references(pairs).sources[:limit])
    return [pair for pair in pairs if pair.source in kept]


def teacher_forced_nll(loaded: LoadedCheckpoint, pairs: Sequence[Pair], batch_size: int = 64) -> NLLResult:
    """Summed NLL of each pair's target given its source, teacher-forced (no label smoothing, eval mode).

    Uses :func:`dotformer.training.evaluate_loss` with label smoothing 0 over batches of ``batch_size`` pairs
    sorted by length.

    Raises:
        DataError: no pairs.
    """
    from dotformer.data.batching import collate, encode_pairs, example_length
    from dotformer.training import evaluate_loss

    if not pairs:
        raise DataError("no pairs to score")
    examples = encode_pairs(pairs, loaded.src_tokenizer, loaded.tgt_tokenizer)
    order = length_sorted_batches([example_length(e) for e in examples], batch_size)
    batches = [collate([examples[i] for i in batch], batch) for batch in order]
    result = evaluate_loss(loaded.model, batches, label_smoothing=0.0, pad_id=loaded.config.pad_id)
    return NLLResult(result.nll * result.num_tokens, result.num_tokens)


def evaluate_pairs(
    loaded: LoadedCheckpoint,
    pairs: Sequence[Pair],
    task: str,
    config: DecodeConfig | None = None,
    batch_size: int = 64,
    progress: bool | None = None,
    num_examples: int = 5,
) -> Evaluation:
    """Decode the distinct sources of ``pairs`` and compute the task's metrics (see the module docstring).

    Args:
        loaded: a loaded checkpoint.
        pairs: held-out (source, target) pairs.
        task: "g2p", "translation" or "synthetic".
        config: decoding settings (default: beam 4, α = 0.6); only the 1-best output is scored.
        batch_size: sentences decoded (and scored) together.
        progress: progress bar on stderr (None: automatic, see :func:`translate`).
        num_examples: how many examples to keep in the result.

    Returns:
        :class:`Evaluation` with metrics: g2p ``wer``, ``per``, ``wer_no_stress``, ``per_no_stress``; translation
        ``bleu``, ``chrf``; synthetic ``exact_match``; always ``perplexity`` and ``nll_per_token``.

    Raises:
        ConfigError: unknown task. DataError: no pairs. ShapeError: an input too long for the model.
    """
    if task not in TASKS:
        raise ConfigError(f"unknown task {task!r}; expected one of {', '.join(TASKS)}")
    if not pairs:
        raise DataError("no pairs to evaluate")
    config = config or DecodeConfig()
    grouped = group_references(pairs)
    outputs = translate(loaded, grouped.sources, config, batch_size, progress)
    best = [hyps[0].text if hyps else "" for hyps in outputs]
    metrics: dict[str, float] = {}
    signatures: dict[str, str] = {}
    if task == "g2p":
        kept = g2p_error_rates(best, grouped.references, strip_stress=False)
        stripped = g2p_error_rates(best, grouped.references, strip_stress=True)
        metrics.update(wer=kept.wer, per=kept.per, wer_no_stress=stripped.wer, per_no_stress=stripped.per)
    else:
        output_of = dict(zip(grouped.sources, best, strict=True))
        hyps = [output_of[pair.source] for pair in pairs]
        refs = [pair.target for pair in pairs]
        if task == "translation":
            bleu_result, chrf_result = bleu(hyps, refs), chrf(hyps, refs)
            metrics.update(bleu=bleu_result.score, chrf=chrf_result.score)
            signatures.update(bleu=bleu_result.signature, chrf=chrf_result.signature)
        else:
            metrics["exact_match"] = exact_match(hyps, refs)
    nll = teacher_forced_nll(loaded, pairs, batch_size)
    metrics["perplexity"] = perplexity(nll.total_nll, nll.num_tokens)
    metrics["nll_per_token"] = nll.total_nll / nll.num_tokens
    examples = [
        {"source": s, "output": o, "references": r}
        for s, o, r in zip(grouped.sources[:num_examples], best, grouped.references, strict=False)
    ]
    return Evaluation(task, metrics, signatures, len(pairs), len(grouped.sources), examples)


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
    """A plain-text table of the metrics (Markdown syntax), then the sacrebleu signatures if any."""
    rows = [("metric", "value")]
    for key, value in evaluation.metrics.items():
        label, unit = METRIC_LABELS.get(key, (key, ""))
        rows.append((label, f"{value:.2f}{unit}"))
    width = max(len(name) for name, _ in rows)
    value_width = max(len(value) for _, value in rows)
    lines = [f"| {name.ljust(width)} | {value.rjust(value_width)} |" for name, value in rows]
    lines.insert(1, f"|{'-' * (width + 2)}|{'-' * (value_width + 1)}:|")
    for key, signature in evaluation.signatures.items():
        lines.append(f"{METRIC_LABELS.get(key, (key, ''))[0]} signature: {signature}")
    return "\n".join(lines)
