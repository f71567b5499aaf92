"""A training run from end to end, as ``dotformer train`` does it: configs from a TOML file and flags, the corpus
read and split, tokenizers trained, the model built, :func:`dotformer.training.fit` called, everything recorded in a
run directory.

Run directory layout::

    RUN/run.json          dataset, task, every config, versions, command lines and flags (the first and each resume)
    RUN/data/             the saved split (train.tsv, valid.tsv, test.tsv, split.json) and the tokenizers
    RUN/metrics.jsonl     one JSON object per logged step and per validation pass
    RUN/checkpoints/step_XXXXXXX/, RUN/last/, RUN/best/    checkpoints (see dotformer.checkpoint)

Config precedence, lowest first: built-in defaults (with per-task choices: tokenizers, preset), the config file's
sections ``[model]``, ``[train]``, ``[data]``, then command-line flags. On ``--resume`` the run's own run.json takes
the place of the defaults and the config file; the model and data may not change (CheckpointError), the recipe and
budgets may.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import platform
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dotformer.config import PRESETS, ModelConfig
from dotformer.errors import CheckpointError, ConfigError, DotformerError
from dotformer.training.config import DataConfig, TrainConfig, data_table

if TYPE_CHECKING:
    from dotformer.data.tokenizers import Tokenizer
    from dotformer.training.loop import FitResult

SECTIONS = ("model", "train", "data")
TASK_PRESETS = {"g2p": "small", "translation": "small", "exact": "small", "synthetic": "tiny"}  # preset per task
NAMED_TASKS = {"cmudict": "g2p", "bible": "translation", "copy": "synthetic", "reverse": "synthetic"}
DEFAULT_BPE_VOCAB = 8000


@dataclass(frozen=True)
class ConfigSections:
    """The raw ``[model]``, ``[train]`` and ``[data]`` tables of a config file (or of flags, or of run.json).

    Attributes:
        model: ModelConfig fields (without the vocabulary sizes) plus an optional "preset".
        train: TrainConfig fields. data: DataConfig fields.
        source: where they came from, for error messages.
    """

    model: dict[str, Any] = field(default_factory=dict)
    train: dict[str, Any] = field(default_factory=dict)
    data: dict[str, Any] = field(default_factory=dict)
    source: str = "defaults"


@dataclass(frozen=True)
class RunResult:
    """What ``dotformer train`` reports at the end.

    Attributes:
        fit: the :class:`dotformer.training.loop.FitResult`. run_dir: the run directory.
        is_main: True on rank 0 (the process that prints).
    """

    fit: FitResult
    run_dir: Path
    is_main: bool

    def summary(self) -> str:
        """One line: steps, time, tokens/s, best validation loss/perplexity, where the checkpoint is."""
        f = self.fit
        text = (
            f"trained {f.steps} steps ({f.epochs:.2f} epochs, stopped by {f.stopped_by}) in {f.run_seconds:.1f} s, "
            f"{f.tokens_per_second:,.0f} target tokens/s"
        )
        if f.best_valid_loss is not None and f.best_metric != "loss" and f.best_score is not None:
            text += (
                f"; best valid {f.best_metric} {f.best_score:.2f} (loss {f.best_valid_loss:.4f}) at step {f.best_step}"
            )
        elif f.best_valid_loss is not None:
            text += (
                f"; best valid loss {f.best_valid_loss:.4f} (ppl {f.best_valid_perplexity:.3f}) at step {f.best_step}"
            )
        return text + f"; checkpoint: {f.checkpoint}"


# -- config files ------------------------------------------------------------------------------------------------------


def read_config_file(path: str | Path) -> ConfigSections:
    """Read a TOML config file with the sections ``[model]``, ``[train]``, ``[data]`` (all optional).

    ``path`` is a file, or the name of a config shipped with the package (``"g2p"``: see
    :mod:`dotformer.training.shipped_configs`).

    Raises:
        ConfigError: not TOML, an unknown section, or an unknown key (the message names the file and the key).
        MissingDataError (a FileNotFoundError): no such file and no shipped config of that name.
    """
    from dotformer.training.shipped_configs import find_config_file

    path = find_config_file(path)
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        try:
            import tomli as tomllib  # type: ignore[no-redef]
        except ModuleNotFoundError:
            raise ConfigError("reading TOML config files needs Python 3.11 or the tomli package") from None
    with open(path, "rb") as f:
        try:
            table = tomllib.load(f)
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path}: not valid TOML ({exc})") from None
    unknown = sorted(set(table) - set(SECTIONS))
    if unknown:
        raise ConfigError(f"{path}: unknown section or key {unknown[0]!r} (sections: [model], [train], [data])")
    for name in SECTIONS:
        if name in table and not isinstance(table[name], dict):
            raise ConfigError(f"{path}: {name} must be a table, [{name}]")
    sections = ConfigSections(
        model=dict(table.get("model", {})),
        train=dict(table.get("train", {})),
        data=data_table(table.get("data", {}), str(path)),  # [data] train = ... is the dataset
        source=str(path),
    )
    check_keys(sections)
    return sections


def check_keys(sections: ConfigSections) -> None:
    """Raise ConfigError naming the first unknown key of a section and the file it came from."""
    model_keys = {f.name for f in dataclasses.fields(ModelConfig)} - {"src_vocab_size", "tgt_vocab_size"} | {"preset"}
    known = {
        "model": model_keys,
        "train": {f.name for f in dataclasses.fields(TrainConfig)},
        "data": {f.name for f in dataclasses.fields(DataConfig)},
    }
    for name in SECTIONS:
        for key in getattr(sections, name):
            if key not in known[name]:
                raise ConfigError(
                    f"{sections.source}: unknown key {key!r} in [{name}] (known: {', '.join(sorted(known[name]))})"
                )


def merge(*layers: ConfigSections) -> ConfigSections:
    """Later layers override earlier ones, key by key within each section."""
    merged: dict[str, dict[str, Any]] = {name: {} for name in SECTIONS}
    for layer in layers:
        for name in SECTIONS:
            merged[name].update(getattr(layer, name))
    return ConfigSections(**merged, source=layers[-1].source if layers else "defaults")


def resolve_data_config(data: DataConfig, task: str) -> DataConfig:
    """Fill the task-dependent defaults: tokenizer kinds (char -> symbol for g2p, symbol for synthetic tasks, BPE
    otherwise), a shared vocabulary for BPE on both sides, and 8000 BPE tokens."""
    from dotformer.data.tokenizers import default_kinds

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


def build_model_config(model_section: dict[str, Any], task: str, src_vocab: int, tgt_vocab: int, shared: bool):
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


# -- the run ----------------------------------------------------------------------------------------------------------


def train_run(
    file_sections: ConfigSections,
    flag_sections: ConfigSections,
    out_dir: str | Path | None,
    resume: bool = False,
    command: Sequence[str] | None = None,
    overwrite: bool = False,
    init_from: str | Path | None = None,
) -> RunResult:
    """Prepare data, tokenizers and model from the configs, and train (the work of ``dotformer train``).

    Args:
        file_sections: the config file's tables (empty without --config).
        flag_sections: the values of the flags given on the command line (they override the file).
        out_dir: the run directory (None: ``runs/<dataset>-<preset>``).
        resume: continue the run in ``out_dir``.
        command: the command line, recorded in run.json.
        overwrite: start afresh in ``out_dir`` even though it holds a run (its run.json, data/, checkpoints and
            metrics are deleted first; other files are left alone; a directory that is not a run is refused).
        init_from: fine-tune: start from this checkpoint's weights, tokenizers and model config
            (:mod:`dotformer.training.finetune`); a fresh optimizer and schedule. Not with ``resume``.

    Returns:
        :class:`RunResult`.

    Raises:
        ConfigError: bad configs, a missing dataset, an existing run without --resume.
        CheckpointError: --resume with nothing to resume, or with a model or data config that differs from the run's.
        DataError / MissingDataError: the corpus cannot be read. TrainingError: see :func:`fit`.
    """
    from dotformer.training.distributed import setup_distributed, teardown_distributed

    if resume and (overwrite or init_from is not None):
        flag = "--overwrite" if overwrite else "--init-from"
        raise ConfigError(f"--resume continues a run as it is: it cannot be combined with {flag}")
    invocation = {
        "command": list(command if command is not None else sys.argv),
        "config_file": None if file_sections.source == "defaults" else file_sections.source,
        "flags": {name: _jsonable(getattr(flag_sections, name)) for name in SECTIONS},
    }
    sections = merge(file_sections, flag_sections)
    dataset = sections.data.get("dataset")
    if out_dir is None:
        if not dataset:
            raise ConfigError("no dataset: pass --data (cmudict, bible, copy, reverse, a TSV file, or SRC,TGT files)")
        preset = sections.model.get("preset") or TASK_PRESETS.get(NAMED_TASKS.get(dataset, "translation"))
        out_dir = default_run_dir(dataset, preset)
    run_dir = Path(out_dir)
    record = None
    if resume:  # the run's own configs take the place of the defaults
        record = _read_run_json(run_dir)
        sections = merge(_record_sections(record), file_sections, flag_sections)
    elif not dataset:
        raise ConfigError("no dataset: pass --data (cmudict, bible, copy, reverse, a TSV file, or SRC,TGT files)")
    train_config = TrainConfig.from_dict(sections.train, f"{file_sections.source} [train]")
    if not train_config.has_budget:
        raise ConfigError("no training budget: pass --max-steps, --max-minutes or --max-epochs (or set one in [train])")
    context = setup_distributed(train_config.device)
    try:
        if record is not None:
            prepared = _prepare_resume(run_dir, record, sections, train_config, invocation, context.is_main)
        else:
            prepared = _prepare_fresh(run_dir, sections, train_config, invocation, context, overwrite, init_from)
        return _train(prepared, run_dir, resume, context.is_main)
    finally:
        teardown_distributed(context)


@dataclass
class _Prepared:
    model_config: ModelConfig
    train_config: TrainConfig
    data_config: DataConfig
    task: str
    train_pairs: list
    valid_pairs: list
    src_tokenizer: Tokenizer
    tgt_tokenizer: Tokenizer
    init_from: Path | None = None
    data_lines: list[str] = field(default_factory=list)  # what reading each file said (printed before training)


def _prepare_fresh(
    run_dir: Path,
    sections: ConfigSections,
    train_config: TrainConfig,
    invocation: dict[str, Any],
    context: Any,
    overwrite: bool = False,
    init_from: str | Path | None = None,
) -> _Prepared:
    from dotformer.checkpoint import clear_run_directory
    from dotformer.data.prepare import make_tokenizers, read_run_data
    from dotformer.data.splits import load_split, save_splits
    from dotformer.data.tokenizers import TokenizerPair, load_tokenizer
    from dotformer.training.distributed import barrier
    from dotformer.training.finetune import init_data_config, read_init_source

    data_config = DataConfig.from_dict(sections.data, "[data]")
    if not overwrite:
        check_no_run_there(run_dir)
    init = read_init_source(init_from, sections.model, sections.data) if init_from is not None else None
    barrier(context)  # every rank has looked before rank 0 writes
    if overwrite and context.is_main:
        clear_run_directory(run_dir)
    data_dir = run_dir / "data"
    data_lines: list[str] = []
    if context.is_main:
        run_data = read_run_data(data_config, train_config.seed)  # given valid/test files, or a random split
        corpus, splits = run_data.corpus, run_data.splits
        data_lines = run_data.lines  # columns used, rows read, pairs kept and dropped, per file
        data_config = resolve_data_config(data_config, corpus.task)
        save_splits(splits, data_dir)
        tokenizers = None if init is None else TokenizerPair(init.src_tokenizer, init.tgt_tokenizer)
        if init is not None:
            data_config = init_data_config(data_config, init)
        tokenizers = tokenizers or make_tokenizers(data_config, splits.train)  # files, or trained on train
        tokenizers.src.save(data_dir / "tokenizer_src.json")
        tokenizers.tgt.save(data_dir / "tokenizer_tgt.json")
        model_config, preset = build_model_config(
            sections.model,
            corpus.task,
            tokenizers.src.vocab_size,
            tokenizers.tgt.vocab_size,
            tokenizers.src is tokenizers.tgt,
        )
        if init is not None:
            model_config, preset = init.model_config, init.preset or sections.model.get("preset")
            invocation = {**invocation, "init_from": str(init.path)}
        record = {
            "dataset": data_config.dataset,
            "task": corpus.task,
            "corpus": {"name": corpus.name, "report": corpus.report},
            "preset": preset,
            "model": model_config.to_dict(),
            "train": train_config.to_dict(),
            "data": data_config.to_dict(),
            "versions": versions(),
            **invocation,
            "created": _now(),
            "world_size": context.world_size,
        }
        write_json_atomic(run_dir / "run.json", record)
    barrier(context)
    # every rank (rank 0 too) reads what rank 0 wrote, so all train on exactly the same data and vocabularies
    prepared = _load_prepared(run_dir, _read_run_json(run_dir), train_config, load_split, load_tokenizer)
    prepared.init_from = None if init is None else init.path
    prepared.data_lines = data_lines
    return prepared


def _record_sections(record: dict[str, Any]) -> ConfigSections:
    """The configs of a run.json as config sections (the model without its vocabulary sizes, with its preset)."""
    model = {k: v for k, v in record["model"].items() if k not in ("src_vocab_size", "tgt_vocab_size")}
    model["preset"] = record.get("preset")
    return ConfigSections(model=model, train=dict(record["train"]), data=dict(record["data"]), source="run.json")


def _prepare_resume(
    run_dir: Path,
    record: dict[str, Any],
    sections: ConfigSections,
    train_config: TrainConfig,
    invocation: dict[str, Any],
    is_main: bool,
) -> _Prepared:
    from dotformer.data.splits import load_split
    from dotformer.data.tokenizers import load_tokenizer

    saved_model = {**record["model"], "preset": record.get("preset")}
    _same_or_raise("model", saved_model, sections.model, run_dir)
    _same_or_raise("data", record["data"], sections.data, run_dir)
    if is_main:
        record.setdefault("resumes", []).append(
            {**invocation, "time": _now(), "train": train_config.to_dict(), "versions": versions()}
        )
        write_json_atomic(run_dir / "run.json", record)
    return _load_prepared(run_dir, record, train_config, load_split, load_tokenizer)


def _load_prepared(run_dir: Path, record: dict[str, Any], train_config: TrainConfig, load_split, load_tokenizer):
    data_dir = run_dir / "data"
    src = load_tokenizer(data_dir / "tokenizer_src.json")
    tgt = load_tokenizer(data_dir / "tokenizer_tgt.json")
    if record["data"].get("shared_vocab"):
        tgt = src  # one vocabulary object, as when it was trained
    try:
        model_config = ModelConfig.from_dict(record["model"])
        data_config = DataConfig.from_dict(record["data"], str(run_dir / "run.json"))
    except DotformerError as exc:
        raise CheckpointError(f"{run_dir / 'run.json'}: {exc}") from None
    return _Prepared(
        model_config=model_config,
        train_config=train_config,
        data_config=data_config,
        task=record["task"],
        train_pairs=load_split(data_dir, "train"),
        valid_pairs=load_split(data_dir, "valid"),
        src_tokenizer=src,
        tgt_tokenizer=tgt,
    )


def _train(prepared: _Prepared, run_dir: Path, resume: bool, is_main: bool) -> RunResult:
    import torch

    from dotformer.data.batching import encode_pairs
    from dotformer.model import Transformer
    from dotformer.training.loop import TrainData, fit

    p = prepared
    torch.manual_seed(p.train_config.seed)  # the model's initial weights
    model = Transformer(p.model_config)
    data = TrainData(
        train=encode_pairs(p.train_pairs, p.src_tokenizer, p.tgt_tokenizer),
        valid=encode_pairs(p.valid_pairs, p.src_tokenizer, p.tgt_tokenizer),
        src_tokenizer=p.src_tokenizer,
        tgt_tokenizer=p.tgt_tokenizer,
        valid_pairs=p.valid_pairs,
    )
    if p.init_from is not None and is_main:
        import warnings

        from dotformer.checkpoint import CheckpointWarning
        from dotformer.training.finetune import unknown_symbols_warning

        message = unknown_symbols_warning(data.train, p.init_from)
        if message:
            warnings.warn(message, CheckpointWarning, stacklevel=2)
    info = {"task": p.task, "dataset": p.data_config.dataset, "data": p.data_config.to_dict()}
    if is_main and p.train_config.progress:
        for line in p.data_lines:
            print(f"data: {line}", file=sys.stderr)
    result = fit(model, data, p.train_config, run_dir=run_dir, info=info, resume=resume, init_from=p.init_from)
    return RunResult(fit=result, run_dir=run_dir, is_main=is_main)


def _same_or_raise(section: str, saved: dict[str, Any], requested: dict[str, Any], run_dir: Path) -> None:
    for key, value in requested.items():
        old = saved.get(key)
        if isinstance(old, list):
            old = tuple(old)
        if isinstance(value, list):
            value = tuple(value)
        if old != value:
            raise CheckpointError(
                f"cannot resume {run_dir}: [{section}] {key} = {value!r} differs from the run's {old!r} "
                f"({run_dir / 'run.json'}); start a new run with --out instead"
            )


def check_no_run_there(run_dir: Path) -> None:
    """Raise ConfigError when ``run_dir`` already holds a run, naming the flags that go on from there: --resume
    (it has a checkpoint), --overwrite (start afresh there) or another --out."""
    from dotformer.checkpoint import is_run_directory, run_has_checkpoint

    if not is_run_directory(run_dir) and not (run_dir / "last").exists():
        return
    if run_has_checkpoint(run_dir):
        raise ConfigError(
            f"{run_dir} already holds a run: pass --resume to continue it, --overwrite to delete it and start "
            f"afresh, or another --out for a new run"
        )
    raise ConfigError(
        f"{run_dir} holds a run stopped before its first checkpoint (nothing to resume): pass --overwrite to start "
        f"afresh there, or another --out"
    )


def _read_run_json(run_dir: Path) -> dict[str, Any]:
    path = run_dir / "run.json"
    if not path.is_file():
        raise CheckpointError(f"nothing to resume: {path} does not exist")
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CheckpointError(f"{path} is corrupted: {exc}") from None
    for key in ("model", "train", "data", "task"):
        if key not in record:
            raise CheckpointError(f"{path} is corrupted: no {key!r} entry")
    return record


def write_json_atomic(path: Path, data: Any) -> None:
    """Write JSON to ``path`` via a temporary file and a rename (never a half-written file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def versions() -> dict[str, str]:
    """Versions of Python, dotformer and the libraries that shape the results."""
    import numpy
    import tokenizers
    import torch

    from dotformer import __version__

    return {
        "dotformer": __version__,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": numpy.__version__,
        "tokenizers": tokenizers.__version__,
        "platform": platform.platform(),
    }


def _jsonable(section: dict[str, Any]) -> dict[str, Any]:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in section.items()}


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
