"""The folders of the package are layered: every import points down.

The order, lowest first, is :data:`LAYERS`. A module may import its own folder, any folder of a lower layer, and
nothing else: never a higher layer, never a sibling of its own layer (siblings stay independent of each other). Every
import statement counts, at the top of a file, inside a function or under ``TYPE_CHECKING``; so do the module names of
a package's lazy table (``_LAZY = {name: "dotformer.x.y"}``, imported on first use).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "dotformer"

# Lowest first. "lesson" is the top of the package: the lesson's modules (attention, masks, multihead, positional,
# layers, stacks, heads, model, config) and the two beside them (packing, errors), with the package's __init__.
LAYERS: list[tuple[str, ...]] = [
    ("lesson",),  # the Transformer, from the dot product up
    ("data",),  # corpora, tokenizers, prepared arrays, batches
    ("checkpoint", "metrics"),  # a model's files; the formulas of its scores
    ("decoding",),  # greedy, beam, sampling, the cache, attention maps, the engines' protocols
    ("training",),  # the engine of training: step, loss, schedule, loop, validation, saving
    ("runs",),  # tasks and the one run pipeline: set-up, records, fine-tuning, config files
    ("export",),  # the lesson's parameters written for other engines
    ("imports", "engines"),  # other engines' parameters read in; which engine decodes (torch or CTranslate2)
    ("api",),  # dotformer.load(...), the server
    ("compare",),  # recurrence against self-attention, measured
    ("plots", "explore"),  # figures; the attention explorer
    ("cli",),  # the dotformer command
    ("__main__",),  # python -m dotformer
]
RANK = {folder: rank for rank, layer in enumerate(LAYERS) for folder in layer}


def folder_of(module: str) -> str:
    """``dotformer.data.bpe`` -> ``data``; a top-level module (or the package itself) -> ``lesson``."""
    parts = module.split(".")
    if len(parts) == 1 or not (SRC / parts[1]).is_dir():
        return "__main__" if parts[1:] == ["__main__"] else "lesson"
    return parts[1]


def module_name(path: Path) -> str:
    """``src/dotformer/data/bpe.py`` -> ``dotformer.data.bpe``; a package's ``__init__.py`` is the package."""
    parts = ["dotformer", *path.relative_to(SRC).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in SRC.rglob("*.py")}


def imports_of(path: Path, lazy: bool = True) -> list[tuple[int, str]]:
    """(line, dotformer module) of every import in ``path``: import statements anywhere in the file, and (``lazy``)
    string constants naming a module of the package (a lazy table's values).

    ``from A import B`` names ``A.B`` when that is a module, else ``A``.
    """
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            assert not node.level, f"{path}:{node.lineno}: a relative import (the package imports absolutely)"
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                found.append((node.lineno, full if full in MODULES else str(node.module)))
        elif lazy and isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in MODULES:
            found.append((node.lineno, node.value))
    return [(line, name) for line, name in found if name == "dotformer" or name.startswith("dotformer.")]


# The package's own __init__ is its public face: ``dotformer.load`` and ``dotformer.KVCache`` name modules above
# the lesson in its lazy table (loaded on first use, never at ``import dotformer``), while its import statements
# load only the lesson's config and errors (which is why training may read ``dotformer.__version__``).
FACADE = "dotformer"


def violations() -> list[str]:
    """``module:line imports target (folder -> folder)`` for every import that does not point down."""
    found = []
    for module, path in sorted(MODULES.items()):
        source = folder_of(module)
        assert source in RANK, f"{module}: its folder {source!r} is not in LAYERS (add it where its imports allow)"
        for line, target in imports_of(path, lazy=module != FACADE):
            folder = folder_of(target)
            if folder == source:
                continue
            if RANK[folder] >= RANK[source]:
                found.append(f"{module}:{line} imports {target} ({source} -> {folder})")
    return found


def test_every_folder_is_in_one_layer() -> None:
    folders = {path.parent.name for path in SRC.glob("*/__init__.py")}
    listed = [folder for layer in LAYERS for folder in layer]
    assert len(listed) == len(set(listed))
    assert sorted(folders - set(listed)) == []
    assert sorted(set(listed) - folders - {"lesson", "__main__"}) == []


def test_every_import_points_down() -> None:
    assert violations() == []


def test_the_probe_sees_every_kind_of_import() -> None:
    """Top-level, function-level and TYPE_CHECKING imports and lazy tables are all seen (so an empty list above means
    something)."""
    seen = {name for _, name in imports_of(SRC / "runs" / "text.py")}
    assert "dotformer.training.scoring" in seen  # inside a function
    assert "dotformer.decoding.engine" in seen  # under TYPE_CHECKING
    assert "dotformer.training.loss" in {name for _, name in imports_of(SRC / "training" / "__init__.py")}  # lazy
    assert folder_of("dotformer") == folder_of("dotformer.multihead") == "lesson"
    assert folder_of("dotformer.data.bpe") == "data"


@pytest.mark.parametrize(
    ("module", "target", "upward"),
    [
        ("dotformer.metrics.decoded", "dotformer.training.loss", True),  # metrics must not run training's loss
        ("dotformer.api.translator", "dotformer.plots.attention", True),  # the API does not draw
        ("dotformer.explore.data", "dotformer.plots.attention", True),  # a sibling: explore and plots are apart
        ("dotformer.multihead", "dotformer.decoding.cache", True),  # the lesson imports no tooling
        ("dotformer.plots.attention", "dotformer.decoding.attention_maps", False),
        ("dotformer.engines.torch", "dotformer.training.scoring", False),
        ("dotformer.cli.train", "dotformer.runs.run", False),
    ],
)
def test_the_order_tells_up_from_down(module: str, target: str, upward: bool) -> None:
    source, folder = folder_of(module), folder_of(target)
    assert (source != folder and RANK[folder] >= RANK[source]) == upward
