"""The tasks of pairs: a source text to a target text (``g2p``, ``translation``, ``exact``, ``synthetic``).

An encoder-decoder model trained with teacher forcing on token-budget batches of pairs. The data is prepared once
(:func:`~dotformer.data.prepared.cache.prepared_for`: given valid/test files or a seeded group-disjoint split of one
corpus, tokenizers learned on a sample of the training split or read from files, every split encoded into memory-mapped
token arrays) and the run refers to it (:mod:`dotformer.runs.run_data`). The task's defaults are the ``[model]`` and
``[train]`` of its shipped config (:data:`TASK_RECIPES`), and ``--init-from`` fine-tunes an encoder-decoder
checkpoint (:mod:`dotformer.runs.finetune`).
"""

from __future__ import annotations

import dataclasses
import logging
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dotformer.config import ModelConfig
from dotformer.data.config import READER_FIELDS, DataConfig
from dotformer.data.prepared.cache import prepared_for
from dotformer.data.prepared.pair_kind import PreparedPairs, read_run_data
from dotformer.data.prepared.splits import load_split
from dotformer.data.read.corpora import load_pairs
from dotformer.data.read.types import NAMED_TASKS, Pair, describe_corpus
from dotformer.data.tokenize.tokenizer_files import TokenizerPair
from dotformer.errors import ConfigError, DataError
from dotformer.runs.task import (
    ANY_VOCAB_SIZE,
    EvalReport,
    EvalRequest,
    Loaded,
    Prepared,
    Task,
    corpus_record,
    pop_preset,
    run_split_file,
)

if TYPE_CHECKING:
    from dotformer.checkpoint import LoadedCheckpoint
    from dotformer.decoding.engine import TranslationEngine
    from dotformer.runs.finetune import InitSource

logger = logging.getLogger(__name__)  # "dotformer.runs.pairs": what reading the data said, before training

TASK_PRESETS = {"g2p": "small", "translation": "small", "exact": "small", "synthetic": "tiny"}  # preset per task
# task -> the shipped config whose [model] and [train] are the task's defaults (its [data] names its own corpus)
TASK_RECIPES = {"g2p": "g2p", "exact": "g2p", "translation": "bible", "synthetic": "copy"}


