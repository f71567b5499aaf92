"""Sphinx configuration of dotformer's documentation: MyST Markdown pages, Google-style docstrings, the furo theme.

Build: ``python3 -m sphinx -W --keep-going -b html docs docs/_build/html`` (the test command runs it), then open
``docs/_build/html/index.html``.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))  # document this tree's code, installed or not
sys.path.insert(0, str(Path(__file__).resolve().parent))  # docs/docstrings.py

from docstrings import tidy_docstring  # noqa: E402

import dotformer  # noqa: E402

project = "dotformer"
author = "dotformer authors"
copyright = "dotformer authors"  # noqa: A001
release = dotformer.__version__
version = release

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.napoleon",
    "sphinx.ext.mathjax",
    "sphinx-mathjax-offline",  # MathJax 3 from its PyPI package, copied into _static/: formulas render offline
    "sphinx.ext.viewcode",
]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
exclude_patterns = ["_build"]
root_doc = "index"

myst_enable_extensions = ["dollarmath", "colon_fence"]
myst_heading_anchors = 3

napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_rtype = False
napoleon_use_ivar = True  # a NamedTuple's Attributes section beside its documented fields, not a second copy

autodoc_member_order = "bysource"
# An attribute named in two classes (src_tokenizer) is an ambiguous reference, not a broken one.
suppress_warnings = ["ref.python"]
autodoc_typehints = "description"
autodoc_typehints_format = "short"
autodoc_default_options = {"members": True, "ignore-module-all": True}  # each name once, in its own module
autosummary_generate = False

html_theme = "furo"
html_title = f"dotformer {release}"
html_static_path: list[str] = []


# The hand-written pages: every Python reference on them must resolve (the docstrings' own references are looser:
# ``Tensor``, ``Path`` and the like have no page here).
WRITTEN_PAGES = {"index", "lesson", "guide", "benchmarks", "api/index"}


def check_written_reference(app, env, node, contnode):  # noqa: ANN001, ANN201
    """Warn (an error under -W) about a Python reference of a hand-written page that names nothing documented."""
    if node.get("refdomain") == "py" and env.docname in WRITTEN_PAGES:
        from sphinx.util import logging

        logging.getLogger(__name__).warning(
            "%s: reference to %s %r not found", env.docname, node.get("reftype"), node.get("reftarget"), location=node
        )
    return None


def setup(app):  # noqa: ANN001, ANN201
    """Read the docstrings as plain text where they are not reStructuredText (see docs/docstrings.py)."""
    app.connect("autodoc-process-docstring", tidy_docstring, priority=600)  # after napoleon (500)
    app.connect("missing-reference", check_written_reference)
