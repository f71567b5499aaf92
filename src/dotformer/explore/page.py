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
"""

from __future__ import annotations

DATA_PLACEHOLDER = "__DOTFORMER_DATA__"
MAX_SVG_CELLS = 40000  # maps with more cells are drawn as one bitmap inside the SVG (a browser slows on 10^5 rects)

PAGE_TEMPLATE = r"""<!DOCTYPE html>
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
<script>
"use strict";
const DATA = JSON.parse(document.getElementById("dotformer-data").textContent);
const NS = "http://www.w3.org/2000/svg";
const FONT = "ui-monospace, Menlo, Consolas, monospace";
const FONT_PX = 12;
const MAX_LABEL = 18;          // characters of a token label drawn; the full label is in its tooltip
const HEAD_VIEW_MIN = 0.01;    // the head view draws lines of weight >= this
const THUMB = 120;             // overview thumbnails fit in THUMB x THUMB CSS pixels
const MAX_SVG_CELLS = __MAX_SVG_CELLS__;
const HEAD_COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
                      "#bcbd22", "#17becf"];
const KIND_NAMES = {encoder: "encoder self-attention", decoder_self: "decoder self-attention",
                    cross: "cross-attention"};
const state = {example: null, second: null, view: "overview", hidden: new Set(), requests: 0};
const $ = (id) => document.getElementById(id);
const measurer = document.createElement("canvas").getContext("2d");

function svgEl(name, attrs, parent) {
  const e = document.createElementNS(NS, name);
  for (const key in attrs) e.setAttribute(key, attrs[key]);
  if (parent) parent.appendChild(e);
  return e;
}
function labelled(parent, label) {
  // a group whose tooltip is the full label (the drawn text may be shortened)
  const g = svgEl("g", {}, parent);
  svgEl("title", {}, g).textContent = label;
  return g;
}
function clear(node) { while (node.firstChild) node.removeChild(node.firstChild); }
function textWidth(text) { measurer.font = FONT_PX + "px " + FONT; return measurer.measureText(text).width; }
function short(label) { return label.length > MAX_LABEL ? label.slice(0, MAX_LABEL - 1) + "\u2026" : label; }

function colour(w) {
  // white (0) to dark blue (1)
  const t = Math.max(0, Math.min(1, w));
  const mix = (a, b) => Math.round(a + (b - a) * t);
  return [mix(247, 8), mix(251, 48), mix(255, 107)];
}
const css = (rgb) => "rgb(" + rgb.join(",") + ")";

function setOptions(select, values, names) {
  const keep = select.value;
  clear(select);
  values.forEach((value, i) => {
    const option = document.createElement("option");
    option.value = String(value); option.textContent = names[i]; select.appendChild(option);
  });
  if (values.map(String).includes(keep)) select.value = keep;
}

function labelsFor(example, kind) {
  if (kind === "encoder") return [example.src_tokens, example.src_tokens, "source (query)", "source (key)"];
  if (kind === "decoder_self") {
    return [example.tgt_tokens, example.tgt_tokens, "target input (query)", "target input (key)"];
  }
  return [example.next_tokens, example.src_tokens,
          example.forced ? "reference token (query)" : "predicted output token (query)", "source (key)"];
}

function headMatrix(example, kind, layer, head) {
  const heads = example.maps[kind][layer];
  if (head !== "avg") return heads[Number(head)];
  return heads[0].map((row, i) => row.map((_, j) => {
    let sum = 0;
    for (let h = 0; h < heads.length; h++) sum += heads[h][i][j];
    return sum / heads.length;
  }));
}
const headName = (head) => head === "avg" ? "mean of heads" : "head " + head;
function choice() {
  return {kind: $("kind").value, layer: Number($("layer").value || 0), head: $("head").value || "0"};
}

