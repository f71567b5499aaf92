"""The package layout: the top of the package is the lesson, tooling lives in subpackages, no module grows past
400 lines, which modules an import loads (the layers point one way), and the old import paths."""

from __future__ import annotations

import ast
import importlib.util
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from dotformer._moved import MOVED

# (what is imported or run, modules that must not be loaded by it)
TANGLES = [
    (
        "import dotformer",
        ["dotformer.decoding", "dotformer.data", "dotformer.checkpoint", "dotformer.training", "tokenizers",
         "dotformer.api", "dotformer.metrics", "dotformer.export", "dotformer._moved"],
    ),
    ("import dotformer.checkpoint", ["dotformer.decoding.quantization", "dotformer.training", "dotformer.decoding"]),
    (
        "import dotformer.decoding.evaluation",
        ["dotformer.training.loop", "dotformer.training.step", "dotformer.checkpoint", "dotformer.data.batching"],
    ),
    ("import dotformer.metrics.scoring", ["dotformer.training.loop", "dotformer.data"]),
    ("import dotformer.export.torch_nn", ["dotformer.decoding", "dotformer.data", "dotformer.checkpoint"]),
    (
        "from dotformer.plots.curves import config_curve; config_curve('g2p', steps=3)",
        ["dotformer.training.run", "dotformer.training.loop", "dotformer.checkpoint"],
    ),
]  # fmt: skip


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

# The top of the package: the lesson's modules in reading order, the two modules beside them, the package's own files.
LESSON = ["attention", "masks", "multihead", "positional", "layers", "stacks", "model", "config"]
BESIDE = ["packing", "errors"]  # skipping the padding (around the lesson, not in it); the exceptions
PACKAGE = ["__init__", "__main__", "_moved"]
MAX_LINES = 400  # a module longer than this gets split by concern


def test_the_top_of_the_package_is_the_lesson() -> None:
    """Every top-level module is a lesson module, one beside them, or the forward of a moved module's old path
    (:mod:`dotformer._moved`); tooling lives in subpackages."""
    old_paths = {old.removeprefix("dotformer."): new for old, new in MOVED.items()}
    allowed = {*LESSON, *BESIDE, *PACKAGE, *old_paths}
    top = {path.stem for path in SRC.glob("*.py")}
    assert sorted(top - allowed) == [], "tooling belongs in a subpackage (or add a lesson module to LESSON)"
    assert sorted(allowed - top) == []
    for name, new in old_paths.items():
        tree = ast.parse((SRC / f"{name}.py").read_text(encoding="utf-8"))
        assert f":mod:`{new}`" in (ast.get_docstring(tree) or ""), f"{name}.py names where the module went"
        assert [ast.unparse(node) for node in tree.body[1:]] == [
            "from dotformer import _moved",
            "__getattr__ = _moved.forward(__name__)",
        ], f"{name}.py forwards its old path and holds nothing else"
        assert importlib.util.find_spec(new) is not None, new


def test_no_module_is_over_the_line_limit() -> None:
    lengths = {str(p.relative_to(SRC)): len(p.read_text(encoding="utf-8").splitlines()) for p in SRC.rglob("*.py")}
    assert len(lengths) > 100  # the probe sees the package
    assert {name: n for name, n in lengths.items() if n > MAX_LINES} == {}


# old path -> a name looked up there (each old path of dotformer._moved has one)
OLD_PATH_NAMES = {
    "dotformer.explain": "explain_lesson",
    "dotformer.extras": "require_extra",
    "dotformer.interop": "to_torch_transformer",
    "dotformer.quantization": "quantize_int8",
    "dotformer.scoring": "evaluate_loss",
    "dotformer.serve": "translate_request",
}


def test_every_moved_module_has_a_test_name() -> None:
    assert set(OLD_PATH_NAMES) == set(MOVED)


@pytest.mark.parametrize("old", sorted(OLD_PATH_NAMES))
def test_an_old_path_warns_and_gives_the_same_object(old: str) -> None:
    name, new, short = OLD_PATH_NAMES[old], MOVED[old], old.removeprefix("dotformer.")
    module = importlib.import_module(old)
    with pytest.warns(DeprecationWarning, match=rf"^{re.escape(old)} has moved to {re.escape(new)}: import {name} "):
        value = getattr(module, name)  # from dotformer.interop import to_torch_transformer
    assert value is getattr(importlib.import_module(new), name)
    with pytest.warns(DeprecationWarning, match=re.escape(new)):  # from dotformer import interop; interop.NAME
        assert getattr(getattr(__import__("dotformer", fromlist=[short]), short), name) is value
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(ImportError, match="no_such_name"):
            exec(f"from {old} import no_such_name", {})
        with pytest.raises(AttributeError):
            module.__wrapped__  # noqa: B018  (dunder lookups, as inspect makes them, are not forwarded)
    assert caught == []  # neither warns


def test_importing_an_old_path_warns_of_nothing_and_loads_nothing_new() -> None:
    """The warning comes with a name looked up, not with the import: no import-time side effects."""
    code = (
        f"import sys, warnings\nwarnings.simplefilter('error')\nimport {', '.join(MOVED)}\n"
        f"print('\\n'.join(m for m in {sorted(MOVED.values())!r} if m in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["dotformer.errors"]  # the one new home that every import loads anyway


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


# module split by concern -> {the module its names went to: the names, still importable from the old module}
SPLIT_NAMES = {
    "dotformer.model": {"dotformer.stacks": ["Decoder", "DecoderOutput", "Encoder", "EncoderOutput"]},
    "dotformer.decoding.translate": {
        "dotformer.decoding.inputs": [
            "EncodedTarget", "EncodedTexts", "InputTooLongError", "UnknownTokenWarning", "check_max_input_length",
            "default_max_input_length", "encode_sources", "encode_target", "encode_texts", "is_empty_source",
            "source_normaliser", "target_normaliser", "unknown_message", "unknown_target_message", "warn_unknown",
        ],
    },
    "dotformer.data.tokenizers": {"dotformer.data.bpe": ["BPETokenizer", "byte_level_alphabet"]},
    "dotformer.cli.translate": {
        "dotformer.cli.lines": ["StreamLines", "argument_chunks", "binary_stdin", "format_result"],
        "dotformer.cli.decode_flags": ["add_decoding_arguments", "decode_config_from_args", "load_for_decoding"],
    },
    "dotformer.metrics": {
        "dotformer.metrics.decoded": [
            "G2PErrorRates", "MetricResult", "STRESS", "bleu", "chrf", "closest_reference", "exact_match",
            "g2p_error_rates", "perplexity", "phones", "require_metric_packages",
        ],
    },
    "dotformer.api": {
        "dotformer.api.translator": [
            "DTYPES", "TranslationResult", "Translator", "load", "load_checkpoint_for_decoding", "resolve_device",
        ],
    },
}  # fmt: skip


@pytest.mark.parametrize("old", sorted(SPLIT_NAMES))
def test_a_split_module_keeps_its_names(old: str) -> None:
    """The names that moved out of a module by concern are the very objects of their new module, without a warning."""
    module = importlib.import_module(old)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for new, names in SPLIT_NAMES[old].items():
            target = importlib.import_module(new)
            for name in names:
                assert getattr(module, name) is getattr(target, name), f"{old}.{name}"
