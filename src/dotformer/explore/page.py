"""The explorer's HTML page: one self-contained file (inline CSS and JavaScript, no network access, no CDN).

The page reads one JSON object, embedded where the template says ``__DOTFORMER_DATA__``:

    {"mode": "serve" | "static", "title": str, "examples": [example, ...]}

and each example is :func:`dotformer.explore.data.maps_to_json` of an :class:`dotformer.plots.AttentionMaps`.
In "serve" mode the page sends the typed input (and an optional reference to force-decode) to
``POST api/attention`` ({"text": ..., "target": ...}) and draws the reply; in "static" mode it can only show the
embedded examples (typing one of them shows it; anything else explains that live input needs
``dotformer explore --checkpoint DIR``). A refused input clears the previous output and maps.

Views (tabs; ``#overview``, ``#map``, ``#heads``, ``#compare`` in the address select one):

* overview: every layer × head of the chosen kind as a thumbnail ``<canvas class="thumb">`` (``data-layer``,
  ``data-head``; head "avg" is the mean over heads), one pixel block per weight;
* map: one head (or the head average) as an SVG with one ``<rect class="cell">`` per (query, key) pair carrying
  ``data-row``, ``data-col`` and ``data-weight`` (above :data:`MAX_SVG_CELLS` cells, one ``<image class="cells">``
  instead), a colour legend, row/column highlight on hover, and PNG/SVG download;
* heads: bertviz's head view: one ``<line class="hv-line">`` per (head, query, key) of weight >= 0.01, coloured by
  head, heads toggled by check boxes;
* compare: the chosen map of two inputs side by side.

Each decoder position's token probability and top-k alternatives are a table ``#probs`` (``data-p`` holds the
probability). The tests read these attributes.

The markup and the style sheet are here; the program is JavaScript in two parts, :mod:`~dotformer.explore.page_draw`
(drawing) and :mod:`~dotformer.explore.page_views` (views, inputs, downloads), joined into the page's one script.
"""

from __future__ import annotations

from dotformer.explore.page_draw import DRAW_SCRIPT
from dotformer.explore.page_views import VIEWS_SCRIPT

DATA_PLACEHOLDER = "__DOTFORMER_DATA__"
MAX_SVG_CELLS = 40000  # maps with more cells are drawn as one bitmap inside the SVG (a browser slows on 10^5 rects)