// -- the colour legend (drawn inside each SVG, so that downloads carry it) ------------------------------------------
function drawLegend(svg, x, y, height) {
  const id = "legend-gradient-" + svg.id;
  const defs = svgEl("defs", {}, svg);
  const gradient = svgEl("linearGradient", {id: id, x1: 0, y1: 1, x2: 0, y2: 0}, defs);
  for (let k = 0; k <= 10; k++) svgEl("stop", {offset: k / 10, "stop-color": css(colour(k / 10))}, gradient);
  svgEl("rect", {x: x, y: y, width: 14, height: height, fill: "url(#" + id + ")", stroke: "#888",
                 class: "legend-bar"}, svg);
  for (let k = 0; k <= 4; k++) {
    const ty = y + height - (height * k) / 4;
    svgEl("line", {x1: x + 14, x2: x + 18, y1: ty, y2: ty, stroke: "#444"}, svg);
    const t = svgEl("text", {x: x + 21, y: ty, "dominant-baseline": "central", class: "legend-tick"}, svg);
    t.textContent = (k / 4).toFixed(2);
  }
  const title = svgEl("text", {x: x, y: y - 8, class: "legend-title"}, svg);
  title.textContent = "attention weight";
}

// -- one map as SVG: labels measured so that nothing overlaps, cells, legend, hover highlight -----------------------
function drawMap(svg, example, kind, layer, head, readout) {
  clear(svg);
  svg.onmousemove = null; svg.onmouseleave = null;
  if (!example) { svg.setAttribute("width", 0); svg.setAttribute("height", 0); return; }
  const matrix = headMatrix(example, kind, layer, head);
  const [rows, cols, rowName, colName] = labelsFor(example, kind);
  svg.setAttribute("font-family", FONT); svg.setAttribute("font-size", FONT_PX);
  const cell = Math.max(16, Math.min(28, Math.floor(720 / Math.max(cols.length, 1))));
  const rowW = Math.max(20, ...rows.map((t) => textWidth(short(t))));
  const colW = Math.max(20, ...cols.map((t) => textWidth(short(t))));
  const titles = ["rows: " + rowName, "columns: " + colName];
  const left = 8 + rowW + 8, top = 12 + 16 * titles.length + colW + 8;
  const gridW = cell * cols.length, gridH = cell * rows.length;
  const legendH = Math.max(100, Math.min(240, gridH)), legendW = 30 + textWidth("attention weight");
  const width = Math.ceil(Math.max(left + gridW + 24 + legendW, 16 + Math.max(...titles.map(textWidth))));
  const height = Math.ceil(Math.max(top + gridH, top + legendH) + 12);
  svg.setAttribute("width", width); svg.setAttribute("height", height);
  svg.setAttribute("viewBox", "0 0 " + width + " " + height);
  svgEl("rect", {x: 0, y: 0, width: width, height: height, fill: "#fff", class: "background"}, svg);
  titles.forEach((title, k) => {
    svgEl("text", {x: 8, y: 16 + 16 * k, class: "axis-title"}, svg).textContent = title;
  });
  const rowLabels = rows.map((label, i) => {
    const t = svgEl("text", {x: left - 6, y: top + cell * i + cell / 2, "text-anchor": "end",
                             "dominant-baseline": "central", class: "row-label"}, labelled(svg, label));
    t.textContent = short(label);
    return t;
  });
  const colLabels = cols.map((label, j) => {
    const x = left + cell * j + cell / 2, y = top - 6;
    const t = svgEl("text", {x: x, y: y, "dominant-baseline": "central", class: "col-label",
                             transform: "rotate(-90 " + x + " " + y + ")"}, labelled(svg, label));
    t.textContent = short(label);
    return t;
  });
  if (rows.length * cols.length <= MAX_SVG_CELLS) {
    for (let i = 0; i < rows.length; i++) {
      for (let j = 0; j < cols.length; j++) {
        const w = matrix[i][j];
        svgEl("rect", {class: "cell", x: left + cell * j, y: top + cell * i, width: cell - 1, height: cell - 1,
                       fill: css(colour(w)), "data-row": i, "data-col": j, "data-weight": w}, svg);
      }
    }
  } else {  // one bitmap, one pixel per weight, scaled up without smoothing
    const canvas = document.createElement("canvas");
    canvas.width = cols.length; canvas.height = rows.length;
    paint(canvas, matrix, 1);
    svgEl("image", {class: "cells", x: left, y: top, width: gridW, height: gridH, preserveAspectRatio: "none",
                    href: canvas.toDataURL("image/png"), style: "image-rendering: pixelated"}, svg);
  }
  drawLegend(svg, left + gridW + 24, top, legendH);
  const bandRow = svgEl("rect", {class: "hl-band", id: svg.id + "-hl-row", x: left - 1, width: gridW + 1,
    height: cell, fill: "none", stroke: "#e33", "stroke-width": 2, visibility: "hidden", "pointer-events": "none"},
    svg);
  const bandCol = svgEl("rect", {class: "hl-band", id: svg.id + "-hl-col", y: top - 1, height: gridH + 1,
    width: cell, fill: "none", stroke: "#e33", "stroke-width": 2, visibility: "hidden", "pointer-events": "none"},
    svg);
  let lit = [];
  const unlight = () => {
    lit.forEach((t) => t.classList.remove("hl")); lit = [];
    bandRow.setAttribute("visibility", "hidden"); bandCol.setAttribute("visibility", "hidden");
    if (readout) readout.textContent = "";
  };
  svg.onmouseleave = unlight;
  svg.onmousemove = (event) => {
    const box = svg.getBoundingClientRect();
    const x = event.clientX - box.left, y = event.clientY - box.top;
    const i = Math.floor((y - top) / cell), j = Math.floor((x - left) / cell);
    unlight();
    if (i < 0 || j < 0 || i >= rows.length || j >= cols.length) return;
    bandRow.setAttribute("y", top + cell * i - 1); bandRow.setAttribute("visibility", "visible");
    bandCol.setAttribute("x", left + cell * j - 1); bandCol.setAttribute("visibility", "visible");
    lit = [rowLabels[i], colLabels[j]];
    lit.forEach((t) => t.classList.add("hl"));
    if (readout) {
      readout.textContent = "row " + i + " " + rows[i] + " \u2192 column " + j + " " + cols[j] + ": " +
        matrix[i][j].toFixed(4);
    }
  };
}

