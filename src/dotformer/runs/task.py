"""A task: what one kind of run reads, builds and scores, beside a run pipeline written once for all.

:func:`dotformer.runs.run.train_run` does what every run does (configs layered, the run directory, run.json, DDP,
budgets, checkpoints, resume, the summary line); a :class:`Task` says what differs between kinds of runs: its
``[data]`` config, its defaults (the ``[model]`` and ``[train]`` of its shipped config), its prepared data and
tokenizers, its model and its evaluation. The tasks are those of pairs (:mod:`~dotformer.runs.pairs`), the language
model (:mod:`~dotformer.runs.text`) and the encoder's (:mod:`~dotformer.runs.encoder`,
:mod:`~dotformer.runs.sentence_pairs`); their table is :mod:`dotformer.runs.tasks`. Every task trains through the
same step (:func:`dotformer.training.step.train_step`), learning what its objective says
(:mod:`dotformer.training.objective`), and the same loop (:func:`dotformer.training.fit`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dotformer.config import DEFAULT_SEED, PRESETS, ModelConfig
from dotformer.errors import CheckpointError, ConfigError, DotformerError

if TYPE_CHECKING:
    from collections.abc import Mapping

    from dotformer.data.tokenize.tokenizer_files import TokenizerPair
    from dotformer.decoding.config import DecodeConfig
    from dotformer.decoding.engine import TranslationEngine
    from dotformer.runs.config_files import ConfigSections
    from dotformer.runs.finetune import InitSource
    from dotformer.training.state import TrainData

ANY_VOCAB_SIZE = 1 << 20  # the vocabulary sizes of a model config checked before the data is read (not yet known)


@dataclass
class Prepared:
    """What a fresh run's data came to on rank 0, before anything is written to the run directory.

    Attributes:
        data: the task's data config as resolved (tokenizer kinds and sizes filled in): run.json's ``[data]``.
        corpus: run.json's ``"corpus"``: the source's name and what its reader reported.
        tokenizers: the source and target tokenizers (one object twice when they are one vocabulary).
        lines: what reading said, one line per file (printed before training).
        splits: the task's prepared data (:class:`~dotformer.data.prepared.PreparedPairs` or
            :class:`~dotformer.data.prepared.PreparedText`), which :meth:`Task.save` refers to.
        given_tokenizers: the tokenizers were given, not learned or read from the data config's files (fine-tuning).
        warnings: what the run should be warned about before training (a valid or test file that shares sources
            with the training data).
    """

    data: Any
    corpus: dict[str, Any]
    tokenizers: TokenizerPair
    lines: list[str] = field(default_factory=list)
    splits: Any = None
    given_tokenizers: bool = False
    warnings: list[str] = field(default_factory=list)


@dataclass
class Loaded:
    """What every rank trains on, read back from the run directory.

    Attributes:
        data: the task's data config (from run.json).
        train_data: the encoded examples and tokenizers :func:`dotformer.training.fit` takes.
        lines: lines to print before training (sizes of the data).
        info: facts every checkpoint's config.json records for the task (a classifier's label names).
    """

    data: Any
    train_data: TrainData
    lines: list[str] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class EvalRequest:
    """What ``dotformer evaluate`` asks a task to score.

    Attributes:
        data: a test file (a task reads its own kinds: pairs or text), or None for the run's saved ``split``.
        split: "test" or "valid": the split of the checkpoint's run (when ``data`` is None).
        limit: score only part of it: a seeded sample of N sources (pairs) or the first N lines (text); None: all.
        seed: the seed of that sample.
        decode: how outputs are decoded (None for a task that decodes nothing).
        batch_size: sentences (or blocks, or windows) a batch.
        reader: reader settings given for ``data`` (delimiter, columns, task, ...), over the checkpoint's own.
        stride: a language model's text scored in a sliding window moved this many tokens
            (:func:`dotformer.training.scoring.score_text`); None: in blocks of its context.
    """

    data: str | None = None
    split: str = "test"
    limit: int | None = None
    seed: int = DEFAULT_SEED
    decode: DecodeConfig | None = None
    batch_size: int = 256
    reader: dict[str, Any] = field(default_factory=dict)
    stride: int | None = None


@dataclass
class EvalReport:
    """What a task's evaluation found.

    Attributes:
        where: what was scored (a file, or the run's split file).
        description: what was scored and how, for the first printed line: ``(counts), task NAME, settings``.
        table: the figures, as printed (a Markdown table or one line).
        notes: lines about the data read (``data: ...``), for standard error.
        warnings: lines for standard error (outputs cut at the maximum length, ...).
        hypotheses: one output per scored example, in order (None: the task decodes nothing).
        payload: the figures as JSON (``--json``).
    """

    where: str
    description: str
    table: str
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    hypotheses: list[str] | None = None
    payload: dict[str, Any] = field(default_factory=dict)


class Task(ABC):
    """One kind of run. Subclasses fill in the abstract methods; the pipeline calls them in this order: fresh run:
    :meth:`data_config`, :meth:`check_model`, :meth:`prepare` (rank 0), :meth:`save`, :meth:`model_config`, then on
    every rank :meth:`load`; resumed run: :meth:`data_config` (the run's own), :meth:`load`."""

    name: str  # run.json's and every checkpoint's "task"
    title: str  # what a run of it is called in messages ("a language model", "a g2p model")
    fine_tunable = False  # whether --init-from CKPT may start it (a checkpoint of the same family)
    decodes = True  # whether its evaluation decodes outputs (the decoding flags apply, --hyps writes them)
    slides = False  # whether its evaluation reads text in a window that --stride may move (a language model)
    reads_pairs = True  # whether its evaluation reads a --data file of pairs as the reader flags say (--delimiter, ...)
    seeded = False  # whether its evaluation draws with --seed though it decodes nothing (a sample, a masking)
    best_metrics: tuple[str, ...] = ("loss",)  # what may choose best/ (--best-metric; training.best_metrics): the loss,
    # and the task's own validation figures (its TrainData's best_metrics and figures)
    joint_ctc = False  # whether --ctc-weight may add CTC on its encoder (an encoder-decoder: dotformer.training.ctc)
    recipe: str | None = None  # the shipped config whose [model] and [train] are the task's defaults

    def __init__(self, name: str | None = None) -> None:
        if name is not None:  # one class may serve several names (the tasks of pairs)
            self.name = name

    @abstractmethod
    def data_config(self, section: dict[str, Any], source: str) -> Any:
        """The task's frozen data config from a ``[data]`` table (flags and files layered).

        Raises:
            ConfigError: an unknown key or a bad value, naming ``source``.
        """

    def defaults(self, fine_tuning: bool = False) -> ConfigSections:
        """The task's ``[model]`` and ``[train]`` defaults (its :attr:`recipe`'s), between the built-in ones and the
        config file (budgets are never defaults; a fine-tuning run takes only the recipe: the model is the
        checkpoint's)."""
        from dotformer.runs.config_files import recipe_defaults

        return recipe_defaults(self.recipe, fine_tuning)

    def default_run_dir(self, data: Any, model_section: dict[str, Any]) -> Path:
        """Where a run goes without ``--out``: ``runs/<dataset>-<task>`` (the pairs': ``runs/<dataset>-<preset>``)."""
        return Path("runs") / f"{Path(data.dataset.replace(':', '-')).stem}-{self.name}"

    @abstractmethod
    def check_model(self, model_section: dict[str, Any], data: Any) -> None:
        """Check the ``[model]`` fields of a fresh run before anything is read or written.

        Raises:
            ConfigError: an unknown preset or a bad field.
        """

    @abstractmethod
    def prepare(
        self, data: Any, seed: int, init: InitSource | None, extend_vocab: bool, progress: bool, source: Any = None
    ) -> tuple[Prepared, InitSource | None]:
        """Prepare the data (read, split, tokenizers, encoded into memory-mapped arrays in the cache of prepared data,
        or mapped from it) for a fresh run; nothing is written to the run directory. Every rank calls it: the first
        prepares, the others wait for it and map what it wrote. ``source``: data prepared already (``dotformer
        prepare``), mapped as it is.

        Returns:
            (the prepared data, ``init`` with its vocabulary extended when ``extend_vocab`` asked for it).

        Raises:
            DataError, MissingDataError, ConfigError: the data cannot be read or does not fit the settings.
            CheckpointError: data the ``init`` checkpoint's vocabulary cannot read.
        """

    @property
    def data_task(self) -> str:
        """The task its prepared data records (``dotformer prepare``, ``train --data DIR``): its own name, or the
        task whose data its kind prepares (a task that reads its inputs as another's)."""
        return self.name

    def kind_data(self, data: Any) -> Any:
        """The data config its kind prepares (``dotformer prepare`` and a fresh run): ``data``, or the task's inputs
        rewritten as the kind reads them.

        Raises:
            DataError, MissingDataError: inputs that cannot be rewritten.
        """
        return data

    def save(self, prepared: Prepared, data_dir: Path) -> None:
        """Write the reference to the prepared data, its held-out text and tokenizers to ``RUN/data`` (rank 0)."""
        from dotformer.runs.run_data import save_reference

        save_reference(prepared.splits, data_dir, prepared.given_tokenizers)

    @abstractmethod
    def model_config(
        self, model_section: dict[str, Any], prepared: Prepared, init: InitSource | None = None
    ) -> tuple[ModelConfig, str | None]:
        """The model config of a fresh run, and the preset it was built from (a fine-tuned run's: its checkpoint's,
        with the task's head).

        Raises:
            ConfigError: an unknown preset or a bad field.
        """

    def read_init(
        self,
        path: str | Path,
        model_section: dict[str, Any],
        data_section: dict[str, Any],
        origins: Mapping[str, str] | None = None,
    ) -> InitSource:
        """What ``--init-from CKPT`` starts a run of this task from (:mod:`dotformer.runs.finetune`): an
        encoder-decoder checkpoint by default.

        Raises:
            CheckpointError: a missing or damaged checkpoint, one of another family, or asked fields that differ.
        """
        from dotformer.runs.finetune import read_init_source

        return read_init_source(path, model_section, data_section, origins)

    def record_data(self, record: dict[str, Any], run_dir: Path) -> Any:
        """The task's data config of ``run_dir``'s run.json ``record``.

        Raises:
            CheckpointError: the data settings are damaged (the message names run.json once).
        """
        where = str(run_dir / "run.json")
        try:
            return self.data_config(record["data"], where)
        except DotformerError as exc:
            message = str(exc)
            raise CheckpointError(message if message.startswith(f"{where}:") else f"{where}: {message}") from None

    @abstractmethod
    def load(self, run_dir: Path, record: dict[str, Any]) -> Loaded:
        """The run's data config, encoded examples and tokenizers, read from ``RUN/data`` (every rank).

        Raises:
            CheckpointError: run.json's data settings are damaged. DataError: the data cannot be trained on.
        """

    @abstractmethod
    def evaluate(self, engine: TranslationEngine, request: EvalRequest) -> EvalReport:
        """Score a checkpoint of this task on a test file or its run's held-out split (``dotformer evaluate``), with
        the engine that runs it (:class:`~dotformer.engines.torch.TorchEngine`, or CTranslate2's for a task that
        decodes: :mod:`dotformer.engines`; ``engine.checkpoint`` is the checkpoint).

        Raises:
            CheckpointError: no run directory and no test file. DataError / MissingDataError: unreadable, empty or
                mismatched data. ConfigError: settings the task cannot take.
        """

    def check_best_metric(self, metric: str) -> None:
        """Refuse a ``--best-metric`` the task's validation does not give, before anything is read or written.

        Raises:
            ConfigError: one line naming the metric, why it does not apply, and the ones the task offers.
        """
        from dotformer.training.best_metrics import DECODING_METRICS, or_list

        if metric in self.best_metrics:
            return
        if metric in DECODING_METRICS:
            why = f"scores the greedy outputs of validation pairs, and {self.title} has none"
        else:
            why = f"is not a figure of {self.title}'s validation"
        raise ConfigError(f"--best-metric {metric} {why}; choose {or_list(self.best_metrics)}")

    def summary(self, run_dir: Path, best_valid_loss: float | None) -> str:
        """What the last line of ``dotformer train`` adds to the shared summary for this task ("" for nothing)."""
        return ""


def corpus_record(prepared: Any) -> dict[str, Any]:
    """run.json's ``"corpus"`` of prepared data: the source's name and what its reader reported."""
    return {"name": prepared.report["corpus"]["name"], "report": prepared.report["corpus"]["report"]}


def pop_preset(section: dict[str, Any], default: str = "small") -> str:
    """The preset a ``[model]`` section names (removed from it), else ``default``.

    Raises:
        ConfigError: an unknown preset (the message lists the known ones).
    """
    preset = section.pop("preset", None) or default
    if preset not in PRESETS:
        raise ConfigError(f"unknown model preset {preset!r}; choose one of {', '.join(PRESETS)}")
    return str(preset)


def run_split_file(checkpoint: Path, name: str) -> Path:
    """``RUN/data/NAME`` of the run a checkpoint belongs to.

    Raises:
        CheckpointError: the checkpoint is not inside a run directory (the message says to pass --data).
    """
    from dotformer.checkpoint import run_data_dir

    try:
        return run_data_dir(checkpoint) / name
    except CheckpointError as exc:
        raise CheckpointError(f"{exc}; pass --data FILE to evaluate a test file") from None
