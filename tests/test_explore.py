"""Tests of dotformer.explore: the JSON the page draws, the local server, the static page, and the page itself in
headless Chromium (driven through chromedriver's W3C WebDriver endpoints with plain HTTP; skipped without Chromium).

CI needs the Debian packages ``chromium`` and ``chromium-driver`` for the browser test.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import threading
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
from dotformer.data.tokenizers import BOS_ID, EOS_ID, PAD_ID, train_tokenizer
from dotformer.errors import ConfigError
from dotformer.explore import ExplorerServer, build_page, maps_to_json, write_page
from dotformer.explore.data import MAX_TEXT_CHARS
from dotformer.model import Transformer
from dotformer.plots import attention_weights

WORDS = ["cat", "dog", "bird", "head"]
PHONES = ["K AE1 T", "D AO1 G", "B ER1 D", "HH EH1 D"]


@pytest.fixture(autouse=True, scope="module")
def one_thread() -> Iterator[None]:
    """Tiny models: one intra-op thread (on a busy 2-core machine a second thread makes small ops much slower)."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


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
    explorer = ExplorerServer(loaded, port=0, examples=["dog"])
    thread = threading.Thread(target=explorer.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield explorer
    explorer.shutdown()
    explorer.server_close()
    thread.join(timeout=5)


def post(url: str, body: bytes, content_type: str = "application/json") -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(url, data=body, headers={"Content-Type": content_type}, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=30) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_maps_to_json_holds_the_models_weights(loaded: LoadedCheckpoint) -> None:
    maps = attention_weights(loaded, "cat")
    data = maps_to_json(maps)
    assert data["output"] == "K AE1 T" == maps.output_text
    assert (data["layers"], data["heads"]) == (2, 2)
    for kind in ("encoder", "decoder_self", "cross"):
        np.testing.assert_allclose(np.array(data["maps"][kind]), maps.kind(kind), atol=5e-5)
    assert data["src_tokens"] == ["c", "a", "t", "</s>"]


def test_page_escapes_its_data() -> None:
    page = build_page([{"source": "</script><script>alert(1)</script>"}], "static")
    assert page.count("</script>") == 2  # the data block's and the program's own
    assert "<\\/script>" in page


def test_server_endpoint(server: ExplorerServer, loaded: LoadedCheckpoint) -> None:
    assert server.server_address[0] == "127.0.0.1"
    with urllib.request.urlopen(server.url, timeout=30) as reply:
        page = reply.read().decode("utf-8")
    assert '"mode": "serve"' in page and '"source": "dog"' in page
    status, data = post(server.url + "api/attention", json.dumps({"text": "bird"}).encode())
    assert status == 200
    assert data == json.loads(json.dumps(maps_to_json(attention_weights(loaded, "bird"))))
    assert post(server.url + "api/attention", b'{"text": "  "}')[0] == 400
    status, data = post(server.url + "api/attention", json.dumps({"text": "a" * (MAX_TEXT_CHARS + 1)}).encode())
    assert status == 400 and "at most" in data["error"]
    assert post(server.url + "api/attention", b"not json")[0] == 400
    assert post(server.url + "api/other", b"{}")[0] == 404
    with pytest.raises(urllib.error.HTTPError):
        urllib.request.urlopen(server.url + "missing", timeout=30)


def test_port_in_use_is_a_clear_error(loaded: LoadedCheckpoint, server: ExplorerServer) -> None:
    with pytest.raises(ConfigError, match="cannot listen on 127.0.0.1"):
        ExplorerServer(loaded, port=server.server_port)


def test_write_page_and_cli(loaded: LoadedCheckpoint, tmp_path: Path) -> None:
    path = write_page(loaded, ["cat", "head"], tmp_path / "page.html")
    text = path.read_text(encoding="utf-8")
    assert '"mode": "static"' in text and '"output": "HH EH1 D"' in text
    out = tmp_path / "cli.html"
    args = ["explore", "--checkpoint", str(loaded.path), "--write", str(out), "--text", "dog"]
    assert main(args) == 0 and '"output": "D AO1 G"' in out.read_text(encoding="utf-8")
    assert main(["explore", "--checkpoint", str(loaded.path), "--write", str(out)]) == 2  # no examples to embed


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
        try:
            yield driver
        finally:
            driver.quit()
    finally:
        process.terminate()
        process.wait(timeout=10)


CELLS_JS = """return Array.from(document.querySelectorAll('#heatmap rect.cell')).map(
    r => [Number(r.dataset.row), Number(r.dataset.col), Number(r.dataset.weight)]);"""


def check_heatmap(driver: WebDriver, expected: np.ndarray) -> None:
    """The SVG holds one cell per matrix entry, in place, with the matrix's value (rounded to 4 decimals)."""
    cells = driver.run_js(CELLS_JS)
    rows, cols = expected.shape
    assert len(cells) == rows * cols
    drawn = np.full((rows, cols), np.nan)
    for r, c, w in cells:
        drawn[r, c] = w
    np.testing.assert_allclose(drawn, expected, atol=5e-5)


def test_page_in_headless_chromium(
    browser: WebDriver, server: ExplorerServer, loaded: LoadedCheckpoint, tmp_path: Path
) -> None:
    # serve mode: type an input, run it, check the output and the chosen head's map
    browser.get(server.url)
    browser.wait_for("return document.body.dataset.ready === '1'")
    browser.type_into("#text", "bird")
    browser.click("#run")
    expected = attention_weights(loaded, "bird")
    assert browser.wait_for(
        "const t = document.getElementById('output').textContent; return t === 'B ER1 D' ? t : null;"
    )
    assert expected.output_text == "B ER1 D"
    browser.click("#layer option[value='1']")
    browser.click("#head option[value='1']")
    check_heatmap(browser, expected.cross[1, 1])  # cross-attention is the default kind: (T, S) = (4, 5)
    browser.click("#kind option[value='encoder']")
    check_heatmap(browser, expected.encoder[1, 1])
    browser.click("#head option[value='0']")
    check_heatmap(browser, expected.encoder[1, 0])
    labels = browser.run_js(
        "return Array.from(document.querySelectorAll('#heatmap .row-label')).map(t => t.textContent);"
    )
    assert labels == ["b", "i", "r", "d", "</s>"]

    # static page: the embedded examples work, other input explains that it needs serve mode
    page = write_page(loaded, ["cat", "head"], tmp_path / "static.html")
    browser.get(page.as_uri())
    browser.wait_for("return document.body.dataset.ready === '1'")
    assert browser.run_js("return document.getElementById('output').textContent;") == "K AE1 T"
    check_heatmap(browser, attention_weights(loaded, "cat").cross[0, 0])
    browser.click("#example option[value='1']")
    assert browser.run_js("return document.getElementById('output').textContent;") == "HH EH1 D"
    browser.type_into("#text", "zebra")
    browser.click("#run")
    status = browser.wait_for("return document.getElementById('status').textContent;")
    assert "serve mode" in status
