// The explorer page's views, inputs and downloads: drawing the chosen view, showing an example or a refusal, the
// requests to POST api/attention, PNG/SVG downloads, and the page's start (init). It calls the functions of draw.js.
"use strict";

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
      " (" + rows.length + "), columns " + colName + " (" + cols.length + "); each row sums to 1" +
      (example.lm ? "; zeros above the diagonal: the causal mask" : "") +
      (example.encoder ? "; no causal mask: each token reads the tokens before and after it" : "");
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
  $("output-name").textContent = example.lm ? "Text and its likeliest next token" :
    example.encoder ? "What the encoder's head reads" : example.forced ? "Reference (forced)" : "Output";
  $("output").textContent = example.output;
  $("decoding-note").textContent = example.lm
    ? "language model: each token attends to itself and the tokens before it (the causal mask: zeros above the " +
      "diagonal); the table gives the likeliest next token at each position"
    : example.encoder
    ? "encoder: each token attends to every token of the text, before and after it (only the padding is hidden); " +
      "the output is the head's: a masked language model's text with its masks filled, a classifier's label, or " +
      "a tagger's label of each token"
    : example.forced
    ? "forced decoding: the decoder reads this reference (teacher forcing); the table gives the probability of " +
      "each reference token and what the model would have chosen"
    : "greedy decoding";
  const kinds = example.kinds || Object.keys(KIND_OPTIONS);
  setOptions($("kind"), kinds, kinds.map((k) => example.lm ? LM_KIND_OPTION : KIND_OPTIONS[k]));
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
    ? (DATA.lm
      ? "Live: each text runs the language model on the local server (its causal self-attention)."
      : DATA.encoder
      ? "Live: each text runs the encoder on the local server (its self-attention over the text)."
      : "Live: each input runs the model on the local server (greedy decoding, or forced decoding of a reference).")
    : "Static page: choose one of its " + DATA.examples.length + " precomputed examples from the list. Live input " +
      "and forced decoding need serve mode (dotformer explore --checkpoint DIR).";
  // a language model and an encoder read the text itself: no reference to force-decode
  if (DATA.lm || DATA.encoder) $("target").hidden = true;
  if (DATA.mode !== "serve") {  // no model behind the page: the lists choose; a typed input or a reference cannot run
    for (const id of ["target", "run", "run2"]) $(id).hidden = true;
    for (const id of ["text", "text2"]) $(id).readOnly = true;
  }
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
