"""TrainConfig / DataConfig validation, TOML config files, task defaults."""

from __future__ import annotations

from pathlib import Path

import pytest

from dotformer.data.config import DataConfig
from dotformer.errors import ConfigError
from dotformer.runs.config_files import ConfigSections, merge, read_config_file
from dotformer.runs.pairs import build_model_config, default_run_dir
from dotformer.training.config import TrainConfig


def test_train_config_defaults_are_the_papers() -> None:
    c = TrainConfig()
    assert (c.adam_beta1, c.adam_beta2, c.adam_eps) == (0.9, 0.98, 1e-9)
    assert (c.lr_schedule, c.warmup_steps, c.label_smoothing) == ("noam", 4000, 0.1)
    assert not c.has_budget and TrainConfig(max_minutes=1.5).has_budget
    assert TrainConfig.from_dict(c.to_dict()) == c


@pytest.mark.parametrize(
    "changes",
    [
        {"max_tokens": 0},
        {"accumulation_steps": 0},
        {"max_epochs": -1},
        {"adam_beta2": 1.0},
        {"label_smoothing": 1.0},
        {"clip_norm": -1.0},
        {"amp": "fp8"},
        {"compile": "yes"},
        {"max_steps": 1.5},
    ],
)
def test_train_config_rejects_bad_values(changes: dict) -> None:
    with pytest.raises(ConfigError, match=next(iter(changes))):
        TrainConfig(**changes)


def test_data_config() -> None:
    with pytest.raises(ConfigError, match="leaves no training data"):
        DataConfig(valid_fraction=0.5, test_fraction=0.5)
    with pytest.raises(ConfigError, match="src_tokenizer"):
        DataConfig(src_tokenizer="word")  # type: ignore[arg-type]
    assert DataConfig.from_dict({"test_books": ["Matt", "Mark"]}).test_books == ("Matt", "Mark")
    with pytest.raises(ConfigError, match=r"x\.toml \[data\]: unknown key\(s\) books"):
        DataConfig.from_dict({"books": 1}, "x.toml [data]")


def test_task_defaults() -> None:
    g2p = DataConfig(dataset="cmudict").resolved("g2p")
    assert (g2p.src_tokenizer, g2p.tgt_tokenizer, g2p.shared_vocab, g2p.vocab_size) == ("char", "symbol", False, None)
    bible = DataConfig(dataset="bible").resolved("translation")
    assert (bible.src_tokenizer, bible.tgt_tokenizer) == ("bpe", "bpe")
    assert (bible.shared_vocab, bible.vocab_size) == (True, 8000)
    copy = DataConfig(dataset="copy").resolved("synthetic")
    assert (copy.src_tokenizer, copy.tgt_tokenizer) == ("symbol", "symbol")
    with pytest.raises(ConfigError, match="shared vocabulary"):
        DataConfig(shared_vocab=True).resolved("g2p")
    config, preset = build_model_config({}, "synthetic", 30, 30, shared=True)
    assert preset == "tiny" and config.d_model == 64 and config.share_embeddings
    config, preset = build_model_config({"preset": "base", "dropout": 0.3}, "g2p", 30, 80, shared=False)
    assert preset == "base" and config.d_model == 512 and config.dropout == 0.3 and not config.share_embeddings
    assert default_run_dir("cmudict", "small") == Path("runs/cmudict-small")
    assert default_run_dir("data/train.es,data/train.en", "tiny") == Path("runs/train-tiny")


def test_config_files(tmp_path: Path) -> None:
    path = tmp_path / "run.toml"
    path.write_text('[model]\npreset = "tiny"\n[train]\nmax_steps = 10\nwarmup_steps = 5\n[data]\ndataset = "copy"\n')
    sections = read_config_file(path)
    assert sections.model == {"preset": "tiny"} and sections.train == {"max_steps": 10, "warmup_steps": 5}
    merged = merge(sections, ConfigSections(train={"max_steps": 3}))
    assert merged.train == {"max_steps": 3, "warmup_steps": 5} and merged.data == {"dataset": "copy"}
    path.write_text("[train]\nmax_steps = 10\nlr = 3\n")
    with pytest.raises(ConfigError, match=r"run\.toml: unknown key 'lr' in \[train\]"):
        read_config_file(path)
    path.write_text("max_steps = 10\n")
    with pytest.raises(ConfigError, match=r"run\.toml: unknown section or key 'max_steps'"):
        read_config_file(path)


def test_a_later_tokenizer_file_replaces_the_earlier_kind_and_back() -> None:
    file = ConfigSections(data={"dataset": "bible", "src_tokenizer": "bpe", "tgt_tokenizer": "bpe", "vocab_size": 8})
    flags = ConfigSections(data={"src_tokenizer_file": "tok.json", "tgt_tokenizer_file": "tok.json"})
    merged = merge(file, flags)
    assert merged.data == {"dataset": "bible", "vocab_size": 8, **flags.data}
    back = merge(merged, ConfigSections(data={"tgt_tokenizer": "char"}))
    assert back.data == {"dataset": "bible", "vocab_size": 8, "src_tokenizer_file": "tok.json", "tgt_tokenizer": "char"}
    DataConfig.from_dict(merged.data)  # the file and the kind of one side together would raise


def test_a_merge_knows_where_each_value_came_from() -> None:
    defaults = ConfigSections(train={"lr_peak": 1e-3}, source="defaults")
    file = ConfigSections(
        model={"preset": "small", "d_ff": 352, "norm": "rmsnorm"}, data={"vocab_size": 8}, source="c.toml"
    )
    flags = ConfigSections(model={"preset": "tiny"}, data={"vocab_size": 9}, source="command line",
                           origins={"model.preset": "--preset", "data.vocab_size": "--vocab-size"})  # fmt: skip
    merged = merge(defaults, file, flags)
    assert merged.model == {"preset": "tiny", "norm": "rmsnorm"}  # the later preset replaces the file's d_ff
    assert merged.origins == {
        "train.lr_peak": "defaults", "model.preset": "--preset", "model.norm": "c.toml",
        "data.vocab_size": "--vocab-size",
    }  # fmt: skip
    assert merged.origin("model", "norm") == "c.toml" and merged.origin("model", "d_ff") == "command line"
    assert merge(file).origins == {f"{s}.{k}": "c.toml" for s in ("model", "data") for k in getattr(file, s)}


def test_shipped_configs_are_valid() -> None:
    root = Path(__file__).resolve().parent.parent / "configs"
    for name in ("copy", "g2p", "bible", "wmt-base"):
        sections = read_config_file(root / f"{name}.toml")
        assert TrainConfig.from_dict(sections.train).has_budget
        DataConfig.from_dict(sections.data)
