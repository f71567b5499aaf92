// The explorer page's drawing code: shared constants and helpers, the colour scale and legend, one map as SVG,
// the overview's thumbnails, the head view, the probabilities table. The page runs it before views.js, which calls it.
"use strict";
const DATA = JSON.parse(document.getElementById("dotformer-data").textContent);
const NS = "http://www.w3.org/2000/svg";
const FONT = "ui-monospace, Menlo, Consolas, monospace";
const FONT_PX = 12;
const MAX_LABEL = 18;          // characters of a token label drawn; the full label is in its tooltip
const HEAD_VIEW_MIN = 0.01;    // the head view draws lines of weight >= this
const THUMB = 120;             // overview thumbnails fit in THUMB x THUMB CSS pixels (less where many heads share a row)
const OVERVIEW_LABEL_PX = 70;  // the overview's "layer N" column
const MAX_SVG_CELLS = 40000;
const HEAD_COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
                      "#bcbd22", "#17becf"];
const KIND_NAMES = {encoder: "encoder self-attention", decoder_self: "decoder self-attention",
                    cross: "cross-attention"};
const KIND_OPTIONS = {cross: "cross-attention (target \u2192 source)", encoder: "encoder self-attention",
                      decoder_self: "decoder self-attention"};  // the kind list; a language model's is its own
const LM_KIND_OPTION = "causal self-attention (the text)";
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
  if (kind === "decoder_self" && example.lm) {
    return [example.tgt_tokens, example.tgt_tokens, "text (query)", "text (key)"];
  }
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
  const heads = [...Array(example.heads).keys()].map(String).concat(["avg"]);
  // the thumbnails of one layer share the page's width (12 heads and their mean fit a 1300-pixel window)
  const room = (grid.parentElement ? grid.parentElement.clientWidth : 0) || window.innerWidth || 1200;
  const box = Math.max(THUMB / 3, Math.min(THUMB, Math.floor((room - OVERVIEW_LABEL_PX) / heads.length) - 10));
  const c = Math.max(1, Math.floor(box / Math.max(rows.length, cols.length)));
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
      const scale = Math.min(1, box / Math.max(canvas.width, canvas.height));
      // a very long, thin map (10 outputs x 1000 inputs) is stretched to a quarter of the box on its short side
      canvas.style.width = Math.max(box / 4, canvas.width * scale) + "px";
      canvas.style.height = Math.max(box / 4, canvas.height * scale) + "px";
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
  [ "#", example.lm ? "likeliest next token" : example.forced ? "reference token" : "output token", "probability",
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
