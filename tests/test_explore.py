"""Tests of dotformer.explore: the JSON the page draws, the local server, the static page, and the page itself in
headless Chromium (driven through chromedriver's W3C WebDriver endpoints with plain HTTP; skipped without Chromium).

CI needs the Debian packages ``chromium`` and ``chromium-driver`` for the browser test.
"""

from __future__ import annotations

import base64
import io
import json
import math
import re
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from dotformer.checkpoint import LoadedCheckpoint, load_checkpoint, save_checkpoint
from dotformer.cli import main
from dotformer.config import ModelConfig
from dotformer.data.tokenize.tokenizer_files import train_tokenizer
from dotformer.data.tokenize.tokenizers import BOS_ID, EOS_ID, PAD_ID
from dotformer.decoding.attention_maps import attention_weights
from dotformer.errors import ConfigError
from dotformer.explore import ExplorerServer, build_page, example_json, maps_to_json, write_page
from dotformer.explore.data import MAX_TEXT_CHARS, TOP_K
from dotformer.explore.page import (
    DATA_PLACEHOLDER,
    SCRIPTS,
    SCRIPTS_PLACEHOLDER,
    STYLE_PLACEHOLDER,
    page_template,
    static_text,
)
from dotformer.model import Transformer

WORDS = ["cat", "dog", "bird", "head"]
PHONES = ["K AE1 T", "D AO1 G", "B ER1 D", "HH EH1 D"]


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


@pytest.fixture(scope="module")
def loaded(one_thread: None, tmp_path_factory: pytest.TempPathFactory) -> LoadedCheckpoint:
    """A 2-layer, 2-head model fitted briefly to four words (so that outputs are short), as a real checkpoint."""
    src_tok, tgt_tok = train_tokenizer("char", WORDS), train_tokenizer("symbol", PHONES)
    torch.manual_seed(0)
    config = ModelConfig(
        src_vocab_size=src_tok.vocab_size,
        tgt_vocab_size=tgt_tok.vocab_size,
        d_model=16,
        num_heads=2,
        d_ff=32,
        num_encoder_layers=2,
        num_decoder_layers=2,
        dropout=0.0,
    )
    model = Transformer(config)
    src = torch.nn.utils.rnn.pad_sequence(
        [torch.tensor([*src_tok.encode(w), EOS_ID]) for w in WORDS], batch_first=True, padding_value=PAD_ID
    )
    tgt = torch.nn.utils.rnn.pad_sequence(
        [torch.tensor([BOS_ID, *tgt_tok.encode(p), EOS_ID]) for p in PHONES], batch_first=True, padding_value=PAD_ID
    )
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(120):
        logits = model(src, tgt[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), tgt[:, 1:].flatten(), ignore_index=PAD_ID)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    directory = tmp_path_factory.mktemp("explore") / "ckpt"
    save_checkpoint(directory, model, src_tok, tgt_tok, {"task": "g2p"})
    return load_checkpoint(directory)


@pytest.fixture(scope="module")
def server(loaded: LoadedCheckpoint) -> Iterator[ExplorerServer]:
    with ExplorerServer(loaded, port=0, examples=["dog"]) as explorer:  # served from a thread
        yield explorer


def post(url: str, body: bytes, content_type: str = "application/json") -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(url, data=body, headers={"Content-Type": content_type}, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=30) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def teacher_forced(loaded: LoadedCheckpoint, text: str, target_ids: list[int]) -> dict[str, Any]:
    """An independent computation: encoder and decoder weights and the softmax of one teacher-forced pass."""
    model = loaded.model
    src = torch.tensor([[*loaded.src_tokenizer.encode(text), EOS_ID]])  # (1, S)
    tgt = torch.tensor([[BOS_ID, *target_ids]])  # (1, T)
    with torch.no_grad():
        enc = model.encode(src, need_weights=True)
        dec = model.decode(tgt, enc.memory, src_mask=model.source_mask(src), need_weights=True)
        probs = torch.softmax(model(src, tgt)[0].double(), dim=-1).numpy()  # (T, V)
    return {
        "encoder": np.stack([w[0].numpy() for w in enc.self_weights]),
        "decoder_self": np.stack([w[0].numpy() for w in dec.self_weights]),
        "cross": np.stack([w[0].numpy() for w in dec.cross_weights]),
        "probs": probs,
    }


def check_steps(steps: list[dict[str, Any]], probs: np.ndarray, scored_ids: list[int], tokenizer: Any) -> None:
    """Each position's probability and its top-k equal the model's softmax."""
    assert len(steps) == len(scored_ids) == probs.shape[0]
    for step, row, token_id in zip(steps, probs, scored_ids, strict=True):
        assert step["id"] == token_id
        assert step["p"] == pytest.approx(row[token_id], abs=1e-6)
        best = np.argsort(-row)[:TOP_K]
        assert [p for _, p in step["top"]] == pytest.approx(row[best].tolist(), abs=1e-6)
        assert step["top"][0][0] == (tokenizer.id_to_token(int(best[0])) if best[0] > 3 else step["top"][0][0])


@pytest.mark.numerical
def test_maps_to_json_holds_the_models_weights_and_probabilities(loaded: LoadedCheckpoint) -> None:
    maps = attention_weights(loaded, "cat")
    data = json.loads(json.dumps(example_json(loaded, "cat")))
    assert data["output"] == "K AE1 T" == maps.output_text
    assert (data["layers"], data["heads"]) == (2, 2)
    assert data["forced"] is False and data["warning"] == "" and data["unknown"] == 0
    reference = teacher_forced(loaded, "cat", loaded.tgt_tokenizer.encode("K AE1 T"))
    for kind in ("encoder", "decoder_self", "cross"):
        np.testing.assert_allclose(np.array(data["maps"][kind]), maps.kind(kind), atol=5e-5)
        np.testing.assert_allclose(np.array(data["maps"][kind]), reference[kind], atol=5e-5)
    assert data["src_tokens"] == ["c", "a", "t", "</s>"]
    assert data["next_tokens"] == ["K", "AE1", "T", "</s>"] == [s["token"] for s in data["steps"]]
    greedy = [*loaded.tgt_tokenizer.encode("K AE1 T"), EOS_ID]
    check_steps(data["steps"], reference["probs"], greedy, loaded.tgt_tokenizer)
    for step in data["steps"]:  # greedy decoding picked the most probable token at every position
        assert step["top"][0] == [step["token"], step["p"]]
    assert maps_to_json(maps)["steps"] == []  # without a tokenizer: no names for the alternatives


