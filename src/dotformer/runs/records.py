"""Run records: ``run.json`` (dataset, task, every config, versions, command lines and flags, the first start and
each resume) written atomically and read back, for every task's run (:mod:`~dotformer.runs.run`)."""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import platform
import shutil
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy

from dotformer.config import ModelConfig
from dotformer.errors import CheckpointError, ConfigError
from dotformer.runs.config_files import SECTIONS, ConfigSections, merge

if TYPE_CHECKING:
    from dotformer.training.config import TrainConfig


def invocation_of(
    file_sections: ConfigSections, flag_sections: ConfigSections, command: Sequence[str] | None
) -> dict[str, Any]:
    """How a run was started, as run.json records it (the first start and each resume): the command line
    (``sys.argv`` when None), the config file (None without one) and the values of the flags given."""
    return {
        "command": list(command if command is not None else sys.argv),
        "config_file": None if file_sections.source == "defaults" else file_sections.source,
        "flags": {name: _jsonable(getattr(flag_sections, name)) for name in SECTIONS},
    }


def resumed_sections(
    record: dict[str, Any], file_sections: ConfigSections, flag_sections: ConfigSections
) -> ConfigSections:
    """The configs of a resumed run: its run.json's (the model without its vocabulary sizes, with its preset) in the
    place of the defaults, under the config file's and the flags'."""
    model = {k: v for k, v in record["model"].items() if k not in ("src_vocab_size", "tgt_vocab_size")}
    model["preset"] = record.get("preset")
    saved = ConfigSections(model=model, train=dict(record["train"]), data=dict(record["data"]), source="run.json")
    return merge(saved, file_sections, flag_sections)


def write_new_record(
    run_dir: Path,
    dataset: str,
    task: str,
    corpus: dict[str, Any],
    preset: str | None,
    configs: tuple[ModelConfig, TrainConfig, Any],
    invocation: dict[str, Any],
    world_size: int,
) -> None:
    """Write ``RUN/run.json`` of a new run: the dataset, task, corpus description (name, report) and model preset,
    every config (``configs``: the model's, the training's and the data's, a DataConfig or an LMDataConfig), the
    versions, how it was started (:func:`invocation_of`), when, and on how many processes."""
    model, train, data = configs
    record = {
        "dataset": dataset,
        "task": task,
        "corpus": corpus,
        "preset": preset,
        "model": model.to_dict(),
        "train": train.to_dict(),
        "data": data.to_dict(),
        "versions": versions(),
        **invocation,
        "created": _now(),
        "world_size": world_size,
    }
    write_json_atomic(run_dir / "run.json", record)


def record_resume(run_dir: Path, record: dict[str, Any], invocation: dict[str, Any], train: TrainConfig) -> None:
    """Append a resume (how it was started, when, its ``[train]``, the versions) to the run's ``record`` and write
    it back to ``RUN/run.json``."""
    record.setdefault("resumes", []).append(
        {**invocation, "time": _now(), "train": train.to_dict(), "versions": versions()}
    )
    write_json_atomic(run_dir / "run.json", record)


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


@contextlib.contextmanager
def removed_if_unfinished(run_dir: Path, is_main: bool = True) -> Iterator[None]:
    """Run the body; when it fails before the run's first checkpoint, delete what it created for ``run_dir``, so
    that the same ``--out`` can be tried again: the topmost of ``run_dir`` and its parents that did not exist on
    entry, or, in a directory that existed, the run's entries (``RUN_ENTRIES``) that were not there on entry. A
    directory that existed before, anything else in it, and a run with a checkpoint are never deleted. The error
    goes on as it was; only rank 0 (``is_main``) deletes, and nothing when another process trains there."""
    from dotformer.checkpoint import RUN_ENTRIES, TRAIN_LOCK, RunBusyError, run_has_checkpoint

    created = None
    for path in (run_dir, *run_dir.parents):
        if os.path.lexists(path):
            break
        created = path
    entries = (*RUN_ENTRIES, TRAIN_LOCK)
    there = {name for name in entries if os.path.lexists(run_dir / name)}
    try:
        yield
    except RunBusyError:  # another process trains there: nothing here is this one's to delete
        raise
    except BaseException:
        if is_main and not run_has_checkpoint(run_dir):
            if created is not None:
                shutil.rmtree(created, ignore_errors=True)
            else:
                for path in (run_dir / name for name in entries if name not in there):
                    if path.is_dir() and not path.is_symlink():
                        shutil.rmtree(path, ignore_errors=True)
                    elif os.path.lexists(path):
                        path.unlink()
        raise


def read_run_json(run_dir: Path) -> dict[str, Any]:
    """``RUN/run.json`` as a dict.

    Raises:
        CheckpointError: no such file (nothing to resume), not JSON, or an entry missing.
    """
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