class PairsTask(Task):
    """A source text to a target text; ``name`` picks the metrics, the tokenizers and the defaults."""

    fine_tunable = True
    best_metrics = ("loss", "bleu", "chrf", "wer", "per")  # the decoding metrics of the greedy outputs
    joint_ctc = True  # an encoder-decoder: --ctc-weight trains its encoder with CTC too (monotonic tasks: g2p)

    def __init__(self, name: str) -> None:
        self.name = name
        self.recipe = TASK_RECIPES.get(name)
        self.title = f"{'an' if name[0] in 'aeiou' else 'a'} {name} model"  # "an exact model", "a g2p model"

    def data_config(self, section: dict[str, Any], source: str) -> DataConfig:

        unknown = set(section) - {f.name for f in dataclasses.fields(DataConfig)}
        if unknown == {"block_size"}:  # --block-size without --task lm
            raise ConfigError(f"{source}: block_size is a language model's (--task lm); pairs are not cut in blocks")
        return DataConfig.from_dict(section, source)

    def default_run_dir(self, data: DataConfig, model_section: dict[str, Any]) -> Path:
        preset = model_section.get("preset") or TASK_PRESETS.get(self.name)
        return default_run_dir(data.dataset, preset)

    def check_model(self, model_section: dict[str, Any], data: DataConfig) -> None:
        build_model_config(model_section, self.name, ANY_VOCAB_SIZE, ANY_VOCAB_SIZE, False)

    def prepare(
        self,
        data: DataConfig,
        seed: int,
        init: InitSource | None,
        extend_vocab: bool,
        progress: bool,
        source: Any = None,
    ) -> tuple[Prepared, InitSource | None]:
        from dotformer.runs.finetune import init_data_config

        tokenizers = None
        if init is not None:  # the checkpoint's vocabulary (extended by the data's new symbols when asked)
            init = checked_init_source(data, seed, init, extend_vocab, progress)
            data = init_data_config(data, init)
            tokenizers = TokenizerPair(init.src_tokenizer, init.tgt_tokenizer)
        prepared = source or prepared_for(data, seed, tokenizers=tokenizers)
        given = tokenizers is not None
        resolved = data.resolved(prepared.task)  # what run.json records: the tokenizer settings filled in
        lines, warnings = prepared.lines, prepared.warnings
        return Prepared(resolved, corpus_record(prepared), prepared.tokenizers, lines, prepared, given, warnings), init

    def model_config(
        self, model_section: dict[str, Any], prepared: Prepared, init: InitSource | None = None
    ) -> tuple[ModelConfig, str | None]:
        if init is not None:  # fine-tuning keeps the checkpoint's model (its dropout rates as asked)
            return init.model_config, init.preset or model_section.get("preset")
        src, tgt = prepared.tokenizers
        return build_model_config(model_section, self.name, src.vocab_size, tgt.vocab_size, src is tgt)

    def load(self, run_dir: Path, record: dict[str, Any]) -> Loaded:
        from dotformer.runs.run_data import open_run_data
        from dotformer.training.state import TrainData

        data = self.record_data(record, run_dir)
        prepared = open_run_data(run_dir, data)
        assert isinstance(prepared, PreparedPairs)
        src, tgt = prepared.tokenizers
        splits = prepared.splits
        train_data = TrainData(
            splits["train"], splits["valid"], src, tgt, valid_pairs=prepared.texts("valid"),
            best_metrics=self.best_metrics,
        )  # fmt: skip
        return Loaded(data, train_data)

    def evaluate(self, engine: TranslationEngine, request: EvalRequest) -> EvalReport:
        """Decode the distinct sources once and score them by the task: WER/PER (g2p), BLEU/chrF (translation) or
        exact match, and the teacher-forced perplexity of the references (:mod:`dotformer.decoding.evaluation`), on
        ``engine`` (either engine: :class:`~dotformer.decoding.engine.TranslationEngine`)."""
        from dotformer.decoding.evaluation import (
            evaluate_pairs,
            format_evaluation,
            sample_sources,
            unfinished_warning,
        )

        loaded = engine.checkpoint  # its files (config, info, tokenizers): no model needed here
        notes: list[str] = []
        if request.data is not None:
            pairs, where = read_test_pairs(loaded, request.data, self.name, request.reader, notes), request.data
        else:
            pairs, where = read_run_pairs(loaded, request.split)
        pairs = sample_sources(pairs, request.limit, request.seed)
        config = request.decode
        evaluation = evaluate_pairs(engine, pairs, self.name, config, request.batch_size)
        if config is None or config.strategy == "beam":
            beam = config.beam_size if config else 4
            search = f"beam {beam}, alpha {config.length_penalty if config else 0.6}"
        else:
            search = config.strategy
        sample = f", a random sample (seed {request.seed})" if request.limit is not None else ""
        counts = f"{evaluation.num_sources} sources, {evaluation.num_pairs} pairs{sample}"
        description = f"({counts}), task {self.name}, {search}"
        warnings = []
        if config is not None:
            model_config = loaded.config
            warning = unfinished_warning(
                evaluation.unfinished,
                evaluation.num_sources,
                config,
                evaluation.unfinished_at_table,
                model_config.max_len,
                model_config.positional,
            )
            warnings = [warning] if warning else []
        payload = {"decode": config.to_dict() if config else None, **evaluation.to_dict()}
        return EvalReport(
            where, description, format_evaluation(evaluation), notes, warnings, evaluation.hypotheses, payload
        )


