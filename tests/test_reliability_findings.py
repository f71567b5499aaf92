"""Faults and confusing moments a user meets, each with its input: two trainings in one run directory, a resume
after the learning rate's cooldown."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from dotformer.cli import main

QUICK = ["--data", "copy", "--preset", "tiny", "--limit", "200", "--no-progress", "--device", "cpu"]

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def test_a_second_training_in_a_busy_run_directory_is_refused_naming_the_holder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """While one process trains in RUN (here: holds its training lock), ``train --resume --out RUN`` is refused in
    one line naming that process and its host, and writes nothing; once it has ended, the resume runs."""
    run = tmp_path / "run"
    assert main(["train", *QUICK, "--max-steps", "4", "--out", str(run)]) == 0
    metrics = (run / "metrics.jsonl").read_text()
    code = (
        "import sys, time\n"
        "from dotformer.checkpoint import training_lock\n"
        "with training_lock(sys.argv[1]):\n"
        "    print('held', flush=True)\n"
        "    time.sleep(120)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    holder = subprocess.Popen([sys.executable, "-c", code, str(run)], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        capsys.readouterr()
        assert main(["train", *QUICK, "--max-steps", "8", "--out", str(run), "--resume"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("dotformer train: error: ")
        assert f"process {holder.pid} on {socket.gethostname()}" in err and str(run) in err and "is in use" in err
        assert (run / "metrics.jsonl").read_text() == metrics
        assert "resumes" not in json.loads((run / "run.json").read_text())
    finally:
        holder.send_signal(signal.SIGKILL)  # killed: the operating system releases its lock
        holder.wait()
    assert main(["train", *QUICK, "--max-steps", "8", "--out", str(run), "--resume"]) == 0
    assert not (run / ".dotformer-train.owner").exists()


def test_a_resume_after_the_cooldown_began_says_so_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    assert main(["train", *QUICK, "--max-steps", "10", "--lr-cooldown", "0.2", "--out", str(run)]) == 0
    capsys.readouterr()
    assert main(["train", *QUICK, "--max-steps", "20", "--out", str(run), "--resume"]) == 0
    lines = [line for line in capsys.readouterr().err.splitlines() if "cooldown" in line]
    assert len(lines) == 1 and "resuming at step 10" in lines[0] and "lr_cooldown 0.2 of the 10-step budget" in lines[0]
    assert "to 0% of the schedule's rate" in lines[0] and "raises it to 100% again" in lines[0]
    assert "--lr-cooldown 0" in lines[0]
    plain = tmp_path / "plain"  # no cooldown: resumed to a longer budget without a word
    assert main(["train", *QUICK, "--max-steps", "10", "--lr-cooldown", "0", "--out", str(plain)]) == 0
    capsys.readouterr()
    assert main(["train", *QUICK, "--max-steps", "20", "--out", str(plain), "--resume"]) == 0
    assert "cooldown" not in capsys.readouterr().err


def cut(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:100])


def replaced_by_a_directory(path: Path) -> None:
    path.unlink()
    path.mkdir()


@pytest.mark.parametrize(
    "harm",
    [cut, Path.unlink, replaced_by_a_directory, lambda p: (p.parent / "train.src.idx").unlink()],
    ids=["prepared.json cut", "prepared.json deleted", "prepared.json a directory", "an index deleted"],
)
def test_a_damaged_entry_of_the_data_cache_is_prepared_again(
    tmp_path: Path, _data_cache: Path, capsys: pytest.CaptureFixture[str], harm
) -> None:
    """A cache entry that cannot be opened is prepared again, with one warning naming it (it used to fail every run
    on the same files, naming a cache directory the user never gave, until deleted by hand)."""
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("".join(f"{w}\t{' '.join(reversed(w))}\n" for w in ("cat", "dog", "bird", "fish", "cow") * 8))
    flags = ["--data", str(pairs), "--task", "exact", "--preset", "tiny", "--max-steps", "2", "--no-progress"]
    assert main(["train", *flags, "--warmup", "1", "--out", str(tmp_path / "one")]) == 0
    (entry,) = [p for p in (_data_cache / "prepared").iterdir() if p.name.startswith("pairs-") and p.is_dir()]
    harm(entry / "prepared.json")
    capsys.readouterr()
    assert main(["train", *flags, "--warmup", "1", "--out", str(tmp_path / "two")]) == 0
    lines = [line for line in capsys.readouterr().err.splitlines() if "damaged" in line]
    assert len(lines) == 1 and str(entry) in lines[0] and "preparing it again" in lines[0]
    assert (entry / "prepared.json").is_file() and not list((_data_cache / "prepared").glob(".*partial*"))


def test_a_resume_names_an_input_rewritten_with_its_size_and_time_kept(
    tmp_path: Path, _data_cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import shutil

    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("".join(f"{w}\t{' '.join(reversed(w))}\n" for w in ("cat", "dog", "bird", "fish", "cow") * 8))
    run = tmp_path / "run"
    flags = ["--data", str(pairs), "--task", "exact", "--preset", "tiny", "--no-progress", "--warmup", "1"]
    assert main(["train", *flags, "--max-steps", "2", "--out", str(run)]) == 0
    for entry in (_data_cache / "prepared").iterdir():
        if entry.name.startswith("pairs-") and entry.is_dir():
            shutil.rmtree(entry)  # the prepared data is gone, so the resume prepares it again
    stat = pairs.stat()
    pairs.write_text(pairs.read_text().replace("cat\tt a c", "cut\tt u c"))  # the same size
    os.utime(pairs, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # and the same modification time
    capsys.readouterr()
    assert main(["train", "--out", str(run), "--resume", "--max-steps", "4", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{pairs} changed since the run started (other content" in err


def test_a_full_disk_during_prepare_names_the_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import numpy as np

    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("".join(f"{w}\t{' '.join(reversed(w))}\n" for w in ("cat", "dog", "bird", "fish", "cow") * 8))

    def full(*args: object, **kwargs: object) -> None:
        raise OSError("450000 requested and 204672 written")  # what numpy says on a full disk

    monkeypatch.setattr(np, "save", full)
    out = tmp_path / "prepared"
    assert main(["prepare", "--data", str(pairs), "--task", "exact", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot write the prepared data (450000 requested and 204672 written" in err
    assert "is the disk full?" in err and err.rstrip().endswith(str(out))
    assert not out.exists() and [p.name for p in tmp_path.iterdir()] == ["pairs.tsv"]  # no partial directory left


def test_a_run_that_ended_inside_its_warmup_says_so() -> None:
    """A budget in minutes that held fewer steps than the bound from the device's peak speed (a 22M-parameter
    encoder fine-tuned for 2 minutes on 1 thread: 29 steps of a 50-step warmup) is named after the run."""
    from dotformer.training.config import TrainConfig
    from dotformer.training.warmup import warmup_unfinished

    config = TrainConfig(lr_schedule="inverse_sqrt", warmup_steps=50, max_minutes=2.0)
    line = warmup_unfinished(config, 29, "max_minutes")
    assert line is not None and "ended at step 29 (stopped by max_minutes)" in line and "warmup of 50 steps" in line
    assert warmup_unfinished(config, 50, "max_minutes") is None
    assert warmup_unfinished(TrainConfig(lr_schedule="constant", warmup_steps=0), 3, "max_steps") is None


def test_export_and_average_take_checkpoint_flags_beside_the_positional_form(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("ctranslate2")
    run = tmp_path / "run"
    assert main(["train", *QUICK, "--max-steps", "4", "--save-every", "2", "--out", str(run)]) == 0
    assert main(["export", "--to", "ct2", "--checkpoint", str(run), "--out", str(tmp_path / "a")]) == 0
    assert main(["export", "--to", "ct2", str(run), str(tmp_path / "b")]) == 0  # the positional form, as before
    assert main(["export", "--to", "ct2", "--checkpoint", str(run), str(tmp_path / "c")]) == 0
    assert all((tmp_path / name / "model.bin").is_file() for name in "abc")
    capsys.readouterr()
    assert main(["export", "--to", "ct2", "--checkpoint", str(run)]) == 2
    assert "give the checkpoint and the output directory" in capsys.readouterr().err
    steps = sorted(str(p) for p in (run / "checkpoints").iterdir())
    assert main(["average", "--checkpoint", steps[0], "--checkpoint", steps[1], "--out", str(tmp_path / "avg")]) == 0
    assert (tmp_path / "avg" / "model.safetensors").is_file()
    assert main(["average", "--out", str(tmp_path / "none")]) == 2
    assert "give the checkpoints to average" in capsys.readouterr().err


def test_the_help_and_the_readme_name_every_shipped_config(capsys: pytest.CaptureFixture[str]) -> None:
    from dotformer.runs.shipped_configs import shipped_config_names

    names = shipped_config_names()
    assert len(names) >= 8
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    shown = " ".join(capsys.readouterr().out.split())
    readme = (Path(__file__).parents[1] / "README.md").read_text()
    for name in names:
        assert name in shown and f"`{name}`" in readme, name
    for kind in ("hf:NAME", "dotformer prepare", "--task lm or mlm", "--task classify or tag"):
        assert kind in shown, kind


def test_a_token_id_outside_the_vocabulary_names_its_array(
    tmp_path: Path, _data_cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A bit flipped in a prepared array (an id past the vocabulary) is named with its file when the data is opened,
    instead of "token ids must lie in [0, V)" in the middle of training."""
    import numpy as np

    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("".join(f"{w}\t{' '.join(reversed(w))}\n" for w in ("cat", "dog", "bird", "fish", "cow") * 8))
    prepared = tmp_path / "prepared"
    assert main(["prepare", "--data", str(pairs), "--task", "exact", "--out", str(prepared)]) == 0
    ids = prepared / "train.src.bin"
    data = np.fromfile(ids, dtype=np.uint8)
    data[3] = 0xFF  # the high byte of the second uint16 id: far past a 30-symbol vocabulary
    data.tofile(ids)
    capsys.readouterr()
    flags = ["--task", "exact", "--preset", "tiny", "--max-steps", "2", "--warmup", "1", "--no-progress"]
    assert main(["train", "--data", str(prepared), *flags, "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{ids}: token id" in err and "outside the tokenizer's" in err
