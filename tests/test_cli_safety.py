"""Nothing lost, one line for every mistake: the CLI run from the outside (a subprocess, real files).

``dotformer average --out`` once deleted whatever directory it was given (a whole run, a user's folder); paths
under a regular file, a full disk and a closed pipe gave tracebacks. Each case here is one of those findings.
"""

from __future__ import annotations

import errno
import os
import shlex
import subprocess
from pathlib import Path

import pytest
from conftest import Cli

from dotformer import checkpoint as ckpt
from dotformer.errors import CheckpointError

QUICK = ["--data", "copy", "--preset", "tiny", "--limit", "120", "--no-progress", "--device", "cpu", "--threads", "1"]


def assert_one_error_line(result: subprocess.CompletedProcess[str], command: str, *fragments: str) -> None:
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"dotformer {command}: error: "), result.stderr
    assert "Traceback" not in result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def snapshot(directory: Path) -> dict[str, bytes]:
    """Every file under ``directory`` with its bytes: what must survive a refused command unchanged."""
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory, cli: Cli) -> Path:
    """A real run of 12 steps with two step checkpoints (the tiny copy task)."""
    run = tmp_path_factory.mktemp("safety") / "run"
    result = cli("train", *QUICK, "--max-steps", "12", "--save-every", "6", "--out", str(run))
    assert result.returncode == 0, result.stderr
    return run


def test_average_never_replaces_a_run_or_a_users_directory(run_dir: Path, tmp_path: Path, cli: Cli) -> None:
    steps = [str(p) for p in ckpt.step_checkpoints(run_dir / "checkpoints")]
    assert len(steps) == 2
    before = snapshot(run_dir)
    # the README's command without "/averaged": the run itself
    assert_one_error_line(cli("average", "--out", str(run_dir), *steps), "average", "run directory")
    assert snapshot(run_dir) == before
    # --overwrite does not change that
    result = cli("average", "--overwrite", "--out", str(run_dir), *steps)
    assert_one_error_line(result, "average", "run directory")
    assert snapshot(run_dir) == before
    # a folder of the user's, and a plain file
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "notes.txt").write_text("keep me\n")
    assert_one_error_line(cli("average", "--out", str(folder), *steps), "average", "not a checkpoint")
    assert (folder / "notes.txt").read_text() == "keep me\n"
    assert_one_error_line(cli("average", "--out", str(folder / "notes.txt"), *steps), "average", "a file")
    assert (folder / "notes.txt").read_text() == "keep me\n"
    # a new directory is written; an existing checkpoint is replaced only with --overwrite
    out = tmp_path / "averaged"
    assert cli("average", "--out", str(out), *steps).returncode == 0
    first = snapshot(out)
    assert_one_error_line(cli("average", "--out", str(out), steps[0]), "average", "--overwrite")
    assert snapshot(out) == first
    assert cli("average", "--overwrite", "--out", str(out), steps[0]).returncode == 0
    assert snapshot(out) != first  # one checkpoint's weights now, not the mean of two
    assert ckpt.load_checkpoint(out).info["averaged_from"] == [steps[0]]


def test_atomic_directory_refuses_what_is_not_a_checkpoint(tmp_path: Path) -> None:
    folder = tmp_path / "folder"
    (folder / "sub").mkdir(parents=True)
    (folder / "model.safetensors").write_bytes(b"x")  # a checkpoint's file name, but it also holds a directory
    with pytest.raises(CheckpointError, match="not a checkpoint"), ckpt.atomic_directory(folder):
        pass
    assert (folder / "sub").is_dir() and (folder / "model.safetensors").read_bytes() == b"x"
    link = tmp_path / "link"
    link.symlink_to(folder)
    with pytest.raises(CheckpointError, match="symbolic link"), ckpt.atomic_directory(link):
        pass
    assert link.is_symlink()
    empty = tmp_path / "empty"
    empty.mkdir()
    with ckpt.atomic_directory(empty) as tmp:
        (tmp / "model.safetensors").write_bytes(b"y")
    assert (empty / "model.safetensors").read_bytes() == b"y"


