"""The tasks of pairs: a source text to a target text (``g2p``, ``translation``, ``exact``, ``synthetic``).

An encoder-decoder model trained with teacher forcing on token-budget batches of pairs. The data is read and split
by :mod:`dotformer.data.prepare` (given valid/test files, or a seeded group-disjoint split of one corpus), the
tokenizers are trained on the training split or read from files, and both are saved in ``RUN/data`` (the split as
TSV with split.json, the tokenizers as tokenizer_src.json and tokenizer_tgt.json). The task's defaults are the
``[model]`` and ``[train]`` of its shipped config (:data:`TASK_RECIPES`), and ``--init-from`` fine-tunes an
encoder-decoder checkpoint (:mod:`dotformer.runs.finetune`).
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dotformer.config import PRESETS, ModelConfig
from dotformer.data.config import DataConfig
from dotformer.errors import CheckpointError, ConfigError, DotformerError
from dotformer.runs.task import EvalReport, EvalRequest, Loaded, Prepared, Task, run_split_file

if TYPE_CHECKING:
    from dotformer.checkpoint import LoadedCheckpoint
    from dotformer.data.corpora import Pair
    from dotformer.data.splits import Splits
    from dotformer.decoding.engine import TranslationEngine
    from dotformer.runs.config_files import ConfigSections
    from dotformer.runs.finetune import InitSource

logger = logging.getLogger(__name__)  # "dotformer.runs.pairs": what reading the data said, before training

DEFAULT_BPE_VOCAB = 8000
TASK_PRESETS = {"g2p": "small", "translation": "small", "exact": "small", "synthetic": "tiny"}  # preset per task
# task -> the shipped config whose [model] and [train] are the task's defaults (its [data] names its own corpus)
TASK_RECIPES = {"g2p": "g2p", "exact": "g2p", "translation": "bible", "synthetic": "copy"}
ANY_VOCAB_SIZE = 1 << 20  # the vocabulary sizes of the model config checked before the data is read (not yet known)


class PairsTask(Task):
    """A source text to a target text; ``name`` picks the metrics, the tokenizers and the defaults."""

    fine_tunable = True

    def __init__(self, name: str) -> None:
        self.name = name
        self.title = f"a {name} model"

    def data_config(self, section: dict[str, Any], source: str) -> DataConfig:
        import dataclasses

        unknown = set(section) - {f.name for f in dataclasses.fields(DataConfig)}
        if unknown == {"block_size"}:  # --block-size without --task lm
            raise ConfigError(f"{source}: block_size is a language model's (--task lm); pairs are not cut in blocks")
        return DataConfig.from_dict(section, source)

    def defaults(self, fine_tuning: bool = False) -> ConfigSections:
        from dotformer.runs.config_files import recipe_defaults

        return recipe_defaults(TASK_RECIPES.get(self.name), fine_tuning)

    def default_run_dir(self, data: DataConfig, model_section: dict[str, Any]) -> Path:
        preset = model_section.get("preset") or TASK_PRESETS.get(self.name)
        return default_run_dir(data.dataset, preset)

    def check_model(self, model_section: dict[str, Any], data: DataConfig) -> None:
        build_model_config(model_section, self.name, ANY_VOCAB_SIZE, ANY_VOCAB_SIZE, False)

    def prepare(
        self, data: DataConfig, seed: int, init: InitSource | None, extend_vocab: bool, progress: bool
    ) -> tuple[Prepared, InitSource | None]:
        from dotformer.data.prepare import make_tokenizers, read_run_data
        from dotformer.data.tokenizer_files import TokenizerPair
        from dotformer.runs.finetune import check_known_symbols, extend_vocabulary, init_data_config

        run_data = read_run_data(data, seed)  # given valid/test files, or a random split
        corpus, splits = run_data.corpus, run_data.splits
        if init is not None and extend_vocab:  # new symbols get new rows
            init, added_src, added_tgt = extend_vocabulary(init, [*splits.train, *splits.valid])
            if progress:
                logger.info(
                    f"vocabulary: {added_src:,} source and {added_tgt:,} target symbols added to those of {init.path}"
                    f" (their embedding and output rows start as a fresh model's)"
                )
        elif init is not None:  # before anything is written: data the checkpoint cannot read is refused
            check_known_symbols([*splits.train, *splits.valid], init.src_tokenizer, init.tgt_tokenizer, init.path)
        for line in leakage_warnings(splits, data):  # on standard error with --no-progress too
            logger.warning(line)
        data = resolve_data_config(data, corpus.task)
        if init is not None:
            data = init_data_config(data, init)
            tokenizers = TokenizerPair(init.src_tokenizer, init.tgt_tokenizer)
        else:
            tokenizers = make_tokenizers(data, splits.train)  # files, or trained on train
        corpus_info = {"name": corpus.name, "report": corpus.report}
        return Prepared(data, corpus_info, tokenizers, run_data.lines, splits), init

    def save(self, prepared: Prepared, data_dir: Path) -> None:
        from dotformer.checkpoint import SRC_TOKENIZER_FILE, TGT_TOKENIZER_FILE
        from dotformer.data.splits import save_splits

        save_splits(prepared.splits, data_dir)
        prepared.tokenizers.src.save(data_dir / SRC_TOKENIZER_FILE)
        prepared.tokenizers.tgt.save(data_dir / TGT_TOKENIZER_FILE)

    def model_config(self, model_section: dict[str, Any], prepared: Prepared) -> tuple[ModelConfig, str | None]:
        src, tgt = prepared.tokenizers
        return build_model_config(model_section, self.name, src.vocab_size, tgt.vocab_size, src is tgt)

    def load(self, run_dir: Path, record: dict[str, Any]) -> Loaded:
        from dotformer.checkpoint import SRC_TOKENIZER_FILE, TGT_TOKENIZER_FILE
        from dotformer.data.batching import encode_pairs
        from dotformer.data.splits import load_split
        from dotformer.data.tokenizer_files import load_tokenizer
        from dotformer.training.state import TrainData

        data_dir = run_dir / "data"
        data = record_data_config(self, record, run_dir)
        src = load_tokenizer(data_dir / SRC_TOKENIZER_FILE)
        tgt = src if data.shared_vocab else load_tokenizer(data_dir / TGT_TOKENIZER_FILE)  # one object, as trained
        train_pairs, valid_pairs = load_split(data_dir, "train"), load_split(data_dir, "valid")
        train_data = TrainData(
            train=encode_pairs(train_pairs, src, tgt),
            valid=encode_pairs(valid_pairs, src, tgt),
            src_tokenizer=src,
            tgt_tokenizer=tgt,
            valid_pairs=valid_pairs,
        )
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
    from dotformer.data.config import READER_FIELDS
    from dotformer.data.corpora import NAMED_TASKS, Pair, describe_corpus, load_pairs
    from dotformer.decoding.evaluation import check_same_task, metric_task, unknown_fraction
    from dotformer.decoding.inputs import source_normaliser
    from dotformer.errors import DataError

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
    check_same_task(task, corpus.task, spec, str(loaded.path))
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
    from dotformer.data.splits import load_split
    from dotformer.errors import DataError

    path = run_split_file(loaded.path, f"{split}.tsv")
    pairs = load_split(path.parent, split)
    if not pairs:
        hint = " (the run was trained on given files without --test)" if split == "test" else ""
        raise DataError(f"{path} holds no pairs{hint}; pass --data FILE to evaluate a test file")
    return pairs, str(path)


def record_data_config(task: Task, record: dict[str, Any], run_dir: Path) -> Any:
    """The task's data config of ``run_dir``'s run.json ``record``.

    Raises:
        CheckpointError: the data settings are damaged (the message names run.json once).
    """
    where = str(run_dir / "run.json")
    try:
        return task.data_config(record["data"], where)
    except DotformerError as exc:
        message = str(exc)
        raise CheckpointError(message if message.startswith(f"{where}:") else f"{where}: {message}") from None


def resolve_data_config(data: DataConfig, task: str) -> DataConfig:
    """Fill the task-dependent defaults: tokenizer kinds (char -> symbol for g2p, symbol for synthetic tasks, BPE
    otherwise), a shared vocabulary for BPE on both sides, and 8000 BPE tokens."""
    from dotformer.data.tokenizer_files import default_kinds

    src_default, tgt_default = default_kinds(task)
    src = None if data.src_tokenizer_file else data.src_tokenizer or src_default  # a side read from a file: no kind
    tgt = None if data.tgt_tokenizer_file else data.tgt_tokenizer or tgt_default
    if data.src_tokenizer_file or data.tgt_tokenizer_file:
        same_file = data.src_tokenizer_file == data.tgt_tokenizer_file
        if data.shared_vocab and not same_file:
            raise ConfigError("a shared vocabulary with tokenizer files needs the same file on both sides")
        shared = same_file
    else:
        shared = data.shared_vocab if data.shared_vocab is not None else (src == tgt == "bpe")
    vocab = data.vocab_size if data.vocab_size is not None else (DEFAULT_BPE_VOCAB if "bpe" in (src, tgt) else None)
    if shared and src != tgt:
        raise ConfigError(f"a shared vocabulary needs one tokenizer kind for both sides, got {src} and {tgt}")
    return data.replace(src_tokenizer=src, tgt_tokenizer=tgt, shared_vocab=shared, vocab_size=vocab)


def build_model_config(
    model_section: dict[str, Any], task: str, src_vocab: int, tgt_vocab: int, shared: bool
) -> tuple[ModelConfig, str]:
    """The ModelConfig: preset (the section's "preset", else the task's) + the section's fields + vocabularies.

    Embeddings are shared (§3.4) by default when the vocabulary is shared.

    Raises:
        ConfigError: an unknown preset or an invalid field.
    """
    section = dict(model_section)
    preset = section.pop("preset", None) or TASK_PRESETS.get(task, "small")
    if preset not in PRESETS:
        raise ConfigError(f"unknown model preset {preset!r}; choose one of {', '.join(PRESETS)}")
    section.setdefault("share_embeddings", shared)
    return ModelConfig.preset(preset, src_vocab_size=src_vocab, tgt_vocab_size=tgt_vocab, **section), preset


def default_run_dir(dataset: str, preset: str | None) -> Path:
    """``runs/<dataset>-<preset>``, with the dataset reduced to a file-name-safe stem."""
    stem = Path(dataset.split(",")[0]).stem if ("/" in dataset or "." in dataset) else dataset
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", stem) or "run"
    return Path("runs") / f"{stem}-{preset or 'auto'}"


def leakage_warnings(splits: Splits, data: DataConfig) -> list[str]:
    """One line per given valid/test file that shares sources with the training split (its scores would measure
    recall of trained pairs, not generalisation); the file named, and said when it is the training file itself.

    Splits drawn at random from one corpus are disjoint by construction and give no line.
    """
    train_sources = {pair.source for pair in splits.train}
    lines = []
    for role in ("valid", "test"):
        spec = getattr(data, role)
        if spec is None:
            continue
        sources = {pair.source for pair in getattr(splits, role)}
        shared = len(sources & train_sources)
        if not shared:
            continue
        same = " (the training file itself)" if _same_file(spec, data.dataset) else ""
        lines.append(
            f"--{role} {spec}{same}: {shared:,} of its {len(sources):,} sources are training sources too, so its "
            f"{'scores' if role == 'test' else 'loss and best/'} measure recall of trained pairs, not "
            f"generalisation: give {role} pairs that are not in the training data"
        )
    return lines


def _same_file(a: str, b: str) -> bool:
    """True when the paths ``a`` and ``b`` are one existing file (also through ``../`` or a link)."""
    try:
        return os.path.samefile(a, b)
    except (OSError, ValueError):
        return False
