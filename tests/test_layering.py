"""The package's layout, read from its source by one import walker (:func:`imports_of`).

- The folders are layered: every import points down. The order, lowest first, is :data:`LAYERS`. A module may import
  its own folder, any folder of a lower layer, and nothing else: never a higher layer, never a sibling of its own
  layer (siblings stay independent of each other). Every import statement counts, at the top of a file, inside a
  function or under ``TYPE_CHECKING``; so do the module names of a package's lazy table (``_LAZY = {name:
  "dotformer.x.y"}``, imported on first use).
- The top of the package is the lesson, tooling lives in subpackages, no module reaches sideways, no import cycles,
  and which modules an import loads.
- No module outside the data kinds and the tasks switches on a kind or a task: no ``isinstance`` on their classes,
  no comparison with a task's name.
"""

from __future__ import annotations

import ast
import subprocess
import sys
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
    """``dotformer.data.tokenize.bpe`` -> ``data``; a top-level module (or the package itself) -> ``lesson``."""
    parts = module.split(".")
    if len(parts) == 1 or not (SRC / parts[1]).is_dir():
        return "__main__" if parts[1:] == ["__main__"] else "lesson"
    return parts[1]


def module_name(path: Path) -> str:
    """``src/dotformer/data/tokenize/bpe.py`` -> ``dotformer.data.tokenize.bpe``; a package's ``__init__.py`` is the
    package."""
    parts = ["dotformer", *path.relative_to(SRC).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in SRC.rglob("*.py")}


def imports_of(path: Path, lazy: bool = True) -> list[tuple[int, str]]:
    """(line, module) of every import in ``path``: import statements anywhere in the file (any package's: torch,
    numpy), and (``lazy``) string constants naming a module of this package (a lazy table's values).

    ``from A import B`` names ``A.B`` when that is a module of the package, else ``A``.
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
    return found


def package_imports(path: Path, lazy: bool = True) -> list[tuple[int, str]]:
    """:func:`imports_of` less the imports of other packages."""
    return [(line, name) for line, name in imports_of(path, lazy) if in_package(name, "dotformer")]


def in_package(name: str, package: str) -> bool:
    """Whether the dotted ``name`` is ``package`` or inside it."""
    return name == package or name.startswith(package + ".")


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
        for line, target in package_imports(path, lazy=module != FACADE):
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
    seen = {name for _, name in package_imports(SRC / "runs" / "text.py")}
    assert "dotformer.training.scoring" in seen  # inside a function
    assert "dotformer.decoding.engine" in seen  # under TYPE_CHECKING
    assert "dotformer.training.loss" in {name for _, name in package_imports(SRC / "training" / "__init__.py")}
    assert folder_of("dotformer") == folder_of("dotformer.multihead") == "lesson"
    assert folder_of("dotformer.data.tokenize.bpe") == "data"


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


# -- the layout ------------------------------------------------------------------------------------------------------

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
        ["dotformer.training.loop", "dotformer.training.step", "dotformer.checkpoint", "dotformer.data.batch.batching"],
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


# The top of the package: the lesson's modules in reading order, the two modules beside them, the package's own files.
LESSON = ["attention", "masks", "multihead", "positional", "layers", "stacks", "heads", "model", "config"]
BESIDE = ["packing", "lora", "errors"]  # skipping the padding, LoRA adapters (around the lesson); the exceptions
PACKAGE = ["__init__", "__main__"]
TOOLING = sorted(path.parent.name for path in SRC.glob("*/__init__.py"))  # the subpackages


def test_the_top_of_the_package_is_the_lesson() -> None:
    """Every top-level module is a lesson module, one beside them, or the package's own; tooling is in subpackages."""
    top = {path.stem for path in SRC.glob("*.py")}
    assert sorted(top - {*LESSON, *BESIDE, *PACKAGE}) == [], "tooling belongs in a subpackage (or add it to LESSON)"
    assert sorted({*LESSON, *BESIDE, *PACKAGE} - top) == []
    assert {"data", "decoding", "training", "export", "imports", "cli"} <= set(TOOLING)  # the probe sees them


READERS = ("read/cmudict", "read/bible", "read/synthetic", "read/hf_datasets", "read/tsv", "read/parallel")
# what preparing data reads and writes: numpy and tokenizers, no torch (dotformer prepare needs none)
STORAGE = ("read", "tokenize", "prepared", "config.py")
# (source files, modules they must not import, at the top or inside a function)
DIRECT_IMPORTS = [
    (["checkpoint"], ["dotformer.decoding", "dotformer.training"]),
    (["data/batch/batching.py"], ["dotformer.masks", "dotformer.data.read.corpora"]),
    ([f"data/{name}.py" for name in READERS], ["dotformer.data.read.corpora"]),
    (
        ["data/read/types.py"],
        ["dotformer.data.read.corpora", *(f"dotformer.data.{name.replace('/', '.')}" for name in READERS)],
    ),
    ([f"data/{name}" for name in STORAGE], ["torch", "dotformer.data.batch"]),
    (["plots/curves.py"], ["dotformer.runs.run"]),
    (
        ["decoding/evaluation.py", "decoding/engine.py", "training/scoring.py"],
        ["dotformer.training.loop", "dotformer.training.step"],
    ),
]