# The head, the style sheet and the body's markup, up to the embedded data.
MARKUP = r"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>dotformer explorer</title>
<style>
  body { font-family: system-ui, sans-serif; margin: 1.2rem 1.5rem; color: #222; max-width: 80rem; }
  h1 { font-size: 1.3rem; margin: 0 0 0.3rem 0; }
  h2 { font-size: 1rem; margin: 0.6rem 0 0.3rem 0; }
  .note { color: #555; font-size: 0.88rem; }
  form, .controls { margin: 0.6rem 0; display: flex; gap: 0.5rem; flex-wrap: wrap; align-items: center; }
  input[type=text] { flex: 1; min-width: 14rem; padding: 0.35rem; font-size: 1rem; }
  button, select { padding: 0.3rem 0.6rem; font-size: 0.95rem; }
  #example, #example2 { max-width: 18rem; }
  #output { font-size: 1.1rem; padding: 0.2rem 0.5rem; background: #f3f6fa; border-radius: 4px; }
  #status { color: #a00; min-height: 1.2rem; margin: 0.3rem 0; }
  #warning { color: #7a4b00; background: #fff4d6; border-radius: 4px; padding: 0.2rem 0.5rem; }
  #warning:empty { display: none; }
  .tabs button { border: 1px solid #bbb; background: #f6f6f6; border-radius: 4px 4px 0 0; }
  .tabs button.active { background: #fff; border-bottom-color: #fff; font-weight: 600; }
  .view { display: none; border-top: 1px solid #bbb; padding-top: 0.5rem; }
  .view.active { display: block; }
  .scroll { overflow: auto; max-height: 80vh; }
  details { margin: 0.4rem 0; }
  #probs-wrap { max-height: 16rem; overflow: auto; }
  table#probs { border-collapse: collapse; font-size: 0.9rem; }
  #probs th, #probs td { padding: 0.1rem 0.5rem; text-align: left; border-bottom: 1px solid #eee; }
  #probs td.tok, #probs td.top { font-family: ui-monospace, Menlo, Consolas, monospace; }
  #probs tr.miss td.tok { color: #b00; }
  .bar { display: inline-block; height: 0.7rem; background: #3b6ea8; vertical-align: middle; margin-right: 0.3rem; }
  .alt { margin-right: 0.8rem; white-space: nowrap; }
  #overview { display: grid; gap: 6px 10px; align-items: center; justify-items: center; justify-content: start; }
  #overview .hdr { font-size: 0.8rem; color: #444; }
  canvas.thumb { border: 1px solid #ccc; cursor: pointer; image-rendering: pixelated; }
  canvas.thumb:hover, canvas.thumb.selected { border-color: #e33; outline: 1px solid #e33; }
  svg text.hl { font-weight: bold; fill: #c00; }
  #hover { font-family: ui-monospace, Menlo, Consolas, monospace; min-height: 1.2rem; font-size: 0.9rem; }
  #head-toggles label { margin-right: 0.7rem; white-space: nowrap; font-size: 0.9rem; }
  .swatch { display: inline-block; width: 0.8rem; height: 0.8rem; vertical-align: middle; margin-right: 0.2rem; }
  #headview.focus .hv-line { visibility: hidden; }
  #headview.focus .hv-line.on { visibility: visible; }
  #headview text { cursor: default; }
  .pair { display: flex; gap: 1.5rem; flex-wrap: wrap; align-items: flex-start; }
  .pair > div { overflow: auto; max-width: 100%; }
</style>
</head>
<body>
<h1>dotformer attention explorer</h1>
<div class="note" id="model"></div>
<div class="note" id="mode-note"></div>
<form id="form">
  <input type="text" id="text" placeholder="type an input" autocomplete="off" aria-label="input">
  <input type="text" id="target" placeholder="reference to force-decode (optional)" autocomplete="off"
    aria-label="reference">
  <button type="submit" id="run">Run</button>
  <select id="example" title="embedded examples"></select>
</form>
<div id="status" role="alert"></div>
<div id="warning" role="status"></div>
<div><span id="output-name">Output</span>: <span id="output"></span> <span class="note" id="decoding-note"></span></div>
<details open><summary>Token probabilities and top-5 alternatives</summary>
  <div id="probs-wrap"><table id="probs"></table></div></details>
<div class="controls">
  <label>Attention <select id="kind">
    <option value="cross">cross-attention (target → source)</option>
    <option value="encoder">encoder self-attention</option>
    <option value="decoder_self">decoder self-attention</option>
  </select></label>
  <label>Layer <select id="layer"></select></label>
  <label>Head <select id="head"></select></label>
</div>
<div class="tabs controls" id="tabs">
  <button type="button" data-view="overview">Overview</button>
  <button type="button" data-view="map">Map</button>
  <button type="button" data-view="heads">Head view</button>
  <button type="button" data-view="compare">Compare</button>
</div>
<section class="view" id="view-overview">
  <div class="note">Every layer (rows) and head (columns) of the chosen kind; the last column is the mean over heads.
    Click a map to open it.</div>
  <div id="overview"></div>
  <svg id="overview-legend" xmlns="http://www.w3.org/2000/svg" width="10" height="10"></svg>
</section>
<section class="view" id="view-map">
  <div id="caption" class="note"></div>
  <div class="controls"><button type="button" id="download-png">Download PNG</button>
    <button type="button" id="download-svg">Download SVG</button></div>
  <div id="hover"></div>
  <div class="scroll"><svg id="heatmap" xmlns="http://www.w3.org/2000/svg" width="10" height="10"></svg></div>
</section>
<section class="view" id="view-heads">
  <div class="note">Lines join each query (left) to the keys it reads (right), opacity = weight (lines under 0.01 are
    not drawn); one colour per head. Point at a token to see only its lines.</div>
  <div id="head-toggles"></div>
  <div class="scroll"><svg id="headview" xmlns="http://www.w3.org/2000/svg" width="10" height="10"></svg></div>
</section>
<section class="view" id="view-compare">
  <form id="form2"><input type="text" id="text2" placeholder="a second input" autocomplete="off"
    aria-label="second input"><button type="submit" id="run2">Compare</button>
    <select id="example2" title="embedded examples"></select></form>
  <div class="note">The map chosen above (kind, layer, head) for both inputs.</div>
  <div class="pair">
    <div><h2 id="cmp-a-title"></h2>
      <svg id="cmp-a" xmlns="http://www.w3.org/2000/svg" width="10" height="10"></svg></div>
    <div><h2 id="cmp-b-title"></h2>
      <svg id="cmp-b" xmlns="http://www.w3.org/2000/svg" width="10" height="10"></svg></div>
  </div>
</section>
<script id="dotformer-data" type="application/json">__DOTFORMER_DATA__</script>
"""

# The program: the drawing functions, then the views, the inputs and the downloads (one <script>, in that order).
PAGE_TEMPLATE = (MARKUP + "<script>\n" + DRAW_SCRIPT + VIEWS_SCRIPT + "</script>\n</body>\n</html>\n").replace(
    "__MAX_SVG_CELLS__", str(MAX_SVG_CELLS)
)
