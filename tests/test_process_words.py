"""The repository speaks of the project only: no history of how it was built in its files.

Words that tell when or by whom something was done rather than what it is ("session 7", "issue 15", "#12", the
tracker, a "fresh clone" story, "the issue's target") fail this test wherever git tracks text: code, comments,
docstrings, configs, tests, scripts, benchmarks, the README, the docs and the changelog. A figure carries one factual
setup line instead (a CPU model there is fine).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
THIS = Path(__file__).resolve().relative_to(ROOT).as_posix()

PATTERNS = {
    # "session 7", "this session": a work session; an onnxruntime or HTTP session object is no process word.
    "a session": re.compile(r"\bsessions? #?\d|\b(?:this|last|previous|next|earlier|later) sessions?\b", re.IGNORECASE),
    "an issue number": re.compile(r"\bissues? #?\d", re.IGNORECASE),
    "a tracker": re.compile(r"\btracker\b", re.IGNORECASE),
    "a fresh clone": re.compile(r"\bfresh.clones?\b", re.IGNORECASE),
    "the issue's": re.compile(r"\bthe issue'?s\b", re.IGNORECASE),
    # "#12" in prose; a colour ("#555;", "\"#888\"") or an HTML entity ("&#10;") is not a number.
    "a #number": re.compile(r"(?<![\w&\"'])#\d{1,3}\b(?![;\"'\w])"),
}


def process_words(text: str) -> list[tuple[int, str, str]]:
    """(line number, pattern name, line) of every hit in ``text``."""
    return [
        (number, name, line.strip())
        for number, line in enumerate(text.splitlines(), start=1)
        for name, pattern in PATTERNS.items()
        if pattern.search(line)
    ]


@pytest.mark.parametrize(
    ("line", "hit"),
    [
        ("measured in session 7 on the VM", True),
        ("see issue 15 item 6", True),
        ("the tracker's issue #12", True),
        ("from a fresh clone of 04ce2a9", True),
        ("the issue's target", True),
        ("Optimisation #16 deferred the reorder", True),
        ("self.session = call('POST', '/session')", False),
        ("session = onnxruntime.InferenceSession(path)", False),
        ("as measured in the previous session", True),
        ('color: #555; stroke: "#888"', False),
        ("a line break is &#10; in HTML", False),
        ("    # 12 layers", False),
        ("the 10-minute G2P default", False),
    ],
)
def test_the_patterns(line: str, hit: bool) -> None:
    assert bool(process_words(line)) is hit


def tracked_text_files() -> list[Path]:
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    files = []
    for name in listed.decode().split("\0"):
        path = ROOT / name
        if not name or name == THIS or not path.is_file() or path.is_symlink():
            continue
        data = path.read_bytes()
        if b"\0" not in data[:8192]:  # text, not an image
            files.append(path)
    return files


def test_no_process_words_in_the_repository() -> None:
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: nothing tracked to read")
    hits = [
        f"{path.relative_to(ROOT)}:{number}: {name}: {line[:100]}"
        for path in tracked_text_files()
        for number, name, line in process_words(path.read_text(encoding="utf-8", errors="replace"))
    ]
    assert not hits, "words about how the project was built, not what it is:\n" + "\n".join(hits)