function paint(canvas, matrix, c) {
  // each weight as a c x c block of pixels, written straight into the canvas's pixel array (fast for big maps)
  const ctx = canvas.getContext("2d");
  const image = ctx.createImageData(canvas.width, canvas.height);
  const data = image.data;
  for (let i = 0; i < matrix.length; i++) {
    for (let j = 0; j < matrix[i].length; j++) {
      const [r, g, b] = colour(matrix[i][j]);
      for (let y = i * c; y < (i + 1) * c; y++) {
        for (let x = j * c, k = 4 * (y * canvas.width + j * c); x < (j + 1) * c; x++, k += 4) {
          data[k] = r; data[k + 1] = g; data[k + 2] = b; data[k + 3] = 255;
        }
      }
    }
  }
  ctx.putImageData(image, 0, 0);
}

// -- overview: every layer x head at once ---------------------------------------------------------------------------
function drawOverview() {
  const grid = $("overview");
  clear(grid);
  const legend = $("overview-legend");
  clear(legend);
  const example = state.example;
  if (!example) return;
  const {kind, layer, head} = choice();
  const [rows, cols] = labelsFor(example, kind);
  const c = Math.max(1, Math.floor(THUMB / Math.max(rows.length, cols.length)));
  const heads = [...Array(example.heads).keys()].map(String).concat(["avg"]);
  grid.style.gridTemplateColumns = "auto repeat(" + heads.length + ", auto)";
  const cellText = (text, cls) => {
    const d = document.createElement("div"); d.className = cls || "hdr"; d.textContent = text; grid.appendChild(d);
  };
  cellText("");
  heads.forEach((h) => cellText(h === "avg" ? "mean" : "head " + h));
  for (let l = 0; l < example.layers; l++) {
    cellText("layer " + l);
    heads.forEach((h) => {
      const canvas = document.createElement("canvas");
      canvas.className = "thumb"; canvas.dataset.layer = l; canvas.dataset.head = h; canvas.dataset.cell = c;
      canvas.width = cols.length * c; canvas.height = rows.length * c;
      const scale = Math.min(1, THUMB / Math.max(canvas.width, canvas.height));
      // a very long, thin map (10 outputs x 1000 inputs) is stretched to a quarter of the box on its short side
      canvas.style.width = Math.max(THUMB / 4, canvas.width * scale) + "px";
      canvas.style.height = Math.max(THUMB / 4, canvas.height * scale) + "px";
      canvas.title = KIND_NAMES[kind] + ", layer " + l + ", " + headName(h);
      if (l === layer && h === head) canvas.classList.add("selected");
      paint(canvas, headMatrix(example, kind, l, h), c);
      canvas.addEventListener("click", () => {
        $("layer").value = String(l); $("head").value = h; setView("map"); drawAll();
      });
      grid.appendChild(canvas);
    });
  }
  legend.setAttribute("font-family", FONT); legend.setAttribute("font-size", FONT_PX);
  legend.setAttribute("width", 250 + textWidth("attention weight")); legend.setAttribute("height", 50);
  drawHorizontalLegend(legend);
}

