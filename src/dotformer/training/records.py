"""Run records: ``run.json`` (dataset, task, every config, versions, command lines and flags, the first start and
each resume) written atomically, read back, and compared on ``--resume``."""

from __future__ import annotations

import datetime
import json
import os
import platform
from pathlib import Path
from typing import Any

from dotformer.errors import CheckpointError, ConfigError
from dotformer.training.config_files import ConfigSections


def _record_sections(record: dict[str, Any]) -> ConfigSections:
    """The configs of a run.json as config sections (the model without its vocabulary sizes, with its preset)."""
    model = {k: v for k, v in record["model"].items() if k not in ("src_vocab_size", "tgt_vocab_size")}
    model["preset"] = record.get("preset")
    return ConfigSections(model=model, train=dict(record["train"]), data=dict(record["data"]), source="run.json")


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
