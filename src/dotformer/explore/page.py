"""The explorer's HTML page: one self-contained file (inline CSS and JavaScript, no network access).

The page reads one JSON object, embedded where the template says ``__DOTFORMER_DATA__``:

    {"mode": "serve" | "static", "title": str, "examples": [example, ...]}

and each example is :func:`dotformer.explore.data.maps_to_json` of an :class:`dotformer.plots.AttentionMaps`.
In "serve" mode the page sends the typed input to ``POST api/attention`` ({"text": ...}) and draws the reply; in
"static" mode it can only show the embedded examples (typing one of them shows it; anything else explains that live
input needs ``dotformer explore --checkpoint DIR``).

The heatmap is an SVG with one ``<rect class="cell">`` per (query, key) pair, carrying ``data-row``, ``data-col``
and ``data-weight`` attributes (the tests count and read them).
"""

from __future__ import annotations

DATA_PLACEHOLDER = "__DOTFORMER_DATA__"

PAGE_TEMPLATE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>dotformer explorer</title>
<style>
  body { font-family: system-ui, sans-serif; margin: 1.5rem; color: #222; max-width: 70rem; }
  h1 { font-size: 1.3rem; margin: 0 0 0.3rem 0; }
  .note { color: #555; font-size: 0.9rem; }
  form, .controls { margin: 0.8rem 0; display: flex; gap: 0.5rem; flex-wrap: wrap; align-items: center; }
  input[type=text] { flex: 1; min-width: 16rem; padding: 0.35rem; font-size: 1rem; }
  button, select { padding: 0.3rem 0.6rem; font-size: 0.95rem; }
  #output { font-size: 1.1rem; padding: 0.4rem 0.6rem; background: #f3f6fa; border-radius: 4px; min-height: 1.4rem; }
  #status { color: #a00; min-height: 1.2rem; margin: 0.3rem 0; }
  svg text { font-size: 11px; font-family: ui-monospace, monospace; }
  rect.cell:hover { stroke: #e33; stroke-width: 2; }
</style>
</head>
<body>
<h1>dotformer attention explorer</h1>
<div class="note" id="model"></div>
<div class="note" id="mode-note"></div>
<form id="form">
  <input type="text" id="text" placeholder="type an input" autocomplete="off">
  <button type="submit" id="run">Run</button>
  <select id="example" title="embedded examples"></select>
</form>
<div>Output: <span id="output"></span></div>
<div id="status"></div>
<div class="controls">
  <label>Attention <select id="kind">
    <option value="cross">cross-attention (target → source)</option>
    <option value="encoder">encoder self-attention</option>
    <option value="decoder_self">decoder self-attention</option>
  </select></label>
  <label>Layer <select id="layer"></select></label>
  <label>Head <select id="head"></select></label>
</div>
<div id="caption" class="note"></div>
<svg id="heatmap" xmlns="http://www.w3.org/2000/svg" width="10" height="10"></svg>
<script id="dotformer-data" type="application/json">__DOTFORMER_DATA__</script>
<script>
"use strict";
const DATA = JSON.parse(document.getElementById("dotformer-data").textContent);
let current = null;
const $ = (id) => document.getElementById(id);

function setOptions(select, count, prefix) {
  const keep = select.value;
  select.innerHTML = "";
  for (let i = 0; i < count; i++) {
    const option = document.createElement("option");
    option.value = String(i);
    option.textContent = prefix + " " + i;
    select.appendChild(option);
  }
  if (keep !== "" && Number(keep) < count) select.value = keep;
}

function colour(w) {
  // white (0) to dark blue (1)
  const t = Math.max(0, Math.min(1, w));
  const mix = (a, b) => Math.round(a + (b - a) * t);
  return "rgb(" + mix(247, 8) + "," + mix(251, 48) + "," + mix(255, 107) + ")";
}

function labelsFor(example, kind) {
  if (kind === "encoder") return [example.src_tokens, example.src_tokens, "source", "source"];
  if (kind === "decoder_self") return [example.tgt_tokens, example.tgt_tokens, "target (decoder input)", "target"];
  return [example.out_tokens, example.src_tokens, "output token being predicted", "source"];
}

function draw() {
  const svg = $("heatmap");
  while (svg.firstChild) svg.removeChild(svg.firstChild);
  if (!current) return;
  const kind = $("kind").value, layer = Number($("layer").value), head = Number($("head").value);
  const matrix = current.maps[kind][layer][head];
  const [rows, cols, rowName, colName] = labelsFor(current, kind);
  const longest = (labels) => Math.max(...labels.map((s) => s.length), 4);
  const cell = 24, left = 12 + 8 * longest(rows), top = 12 + 6 * longest(cols);
  const ns = "http://www.w3.org/2000/svg";
  svg.setAttribute("width", left + cell * cols.length + 10);
  svg.setAttribute("height", top + cell * rows.length + 10);
  for (let i = 0; i < rows.length; i++) {
    const text = document.createElementNS(ns, "text");
    text.setAttribute("x", left - 6); text.setAttribute("y", top + cell * i + cell * 0.65);
    text.setAttribute("text-anchor", "end"); text.setAttribute("class", "row-label");
    text.textContent = rows[i]; svg.appendChild(text);
  }
  for (let j = 0; j < cols.length; j++) {
    const text = document.createElementNS(ns, "text");
    const x = left + cell * j + cell * 0.65, y = top - 6;
    text.setAttribute("x", x); text.setAttribute("y", y); text.setAttribute("class", "col-label");
    text.setAttribute("transform", "rotate(-60 " + x + " " + y + ")");
    text.textContent = cols[j]; svg.appendChild(text);
  }
  for (let i = 0; i < rows.length; i++) {
    for (let j = 0; j < cols.length; j++) {
      const w = matrix[i][j];
      const rect = document.createElementNS(ns, "rect");
      rect.setAttribute("class", "cell");
      rect.setAttribute("x", left + cell * j); rect.setAttribute("y", top + cell * i);
      rect.setAttribute("width", cell - 1); rect.setAttribute("height", cell - 1);
      rect.setAttribute("fill", colour(w));
      rect.setAttribute("data-row", i); rect.setAttribute("data-col", j); rect.setAttribute("data-weight", w);
      const title = document.createElementNS(ns, "title");
      title.textContent = rows[i] + " \\u2192 " + cols[j] + ": " + w.toFixed(3);
      rect.appendChild(title); svg.appendChild(rect);
    }
  }
  $("caption").textContent = "rows: " + rowName + ", columns: " + colName + " (layer " + layer + ", head " + head +
    "; each row sums to 1)";
}

function show(example) {
  current = example;
  $("output").textContent = example.output;
  $("status").textContent = "";
  setOptions($("layer"), example.layers, "layer");
  setOptions($("head"), example.heads, "head");
  draw();
}

async function run(event) {
  if (event) event.preventDefault();
  const text = $("text").value.trim();
  if (!text) { $("status").textContent = "type an input first"; return; }
  if (DATA.mode === "serve") {
    $("status").textContent = "running…";
    try {
      const reply = await fetch("api/attention", {
        method: "POST", headers: {"Content-Type": "application/json"}, body: JSON.stringify({text: text}),
      });
      const body = await reply.json();
      if (!reply.ok) { $("status").textContent = "error: " + body.error; return; }
      show(body);
    } catch (err) {
      $("status").textContent = "the server did not answer (" + err + ")";
    }
    return;
  }
  const found = DATA.examples.find((e) => e.source === text);
  if (found) { show(found); return; }
  $("status").textContent = "this page holds only the examples in the list; for live input run " +
    "`dotformer explore --checkpoint DIR` (serve mode)";
}

function init() {
  $("model").textContent = DATA.title || "";
  $("mode-note").textContent = DATA.mode === "serve"
    ? "Live: each input runs the model on the local server (greedy decoding)."
    : "Static page: " + DATA.examples.length + " precomputed examples. Live input needs serve mode " +
      "(dotformer explore --checkpoint DIR).";
  const select = $("example");
  select.innerHTML = "";
  const first = document.createElement("option");
  first.value = ""; first.textContent = DATA.examples.length ? "examples…" : "(no examples)";
  select.appendChild(first);
  DATA.examples.forEach((e, i) => {
    const option = document.createElement("option");
    option.value = String(i); option.textContent = e.source; select.appendChild(option);
  });
  select.addEventListener("change", () => {
    if (select.value === "") return;
    const example = DATA.examples[Number(select.value)];
    $("text").value = example.source;
    show(example);
  });
  $("form").addEventListener("submit", run);
  ["kind", "layer", "head"].forEach((id) => $(id).addEventListener("change", draw));
  if (DATA.examples.length) { $("text").value = DATA.examples[0].source; show(DATA.examples[0]); }
  document.body.setAttribute("data-ready", "1");
}
init();
</script>
</body>
</html>
"""