function drawHorizontalLegend(svg) {
  const id = "legend-gradient-" + svg.id;
  const gradient = svgEl("linearGradient", {id: id, x1: 0, y1: 0, x2: 1, y2: 0}, svgEl("defs", {}, svg));
  for (let k = 0; k <= 10; k++) svgEl("stop", {offset: k / 10, "stop-color": css(colour(k / 10))}, gradient);
  svgEl("rect", {x: 20, y: 8, width: 200, height: 14, fill: "url(#" + id + ")", stroke: "#888",
                 class: "legend-bar"}, svg);
  for (let k = 0; k <= 4; k++) {
    const t = svgEl("text", {x: 20 + 50 * k, y: 36, "text-anchor": "middle", class: "legend-tick"}, svg);
    t.textContent = (k / 4).toFixed(2);
  }
  svgEl("text", {x: 230, y: 20, class: "legend-title"}, svg).textContent = "attention weight";
}

// -- head view: lines from queries to keys, one colour per head -----------------------------------------------------
function drawHeadToggles() {
  const box = $("head-toggles");
  clear(box);
  if (!state.example) return;
  for (let h = 0; h < state.example.heads; h++) {
    const label = document.createElement("label");
    const input = document.createElement("input");
    input.type = "checkbox"; input.dataset.head = h; input.checked = !state.hidden.has(h);
    input.addEventListener("change", () => {
      if (input.checked) state.hidden.delete(h); else state.hidden.add(h);
      drawHeadView();
    });
    const swatch = document.createElement("span");
    swatch.className = "swatch"; swatch.style.background = HEAD_COLOURS[h % HEAD_COLOURS.length];
    label.append(input, swatch, "head " + h);
    box.appendChild(label);
  }
}

