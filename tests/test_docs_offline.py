"""The built documentation is read offline: a page's formulas render from the build itself, not from a CDN.

A one-page site built with ``docs/conf.py``'s settings (its extensions, its math): the page loads MathJax from
``_static/`` and the file is there; no script comes from another host.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytest.importorskip("sphinx")
pytest.importorskip("myst_parser")

DOCS = Path(__file__).resolve().parent.parent / "docs"


def test_math_renders_from_the_build_not_a_cdn(tmp_path: Path) -> None:
    from sphinx.application import Sphinx

    source = tmp_path / "src"
    source.mkdir()
    conf = DOCS / "conf.py"  # run as if it were this site's (its paths are relative to its own file)
    (source / "conf.py").write_text(
        f"__file__ = {str(conf)!r}\nexec(compile(open(__file__).read(), __file__, 'exec'))\nhtml_theme = 'basic'\n",
        encoding="utf-8",
    )
    (source / "index.md").write_text("# Attention\n\n$$\\mathrm{softmax}(QK^T / \\sqrt{d_k})V$$\n", encoding="utf-8")
    out = tmp_path / "html"
    app = Sphinx(str(source), str(source), str(out), str(tmp_path / "doctrees"), "html", status=None, warning=None)
    app.build()
    page = (out / "index.html").read_text(encoding="utf-8")
    scripts = re.findall(r'<script[^>]*src="([^"]+)"', page)
    mathjax = [src for src in scripts if "mathjax" in src.lower()]
    assert mathjax, scripts
    for src in scripts:
        assert "://" not in src and not src.startswith("//"), src  # nothing from another host
        assert (out / src.split("?")[0]).is_file(), src