@pytest.mark.numerical
def test_forced_decoding_equals_teacher_forcing(loaded: LoadedCheckpoint) -> None:
    reference_text = "D AO1 G"  # "cat" force-decoded with the phones of "dog": the model did not choose these
    data = json.loads(json.dumps(example_json(loaded, "cat", target=reference_text)))
    ids = loaded.tgt_tokenizer.encode(reference_text)
    reference = teacher_forced(loaded, "cat", ids)
    assert data["forced"] is True and data["target"] == reference_text and data["output"] == reference_text
    assert data["tgt_tokens"] == ["<s>", "D", "AO1", "G"]
    assert data["next_tokens"] == ["D", "AO1", "G", "</s>"]
    for kind in ("encoder", "decoder_self", "cross"):
        np.testing.assert_allclose(np.array(data["maps"][kind]), reference[kind], atol=5e-5)
    check_steps(data["steps"], reference["probs"], [*ids, EOS_ID], loaded.tgt_tokenizer)
    assert data["steps"][0]["p"] < 0.5  # the model prefers K for "cat"
    assert data["steps"][0]["top"][0][0] == "K"


def test_unknown_symbols_are_warned_about(loaded: LoadedCheckpoint) -> None:
    data = example_json(loaded, "日本語")
    assert data["src_tokens"] == ["<unk>", "<unk>", "<unk>", "</s>"]
    assert data["unknown"] == 3
    assert "3 input symbol(s) are not in the source vocabulary and were read as <unk>" in data["warning"]
    forced = example_json(loaded, "cat", target="K ZZ9 T")
    assert "1 reference symbol(s) are not in the target vocabulary" in forced["warning"]


def test_page_escapes_its_data_and_needs_no_network() -> None:
    page = build_page([{"source": "</script><script>alert(1)</script>"}], "static")
    assert page.count("</script>") == 1 + len(SCRIPTS)  # the data block's and the program's own
    assert "<\\/script>" in page
    # offline: no external script, style, font or image; the only URL is the SVG namespace
    assert not re.search(r"<link|@import|url\(\s*['\"]?https?:|(src|href)\s*=\s*['\"]https?:", page)
    assert set(re.findall(r"https?://[^\s\"'<>)]+", page)) == {"http://www.w3.org/2000/svg"}


STATIC = Path(__file__).resolve().parent.parent / "src" / "dotformer" / "explore" / "static"
NODE = shutil.which("node")


def test_page_is_the_static_files_inline() -> None:
    markup = static_text("explorer.html")
    for placeholder in (DATA_PLACEHOLDER, STYLE_PLACEHOLDER, SCRIPTS_PLACEHOLDER):
        assert markup.count(placeholder) == 1, placeholder
    assert sorted(p.name for p in STATIC.iterdir()) == sorted(["explorer.html", "explorer.css", *SCRIPTS])
    template = page_template()
    assert "__DOTFORMER_" not in template.replace(DATA_PLACEHOLDER, "")  # every other placeholder filled
    style = static_text("explorer.css")
    assert f"<style>\n{style}</style>" in template and "</" not in style
    starts = [template.index(f"<script>\n{static_text(name)}</script>\n") for name in SCRIPTS]
    assert starts == sorted(starts) and starts[0] > template.index(DATA_PLACEHOLDER)  # in order, after the data
    for name in SCRIPTS:  # inline, a script must not hold "</script" (it would end the element early)
        assert "</script" not in static_text(name).lower()
        assert static_text(name).startswith("// ") and '\n"use strict";\n' in static_text(name)


