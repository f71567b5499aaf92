"""The package layout: the top of the package is the lesson, tooling lives in subpackages, imports point one way
(tooling -> lesson, never back; no module reaches sideways), no import cycles, and which modules an import loads."""

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
        ["dotformer.decoding", "dotformer.data", "dotformer.checkpoint", "dotformer.training", "tokenizers",
         "dotformer.api", "dotformer.metrics", "dotformer.export"],
    ),
    ("import dotformer.checkpoint", ["dotformer.decoding.quantization", "dotformer.training", "dotformer.decoding"]),
    (
        "import dotformer.decoding.evaluation",
        ["dotformer.training.loop", "dotformer.training.step", "dotformer.checkpoint", "dotformer.data.batching"],
    ),
    ("import dotformer.training.scoring", ["dotformer.training.loop", "dotformer.data", "dotformer.checkpoint"]),
    ("import dotformer.export.torch_nn", ["dotformer.decoding", "dotformer.data", "dotformer.checkpoint"]),
    (
        "from dotformer.plots.curves import config_curve; config_curve('g2p', steps=3)",
        ["dotformer.runs.run", "dotformer.training.loop", "dotformer.checkpoint"],
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
LESSON = ["attention", "masks", "multihead", "positional", "layers", "stacks", "heads", "model", "config"]
BESIDE = ["packing", "errors"]  # skipping the padding (around the lesson, not in it); the exceptions
PACKAGE = ["__init__", "__main__"]
TOOLING = sorted(path.parent.name for path in SRC.glob("*/__init__.py"))  # the subpackages


def test_the_top_of_the_package_is_the_lesson() -> None:
    """Every top-level module is a lesson module, one beside them, or the package's own; tooling is in subpackages."""
    top = {path.stem for path in SRC.glob("*.py")}
    assert sorted(top - {*LESSON, *BESIDE, *PACKAGE}) == [], "tooling belongs in a subpackage (or add it to LESSON)"
    assert sorted({*LESSON, *BESIDE, *PACKAGE} - top) == []
    assert {"data", "decoding", "training", "export", "imports", "cli"} <= set(TOOLING)  # the probe sees them


READERS = ("cmudict", "bible", "synthetic", "hf", "tsv", "parallel")
# what preparing data reads and writes: numpy and tokenizers, no torch (dotformer prepare needs none)
STORAGE = ("arrays", "textio", "text", "labelled_text", "words", "splits", "tokenizers", "tokenizer_files", "bpe",
           "pretrained", "config", "corpora", "types", *READERS)  # fmt: skip
# (source files, modules they must not import, at the top or inside a function)
DIRECT_IMPORTS = [
    (["checkpoint"], ["dotformer.decoding", "dotformer.training"]),
    (["data/batching.py"], ["dotformer.masks", "dotformer.data.corpora"]),
    ([f"data/{name}.py" for name in READERS], ["dotformer.data.corpora"]),
    (["data/types.py"], ["dotformer.data.corpora", *(f"dotformer.data.{name}" for name in READERS)]),
    (
        [*(f"data/{name}.py" for name in STORAGE), "data/prepared"],
        ["torch", "dotformer.data.batching", "dotformer.data.blocks"],
    ),
    (["plots/curves.py"], ["dotformer.runs.run"]),
    (
        ["decoding/evaluation.py", "decoding/engine.py", "training/scoring.py"],
        ["dotformer.training.loop", "dotformer.training.step"],
    ),
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
    engine = imported_modules(SRC / "engines/torch.py")
    assert "dotformer.training.scoring.evaluate_loss" in engine  # imported inside a function


def in_package(name: str, package: str) -> bool:
    """Whether the dotted ``name`` is ``package`` or inside it."""
    return name == package or name.startswith(package + ".")


@pytest.mark.parametrize("module", LESSON + BESIDE)
def test_the_lesson_imports_nothing_from_decoding_or_training(module: str) -> None:
    """Decoding and training build on the lesson's modules; the lesson calls neither (not even for a type)."""
    names = imported_modules(SRC / f"{module}.py")
    assert sorted(n for n in names if in_package(n, "dotformer.decoding") or in_package(n, "dotformer.training")) == []


@pytest.mark.parametrize("module", LESSON + BESIDE)
def test_imports_point_from_tooling_to_the_lesson(module: str) -> None:
    """A lesson module imports only other top-level modules: tooling -> lesson, never lesson -> tooling."""
    names = imported_modules(SRC / f"{module}.py")
    assert sorted(n for n in names if any(in_package(n, f"dotformer.{package}") for package in TOOLING)) == []


def module_name(path: Path) -> str:
    """``src/dotformer/data/bpe.py`` -> ``dotformer.data.bpe``; a package's ``__init__.py`` is the package."""
    parts = ["dotformer", *path.relative_to(SRC).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """Module -> the package's modules it imports, by any import statement (in a function or for a type included).

    ``from A import B`` is an edge to ``A.B`` when that is a module, else to ``A``; ``import A.B`` to ``A.B``.
    """
    paths = {module_name(path): path for path in SRC.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for module, path in paths.items():
        edges = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                edges.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                full = (f"{node.module}.{alias.name}" for alias in node.names)
                edges.update(name if name in paths else node.module for name in full)
        graph[module] = {name for name in edges if name in paths and name != module}
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The groups of modules that import each other, directly or through others (each sorted; none when acyclic)."""

    def reachable(start: str) -> set[str]:
        seen: set[str] = set()
        todo = list(graph[start])
        while todo:
            node = todo.pop()
            if node not in seen:
                seen.add(node)
                todo.extend(graph.get(node, ()))
        return seen

    reach = {module: reachable(module) for module in graph}
    groups = {frozenset({m, *(n for n in reach[m] if m in reach[n])}) for m in graph if m in reach[m]}
    return sorted(sorted(group) for group in groups)


def test_the_cycle_finder_finds_cycles() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"d", "f"}, "f": {"e"}}
    assert import_cycles(graph) == [["a", "b", "c"], ["e", "f"]]
    assert import_cycles({"a": {"b"}, "b": set()}) == []


def test_the_import_graph_sees_the_package() -> None:
    graph = import_graph()
    assert len(graph) > 100
    assert "dotformer.data.tokenizer_files" in graph["dotformer.runs.text"]  # imported inside a function
    assert "dotformer.attention" in graph["dotformer.multihead"]
    assert "dotformer.decoding.batch" in graph["dotformer.decoding.translate"]  # from dotformer.decoding.batch import
    assert "dotformer.checkpoint" in graph["dotformer.runs.run"]  # a name of the package's __init__


def test_no_import_cycles() -> None:
    """No module imports, through any chain, a module that imports it (in a function or for a type included)."""
    assert import_cycles(import_graph()) == []


MAX_FUNCTION_LINES = 40  # code lines of one function in the converters, its docstring not counted


def code_lines(function: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """The lines from a function's first statement after its docstring to its last."""
    body = function.body
    if (
        isinstance(body[0], ast.Expr)
        and isinstance(body[0].value, ast.Constant)
        and isinstance(body[0].value.value, str)
    ):
        body = body[1:]
    return body[-1].end_lineno - body[0].lineno + 1 if body else 0  # type: ignore[operator]


def test_converter_functions_are_short() -> None:
    """Exporters and importers are per-layer helpers over one parameter map (export/params.py), not long readers."""
    lengths = {}
    for path in [*(SRC / "export").glob("*.py"), *(SRC / "imports").glob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lengths[f"{path.relative_to(SRC)}:{node.name}"] = code_lines(node)
    assert lengths["export/params.py:copy_layer"] > 5  # the probe sees functions
    assert {name: n for name, n in lengths.items() if n > MAX_FUNCTION_LINES} == {}
