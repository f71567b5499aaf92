"""Checkpoints: round trip, atomic writes under a crash, damaged files, averaging, the training-state format."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from dotformer import checkpoint as ckpt
from dotformer.config import ModelConfig
from dotformer.data.tokenize.tokenizer_files import train_tokenizer
from dotformer.errors import CheckpointError
from dotformer.model import Transformer

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def tokenizers():
    src = train_tokenizer("char", ["abc", "bcd"])
    tgt = train_tokenizer("symbol", ["X Y", "Z"])
    return src, tgt


def model_for(src, tgt, seed: int = 0, **changes) -> Transformer:
    torch.manual_seed(seed)
    sizes = dict(d_model=8, num_heads=2, d_ff=16, num_encoder_layers=1, num_decoder_layers=1)
    config = ModelConfig(src_vocab_size=src.vocab_size, tgt_vocab_size=tgt.vocab_size, **{**sizes, **changes})
    return Transformer(config)


def save(path: Path, seed: int = 0, train_state=None) -> Transformer:
    src, tgt = tokenizers()
    model = model_for(src, tgt, seed)
    ckpt.save_checkpoint(path, model, src, tgt, {"task": "g2p", "data": {"dataset": "x"}}, train_state)
    return model


def same_weights(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def test_round_trip_with_tied_weights(tmp_path: Path) -> None:
    model = save(tmp_path / "c")
    loaded = ckpt.load_checkpoint(tmp_path / "c")
    assert same_weights(model, loaded.model)
    assert loaded.model.generator.weight is loaded.model.tgt_embed.token.lookup.weight  # tying survives
    assert not loaded.model.training
    assert loaded.config == model.config and loaded.info["task"] == "g2p"
    assert loaded.src_tokenizer.encode("abc") == tokenizers()[0].encode("abc")
    assert sorted(p.name for p in (tmp_path / "c").iterdir()) == [
        "config.json",
        "manifest.json",
        "model.safetensors",
        "tokenizer_src.json",
        "tokenizer_tgt.json",
    ]
    src, tgt = tokenizers()
    src_ids = torch.tensor([[4, 5, 2]])
    tgt_ids = torch.tensor([[1, 4]])
    model.eval()
    assert torch.equal(model(src_ids, tgt_ids), loaded.model(src_ids, tgt_ids))


def test_train_state_round_trip(tmp_path: Path) -> None:
    state = {
        "step": 7,
        "optimizer": {"state": {0: {"step": torch.tensor(3.0), "exp_avg": torch.randn(2, 3)}}, "param_groups": []},
        "rng": {"torch": [torch.get_rng_state()], "python": [3, [1, 2, 3], None]},
        "betas": (0.9, 0.98),
        "best": None,
    }
    save(tmp_path / "c", train_state=state)
    back = ckpt.load_train_state(tmp_path / "c")
    assert back["step"] == 7 and back["best"] is None and back["betas"] == [0.9, 0.98]
    assert list(back["optimizer"]["state"]) == [0]  # int keys stay int
    assert torch.equal(back["optimizer"]["state"][0]["exp_avg"], state["optimizer"]["state"][0]["exp_avg"])
    assert torch.equal(back["rng"]["torch"][0], state["rng"]["torch"][0])
    # nothing pickled: the JSON file is plain JSON with tensor references
    skeleton = json.loads((tmp_path / "c" / ckpt.TRAIN_STATE_JSON).read_text())
    reference = skeleton["optimizer"]["state"]["__int_keys__"]["0"]["exp_avg"]
    assert reference == {"__tensor__": "state.optimizer.state.0.exp_avg"}
    with pytest.raises(CheckpointError, match="no training state"):
        save(tmp_path / "d")
        ckpt.load_train_state(tmp_path / "d")


def test_crash_while_writing_keeps_the_previous_checkpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    old = save(tmp_path / "c", seed=0)

    def crash(directory: Path) -> None:  # the weights and tokenizers are written, then the process "dies"
        raise KeyboardInterrupt("simulated crash")

    monkeypatch.setattr(ckpt.store, "_write_manifest", crash)  # save_checkpoint lives in dotformer.checkpoint.store
    with pytest.raises(KeyboardInterrupt):
        save(tmp_path / "c", seed=1)
    monkeypatch.undo()
    assert same_weights(old, ckpt.load_checkpoint(tmp_path / "c").model)
    assert [p.name for p in tmp_path.iterdir()] == ["c"]  # the temporary directory is gone


def test_crash_between_the_two_renames_leaves_a_readable_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    old = save(tmp_path / "c", seed=0)
    real_rename = os.rename
    calls = {"n": 0}

    def rename(a, b) -> None:  # type: ignore[no-untyped-def]
        calls["n"] += 1
        if calls["n"] == 2:  # the old checkpoint is aside, the new one not yet in place
            raise KeyboardInterrupt("simulated crash")
        real_rename(a, b)

    monkeypatch.setattr(ckpt.os, "rename", rename)
    with pytest.raises(KeyboardInterrupt):
        save(tmp_path / "c", seed=1)
    monkeypatch.undo()
    assert not (tmp_path / "c").exists()
    loaded = ckpt.load_checkpoint(tmp_path / "c")  # found aside
    assert same_weights(old, loaded.model)
    new = save(tmp_path / "c", seed=2)  # the next save cleans up
    assert same_weights(new, ckpt.load_checkpoint(tmp_path / "c").model)
    assert [p.name for p in tmp_path.iterdir()] == ["c"]


@pytest.mark.filterwarnings("ignore::dotformer.checkpoint.CheckpointWarning")  # some have no manifest
@pytest.mark.parametrize(
    ("damage", "message"),
    [
        ("truncate_weights", r"model\.safetensors is truncated"),
        ("flip_weights", r"model\.safetensors is corrupted"),
        ("truncate_no_manifest", r"model\.safetensors is truncated or corrupted"),
        ("delete_tokenizer", r"tokenizer_tgt\.json is missing"),
        ("garbage_config", r"config\.json is truncated or corrupted"),
        ("other_vocabulary", r"vocabulary mismatch: .*tokenizer_src\.json"),
        ("bad_model_config", r"config\.json: invalid model config"),
    ],
)
def test_damaged_checkpoints_raise_checkpoint_error_naming_the_file(tmp_path: Path, damage: str, message: str) -> None:
    path = tmp_path / "c"
    save(path)
    weights = path / ckpt.MODEL_FILE
    if damage == "truncate_weights":
        weights.write_bytes(weights.read_bytes()[:100])
    elif damage == "flip_weights":
        data = bytearray(weights.read_bytes())
        data[-5] ^= 0xFF
        weights.write_bytes(bytes(data))
    elif damage == "truncate_no_manifest":
        (path / ckpt.MANIFEST_FILE).unlink()
        weights.write_bytes(weights.read_bytes()[:100])
    elif damage == "delete_tokenizer":
        (path / ckpt.TGT_TOKENIZER_FILE).unlink()
    elif damage == "garbage_config":
        (path / ckpt.MANIFEST_FILE).unlink()
        (path / ckpt.CONFIG_FILE).write_text('{"model": {"d_mod')
    elif damage == "other_vocabulary":
        (path / ckpt.MANIFEST_FILE).unlink()
        train_tokenizer("char", ["abcdefgh"]).save(path / ckpt.SRC_TOKENIZER_FILE)
    elif damage == "bad_model_config":
        (path / ckpt.MANIFEST_FILE).unlink()
        info = json.loads((path / ckpt.CONFIG_FILE).read_text())
        info["model"]["num_heads"] = 3
        (path / ckpt.CONFIG_FILE).write_text(json.dumps(info))
    with pytest.raises(CheckpointError, match=message):
        ckpt.load_checkpoint(path)


def test_missing_checkpoint_and_weights_of_another_shape(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="does not exist"):
        ckpt.load_checkpoint(tmp_path / "nope")
    save(tmp_path / "c")
    src, tgt = tokenizers()
    with pytest.raises(CheckpointError, match="does not fit"):
        ckpt.load_weights_into(model_for(src, tgt, num_decoder_layers=2), tmp_path / "c" / ckpt.MODEL_FILE)


def test_average_checkpoints(tmp_path: Path) -> None:
    models = [save(tmp_path / f"c{i}", seed=i) for i in range(3)]
    averaged = ckpt.average_checkpoints([tmp_path / f"c{i}" for i in range(3)])
    for name, tensor in models[0].state_dict().items():
        expected = sum(m.state_dict()[name].double() for m in models) / 3
        assert torch.allclose(averaged[name].double(), expected, atol=1e-7), name
        assert averaged[name].dtype == tensor.dtype
    assert averaged["generator.weight"] is averaged["tgt_embed.token.lookup.weight"]
    src, tgt = tokenizers()
    fresh = model_for(src, tgt, seed=9)
    fresh.load_state_dict(averaged)  # a complete state dict
    other_src = train_tokenizer("char", ["abcdefgh"])
    other = model_for(other_src, tgt)
    ckpt.save_checkpoint(tmp_path / "other", other, other_src, tgt, {})
    with pytest.raises(CheckpointError, match="differs"):
        ckpt.average_checkpoints([tmp_path / "c0", tmp_path / "other"])
    with pytest.raises(CheckpointError):
        ckpt.average_checkpoints([])


def test_run_directories(tmp_path: Path) -> None:
    run = tmp_path / "run"
    for step in (10, 20, 30):
        save(run / "checkpoints" / ckpt.step_dir_name(step), seed=step)
    assert ckpt.resolve_checkpoint(run) == run / "checkpoints" / "step_0000030"
    ckpt.link_checkpoint(run / "checkpoints" / "step_0000020", run / "last")
    assert ckpt.resolve_checkpoint(run) == run / "last"
    ckpt.link_checkpoint(run / "checkpoints" / "step_0000010", run / "best")
    assert ckpt.load_checkpoint(run).path == run / "best"
    assert ckpt.prune_checkpoints(run / "checkpoints", 1) == [
        run / "checkpoints" / "step_0000010",
        run / "checkpoints" / "step_0000020",
    ]
    assert ckpt.load_checkpoint(run / "best").path == run / "best"  # hard links outlive the pruned step directory
    with pytest.raises(CheckpointError, match="data/"):
        ckpt.run_data_dir(run / "best")
    (run / "data").mkdir()
    assert ckpt.run_data_dir(run / "best") == (run / "data").resolve()
    assert ckpt.run_data_dir(run / "checkpoints" / "step_0000030") == (run / "data").resolve()
    assert ckpt.run_data_dir(run) == (run / "data").resolve()


def test_a_crash_while_pruning_leaves_no_half_deleted_step_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = tmp_path / "run"
    for step in (10, 20):
        save(run / "checkpoints" / ckpt.step_dir_name(step), seed=step)
    real_rmtree = ckpt.shutil.rmtree

    def crash_half_way(path, ignore_errors=False):  # type: ignore[no-untyped-def]
        next(Path(path).rglob(ckpt.MODEL_FILE)).unlink()  # some files are gone, then the process dies
        raise KeyboardInterrupt("simulated kill")

    monkeypatch.setattr(ckpt.shutil, "rmtree", crash_half_way)
    with pytest.raises(KeyboardInterrupt):
        ckpt.prune_checkpoints(run / "checkpoints", 1)
    monkeypatch.setattr(ckpt.shutil, "rmtree", real_rmtree)
    assert [p.name for p in ckpt.step_checkpoints(run / "checkpoints")] == ["step_0000020"]  # never picked up
    assert [p.name for p in (run / "checkpoints").iterdir() if p.name.startswith(".step_0000010.pruned-")]
    assert any("removed" in a for a in ckpt.recover_run_directory(run))
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step_0000020"]


def test_recover_run_directory_puts_back_a_checkpoint_renamed_aside(tmp_path: Path) -> None:
    run = tmp_path / "run"
    old = save(run / "best", seed=3)
    aside = run / ".best.old-x1"
    aside.mkdir()
    (run / "best").rename(aside / "best")  # a kill between the two renames of a replacement
    (run / ".best.tmp-y2").mkdir()  # and the unfinished new copy
    (run / ".run.json.tmp-123").write_text("{")
    (run / "notes.txt").write_text("mine")
    actions = ckpt.recover_run_directory(run)
    assert any(a.startswith(f"restored {run / 'best'}") for a in actions)
    assert sorted(p.name for p in run.iterdir()) == ["best", "notes.txt"]
    assert same_weights(old, ckpt.load_checkpoint(run / "best").model)


def test_recover_run_directory_links_last_to_a_newer_step(tmp_path: Path) -> None:
    """A kill between writing checkpoints/step_N and linking last/ to it leaves last/ at the step before: the next
    start links it to step N (a damaged step N is left alone: resuming skips it)."""
    run = tmp_path / "run"
    for step in (10, 20):
        save(run / "checkpoints" / ckpt.step_dir_name(step), seed=step, train_state={"step": step})
    ckpt.link_checkpoint(run / "checkpoints" / "step_0000010", run / "last")
    assert ckpt.recover_run_directory(run) == [f"linked {run / 'last'} to {run / 'checkpoints' / 'step_0000020'}"]
    assert ckpt.load_train_state(run / "last")["step"] == 20
    assert ckpt.recover_run_directory(run) == []  # last/ is the newest step: nothing to do

    save(run / "checkpoints" / ckpt.step_dir_name(30), seed=30, train_state={"step": 30})
    weights = run / "checkpoints" / "step_0000030" / ckpt.MODEL_FILE
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0x10
    weights.write_bytes(bytes(data))  # damaged: last/ stays at step 20
    assert ckpt.recover_run_directory(run) == []
    assert ckpt.load_train_state(run / "last")["step"] == 20
    (run / "last").rename(tmp_path / "gone")
    (run / "checkpoints" / "step_0000030").rename(tmp_path / "step_30")
    assert ckpt.recover_run_directory(run) == [f"linked {run / 'last'} to {run / 'checkpoints' / 'step_0000020'}"]


def test_a_checkpoint_without_manifest_loads_with_a_warning(tmp_path: Path) -> None:
    model = save(tmp_path / "c")
    (tmp_path / "c" / ckpt.MANIFEST_FILE).unlink()
    with pytest.warns(ckpt.CheckpointWarning, match=r"c has no manifest\.json: its files cannot be checked"):
        loaded = ckpt.load_checkpoint(tmp_path / "c")
    assert same_weights(model, loaded.model)


def test_choose_resume_checkpoint_names_the_damaged_newer_ones(tmp_path: Path) -> None:
    run = tmp_path / "run"
    state = {"step": 1}
    for step in (10, 20):
        save(run / "checkpoints" / ckpt.step_dir_name(step), seed=step, train_state=state)
    ckpt.link_checkpoint(run / "checkpoints" / "step_0000020", run / "last")
    weights = run / "checkpoints" / "step_0000020" / ckpt.MODEL_FILE
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0x10
    weights.write_bytes(bytes(data))  # last/ shares the file
    point = ckpt.choose_resume_checkpoint(run)
    assert point.path == run / "checkpoints" / "step_0000010"
    assert len(point.skipped) == 1 and "step_0000020 failed verification" in point.skipped[0]
    assert "model.safetensors is corrupted" in point.skipped[0]
    with pytest.raises(CheckpointError, match=r"stopped before its first checkpoint.*--overwrite"):
        ckpt.choose_resume_checkpoint(tmp_path / "empty")


def test_clear_run_directory_deletes_only_a_runs_own_entries(tmp_path: Path) -> None:
    run = tmp_path / "run"
    save(run / "last")
    (run / "run.json").write_text("{}")
    (run / "data").mkdir()
    (run / "notes.txt").write_text("mine")
    assert sorted(p.name for p in ckpt.clear_run_directory(run)) == ["data", "last", "run.json"]
    assert [p.name for p in run.iterdir()] == ["notes.txt"]
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "thesis.tex").write_text("x")
    with pytest.raises(CheckpointError, match="not a dotformer run directory"):
        ckpt.clear_run_directory(folder)
    assert [p.name for p in folder.iterdir()] == ["thesis.tex"]
    empty = tmp_path / "empty"  # nothing to delete, nothing to refuse: a fresh --out made by hand
    empty.mkdir()
    assert ckpt.clear_run_directory(empty) == [] and empty.is_dir()
    assert ckpt.clear_run_directory(tmp_path / "missing") == []
    with ckpt.training_lock(tmp_path / "locked"):  # a fresh --out holding only this process's lock (train --overwrite)
        assert ckpt.clear_run_directory(tmp_path / "locked") == []


@pytest.mark.parametrize("umask", [0o022, 0o027, 0o077])
def test_checkpoint_directories_follow_the_umask(tmp_path: Path, umask: int) -> None:
    old = os.umask(umask)
    try:
        save(tmp_path / "c")
        (tmp_path / "plain").mkdir()  # what any other output directory gets
    finally:
        os.umask(old)
    mode = (tmp_path / "c").stat().st_mode & 0o777
    assert mode == 0o777 & ~umask == (tmp_path / "plain").stat().st_mode & 0o777  # not mkdtemp's 0700
    assert ckpt.current_umask() == old
