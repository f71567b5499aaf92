"""The explorer's HTML page: one self-contained file (inline CSS and JavaScript, no network access, no CDN).

The page's files are package data in ``static/``: ``explorer.html`` (the markup), ``explorer.css`` (the style sheet),
``draw.js`` (the drawing: maps, overview, head view, probabilities) and ``views.js`` (the views, the inputs, the
requests and the downloads; it calls ``draw.js``). :func:`page_template` reads them with :mod:`importlib.resources`
when a page is built and puts the style sheet and the scripts inline, where ``explorer.html`` says
``__DOTFORMER_STYLE__`` and ``__DOTFORMER_SCRIPTS__``.

The page reads one JSON object, embedded where the markup says ``__DOTFORMER_DATA__``:

    {"mode": "serve" | "static", "title": str, "examples": [example, ...]}

and each example is :func:`dotformer.explore.data.maps_to_json` of an
:class:`dotformer.decoding.attention_maps.AttentionMaps`.
In "serve" mode the page sends the typed input (and an optional reference to force-decode) to
``POST api/attention`` ({"text": ..., "target": ...}) and draws the reply; in "static" mode it shows the embedded
examples, chosen from a list: the Run buttons and the reference field are hidden, the inputs read-only, and a line
says that live input needs ``dotformer explore --checkpoint DIR``. A refused input clears the previous output and maps.

Views (tabs; ``#overview``, ``#map``, ``#heads``, ``#compare`` in the address select one), right below the inputs,
the output and the choice of map:

* overview: every layer × head of the chosen kind as a thumbnail ``<canvas class="thumb">`` (``data-layer``,
  ``data-head``; head "avg" is the mean over heads), one pixel block per weight;
* map: one head (or the head average) as an SVG with one ``<rect class="cell">`` per (query, key) pair carrying
  ``data-row``, ``data-col`` and ``data-weight`` (above 40,000 cells, ``MAX_SVG_CELLS`` in ``draw.js``, one
  ``<image class="cells">`` instead), a colour legend, row/column highlight on hover, and PNG/SVG download;
* heads: bertviz's head view: one ``<line class="hv-line">`` per (head, query, key) of weight >= 0.01, coloured by
  head, heads toggled by check boxes;
* compare: the chosen map of two inputs side by side.

Each decoder position's token probability and top-k alternatives are a table ``#probs`` below the views
(``data-p`` holds the probability). The tests read these attributes.
"""

from __future__ import annotations

from importlib.resources import files

DATA_PLACEHOLDER = "__DOTFORMER_DATA__"
STYLE_PLACEHOLDER = "__DOTFORMER_STYLE__"
SCRIPTS_PLACEHOLDER = "__DOTFORMER_SCRIPTS__"
STATIC = "static"  # the page's files, a folder of this package
SCRIPTS = ("draw.js", "views.js")  # the program, in the order the page runs it: views.js calls draw.js


def static_text(name: str) -> str:
    """One of the page's files, ``static/NAME`` of this package, as text (UTF-8)."""
    return (files("dotformer.explore") / STATIC / name).read_text(encoding="utf-8")


def page_template() -> str:
    """The page with its style sheet and scripts inline, up to the data: ``DATA_PLACEHOLDER`` is still in it."""
    scripts = "".join(f"<script>\n{static_text(name)}</script>\n" for name in SCRIPTS)
    markup = static_text("explorer.html").replace(STYLE_PLACEHOLDER, static_text("explorer.css"))
    return markup.replace(SCRIPTS_PLACEHOLDER, scripts)
