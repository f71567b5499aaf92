"""The Dockerfile builds an image whose entry point is ``dotformer serve`` on the checkpoint mounted at /model, and
the image answers GET /health and translates as the Python API does (where docker and its daemon are here)."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
IMAGE = "dotformer-serve-test"
BUILD_TIMEOUT_S = 1800  # installs torch and CTranslate2 from the network


def docker_problem() -> str | None:
    """Why docker cannot build here (None: it can)."""
    if shutil.which("docker") is None:
        return "docker is not installed"
    info = subprocess.run(["docker", "info"], capture_output=True, text=True, timeout=60, check=False)
    if info.returncode != 0:
        return f"the docker daemon is not reachable: {(info.stderr.strip().splitlines() or ['?'])[-1]}"
    return None


def test_the_dockerfile_installs_the_image_from_the_constraints() -> None:
    """Read without docker: the CPU index, the constraints, the ct2 and serve extras, the mounted checkpoint, the
    liveness probe."""
    text = (ROOT / "Dockerfile").read_text(encoding="utf-8")
    assert '-c constraints.txt ".[ct2,serve]"' in text and "download.pytorch.org/whl/cpu" in text
    assert '"--checkpoint", "/model", "--host", "0.0.0.0"' in text and "/health" in text
    ignored = (ROOT / ".dockerignore").read_text(encoding="utf-8")
    copies = " ".join(line for line in text.splitlines() if line.startswith("COPY "))
    for copied in ("pyproject.toml", "constraints.txt", "README.md", "LICENSE", "configs/", "src/"):
        assert f"!{copied}" in ignored.splitlines() and copied.rstrip("/") in copies.split(), copied


@pytest.mark.slow
def test_the_image_builds_and_serves_a_mounted_checkpoint(tmp_path: Path) -> None:
    problem = docker_problem()
    if problem is not None:
        pytest.skip(problem)
    build = subprocess.run(["docker", "build", "-t", IMAGE, str(ROOT)], capture_output=True, text=True,
                           timeout=BUILD_TIMEOUT_S, check=False)  # fmt: skip
    assert build.returncode == 0, build.stderr[-3000:]
    import torch

    import dotformer
    from dotformer import ModelConfig, Transformer
    from dotformer.checkpoint import save_checkpoint
    from dotformer.data.tokenize.tokenizer_files import train_tokenizer

    tokenizer = train_tokenizer("symbol", ["a1 a2 a3"])
    config = ModelConfig.preset("tiny", src_vocab_size=tokenizer.vocab_size, tgt_vocab_size=tokenizer.vocab_size)
    torch.manual_seed(0)
    save_checkpoint(tmp_path / "ck", Transformer(config).eval(), tokenizer, tokenizer, {"task": "synthetic"})
    run = subprocess.run(["docker", "run", "-d", "--rm", "-p", "127.0.0.1::8080", "-v", f"{tmp_path / 'ck'}:/model:ro",
                          IMAGE], capture_output=True, text=True, timeout=120, check=True)  # fmt: skip
    container = run.stdout.strip()
    try:
        port = subprocess.run(["docker", "port", container, "8080"], capture_output=True, text=True, timeout=60,
                              check=True).stdout.split(":")[-1].strip()  # fmt: skip
        url = f"http://127.0.0.1:{port}"
        for _ in range(120):  # the model loads and converts: up to two minutes
            try:
                with urllib.request.urlopen(url + "/ready", timeout=2) as response:
                    break
            except OSError:
                time.sleep(1)
        request = urllib.request.Request(url + "/api/translate", data=b'{"texts": ["a1 a2"], "beam": 2}',
                                         method="POST")  # fmt: skip
        with urllib.request.urlopen(request, timeout=60) as response:
            reply = json.loads(response.read())
        expected = dotformer.load(tmp_path / "ck", device="cpu").translate(["a1 a2"], beam=2)
        assert [t["text"] for t in reply["translations"]] == expected
    finally:
        subprocess.run(["docker", "stop", container], capture_output=True, timeout=120, check=False)