@pytest.mark.parametrize(
    ("argv", "command", "flag"),
    [
        (["evaluate", "--checkpoint", "RUN", "--json", "FILE/m.json"], "evaluate", "--json"),
        (["plot", "masks", "--out", "FILE/masks.png"], "plot", "--out"),
        (["explore", "--checkpoint", "RUN", "--text", "a1", "--write", "FILE/page.html"], "explore", "--write"),
        (["train", *QUICK, "--max-steps", "1", "--out", "FILE/run"], "train", "--out"),
        (["average", "--out", "FILE/avg", "RUN/best"], "average", "is a file"),
    ],
)
def test_a_path_under_a_regular_file_is_one_line(
    run_dir: Path, tmp_path: Path, argv: list[str], command: str, flag: str, cli: Cli
) -> None:
    regular = tmp_path / "regular"
    regular.write_text("not a directory\n")
    argv = [a.replace("RUN", str(run_dir)).replace("FILE", str(regular)) for a in argv]
    assert_one_error_line(cli(*argv), command, flag, str(regular))
    assert regular.read_text() == "not a directory\n"


def test_full_disk_during_a_checkpoint_write_is_one_line(
    run_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """ENOSPC raised by the safetensors writer (as on a full tmpfs): one line, the old checkpoint intact."""
    import safetensors.torch

    from dotformer.cli import main

    out = tmp_path / "avg"
    assert main(["average", "--out", str(out), str(run_dir / "best")]) == 0
    before = snapshot(out)
    capsys.readouterr()

    def full_disk(*args: object, **kwargs: object) -> None:
        from safetensors import SafetensorError

        raise SafetensorError(f"Error while serializing: IoError({os.strerror(errno.ENOSPC)} (os error 28))")

    monkeypatch.setattr(safetensors.torch, "save_file", full_disk)
    assert main(["average", "--overwrite", "--out", str(out), str(run_dir / "best")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "No space left on device" in err and "model.safetensors" in err
    assert snapshot(out) == before
    assert not list(tmp_path.glob(".avg.*"))  # no temporary directory left behind


def test_os_errors_are_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Any OSError a command meets (ENOSPC on a plain write, ENOTDIR) is one line naming the reason and the file."""
    from dotformer import cli

    for code in (errno.ENOSPC, errno.ENOTDIR, errno.EROFS):

        def fail(args: object, code: int = code) -> int:
            raise OSError(code, os.strerror(code), str(tmp_path / "m.json"))

        monkeypatch.setattr(cli, "build_parser", _parser_running(fail))
        assert cli.main(["explain"]) == 2
        err = capsys.readouterr().err
        assert err == f"dotformer explain: error: {os.strerror(code)}: {tmp_path / 'm.json'}\n"


def _parser_running(handler):  # type: ignore[no-untyped-def]
    import argparse

    def build(commands: object = None) -> argparse.ArgumentParser:
        parser = argparse.ArgumentParser(prog="dotformer")
        sub = parser.add_subparsers(dest="command")
        sub.add_parser("explain").set_defaults(handler=handler)
        return parser

    return build


def test_closed_pipe_ends_quietly(run_dir: Path, cli: Cli) -> None:
    """``dotformer translate ... | head -1``: no traceback, exit 141 (a shell's status for a closed pipe)."""
    words = "\n".join(f"a{i % 9 + 1} b{(i * 7) % 9 + 1}" for i in range(3000)) + "\n"
    translate = shlex.join(cli.command("translate", "--checkpoint", str(run_dir), "--device", "cpu"))
    script = f'{translate} | head -n 1; echo "status=${{PIPESTATUS[0]}}" >&2'
    result = subprocess.run(
        ["bash", "-c", script], input=words, capture_output=True, text=True, timeout=cli.timeout_s, env=cli.env()
    )
    assert result.stdout.count("\n") == 1
    assert "Traceback" not in result.stderr and "BrokenPipe" not in result.stderr, result.stderr
    assert "status=141" in result.stderr or "status=0" in result.stderr, result.stderr


def test_outputs_never_overwrite_an_input_a_checkpoint_or_a_run(run_dir: Path, tmp_path: Path, cli: Cli) -> None:
    """--hyps/--json/--output never write over the test file, run.json or a checkpoint's weights."""
    test_file = tmp_path / "test.tsv"
    test_file.write_text("a1 a2\ta1 a2\nb3\tb3\n", encoding="utf-8")
    run_before, test_before = snapshot(run_dir), test_file.read_bytes()
    evaluate = ["evaluate", "--checkpoint", str(run_dir), "--data", str(test_file), "--task", "exact"]
    cases = [
        ([*evaluate, "--hyps", str(test_file)], "evaluate", "reads"),
        ([*evaluate, "--json", str(test_file)], "evaluate", "reads"),
        ([*evaluate, "--json", str(run_dir / "run.json")], "evaluate", "part of the run"),
        ([*evaluate, "--hyps", str(run_dir / "best" / "model.safetensors")], "evaluate", "inside the checkpoint"),
        ([*evaluate, "--hyps", str(run_dir / "data" / "new.txt")], "evaluate", "part of the run"),
        (
            ["translate", "--checkpoint", str(run_dir), "--output", str(run_dir / "best" / "config.json"), "a1"],
            "translate",
            "inside the checkpoint",
        ),  # fmt: skip
        (
            ["translate", "--checkpoint", str(run_dir), "--input", str(test_file), "--output", str(test_file)],
            "translate",
            "reads",
        ),  # fmt: skip
        (
            ["average", "--overwrite", "--out", str(run_dir / "last"), str(run_dir / "best")],
            "average",
            "part of the run",
        ),
        (
            ["average", "--overwrite", "--out", str(run_dir / "best"), str(run_dir / "last")],
            "average",
            "part of the run",
        ),
        (["train", *QUICK, "--max-steps", "1", "--out", str(run_dir / "best")], "train", "part of the run"),
    ]
    for step in ckpt.step_checkpoints(run_dir / "checkpoints"):
        cases.append((["average", "--overwrite", "--out", str(step), str(run_dir / "best")], "average", "part of"))
    for argv, command, fragment in cases:
        assert_one_error_line(cli(*argv), command, fragment)
    assert snapshot(run_dir) == run_before and test_file.read_bytes() == test_before
    # a new file beside the run's own is fine (scripts/g2p.sh writes RUN/test_metrics.json)
    result = cli(*evaluate, "--json", str(run_dir / "test_metrics.json"), "--hyps", str(run_dir / "test.hyp"))
    assert result.returncode == 0, result.stderr
    assert (run_dir / "test.hyp").read_text(encoding="utf-8").count("\n") == 2
    for name in ("test_metrics.json", "test.hyp"):
        (run_dir / name).unlink()


def test_an_output_is_never_an_input_by_another_name(
    run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every output is compared with every input by device and inode, before it is opened: a hard link, a symbolic
    link or a ``../`` form of the input (or of the prefix file, the test file) is refused in one line, exit 2, and
    the input keeps its bytes. A hard link once let ``translate --output`` and ``embed --output`` empty the input."""
    from dotformer.cli import main

    source, prefixes, test_file = tmp_path / "in.txt", tmp_path / "prefixes.txt", tmp_path / "test.tsv"
    source.write_text("a1 a2\nb3\n", encoding="utf-8")
    prefixes.write_text("a1\nb3\n", encoding="utf-8")
    test_file.write_text("a1 a2\ta1 a2\nb3\tb3\n", encoding="utf-8")
    (tmp_path / "sub").mkdir()
    names = {}
    for original in (source, prefixes, test_file):
        names[original] = [tmp_path / f"hard-{original.name}", tmp_path / f"soft-{original.name}"]
        os.link(original, names[original][0])
        names[original][1].symlink_to(original)
        names[original].append(tmp_path / "sub" / ".." / original.name)
    before = {path: path.read_bytes() for path in (source, prefixes, test_file)}
    translate = ["translate", "--checkpoint", str(run_dir), "--device", "cpu", "--input", str(source)]
    embed = ["embed", "--checkpoint", str(run_dir), "--device", "cpu", "--input", str(source)]
    evaluate = ["evaluate", "--checkpoint", str(run_dir), "--device", "cpu", "--data", str(test_file)]
    cases = []
    for name in names[source]:
        cases.append(([*translate, "--output", str(name)], "--input"))
        cases.append(([*embed, "--output", str(name)], "--input"))
    for name in names[prefixes]:
        cases.append(([*translate, "--prefix-file", str(prefixes), "--output", str(name)], "--prefix-file"))
    for name in names[test_file]:
        cases.append(([*evaluate, "--task", "exact", "--hyps", str(name)], "--data"))
        cases.append(([*evaluate, "--task", "exact", "--json", str(name)], "--data"))
    for argv, flag in cases:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"is a file this command reads ({flag} " in err, (argv, err)
    assert {path: path.read_bytes() for path in before} == before
    # two outputs that are one file by two names
    out = tmp_path / "out.txt"
    out.write_text("", encoding="utf-8")
    os.link(out, tmp_path / "out-link.txt")
    assert main([*evaluate, "--task", "exact", "--hyps", str(out), "--json", str(tmp_path / "out-link.txt")]) == 2
    assert "--json and --hyps name one file" in capsys.readouterr().err
    # average --overwrite never replaces one of the checkpoints it averages, by any name
    mine = tmp_path / "mine"
    assert main(["average", "--out", str(mine), str(run_dir / "best"), str(run_dir / "last")]) == 0
    (tmp_path / "mine-link").symlink_to(mine)
    kept = snapshot(mine)
    for name in (mine, tmp_path / "mine-link", tmp_path / "sub" / ".." / "mine"):
        capsys.readouterr()
        assert main(["average", "--overwrite", "--out", str(mine), str(name), str(run_dir / "best")]) == 2
        assert "is one of the checkpoints averaged" in capsys.readouterr().err
    assert snapshot(mine) == kept


def test_decoding_threads(run_dir: Path, cli: Cli) -> None:
    one = cli("translate", "--checkpoint", str(run_dir), "--device", "cpu", "--threads", "1", "a1 b2")
    default = cli("translate", "--checkpoint", str(run_dir), "--device", "cpu", "a1 b2")
    assert one.returncode == 0 and one.stdout == default.stdout and one.stdout.count("\n") == 1, one.stderr
    for command in ("translate", "evaluate"):
        result = cli(command, "--checkpoint", str(run_dir), "--threads", "0", *(["a1"] * (command == "translate")))
        assert_one_error_line(result, command, "--threads must be positive, got 0")


def test_input_dev_stdin_reads_a_pipe(run_dir: Path, cli: Cli) -> None:
    """``--input /dev/stdin`` with a pipe on standard input (not a regular file) is read, not "no such file"."""
    flags = ["--checkpoint", str(run_dir), "--device", "cpu", "--input", "/dev/stdin"]
    result = cli("translate", *flags, "--strategy", "greedy", stdin="a1 a2\nb3\n")
    assert result.returncode == 0 and result.stdout.count("\n") == 2, result.stderr
    assert result.stdout == cli("translate", *flags[:4], "--strategy", "greedy", "a1 a2", "b3").stdout
    result = cli("embed", *flags, "--output-format", "jsonl", stdin="a1 a2\nb3\n")
    assert result.returncode == 0 and result.stdout.count("\n") == 2, result.stderr