def imported_modules(path: Path) -> set[str]:
    """Every module an import statement anywhere in ``path`` names (:func:`imports_of`)."""
    return {name for _, name in imports_of(path, lazy=False)}


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
    assert "dotformer.checkpoint.store.save_checkpoint" not in imported_modules(SRC / "data/batch/batching.py")
    assert "dotformer.data.read.types" in imported_modules(SRC / "data/batch/batching.py")
    engine = imported_modules(SRC / "engines/torch.py")
    assert "dotformer.training.scoring" in engine  # imported inside a function


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


def import_graph() -> dict[str, set[str]]:
    """Module -> the package's modules it imports, by any import statement (in a function or for a type included;
    a lazy table's names are not imports here: they load on first use)."""
    return {
        module: {name for _, name in imports_of(path, lazy=False) if name in MODULES and name != module}
        for module, path in MODULES.items()
    }


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
    assert "dotformer.data.tokenize.tokenizer_files" in graph["dotformer.runs.text"]  # imported inside a function
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


# -- no switch on a kind or a task outside their classes ---------------------------------------------------------------

TASK_NAMES = {"g2p", "translation", "exact", "synthetic", "lm", "mlm", "classify", "tag"}
# the classes of the data kinds, their configs and examples: an isinstance on one of them picks a kind
KIND_CLASSES = {
    "DataConfig", "LMDataConfig", "EncoderDataConfig", "PairsKind", "TextKind", "LabelledKind", "PreparedPairs",
    "PreparedText", "PreparedLabelled", "LabelledExamples", "TokenStream", "PlannedBatches", "BlockSampler",
    "LabelledSampler", "Batch", "LabelledBatch",
}  # fmt: skip
# where a kind or a task may be told apart: the kinds (their configs and prepared data) and the tasks
KINDS_AND_TASKS = {
    "data/config.py", "data/prepared/pair_kind.py", "data/prepared/text_kind.py", "data/prepared/labelled_kind.py",
    "runs/task.py", "runs/tasks.py", "runs/pairs.py", "runs/text.py", "runs/encoder.py",
}  # fmt: skip
# what still picks by a task's name below the tasks, and why: a reader's options or a metric, not a kind
READERS_AND_METRICS = {
    "data/read/hf_datasets.py": "a g2p corpus's phones are read as space-separated symbols (the reader's option)",
    "data/read/tsv.py": "a g2p corpus's phones are read as space-separated symbols (the reader's option)",
    "data/read/parallel.py": "a g2p corpus's phones are read as space-separated symbols (the reader's option)",
    "data/read/types.py": "a g2p corpus's phones are read as space-separated symbols (the reader's option)",
    "data/tokenize/tokenizer_files.py": "the default tokenizer kinds of a task of pairs (characters, phone symbols, "
    "BPE)",
    "data/read/labelled_reader.py": "the two forms of labelled files: a label a text (classify), a label a word (tag)",
    "decoding/evaluation.py": "the metrics of a task of pairs: WER/PER (g2p), BLEU/chrF (translation), exact match",
}


def names_a_task(node: ast.AST) -> bool:
    """Whether ``node`` is a task's name (a string or ``LM_TASK``), or a tuple, list or set holding one."""
    if isinstance(node, ast.Constant):
        return node.value in TASK_NAMES
    if isinstance(node, ast.Name):
        return node.id == "LM_TASK"
    return isinstance(node, (ast.Tuple, ast.List, ast.Set)) and any(names_a_task(e) for e in node.elts)


def switches(path: Path, root: Path = SRC) -> list[str]:
    """``FILE:LINE code`` of every comparison with a task's name and every isinstance on a kind's class in ``path``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Compare) and any(names_a_task(n) for n in [node.left, *node.comparators]):
            found.append(node)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "isinstance":
            classes = node.args[1].elts if isinstance(node.args[1], ast.Tuple) else [node.args[1]]
            if any(getattr(c, "id", getattr(c, "attr", None)) in KIND_CLASSES for c in classes):
                found.append(node)
    return [f"{path.relative_to(root)}:{node.lineno} {ast.unparse(node)}" for node in found]


def test_no_switch_on_a_kind_or_a_task_outside_their_classes() -> None:
    """A kind's or a task's differences are its class's methods: nothing else compares a task's name or asks which
    class a kind's data is (a new kind or task is one file, no switch to extend elsewhere)."""
    found = [hit for path in sorted(SRC.rglob("*.py")) for hit in switches(path)]
    outside = [hit for hit in found if hit.split(":")[0] not in KINDS_AND_TASKS | set(READERS_AND_METRICS)]
    assert outside == []
    assert {hit.split(":")[0] for hit in found} >= set(READERS_AND_METRICS)  # each reason still names a switch


def test_the_switch_finder_finds_switches(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(
        'if task == "mlm" or x.task in ("classify", "tag") or isinstance(c, LMDataConfig) or kind == "pairs":\n'
        "    exact = tag is None\n",
        encoding="utf-8",
    )
    assert [hit.split(" ", 1)[0] for hit in switches(probe, tmp_path)] == ["probe.py:1"] * 3