function drawHeadView() {
  const svg = $("headview");
  clear(svg);
  svg.classList.remove("focus");
  const example = state.example;
  if (!example) { svg.setAttribute("width", 0); svg.setAttribute("height", 0); return; }
  const {kind, layer} = choice();
  const [rows, cols, rowName, colName] = labelsFor(example, kind);
  const step = 20, top = 30;
  const rowW = Math.max(textWidth(rowName), ...rows.map((t) => textWidth(short(t))));
  const colW = Math.max(textWidth(colName), ...cols.map((t) => textWidth(short(t))));
  const leftX = 10 + rowW, rightX = leftX + 260;
  const width = Math.ceil(rightX + colW + 20), height = top + step * Math.max(rows.length, cols.length) + 10;
  svg.setAttribute("width", width); svg.setAttribute("height", height);
  svg.setAttribute("font-family", FONT); svg.setAttribute("font-size", FONT_PX);
  svgEl("text", {x: leftX, y: 14, "text-anchor": "end", class: "axis-title"}, svg).textContent = rowName;
  svgEl("text", {x: rightX, y: 14, class: "axis-title"}, svg).textContent = colName;
  const lines = svgEl("g", {}, svg);
  const heads = example.maps[kind][layer];
  for (let h = 0; h < heads.length; h++) {
    if (state.hidden.has(h)) continue;
    const colour = HEAD_COLOURS[h % HEAD_COLOURS.length];
    for (let i = 0; i < rows.length; i++) {
      for (let j = 0; j < cols.length; j++) {
        const w = heads[h][i][j];
        if (w < HEAD_VIEW_MIN) continue;
        svgEl("line", {class: "hv-line", x1: leftX + 6, y1: top + step * i, x2: rightX - 6, y2: top + step * j,
                       stroke: colour, "stroke-opacity": w, "stroke-width": 2, "data-head": h, "data-row": i,
                       "data-col": j, "data-weight": w}, lines);
      }
    }
  }
  const focus = (attr, index) => {
    svg.classList.add("focus");
    svg.querySelectorAll(".hv-line").forEach((line) => {
      line.classList.toggle("on", line.getAttribute(attr) === String(index));
    });
  };
  const unfocus = () => svg.classList.remove("focus");
  rows.forEach((label, i) => {
    const t = svgEl("text", {x: leftX, y: top + step * i, "text-anchor": "end", "dominant-baseline": "central",
                             class: "hv-left"}, labelled(svg, label));
    t.textContent = short(label);
    t.addEventListener("mouseenter", () => focus("data-row", i)); t.addEventListener("mouseleave", unfocus);
  });
  cols.forEach((label, j) => {
    const t = svgEl("text", {x: rightX, y: top + step * j, "dominant-baseline": "central", class: "hv-right"},
                    labelled(svg, label));
    t.textContent = short(label);
    t.addEventListener("mouseenter", () => focus("data-col", j)); t.addEventListener("mouseleave", unfocus);
  });
}

// -- probabilities ---------------------------------------------------------------------------------------------------
function drawProbs() {
  const table = $("probs");
  clear(table);
  const example = state.example;
  if (!example || !example.steps) return;
  const head = table.insertRow();
  [ "#", example.forced ? "reference token" : "output token", "probability",
    "top-" + (example.steps[0] ? example.steps[0].top.length : 0) + " (the model's softmax)"].forEach((name) => {
    const th = document.createElement("th"); th.textContent = name; head.appendChild(th);
  });
  example.steps.forEach((s, i) => {
    const row = table.insertRow();
    row.dataset.index = i;
    if (s.top.length && s.top[0][0] !== s.token) row.className = "miss";
    row.insertCell().textContent = String(i + 1);
    const tok = row.insertCell(); tok.className = "tok"; tok.textContent = s.token;
    const p = row.insertCell(); p.className = "p"; p.dataset.p = s.p;
    const bar = document.createElement("span"); bar.className = "bar"; bar.style.width = Math.round(60 * s.p) + "px";
    p.append(bar, (100 * s.p).toFixed(1) + "%");
    const top = row.insertCell(); top.className = "top";
    s.top.forEach(([label, q]) => {
      const alt = document.createElement("span"); alt.className = "alt"; alt.dataset.token = label; alt.dataset.p = q;
      alt.textContent = label + " " + (100 * q).toFixed(1) + "%"; top.appendChild(alt);
    });
  });
}

// -- everything ------------------------------------------------------------------------------------------------------
function drawCompare() {
  const {kind, layer, head} = choice();
  const title = (e) => e ? e.source + " \u2192 " + e.output + (e.forced ? " (forced)" : "") : "";
  $("cmp-a-title").textContent = title(state.example);
  $("cmp-b-title").textContent = state.second ? title(state.second) : "";
  drawMap($("cmp-a"), state.example, kind, layer, head, null);
  const fits = state.second && state.example && state.second.layers === state.example.layers &&
    state.second.heads === state.example.heads;
  drawMap($("cmp-b"), fits ? state.second : null, kind, layer, head, null);
}

function drawAll() {
  const example = state.example;
  const {kind, layer, head} = choice();
  if (example) {
    const [rows, cols, rowName, colName] = labelsFor(example, kind);
    $("caption").textContent = KIND_NAMES[kind] + ", layer " + layer + ", " + headName(head) + ": rows " + rowName +
      " (" + rows.length + "), columns " + colName + " (" + cols.length + "); each row sums to 1";
  } else {
    $("caption").textContent = "";
  }
  $("hover").textContent = "";
  drawMap($("heatmap"), example, kind, layer, head, $("hover"));
  drawOverview();
  drawHeadView();
  drawCompare();
}

