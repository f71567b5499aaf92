"""One path: every mode runs through the lesson's own attention, layers and stacks (read from the source with ast).

Cached decoding, packed training, beam search's grouped queries, the attention weights and the ONNX graphs all call
``MultiHeadAttention.forward`` and the one forward of each layer and stack; speed enters through the seams
``KeyValueCache`` and ``Layout`` (:mod:`dotformer.multihead`), never through a second copy.
"""

from __future__ import annotations

import ast
import functools
import inspect
import textwrap
from pathlib import Path

import pytest

import dotformer
from dotformer.multihead import MultiHeadAttention

pytestmark = pytest.mark.numerical  # run again under another vector unit by scripts/test.sh

PACKAGE = Path(dotformer.__file__).parent
LESSON = ("attention", "masks", "multihead", "positional", "layers", "stacks", "heads", "model", "config")
LESSON += ("packing", "errors")


@functools.cache
def _modules() -> dict[str, ast.Module]:
    """Every module of the package, parsed, by its path relative to the package ("decoding/cache.py")."""
    return {
        str(path.relative_to(PACKAGE)): ast.parse(path.read_text(encoding="utf-8")) for path in PACKAGE.rglob("*.py")
    }


def _imports(tree: ast.Module) -> set[str]:
    """The dotformer modules a module imports anywhere (top level, inside functions, under TYPE_CHECKING)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("dotformer"):
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names if alias.name.startswith("dotformer"))
    return names


def test_the_forward_of_multihead_attention_is_at_most_15_code_lines() -> None:
    """project, split heads, (cache or layout), attend, concatenate, W_o: without docstring and comments."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(MultiHeadAttention.forward)))
    body = tree.body[0].body  # type: ignore[attr-defined]
    code = body[1:] if isinstance(body[0], ast.Expr) else body  # without the docstring
    lines = {n.lineno for stmt in code for n in ast.walk(stmt) if hasattr(n, "lineno")}
    assert len(lines) <= 15, f"MultiHeadAttention.forward has {len(lines)} code lines"


def test_only_multihead_applies_the_projections_or_splits_heads() -> None:
    """Reading the weights (converters) is fine; calling W_q/W_k/W_v/W_o, split/merge_heads or attend is attention."""
    inside = {"W_q", "W_k", "W_v", "W_o", "split_heads", "merge_heads", "attend"}
    found = [
        f"{name}:{node.lineno} {node.func.attr}"
        for name, tree in _modules().items()
        if name != "multihead.py"
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in inside
    ]
    assert not found, f"attention computed outside multihead.py: {found}"


def test_no_second_forward_of_a_layer_or_a_stack() -> None:
    """Only layers.py runs a layer's sublayers; only stacks.py runs the layers of a stack in turn."""
    sublayers = {"res_attn", "res_self", "res_cross", "res_ff", "feed_forward", "self_attn", "cross_attn"}
    found = []
    for name, tree in _modules().items():
        for node in ast.walk(tree):
            calls_sublayer = isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            if name != "layers.py" and calls_sublayer and node.func.attr in sublayers:  # type: ignore[attr-defined]
                found.append(f"{name}:{node.lineno} calls .{node.func.attr}(...)")
            if name != "stacks.py" and isinstance(node, ast.For) and isinstance(node.target, ast.Name):
                over_layers = any(isinstance(n, ast.Attribute) and n.attr == "layers" for n in ast.walk(node.iter))
                calls = [
                    n
                    for n in ast.walk(node)
                    if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == node.target.id
                ]
                if over_layers and calls:
                    found.append(f"{name}:{node.lineno} runs the layers of a stack")
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and node.name.startswith("packed_"):
                found.append(f"{name}:{node.lineno} defines {node.name}")
    assert not found, f"a second forward: {found}"


@pytest.mark.parametrize("module", LESSON)
def test_the_lesson_imports_only_the_lesson(module: str) -> None:
    """No import of decoding/, training/ or anything else outside the lesson, not even inside a function."""
    tree = _modules()[f"{module}.py"]
    outside = {name for name in _imports(tree) if name.removeprefix("dotformer.") not in LESSON}
    assert not outside, f"dotformer.{module} imports {sorted(outside)}"


def test_the_lesson_has_no_import_circle() -> None:
    """Data flows straight down: the lesson's modules import each other in one direction only."""
    modules = _modules()
    graph = {m: {n.removeprefix("dotformer.") for n in _imports(modules[f"{m}.py"])} & set(LESSON) for m in LESSON}
    done: set[str] = set()

    def visit(module: str, path: tuple[str, ...]) -> None:
        assert module not in path, f"import circle: {' -> '.join((*path, module))}"
        if module not in done:
            for imported in graph[module]:
                visit(imported, (*path, module))
            done.add(module)

    for module in LESSON:
        visit(module, ())


def test_no_module_level_getattr_shims_in_the_lesson() -> None:
    """Names live in one module: no PEP 562 forwarding of moved names."""
    modules = _modules()
    found = [
        m
        for m in LESSON
        if any(isinstance(n, ast.FunctionDef) and n.name == "__getattr__" for n in modules[f"{m}.py"].body)
    ]
    assert not found, f"__getattr__ shims in {found}"
