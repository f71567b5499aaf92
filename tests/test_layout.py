"""The package layout: which modules an import loads (the layers point one way), and the old import paths."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

# (what is imported or run, modules that must not be loaded by it)
TANGLES = [
    (
        "import dotformer",
        ["dotformer.decoding", "dotformer.data", "dotformer.checkpoint", "dotformer.training", "tokenizers"],
    ),
    ("import dotformer.checkpoint", ["dotformer.decoding.quantization", "dotformer.training", "dotformer.decoding"]),
    (
        "import dotformer.decoding.evaluation",
        ["dotformer.training.loop", "dotformer.training.step", "dotformer.checkpoint", "dotformer.data.batching"],
    ),
    ("import dotformer.metrics.scoring", ["dotformer.training.loop", "dotformer.data"]),
    (
        "from dotformer.plots.curves import config_curve; config_curve('g2p', steps=3)",
        ["dotformer.training.run", "dotformer.training.loop", "dotformer.checkpoint"],
    ),
]


@pytest.mark.parametrize(("code", "forbidden"), TANGLES, ids=[code for code, _ in TANGLES])
def test_an_import_loads_only_its_own_layer(code: str, forbidden: list[str]) -> None:
    script = f"import sys\n{code}\nprint('\\n'.join(sorted(sys.modules)))"
    loaded = set(
        subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout.split()
    )
    assert any(name.startswith("dotformer") for name in loaded)  # the probe sees the modules it loaded
    leaked = sorted(m for m in loaded if any(m == f or m.startswith(f + ".") for f in forbidden))
    assert leaked == []


SRC = Path(__file__).resolve().parents[1] / "src" / "dotformer"
READERS = ("cmudict", "bible", "synthetic", "hf", "tsv", "parallel")
# (source files, modules they must not import, at the top or inside a function)
DIRECT_IMPORTS = [
    (["checkpoint"], ["dotformer.decoding", "dotformer.training"]),
    (["data/batching.py"], ["dotformer.masks", "dotformer.data.corpora"]),
    ([f"data/{name}.py" for name in READERS], ["dotformer.data.corpora"]),
    (["data/types.py"], ["dotformer.data.corpora", *(f"dotformer.data.{name}" for name in READERS)]),
    (["plots/curves.py"], ["dotformer.training.run"]),
    (["decoding/evaluation.py", "metrics/scoring.py"], ["dotformer.training.loop", "dotformer.training.step"]),
]


def imported_modules(path: Path) -> set[str]:
    """Every module named by an import statement anywhere in ``path``."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


@pytest.mark.parametrize(("paths", "forbidden"), DIRECT_IMPORTS, ids=[p[0] for p, _ in DIRECT_IMPORTS])
def test_no_module_reaches_sideways(paths: list[str], forbidden: list[str]) -> None:
    files = [f for p in paths for f in ((SRC / p).rglob("*.py") if (SRC / p).is_dir() else [SRC / p])]
    assert files and all(f.is_file() for f in files)
    for file in files:
        names = imported_modules(file)
        leaked = sorted(n for n in names if any(n == f or n.startswith(f + ".") for f in forbidden))
        assert leaked == [], file


def test_the_import_probe_sees_imports() -> None:
    """The static probe finds a function-level import (so an empty result above means something)."""
    assert "dotformer.checkpoint.store.save_checkpoint" not in imported_modules(SRC / "data/batching.py")
    assert "dotformer.data.types.Pair" in imported_modules(SRC / "data/batching.py")
    evaluation = imported_modules(SRC / "decoding/evaluation.py")
    assert "dotformer.metrics.scoring.evaluate_loss" in evaluation  # imported inside a function


CHECKPOINT_NAMES = {
    "format": [
        "CONFIG_FILE", "FORMAT_VERSION", "MANIFEST_FILE", "MODEL_FILE", "SRC_TOKENIZER_FILE", "TGT_TOKENIZER_FILE",
        "TRAIN_STATE_JSON", "TRAIN_STATE_TENSORS", "CheckpointWarning", "check_vocabulary", "load_tokenizer_file",
        "load_weights", "load_weights_into", "model_config_of", "read_json", "unwrap_model", "verify_checkpoint",
    ],
    "atomic": [
        "atomic_directory", "current_umask", "is_replaceable_checkpoint", "link_checkpoint", "refuse_unless_checkpoint",
    ],
    "rundir": [
        "RUN_ENTRIES", "STEP_DIR", "ResumePoint", "choose_resume_checkpoint", "clear_run_directory",
        "find_resume_checkpoint", "is_run_directory", "prune_checkpoints", "recover_run_directory",
        "resolve_checkpoint", "run_data_dir", "run_has_checkpoint", "step_checkpoints", "step_dir_name",
    ],
    "train_state": ["load_train_state"],
    "store": ["LoadedCheckpoint", "load_checkpoint", "save_checkpoint"],
    "averaging": ["average_checkpoints"],
}  # fmt: skip
RUN_NAMES = {
    "config_files": ["NAMED_TASKS", "SECTIONS", "TASK_PRESETS", "ConfigSections", "check_keys", "merge",
                     "read_config_file"],
    "preparation": ["DEFAULT_BPE_VOCAB", "build_model_config", "default_run_dir", "resolve_data_config"],
    "records": ["check_no_run_there", "versions", "write_json_atomic"],
    "run": ["RunResult", "train_run"],
}  # fmt: skip


def test_old_import_paths_name_the_same_objects() -> None:
    """Every name of the former checkpoint.py and training/run.py is still there, the very object of its new module."""
    import importlib

    import dotformer.checkpoint as ckpt
    import dotformer.training.run as run

    for package, table in (("dotformer.checkpoint", CHECKPOINT_NAMES), ("dotformer.training", RUN_NAMES)):
        old = ckpt if package == "dotformer.checkpoint" else run
        for module, names in table.items():
            new = importlib.import_module(f"{package}.{module}")
            for name in names:
                assert getattr(old, name) is getattr(new, name), f"{package}.{module}.{name}"
    assert run.NAMED_TASKS == {"cmudict": "g2p", "bible": "translation", "copy": "synthetic", "reverse": "synthetic"}
    assert set(ckpt.__all__) >= {n for names in CHECKPOINT_NAMES.values() for n in names}