def read_test_pairs(
    loaded: LoadedCheckpoint, spec: str, task: str, given: dict[str, Any], notes: list[str]
) -> list[Pair]:
    """The pairs of a test file, read with the checkpoint's reader settings overridden by ``given`` (the reader
    flags); what reading said is appended to ``notes``.

    Raises:
        DataError: a file of another task, a target side the checkpoint's vocabulary cannot read (a test file of
            another task), no pairs. ConfigError / MissingDataError: from the reader.
    """
    from dotformer.decoding.evaluation import check_same_task, metric_task, unknown_fraction
    from dotformer.decoding.inputs import source_normaliser

    saved = loaded.info.get("data") if isinstance(loaded.info.get("data"), dict) else {}
    reader = {field: saved[field] for field in READER_FIELDS if saved.get(field) is not None}
    reader.update(given)
    if spec in NAMED_TASKS:  # cmudict, bible, copy, reverse have their own task
        reader.pop("task", None)
    else:  # a file has the task given by --task, else the checkpoint's
        reader["task"] = given.get("task") or metric_task(task)
    split = reader.pop("hf_split", None)
    data = DataConfig.from_dict({"dataset": spec, "hf_test_split": split, **reader}, "evaluate flags")
    corpus = load_pairs(spec, data.corpus_options("test"))
    check_same_task(task, corpus.task, spec, str(loaded.path), asked=spec not in NAMED_TASKS and "task" in given)
    normalise = source_normaliser(loaded.info)  # a CMUdict model reads lower-case words
    pairs = [Pair(normalise(pair.source), pair.target) for pair in corpus.pairs]
    share = unknown_fraction(loaded.tgt_tokenizer, [pair.target for pair in pairs])
    if share > 0.5:
        raise DataError(
            f"{spec}: {share:.0%} of its target tokens are unknown to the checkpoint's target vocabulary: is it "
            f"{task} data, and are the columns right (--source-column/--target-column)?"
        )
    notes.append(f"data: {describe_corpus(corpus, 'test')}")  # after the checks
    return pairs


def read_run_pairs(loaded: LoadedCheckpoint, split: str) -> tuple[list[Pair], str]:
    """The pairs of the checkpoint's run's saved split, and its path.

    Raises:
        CheckpointError: the checkpoint is not inside a run directory (pass --data). DataError: an empty split.
    """

    path = run_split_file(loaded.path, f"{split}.tsv")
    pairs = load_split(path.parent, split)
    if not pairs:
        hint = " (the run was trained on given files without --test)" if split == "test" else ""
        raise DataError(f"{path} holds no pairs{hint}; pass --data FILE to evaluate a test file")
    return pairs, str(path)


def checked_init_source(
    data: DataConfig, seed: int, init: InitSource, extend_vocab: bool, progress: bool
) -> InitSource:
    """The fine-tuning source whose vocabulary can read ``data``: its symbols unknown to the checkpoint's char/symbol
    vocabularies appended (``extend_vocab``), or none of them unknown. The training and validation pairs are read
    once for this (fine-tuning data is read whole here; it is then prepared as any data is).

    Raises:
        CheckpointError: unknown symbols without ``extend_vocab`` (the message names them), or a vocabulary that
            cannot grow (BPE, a tokenizer file).
    """
    from dotformer.runs.finetune import check_known_symbols, extend_vocabulary

    splits = read_run_data(data, seed).splits
    pairs = [*splits.train, *splits.valid]
    if not extend_vocab:
        check_known_symbols(pairs, init.src_tokenizer, init.tgt_tokenizer, init.path)
        return init
    init, added_src, added_tgt = extend_vocabulary(init, pairs)
    if progress:
        logger.info(
            f"vocabulary: {added_src:,} source and {added_tgt:,} target symbols added to those of {init.path} (their "
            f"embedding and output rows start as a fresh model's)"
        )
    return init


def build_model_config(
    model_section: dict[str, Any], task: str, src_vocab: int, tgt_vocab: int, shared: bool
) -> tuple[ModelConfig, str]:
    """The ModelConfig: preset (the section's "preset", else the task's) + the section's fields + vocabularies.

    Embeddings are shared (§3.4) by default when the vocabulary is shared.

    Raises:
        ConfigError: an unknown preset or an invalid field.
    """
    section = dict(model_section)
    preset = pop_preset(section, TASK_PRESETS.get(task, "small"))
    section.setdefault("share_embeddings", shared)
    return ModelConfig.preset(preset, src_vocab_size=src_vocab, tgt_vocab_size=tgt_vocab, **section), preset


def default_run_dir(dataset: str, preset: str | None) -> Path:
    """``runs/<dataset>-<preset>``, with the dataset reduced to a file-name-safe stem."""
    stem = Path(dataset.split(",")[0]).stem if ("/" in dataset or "." in dataset) else dataset
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", stem) or "run"
    return Path("runs") / f"{stem}-{preset or 'auto'}"