function setView(view) {
  state.view = view;
  document.querySelectorAll(".view").forEach((v) => v.classList.toggle("active", v.id === "view-" + view));
  document.querySelectorAll("#tabs button").forEach((b) => b.classList.toggle("active", b.dataset.view === view));
}

function clearResult(message) {
  state.example = null;
  $("output").textContent = "";
  $("decoding-note").textContent = "";
  $("warning").textContent = "";
  $("status").textContent = message || "";
  drawProbs(); drawHeadToggles(); drawAll();
}

function show(example) {
  state.example = example;
  state.hidden.clear();
  $("output-name").textContent = example.forced ? "Reference (forced)" : "Output";
  $("output").textContent = example.output;
  $("decoding-note").textContent = example.forced
    ? "forced decoding: the decoder reads this reference (teacher forcing); the table gives the probability of " +
      "each reference token and what the model would have chosen"
    : "greedy decoding";
  $("status").textContent = "";
  $("warning").textContent = example.warning || "";
  setOptions($("layer"), [...Array(example.layers).keys()], [...Array(example.layers).keys()].map((l) => "layer " + l));
  const heads = [...Array(example.heads).keys()];
  setOptions($("head"), heads.concat(["avg"]), heads.map((h) => "head " + h).concat(["mean of heads"]));
  drawProbs(); drawHeadToggles(); drawAll();
  document.body.dataset.shown = (Number(document.body.dataset.shown || 0) + 1).toString();
}

async function fetchExample(text, target) {
  const body = {text: text};
  if (target) body.target = target;
  let reply;
  try {
    reply = await fetch("api/attention", {
      method: "POST", headers: {"Content-Type": "application/json"}, body: JSON.stringify(body),
    });
  } catch (err) {
    throw new Error("the server did not answer (" + err + ")");
  }
  const data = await reply.json().catch(() => ({error: "the server's reply is not JSON"}));
  if (!reply.ok) throw new Error("error: " + data.error);
  return data;
}

async function run(event) {
  if (event) event.preventDefault();
  const text = $("text").value.trim(), target = $("target").value.trim();
  if (!text) { clearResult("type an input first"); return; }
  if (DATA.mode === "serve") {
    const ticket = ++state.requests;  // only the latest request's reply is shown
    clearResult("running\u2026");
    try {
      const example = await fetchExample(text, target);
      if (ticket === state.requests) show(example);
    } catch (err) {
      if (ticket === state.requests) clearResult(err.message);
    }
    return;
  }
  const found = DATA.examples.find((e) => e.source === text && (!target || e.target === target));
  if (found) { show(found); return; }
  clearResult(target
    ? "forced decoding of a reference needs serve mode: `dotformer explore --checkpoint DIR`"
    : "this page holds only the examples in the list; for live input run " +
      "`dotformer explore --checkpoint DIR` (serve mode)");
}

async function runSecond(event) {
  if (event) event.preventDefault();
  const text = $("text2").value.trim();
  if (!text) return;
  if (DATA.mode === "serve") {
    try { state.second = await fetchExample(text, ""); $("status").textContent = ""; }
    catch (err) { state.second = null; $("status").textContent = err.message; }
  } else {
    state.second = DATA.examples.find((e) => e.source === text) || null;
    if (!state.second) $("status").textContent = "this page holds only the examples in the list (serve mode runs any)";
  }
  drawCompare();
}

// -- download --------------------------------------------------------------------------------------------------------
function svgMarkup(svg) {
  const copy = svg.cloneNode(true);
  copy.setAttribute("xmlns", NS);
  copy.querySelectorAll(".hl-band").forEach((e) => e.remove());
  copy.querySelectorAll(".hl").forEach((e) => e.classList.remove("hl"));
  return '<?xml version="1.0" encoding="UTF-8"?>\n' + new XMLSerializer().serializeToString(copy);
}