@pytest.mark.skipif(NODE is None, reason="node not found: install the Debian package nodejs for the syntax check")
@pytest.mark.parametrize("name", SCRIPTS)
def test_page_scripts_pass_nodes_syntax_check(name: str, tmp_path: Path) -> None:
    script = STATIC / name
    proc = subprocess.run([NODE, "--check", str(script)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    broken = tmp_path / "broken.js"  # the check can fail: one bracket missing is a syntax error
    broken.write_text(script.read_text(encoding="utf-8").replace("{", "", 1), encoding="utf-8")
    assert subprocess.run([NODE, "--check", str(broken)], capture_output=True, timeout=60).returncode != 0


def test_server_endpoint(server: ExplorerServer, loaded: LoadedCheckpoint) -> None:
    assert server.server_address[0] == "127.0.0.1"
    with urllib.request.urlopen(server.url, timeout=30) as reply:
        page = reply.read().decode("utf-8")
    assert '"mode": "serve"' in page and '"source": "dog"' in page
    status, data = post(server.url + "api/attention", json.dumps({"text": "bird"}).encode())
    assert status == 200
    assert data == json.loads(json.dumps(example_json(loaded, "bird")))
    status, data = post(server.url + "api/attention", json.dumps({"text": "bird", "target": "B ER1 D"}).encode())
    assert status == 200 and data["forced"] and data["next_tokens"] == ["B", "ER1", "D", "</s>"]
    status, data = post(server.url + "api/attention", json.dumps({"text": "bird", "target": ""}).encode())
    assert status == 200 and not data["forced"]  # an empty reference means: decode
    status, data = post(server.url + "api/attention", json.dumps({"text": "bird", "target": 3}).encode())
    assert status == 400 and "target" in data["error"]
    assert post(server.url + "api/attention", b"[1]")[0] == 400
    assert post(server.url + "api/attention", b'{"text": "  "}')[0] == 400
    status, data = post(server.url + "api/attention", json.dumps({"text": "a" * (MAX_TEXT_CHARS + 1)}).encode())
    assert status == 400 and "at most" in data["error"]
    assert post(server.url + "api/attention", b"not json")[0] == 400
    assert post(server.url + "api/other", b"{}")[0] == 404
    with pytest.raises(urllib.error.HTTPError):
        urllib.request.urlopen(server.url + "missing", timeout=30)


def test_port_in_use_is_a_clear_error(loaded: LoadedCheckpoint, server: ExplorerServer) -> None:
    with pytest.raises(ConfigError, match="cannot listen on 127.0.0.1"):
        ExplorerServer(loaded, port=server.server_address[1]).start()


def test_write_page_and_cli(loaded: LoadedCheckpoint, tmp_path: Path) -> None:
    path = write_page(loaded, ["cat", "head"], tmp_path / "page.html")
    text = path.read_text(encoding="utf-8")
    assert '"mode": "static"' in text and '"output": "HH EH1 D"' in text
    out = tmp_path / "cli.html"
    args = ["explore", "--checkpoint", str(loaded.path), "--write", str(out), "--text", "dog"]
    assert main(args) == 0 and '"output": "D AO1 G"' in out.read_text(encoding="utf-8")
    assert main([*args, "--device", "auto"]) == 0  # every command's device names (auto: CUDA if available)
    assert main(["explore", "--checkpoint", str(loaded.path), "--write", str(out)]) == 2  # no examples to embed
    # forced examples: one --target per --text ('' decodes that one)
    args += ["--target", "K AE1 T", "--text", "cat", "--target", ""]
    assert main(args) == 0
    page = out.read_text(encoding="utf-8")
    data = json.loads(page[page.index('{"mode"') : page.index("</script>")].replace("<\\/", "</"))
    assert [(e["source"], e["forced"], e["output"]) for e in data["examples"]] == [
        ("dog", True, "K AE1 T"),
        ("cat", False, "K AE1 T"),
    ]
    assert data["examples"][0] == json.loads(json.dumps(example_json(loaded, "dog", target="K AE1 T")))
    assert main([*args, "--target", "extra"]) == 2  # not one per text


# -- the page in headless Chromium --------------------------------------------------------------------------------

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
CHROMEDRIVER = shutil.which("chromedriver")
ELEMENT = "element-6066-11e4-a52e-4f735466cecf"  # the W3C key of an element reference


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class WebDriver:
    """The few W3C WebDriver commands the test needs, over plain HTTP to a local chromedriver."""

    def __init__(self, base: str, user_data_dir: Path) -> None:
        self.base = base
        args = [
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            f"--user-data-dir={user_data_dir}",
        ]
        capabilities = {"alwaysMatch": {"goog:chromeOptions": {"binary": CHROMIUM, "args": args}}}
        self.session = self.call("POST", "/session", {"capabilities": capabilities})["sessionId"]

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        data = json.dumps(body if body is not None else {}).encode() if method == "POST" else None
        request = urllib.request.Request(
            self.base + path, data=data, method=method, headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=60) as reply:
                return json.loads(reply.read())["value"]
        except urllib.error.HTTPError as error:
            raise AssertionError(f"WebDriver {method} {path}: {error.read().decode()}") from None

    def session_call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        return self.call(method, f"/session/{self.session}{path}", body)

    def get(self, url: str) -> None:
        self.session_call("POST", "/url", {"url": url})

    def find(self, css: str) -> str:
        return self.session_call("POST", "/element", {"using": "css selector", "value": css})[ELEMENT]

    def run_js(self, script: str, *args: Any) -> Any:
        return self.session_call("POST", "/execute/sync", {"script": script, "args": list(args)})

    def type_into(self, css: str, text: str) -> None:
        element = self.find(css)
        self.session_call("POST", f"/element/{element}/clear")
        self.session_call("POST", f"/element/{element}/value", {"text": text})

    def click(self, css: str) -> None:
        self.session_call("POST", f"/element/{self.find(css)}/click")

    def wait_for(self, script: str, timeout: float = 20.0) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = self.run_js(script)
            if value:
                return value
            time.sleep(0.05)
        raise AssertionError(f"timed out waiting for: {script}")

    def run_async(self, script: str, *args: Any) -> Any:
        """Run ``script``; it calls ``arguments[arguments.length - 1](value)`` when done."""
        return self.session_call("POST", "/execute/async", {"script": script, "args": list(args)})

    def hover(self, css: str) -> None:
        """Move the mouse to the centre of the element (scrolled into view first), as a user would."""
        self.run_js("document.querySelector(arguments[0]).scrollIntoView({block: 'center'});", css)
        move = {"type": "pointerMove", "duration": 0, "origin": {ELEMENT: self.find(css)}, "x": 0, "y": 0}
        mouse = {"type": "pointer", "id": "mouse", "parameters": {"pointerType": "mouse"}, "actions": [move]}
        self.session_call("POST", "/actions", {"actions": [mouse]})

    def screenshot(self, path: Path) -> Any:
        """Save a PNG of the window and return it as an (H, W, 3) uint8 array."""
        from PIL import Image

        data = base64.b64decode(self.session_call("GET", "/screenshot"))
        path.write_bytes(data)
        return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))

    def quit(self) -> None:
        self.session_call("DELETE", "")


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebDriver]:
    if not (CHROMIUM and CHROMEDRIVER):
        pytest.skip("headless Chromium not found: install the Debian packages chromium and chromium-driver")
    port = free_port()
    process = subprocess.Popen([CHROMEDRIVER, f"--port={port}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                with urllib.request.urlopen(base + "/status", timeout=2) as reply:
                    if json.loads(reply.read())["value"]["ready"]:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail("chromedriver did not start")
            time.sleep(0.1)
        driver = WebDriver(base, tmp_path_factory.mktemp("chromium-profile"))
        driver.session_call("POST", "/window/rect", {"width": 1300, "height": 1000})
        try:
            yield driver
        finally:
            driver.quit()
    finally:
        process.terminate()
        process.wait(timeout=10)


CELLS_JS = """return Array.from(document.querySelectorAll(arguments[0] + ' rect.cell')).map(
    r => [Number(r.dataset.row), Number(r.dataset.col), Number(r.dataset.weight)]);"""


def check_heatmap(driver: WebDriver, expected: np.ndarray, svg: str = "#heatmap") -> None:
    """The SVG holds one cell per matrix entry, in place, with the matrix's value (rounded to 4 decimals)."""
    cells = driver.run_js(CELLS_JS, svg)
    rows, cols = expected.shape
    assert len(cells) == rows * cols
    drawn = np.full((rows, cols), np.nan)
    for r, c, w in cells:
        drawn[r, c] = w
    np.testing.assert_allclose(drawn, expected, atol=1e-4)


def page_colour(w: float) -> tuple[int, int, int]:
    """The page's colour map, white (0) to dark blue (1), rounded as JavaScript's Math.round does."""
    t = min(1.0, max(0.0, w))
    return tuple(math.floor(a + (b - a) * t + 0.5) for a, b in ((247, 8), (251, 48), (255, 107)))


THUMBS_JS = """return Array.from(document.querySelectorAll('#overview canvas.thumb')).map(canvas => {
    const c = Number(canvas.dataset.cell), rows = canvas.height / c, cols = canvas.width / c;
    const data = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height).data;
    const pixels = [];
    for (let i = 0; i < rows; i++) {
        const row = [];
        for (let j = 0; j < cols; j++) {
            const k = 4 * ((i * c + Math.floor(c / 2)) * canvas.width + j * c + Math.floor(c / 2));
            row.push([data[k], data[k + 1], data[k + 2]]);
        }
        pixels.push(row);
    }
    return [Number(canvas.dataset.layer), canvas.dataset.head, pixels];
});"""


def check_overview(driver: WebDriver, weights: np.ndarray) -> None:
    """Every layer x head thumbnail (and the head mean) paints each cell in the colour of the model's weight."""
    thumbs = driver.run_js(THUMBS_JS)
    L, H = weights.shape[:2]
    assert sorted((layer, head) for layer, head, _ in thumbs) == sorted(
        (layer, head) for layer in range(L) for head in [*map(str, range(H)), "avg"]
    )
    for layer, head, pixels in thumbs:
        matrix = weights[layer].mean(axis=0) if head == "avg" else weights[layer, int(head)]
        expected = np.array([[page_colour(w) for w in row] for row in matrix])
        np.testing.assert_allclose(np.array(pixels), expected, atol=1)  # 4-decimal rounding moves a level at most


def texts(driver: WebDriver, css: str) -> list[str]:
    return driver.run_js("return Array.from(document.querySelectorAll(arguments[0])).map(t => t.textContent);", css)


PROBS_JS = """return Array.from(document.querySelectorAll('#probs tr[data-index]')).map(r => [
    r.querySelector('.tok').textContent, Number(r.querySelector('.p').dataset.p),
    Array.from(r.querySelectorAll('.alt')).map(a => [a.dataset.token, Number(a.dataset.p)])]);"""


def check_probabilities(driver: WebDriver, loaded: LoadedCheckpoint, text: str, scored: list[int]) -> None:
    """The table's probabilities are the model's softmax of one teacher-forced pass over ``scored``."""
    probs = teacher_forced(loaded, text, scored[:-1])["probs"]
    shown = driver.run_js(PROBS_JS)
    assert len(shown) == len(scored)
    for (token, p, top), row, token_id in zip(shown, probs, scored, strict=True):
        assert token == (loaded.tgt_tokenizer.id_to_token(token_id) if token_id > 3 else "</s>")
        assert p == pytest.approx(row[token_id], abs=1e-6)
        assert [q for _, q in top] == pytest.approx(np.sort(row)[::-1][:TOP_K].tolist(), abs=1e-6)


OVERLAP_JS = """
const boxes = (css) => Array.from(document.querySelectorAll(css)).map(e => e.getBoundingClientRect());
const hit = (a, b) => a.left < b.right - 0.5 && b.left < a.right - 0.5 &&
    a.top < b.bottom - 0.5 && b.top < a.bottom - 0.5;
const rows = boxes('#heatmap .row-label'), cols = boxes('#heatmap .col-label');
const cells = boxes('#heatmap rect.cell, #heatmap image.cells');
const grid = {left: Math.min(...cells.map(c => c.left)), right: Math.max(...cells.map(c => c.right)),
              top: Math.min(...cells.map(c => c.top)), bottom: Math.max(...cells.map(c => c.bottom))};
const svg = document.getElementById('heatmap').getBoundingClientRect();
const inside = (b) => b.left >= svg.left - 0.5 && b.right <= svg.right + 0.5 && b.top >= svg.top - 0.5 &&
    b.bottom <= svg.bottom + 0.5;
const problems = [];
[rows, cols].forEach((labels, k) => labels.forEach((b, i) => {
    if (i && hit(labels[i - 1], b)) problems.push((k ? 'column' : 'row') + ' labels ' + (i - 1) + ' and ' + i);
    if (hit(b, grid)) problems.push((k ? 'column' : 'row') + ' label ' + i + ' covers the cells');
    if (!inside(b)) problems.push((k ? 'column' : 'row') + ' label ' + i + ' is cut off');
}));
return problems;"""


SHOWN_JS = """return arguments[0].map(css => {
    const e = document.querySelector(css);
    return e.getClientRects().length > 0 && getComputedStyle(e).visibility === 'visible';
});"""


def test_page_in_headless_chromium(
    browser: WebDriver, server: ExplorerServer, loaded: LoadedCheckpoint, tmp_path: Path
) -> None:
    # serve mode: type an input, run it, check the output, the overview, the probabilities and the chosen map
    browser.get(server.url)
    browser.wait_for("return document.body.dataset.ready === '1'")
    assert browser.run_js(SHOWN_JS, ["#run", "#target", "#example"]) == [True, True, True]  # live: all of them
    assert browser.run_js("return ['text', 'text2'].map(id => document.getElementById(id).readOnly);") == [False] * 2
    browser.type_into("#text", "bird")
    browser.click("#run")
    expected = attention_weights(loaded, "bird")
    assert browser.wait_for(
        "const t = document.getElementById('output').textContent; return t === 'B ER1 D' ? t : null;"
    )
    assert expected.output_text == "B ER1 D"
    assert browser.run_js("return document.getElementById('view-overview').offsetHeight > 0;")  # the first view
    check_overview(browser, expected.cross)
    browser.click("#kind option[value='decoder_self']")
    check_overview(browser, expected.decoder_self)
    browser.click("#kind option[value='cross']")
    check_probabilities(browser, loaded, "bird", [*loaded.tgt_tokenizer.encode("B ER1 D"), EOS_ID])
    image = browser.screenshot(tmp_path / "overview.png")
    box = browser.run_js(
        'const r = document.querySelector(\'#overview canvas.thumb[data-layer="1"][data-head="0"]\')'
        ".getBoundingClientRect(); return [r.left, r.top, r.width, r.height];"
    )
    assert box[2] > 20 and box[3] > 20  # the thumbnail is on screen, in the colour of the model's first weight
    c = (box[2] - 2) / expected.cross.shape[3]  # CSS pixels per cell (1-pixel border)
    pixel = image[int(box[1] + 1 + c / 2), int(box[0] + 1 + c / 2)]
    np.testing.assert_allclose(pixel, page_colour(float(expected.cross[1, 0, 0, 0])), atol=2)
    assert "attention weight" in texts(browser, "#overview-legend text")  # the colour legend

    browser.click("#overview canvas.thumb[data-layer='1'][data-head='1']")  # opens that head as a map
    assert browser.run_js("return document.getElementById('view-map').offsetHeight > 0;")
    check_heatmap(browser, expected.cross[1, 1])  # cross-attention is the default kind: (T, S) = (4, 5)
    assert texts(browser, "#heatmap .row-label") == ["B", "ER1", "D", "</s>"]
    browser.click("#head option[value='avg']")
    check_heatmap(browser, expected.cross[1].mean(axis=0))
    browser.click("#kind option[value='encoder']")
    browser.click("#head option[value='1']")
    check_heatmap(browser, expected.encoder[1, 1])
    browser.click("#head option[value='0']")
    check_heatmap(browser, expected.encoder[1, 0])
    assert texts(browser, "#heatmap .row-label") == ["b", "i", "r", "d", "</s>"]
    assert set(texts(browser, "#heatmap .legend-tick")) == {"0.00", "0.25", "0.50", "0.75", "1.00"}
    assert browser.run_js(OVERLAP_JS) == []

    # hover: the row and the column of the cell under the mouse are outlined, their labels bold, the value shown
    browser.hover("#heatmap rect.cell[data-row='2'][data-col='3']")
    lit = browser.run_js(
        "return [document.getElementById('heatmap-hl-row').getAttribute('visibility'),"
        " Array.from(document.querySelectorAll('#heatmap text.hl')).map(t => t.textContent),"
        " document.getElementById('hover').textContent];"
    )
    assert lit[0] == "visible" and lit[1] == ["r", "d"]
    assert lit[2].endswith(f"{expected.encoder[1, 0, 2, 3]:.4f}")
    browser.screenshot(tmp_path / "map.png")

    # download: the SVG is the drawn map; the PNG is a real image of it
    markup = browser.run_js("return window.dotformer.svgMarkup(document.getElementById('heatmap'));")
    assert markup.startswith("<?xml") and markup.count('class="cell"') == 25 and "hl-band" not in markup
    png = browser.run_async(
        "const done = arguments[arguments.length - 1];"
        "window.dotformer.pngDataUrl(document.getElementById('heatmap')).then(done, e => done('error ' + e));"
    )
    assert png.startswith("data:image/png;base64,")
    from PIL import Image

    picture = Image.open(io.BytesIO(base64.b64decode(png.split(",", 1)[1])))
    width = browser.run_js("return Number(document.getElementById('heatmap').getAttribute('width'));")
    assert picture.size[0] == round(2 * width)  # drawn at twice the page's size

    # head view: one line per (head, query, key) of weight >= 0.01, heads toggled
    browser.click("#tabs button[data-view='heads']")
    browser.click("#kind option[value='cross']")
    lines_js = """return Array.from(document.querySelectorAll('#headview .hv-line')).map(l => [Number(l.dataset.head),
        Number(l.dataset.row), Number(l.dataset.col), Number(l.dataset.weight), l.getAttribute('stroke')]);"""
    lines = browser.run_js(lines_js)
    weights = expected.cross[1]
    wanted = {(h, i, j) for h, i, j in zip(*np.nonzero(np.round(weights, 4) >= 0.01), strict=True)}
    assert {(h, i, j) for h, i, j, _, _ in lines} == wanted
    for h, i, j, w, _ in lines:
        assert w == pytest.approx(weights[h, i, j], abs=1e-4)
    assert len({stroke for h, *_, stroke in lines if h == 0} | {stroke for h, *_, stroke in lines if h == 1}) == 2
    browser.click("#head-toggles input[data-head='0']")
    assert {h for h, *_ in browser.run_js(lines_js)} == {1}
    browser.hover("#headview .hv-left")  # pointing at the first query shows only its lines
    shown = browser.run_js(
        "return Array.from(document.querySelectorAll('#headview .hv-line'))"
        ".filter(l => getComputedStyle(l).visibility === 'visible').map(l => Number(l.dataset.row));"
    )
    assert shown and set(shown) == {0}
    browser.screenshot(tmp_path / "heads.png")

    # forced decoding of a reference: the maps and probabilities of teacher forcing
    browser.type_into("#target", "D AO1 G")
    browser.click("#run")
    browser.wait_for("return document.getElementById('output-name').textContent.startsWith('Reference');")
    forced = teacher_forced(loaded, "bird", loaded.tgt_tokenizer.encode("D AO1 G"))
    browser.click("#tabs button[data-view='map']")
    browser.click("#layer option[value='0']")
    browser.click("#head option[value='1']")
    check_heatmap(browser, forced["cross"][0, 1])
    assert texts(browser, "#heatmap .row-label") == ["D", "AO1", "G", "</s>"]
    check_probabilities(browser, loaded, "bird", [*loaded.tgt_tokenizer.encode("D AO1 G"), EOS_ID])
    assert browser.run_js("return document.querySelectorAll('#probs tr.miss').length;") >= 1  # the model prefers B

    # two inputs side by side
    browser.click("#tabs button[data-view='compare']")
    browser.type_into("#text2", "dog")
    browser.click("#run2")
    browser.wait_for("return document.getElementById('cmp-b-title').textContent.startsWith('dog');")
    check_heatmap(browser, forced["cross"][0, 1], "#cmp-a")
    check_heatmap(browser, attention_weights(loaded, "dog").cross[0, 1], "#cmp-b")
    browser.screenshot(tmp_path / "compare.png")

    # symbols outside the vocabulary: the CLI's warning; then a refused input clears the stale output
    browser.type_into("#target", "")
    browser.type_into("#text", "日本語")
    browser.click("#run")
    warning = browser.wait_for("return document.getElementById('warning').textContent;")
    assert "3 input symbol(s) are not in the source vocabulary and were read as <unk>" in warning
    browser.type_into("#text", "a" * (MAX_TEXT_CHARS + 1))
    browser.click("#run")
    status = browser.wait_for(
        "const t = document.getElementById('status').textContent; return t.startsWith('error') ? t : null;"
    )
    assert "at most" in status
    assert browser.run_js(
        "return [document.getElementById('output').textContent, document.getElementById('warning').textContent,"
        " document.querySelectorAll('#heatmap rect, #overview canvas, #probs tr, #headview line').length];"
    ) == ["", "", 0]

    # a long input: labels stay readable and apart; above MAX_SVG_CELLS cells the map is one bitmap
    long_word = "pneumonoultramicroscopicsilicovolcanoconiosis" * 5  # 225 characters
    browser.type_into("#text", long_word)
    browser.click("#run")
    browser.wait_for("return document.getElementById('output').textContent.length > 0;", timeout=60)
    browser.click("#kind option[value='encoder']")
    assert browser.run_js("return document.querySelectorAll('#heatmap image.cells').length;") == 1
    assert browser.run_js(OVERLAP_JS) == []
    browser.click("#kind option[value='cross']")
    assert browser.run_js(OVERLAP_JS) == []

    # static page: the embedded examples work, other input explains that it needs serve mode
    page = write_page(loaded, ["cat", "head"], tmp_path / "static.html")
    browser.get(page.as_uri() + "#map")
    browser.wait_for("return document.body.dataset.ready === '1'")
    assert browser.run_js("return document.getElementById('output').textContent;") == "K AE1 T"
    check_heatmap(browser, attention_weights(loaded, "cat").cross[0, 0])
    browser.click("#example option[value='1']")
    assert browser.run_js("return document.getElementById('output').textContent;") == "HH EH1 D"
    # no model behind it: no Run buttons, no reference field, read-only inputs, and one line that says why
    assert browser.run_js(SHOWN_JS, ["#run", "#target", "#example", "#text"]) == [False, False, True, True]
    note = browser.run_js("return document.getElementById('mode-note').textContent;")
    assert note == (
        "Static page: choose one of its 2 precomputed examples from the list. Live input and forced decoding need "
        "serve mode (dotformer explore --checkpoint DIR)."
    )
    lines = "const r = document.createRange(); r.selectNodeContents(document.getElementById('mode-note'));"
    assert browser.run_js(lines + "return r.getClientRects().length;") == 1  # one line at the test's window size
    browser.click("#tabs button[data-view='compare']")
    assert browser.run_js(SHOWN_JS, ["#run2", "#example2", "#text2"]) == [False, True, True]
    read_only = "return ['text', 'text2'].map(id => document.getElementById(id).readOnly);"
    assert browser.run_js(read_only) == [True, True]
    browser.click("#tabs button[data-view='map']")
    # an input that still reaches the form (Enter in the field) explains that it needs serve mode
    browser.run_js("document.getElementById('text').value = 'zebra'; document.getElementById('form').requestSubmit();")
    status = browser.wait_for("return document.getElementById('status').textContent;")
    assert "serve mode" in status
    assert browser.run_js("return document.querySelectorAll('#heatmap rect.cell').length;") == 0


VISIBLE_JS = """window.scrollTo(0, 0);
const fits = (e) => { const r = e.getBoundingClientRect();
    return r.width > 0 && r.top >= 0 && r.left >= 0 && r.bottom <= innerHeight && r.right <= innerWidth; };
return [arguments[0].map(css => fits(document.querySelector(css))), innerWidth, innerHeight,
    document.getElementById('probs').getBoundingClientRect().top >=
    document.querySelector('.view.active').getBoundingClientRect().bottom];"""


def test_views_are_on_the_first_screen_at_1200_by_1000(
    browser: WebDriver, server: ExplorerServer, tmp_path: Path
) -> None:
    """The views sit right below the inputs, the probabilities below the views: on a 1200 x 1000 window the map
    and both compared maps of a 9-token reference are whole on the first screen, without scrolling."""
    reference = "B ER1 D D AO1 G K AE1 T"
    browser.session_call("POST", "/window/rect", {"width": 1200, "height": 1000})
    try:
        browser.get(server.url + "#map")
        browser.wait_for("return document.body.dataset.ready === '1'")
        browser.type_into("#text", "bird")
        browser.type_into("#target", reference)
        browser.click("#run")
        browser.wait_for(f"return document.getElementById('output').textContent === {json.dumps(reference)};")
        assert len(texts(browser, "#heatmap .row-label")) == 10 and len(texts(browser, "#probs tr[data-index]")) == 10
        shown, width, height, probs_below = browser.run_js(VISIBLE_JS, ["#heatmap", "#view-map"])
        browser.screenshot(tmp_path / "map-1200.png")
        assert width <= 1200 and height <= 1000
        assert shown == [True, True] and probs_below
        browser.click("#tabs button[data-view='compare']")
        browser.type_into("#text2", "dog")
        browser.click("#run2")
        browser.wait_for("return document.getElementById('cmp-b-title').textContent.startsWith('dog');")
        shown, *_, probs_below = browser.run_js(VISIBLE_JS, ["#cmp-a", "#cmp-b", "#view-compare"])
        browser.screenshot(tmp_path / "compare-1200.png")
        assert shown == [True, True, True] and probs_below
    finally:
        browser.session_call("POST", "/window/rect", {"width": 1300, "height": 1000})


def test_forced_targets_are_normalised_and_unknown_symbols_named_as_plot_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import warnings

    from dotformer.decoding.inputs import UnknownTokenWarning
    from dotformer.explore.data import examples_json

    src_tok = train_tokenizer("char", ["read"])
    tgt_tok = train_tokenizer("symbol", ["R IY D", "R EH D"])  # a --strip-stress run: no stress digits
    torch.manual_seed(0)
    config = ModelConfig(
        src_vocab_size=src_tok.vocab_size,
        tgt_vocab_size=tgt_tok.vocab_size,
        d_model=16,
        num_heads=2,
        d_ff=32,
        num_encoder_layers=1,
        num_decoder_layers=1,
        dropout=0.0,
    )
    info = {"task": "g2p", "dataset": "cmudict", "data": {"dataset": "cmudict", "strip_stress": True}}
    save_checkpoint(tmp_path / "g2p", Transformer(config).eval(), src_tok, tgt_tok, info)
    loaded = load_checkpoint(tmp_path / "g2p")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        (data,) = examples_json(loaded, ["read"], ["R IY1 D"])
    assert data["tgt_tokens"] == ["<s>", "R", "IY", "D"] and data["output"] == "R IY D" and data["warning"] == ""
    with pytest.warns(UnknownTokenWarning, match=r"2 target symbol\(s\) .*<unk>: ZH ") as record:
        first, second = examples_json(loaded, ["read", "read"], ["R ZH1 D", "ZH0 EH1 D"])
    assert len([w for w in record if w.category is UnknownTokenWarning]) == 1  # once for all the examples
    assert first["tgt_tokens"] == ["<s>", "R", "<unk>", "D"] and first["output"] == "R <unk> D"
    assert second["tgt_tokens"] == ["<s>", "<unk>", "EH", "D"]
    assert first["warning"] == "1 reference symbol(s) are not in the target vocabulary and were read as <unk>: ZH"
    with pytest.warns(UnknownTokenWarning, match=r"<unk>: ZH "):  # plot reads the same target the same way
        plotted = attention_weights(loaded, "read", target="R ZH1 D")
    assert plotted.tgt_tokens == first["tgt_tokens"] and plotted.output_text == first["output"]
    page = tmp_path / "page.html"
    argv = ["explore", "--checkpoint", str(tmp_path / "g2p"), "--write", str(page), "--text", "read"]
    assert main([*argv, "--target", "R IY1 D"]) == 0
    assert "warning" not in capsys.readouterr().err
    assert main([*argv, "--target", "R ZH1 D"]) == 0
    err = capsys.readouterr().err
    assert err.count("target vocabulary") == 1 and "<unk>: ZH " in err


LM_LINES = ["in the beginning", "the light", "and the darkness"]


@pytest.fixture(scope="module")
def lm_checkpoint(one_thread: None, tmp_path_factory: pytest.TempPathFactory) -> LoadedCheckpoint:
    """A 2-layer, 2-head character language model (random weights) saved as a run: its test text in data/."""
    tokenizer = train_tokenizer("char", LM_LINES)
    torch.manual_seed(0)
    config = ModelConfig(
        src_vocab_size=tokenizer.vocab_size,
        tgt_vocab_size=tokenizer.vocab_size,
        d_model=16,
        num_heads=2,
        d_ff=32,
        num_decoder_layers=2,
        dropout=0.0,
        arch="decoder-only",
        max_len=24,
    )
    run = tmp_path_factory.mktemp("explore-lm") / "run"
    (run / "data").mkdir(parents=True)
    (run / "data" / "test.txt").write_text("x" * 40 + "\n\nthe light\nin the\nlight\n", encoding="utf-8")
    save_checkpoint(run / "best", Transformer(config), tokenizer, tokenizer, {"task": "lm", "data": {"block_size": 24}})
    return load_checkpoint(run / "best")


def lm_self_attention(loaded: LoadedCheckpoint, text: str) -> np.ndarray:
    """An independent computation: the decoder's self-attention over a line end and the text's ids, (L, H, T, T)."""
    ids = torch.tensor([[EOS_ID, *loaded.tgt_tokenizer.encode(text)]])
    with torch.no_grad():
        decoded = loaded.model.decode(ids, need_weights=True)
    return np.stack([w[0].numpy() for w in decoded.self_weights])


@pytest.mark.numerical
def test_a_language_models_example_is_its_causal_self_attention(lm_checkpoint: LoadedCheckpoint) -> None:
    data = json.loads(json.dumps(example_json(lm_checkpoint, "the light")))
    assert data["lm"] is True and data["kinds"] == ["decoder_self"] and not data["forced"]
    assert data["tgt_tokens"] == ["</s>", *"the\u2423light"] and data["src_tokens"] == []  # a visible space
    maps = np.array(data["maps"]["decoder_self"])
    assert maps.shape == (2, 2, 10, 10)
    np.testing.assert_allclose(maps, lm_self_attention(lm_checkpoint, "the light"), atol=5e-5)
    assert np.all(np.triu(maps, k=1) == 0.0) and np.all(np.diagonal(maps, axis1=2, axis2=3) > 0)  # the mask
    assert len(data["steps"]) == 10
    with pytest.raises(ConfigError, match="no reference"):
        example_json(lm_checkpoint, "the", target="light")
    with pytest.raises(ConfigError, match="at most 24"):
        example_json(lm_checkpoint, "x" * 30)
    translation = example_json.__globals__["MAP_KINDS"]
    assert tuple(translation) == ("cross", "encoder", "decoder_self")


@pytest.fixture(scope="module")
def imported_lm(one_thread: None, tmp_path_factory: pytest.TempPathFactory) -> tuple[LoadedCheckpoint, Any]:
    """A tiny Llama built by transformers (random weights; rotary positions, grouped-query attention, RMSNorm),
    imported with ``dotformer import --from hf``: the loaded checkpoint and transformers' model (eager attention)."""
    pytest.importorskip("transformers")
    from test_import_hf import import_dir, save_family

    root = tmp_path_factory.mktemp("explore-imported")
    hf_model = save_family("llama", root / "hf")
    return import_dir(root / "hf", root / "ckpt"), hf_model


@pytest.mark.numerical
def test_an_imported_language_models_example_is_transformers_attention(
    imported_lm: tuple[LoadedCheckpoint, Any], tmp_path: Path
) -> None:
    """An imported model reads the text as generate does (BOS first, its own tokenizer): each layer's maps are the
    attention weights transformers returns for the same ids, and the next token is transformers' argmax. The
    tolerance: two logit tolerances (a weight is a softmax of scores, which go through fewer sums than a logit)."""
    from tolerance import logits_tolerance

    loaded, hf_model = imported_lm
    text = "the cat sat"
    data = json.loads(json.dumps(example_json(loaded, text)))
    ids = [hf_model.config.bos_token_id, *(i - 4 for i in loaded.tgt_tokenizer.encode(text))]  # the released ids
    assert data["lm"] is True and data["kinds"] == ["decoder_self"] and data["src_tokens"] == []
    assert data["tgt_tokens"][0] == "<s>" and len(data["tgt_tokens"]) == len(ids)
    with torch.no_grad():
        theirs = hf_model(torch.tensor([ids]), output_attentions=True)
    expected = np.stack([weights[0].numpy() for weights in theirs.attentions])  # (L, H, T, T)
    maps = np.array(data["maps"]["decoder_self"])
    assert maps.shape == expected.shape == (2, 4, len(ids), len(ids))
    tolerance = 2 * logits_tolerance(loaded.config, theirs.logits)
    assert np.abs(maps - expected).max() <= tolerance
    next_token = int(theirs.logits[0, -1].argmax())
    assert data["output"] == text + loaded.tgt_tokenizer.decode([next_token + 4])
    out = tmp_path / "imported.html"
    assert main(["explore", "--checkpoint", str(loaded.path), "--write", str(out), "--text", text]) == 0
    assert '"lm": true' in out.read_text(encoding="utf-8")


def test_a_language_models_default_examples_fit_its_window(lm_checkpoint: LoadedCheckpoint, tmp_path: Path) -> None:
    from dotformer.cli.explore import default_examples

    run = lm_checkpoint.path.parent
    assert default_examples(str(run), 2, loaded=lm_checkpoint) == ["the light", "in the"]  # 40 chars: too long
    out = tmp_path / "lm.html"
    assert main(["explore", "--checkpoint", str(run), "--write", str(out)]) == 0  # the test lines that fit
    page = out.read_text(encoding="utf-8")
    assert '"lm": true' in page and "a language model (decoder only)" in page
    assert [f'"source": "{line}"' in page for line in ("the light", "in the", "light", "x" * 40)] == [True] * 3 + [
        False
    ]
    assert main(["explore", "--checkpoint", str(run), "--write", str(out), "--text", "x" * 30]) == 2  # too long


def test_a_language_model_in_headless_chromium(
    browser: WebDriver, lm_checkpoint: LoadedCheckpoint, tmp_path: Path
) -> None:
    explorer = ExplorerServer(lm_checkpoint, port=0, examples=["in the"]).start()
    try:
        browser.get(explorer.url + "#map")
        browser.wait_for("return document.body.dataset.ready === '1'")
        # one kind of map, no reference field: a language model reads its own text
        assert browser.run_js("return Array.from(document.querySelectorAll('#kind option')).map(o => o.value);") == [
            "decoder_self"
        ]
        assert browser.run_js(SHOWN_JS, ["#run", "#target", "#text"]) == [True, False, True]
        check_heatmap(browser, lm_self_attention(lm_checkpoint, "in the")[0, 0])
        browser.type_into("#text", "the light")
        browser.click("#run")
        browser.wait_for("return document.querySelectorAll('#heatmap .row-label').length === 10 ? true : null;")
        weights = lm_self_attention(lm_checkpoint, "the light")
        browser.click("#layer option[value='1']")
        browser.click("#head option[value='1']")
        check_heatmap(browser, weights[1, 1])
        cells = browser.run_js(CELLS_JS, "#heatmap")
        assert all(w == 0.0 for r, c, w in cells if c > r) and all(w > 0 for r, c, w in cells if c == r)
        # the mask is visible: every cell above the diagonal is painted white, the colour of weight 0
        fills = browser.run_js(
            "return Array.from(document.querySelectorAll('#heatmap rect.cell')).filter("
            "r => Number(r.dataset.col) > Number(r.dataset.row)).map(r => r.getAttribute('fill'));"
        )
        assert fills and set(fills) == {"rgb({},{},{})".format(*page_colour(0.0))}
        assert texts(browser, "#heatmap .row-label") == ["</s>", *"the\u2423light"]  # the space shown
        caption = browser.run_js("return document.getElementById('caption').textContent;")
        assert caption.startswith("decoder self-attention, layer 1, head 1: rows text (query) (10)")
        assert caption.endswith("zeros above the diagonal: the causal mask")
        check_overview(browser, weights)
        header = texts(browser, "#probs th")
        assert header[1] == "likeliest next token" and len(texts(browser, "#probs tr[data-index]")) == 10
        browser.screenshot(tmp_path / "lm-map.png")
    finally:
        explorer.stop()


@pytest.fixture(scope="module")
def encoder_checkpoint(one_thread: None, tmp_path_factory: pytest.TempPathFactory) -> LoadedCheckpoint:
    """A 2-layer, 2-head character encoder with the generator head (a masked language model, random weights)."""
    tokenizer = train_tokenizer("char", LM_LINES, mask=True)
    torch.manual_seed(0)
    config = ModelConfig(
        src_vocab_size=tokenizer.vocab_size,
        tgt_vocab_size=tokenizer.vocab_size,
        d_model=16,
        num_heads=2,
        d_ff=32,
        num_encoder_layers=2,
        num_decoder_layers=0,
        dropout=0.0,
        arch="encoder-only",
        max_len=24,
    )
    run = tmp_path_factory.mktemp("explore-encoder") / "run"
    save_checkpoint(run / "best", Transformer(config), tokenizer, tokenizer, {"task": "mlm"})
    return load_checkpoint(run / "best")


def encoder_self_attention(loaded: LoadedCheckpoint, text: str) -> np.ndarray:
    """An independent computation: the encoder's self-attention over BOS, the text's ids and EOS, (L, H, S, S)."""
    ids = torch.tensor([[BOS_ID, *loaded.src_tokenizer.encode(text), EOS_ID]])
    with torch.no_grad():
        encoded = loaded.model.encode(ids, need_weights=True)
    return np.stack([w[0].numpy() for w in encoded.self_weights])


def test_an_encoder_in_headless_chromium(
    browser: WebDriver, encoder_checkpoint: LoadedCheckpoint, tmp_path: Path
) -> None:
    explorer = ExplorerServer(encoder_checkpoint, port=0, examples=["in the"]).start()
    try:
        browser.get(explorer.url + "#map")
        browser.wait_for("return document.body.dataset.ready === '1'")
        # one kind of map, no reference field: an encoder reads its own text
        assert browser.run_js("return Array.from(document.querySelectorAll('#kind option')).map(o => o.value);") == [
            "encoder"
        ]
        assert browser.run_js(SHOWN_JS, ["#run", "#target", "#text"]) == [True, False, True]
        check_heatmap(browser, encoder_self_attention(encoder_checkpoint, "in the")[0, 0])
        browser.type_into("#text", "the light")
        browser.click("#run")
        browser.wait_for("return document.querySelectorAll('#heatmap .row-label').length === 11 ? true : null;")
        weights = encoder_self_attention(encoder_checkpoint, "the light")
        browser.click("#layer option[value='1']")
        browser.click("#head option[value='1']")
        check_heatmap(browser, weights[1, 1])
        cells = browser.run_js(CELLS_JS, "#heatmap")
        assert any(w > 0 for r, c, w in cells if c > r)  # no causal mask: a token reads the tokens after it
        assert texts(browser, "#heatmap .row-label") == ["<s>", *"the\u2423light", "</s>"]  # the space shown
        caption = browser.run_js("return document.getElementById('caption').textContent;")
        assert caption.startswith("encoder self-attention, layer 1, head 1: rows source (query) (11)")
        assert caption.endswith("no causal mask: each token reads the tokens before and after it")
        name = browser.run_js("return document.getElementById('output-name').textContent;")
        assert name == "What the encoder's head reads"
        check_overview(browser, weights)
        browser.screenshot(tmp_path / "encoder-map.png")
    finally:
        explorer.stop()


def test_the_overview_of_twelve_heads_fits_a_1300_pixel_window(
    browser: WebDriver, one_thread: None, tmp_path: Path
) -> None:
    """A BERT-sized head count (12, and their mean): one layer's thumbnails share the page's width, with each
    thumbnail still painting the model's weights."""
    tokenizer = train_tokenizer("char", LM_LINES, mask=True)
    torch.manual_seed(0)
    config = ModelConfig(
        src_vocab_size=tokenizer.vocab_size, tgt_vocab_size=tokenizer.vocab_size, d_model=48, num_heads=12, d_ff=32,
        num_encoder_layers=2, num_decoder_layers=0, dropout=0.0, arch="encoder-only", max_len=24,
    )  # fmt: skip
    save_checkpoint(tmp_path / "run" / "best", Transformer(config), tokenizer, tokenizer, {"task": "mlm"})
    loaded = load_checkpoint(tmp_path / "run" / "best")
    explorer = ExplorerServer(loaded, port=0, examples=["in the"]).start()
    try:
        browser.get(explorer.url + "#overview")
        browser.wait_for("return document.body.dataset.ready === '1'")
        browser.wait_for("return document.querySelectorAll('#overview canvas.thumb').length === 26 ? true : null;")
        right = browser.run_js(
            "return Math.max(...Array.from(document.querySelectorAll('#overview canvas.thumb'))"
            ".map(c => c.getBoundingClientRect().right));"
        )
        assert right <= browser.run_js("return innerWidth;") <= 1300
        check_overview(browser, encoder_self_attention(loaded, "in the"))
        browser.screenshot(tmp_path / "overview-12-heads.png")
    finally:
        explorer.stop()