function pngDataUrl(svg) {
  return new Promise((resolve, reject) => {
    const width = Number(svg.getAttribute("width")), height = Number(svg.getAttribute("height"));
    const scale = Math.min(2, 16000 / Math.max(width, height, 1));
    const image = new Image();
    image.onload = () => {
      const canvas = document.createElement("canvas");
      canvas.width = Math.round(width * scale); canvas.height = Math.round(height * scale);
      const ctx = canvas.getContext("2d");
      ctx.fillStyle = "#fff"; ctx.fillRect(0, 0, canvas.width, canvas.height);
      ctx.drawImage(image, 0, 0, canvas.width, canvas.height);
      resolve(canvas.toDataURL("image/png"));
    };
    image.onerror = () => reject(new Error("the browser could not render the map as PNG"));
    image.src = "data:image/svg+xml;charset=utf-8," + encodeURIComponent(svgMarkup(svg));
  });
}

function fileName(extension) {
  const {kind, layer, head} = choice();
  return "attention-" + kind + "-layer" + layer + "-" + (head === "avg" ? "mean" : "head" + head) + extension;
}
function save(name, url) {
  const a = document.createElement("a");
  a.href = url; a.download = name; document.body.appendChild(a); a.click(); a.remove();
}

function init() {
  $("model").textContent = DATA.title || "";
  $("mode-note").textContent = DATA.mode === "serve"
    ? "Live: each input runs the model on the local server (greedy decoding, or forced decoding of a reference)."
    : "Static page: " + DATA.examples.length + " precomputed examples. Live input and forced decoding need serve " +
      "mode (dotformer explore --checkpoint DIR).";
  for (const id of ["example", "example2"]) {
    const select = $(id);
    clear(select);
    const first = document.createElement("option");
    first.value = ""; first.textContent = DATA.examples.length ? "examples\u2026" : "(no examples)";
    select.appendChild(first);
    DATA.examples.forEach((e, i) => {
      const option = document.createElement("option");
      option.value = String(i); option.textContent = e.source + (e.forced ? " (forced: " + e.target + ")" : "");
      select.appendChild(option);
    });
  }
  $("example").addEventListener("change", () => {
    if ($("example").value === "") return;
    const example = DATA.examples[Number($("example").value)];
    $("text").value = example.source; $("target").value = example.forced ? example.target : "";
    show(example);
  });
  $("example2").addEventListener("change", () => {
    if ($("example2").value === "") return;
    state.second = DATA.examples[Number($("example2").value)];
    $("text2").value = state.second.source;
    drawCompare();
  });
  $("form").addEventListener("submit", run);
  $("form2").addEventListener("submit", runSecond);
  ["kind", "layer", "head"].forEach((id) => $(id).addEventListener("change", drawAll));
  document.querySelectorAll("#tabs button").forEach((b) => b.addEventListener("click", () => setView(b.dataset.view)));
  $("download-svg").addEventListener("click", () => {
    const blob = new Blob([svgMarkup($("heatmap"))], {type: "image/svg+xml"});
    const url = URL.createObjectURL(blob);
    save(fileName(".svg"), url);
    setTimeout(() => URL.revokeObjectURL(url), 10000);
  });
  $("download-png").addEventListener("click", () => {
    pngDataUrl($("heatmap")).then((url) => save(fileName(".png"), url),
                                  (err) => { $("status").textContent = err.message; });
  });
  const wanted = location.hash.replace("#", "");
  setView(["overview", "map", "heads", "compare"].includes(wanted) ? wanted : "overview");
  if (DATA.examples.length) {
    const e = DATA.examples[0];
    $("text").value = e.source; $("target").value = e.forced ? e.target : "";
    show(e);
    if (DATA.examples.length > 1) { state.second = DATA.examples[1]; $("text2").value = state.second.source; }
    drawCompare();
  } else {
    clearResult("");
  }
  window.dotformer = {state: state, svgMarkup: svgMarkup, pngDataUrl: pngDataUrl, colour: colour};
  document.body.setAttribute("data-ready", "1");
}
init();
</script>
</body>
</html>
""".replace("__MAX_SVG_CELLS__", str(MAX_SVG_CELLS))
