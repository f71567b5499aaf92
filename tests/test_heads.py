"""The heads of the three families (dotformer.heads): the pooled and per-token classifiers against their formulas and
HF's BertForTokenClassification, packed and selected scores equal to the padded ones, and the config's checks."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch

from dotformer.config import ModelConfig
from dotformer.errors import ConfigError
from dotformer.heads import SequenceClassifier, TokenClassifier, pool
from dotformer.model import Transformer

PAD = 0


def encoder(head: str = "generator", num_labels: int = 0, pooling: str = "cls", **changes: object) -> Transformer:
    torch.manual_seed(0)
    config = ModelConfig(
        src_vocab_size=13, tgt_vocab_size=13, d_model=16, num_heads=2, d_ff=24, num_encoder_layers=2,
        num_decoder_layers=0, arch="encoder-only", head=head, num_labels=num_labels, pooling=pooling, dropout=0.0,
        **changes,
    )  # fmt: skip
    return Transformer(config).eval()


def batch() -> torch.Tensor:
    return torch.tensor([[1, 5, 6, 7, 8, 2], [1, 9, 4, 2, PAD, PAD], [1, 2, PAD, PAD, PAD, PAD]])  # (3, 6)


def test_pool_is_the_first_row_or_the_mean_of_the_real_rows() -> None:
    memory = torch.arange(2 * 3 * 2, dtype=torch.float32).view(2, 3, 2)
    keep = torch.tensor([[True, True, True], [True, True, False]])
    assert torch.equal(pool(memory, keep, "cls"), memory[:, 0])
    assert torch.allclose(pool(memory, keep, "mean"), torch.stack([memory[0].mean(0), memory[1, :2].mean(0)]))
    with pytest.raises(ConfigError, match="pooling 'max'"):
        pool(memory, keep, "max")


@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_the_sequence_head_is_a_linear_layer_on_the_pooled_memory(pooling: str) -> None:
    model = encoder("sequence", 3, pooling)
    src = batch()
    memory = model.encode(src).memory  # (B, S, D)
    assert isinstance(model.classifier, SequenceClassifier)
    expected = model.classifier.proj(pool(memory, src != PAD, pooling))  # (B, C)
    assert torch.allclose(model(src), expected, atol=1e-6)
    assert torch.allclose(model(src, packed=True), expected, atol=1e-5)  # packed memory, unpacked to pool


def test_a_texts_class_scores_do_not_depend_on_its_batch() -> None:
    model = encoder("sequence", 3, "mean")
    src = batch()
    alone = torch.cat([model(src[i : i + 1, : int((src[i] != PAD).sum())]) for i in range(3)])
    assert torch.allclose(model(src), alone, atol=1e-5)


@pytest.mark.parametrize("head", ["generator", "token"])
def test_selected_and_packed_scores_equal_the_padded_ones(head: str) -> None:
    model = encoder(head, 0 if head == "generator" else 4)
    src = batch()
    full = model(src)  # (B, S, V or C)
    select = torch.zeros_like(src, dtype=torch.bool)
    select[0, [1, 3]] = select[1, 2] = True
    assert torch.allclose(model(src, select=select), full[select], atol=1e-5)
    assert torch.allclose(model(src, packed=True, select=select), full[select], atol=1e-5)
    assert torch.allclose(model(src, packed=True), full[src != PAD], atol=1e-5)


def test_the_token_head_equals_hf_bert_for_token_classification(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    from test_embed import make_bert_dir
    from transformers import BertForTokenClassification

    from dotformer.imports.bert import bert_inputs, read_bert

    make_bert_dir(tmp_path / "hf")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hf = BertForTokenClassification.from_pretrained(str(tmp_path / "hf"), num_labels=3).eval()
    bert, tokenizer = read_bert(tmp_path / "hf")
    ours = Transformer(bert.config.replace(head="token", num_labels=3)).eval()
    missing = ours.load_state_dict(bert.state_dict(), strict=False).missing_keys
    assert sorted(missing) == ["classifier.proj.bias", "classifier.proj.weight"]  # only the fresh head
    with torch.no_grad():
        ours.classifier.proj.weight.copy_(hf.classifier.weight)
        ours.classifier.proj.bias.copy_(hf.classifier.bias)
    texts = ["the cat sat on the mat", "a dog"]
    src = bert_inputs(tokenizer, texts)  # (B, S) [CLS] ... [SEP], dotformer's ids
    hf_ids = torch.where(src >= 4, src - 4, torch.tensor([0, 2, 3, 1])[src.clamp(max=3)])  # back to BERT's ids
    with torch.no_grad():
        expected = hf(input_ids=hf_ids, attention_mask=(src != PAD).long()).logits  # (B, S, C)
        got = ours(src)
    keep = src != PAD
    assert torch.allclose(got[keep], expected[keep], atol=1e-5)


def test_the_config_checks_the_head() -> None:
    with pytest.raises(ConfigError, match="needs encoder-only"):
        ModelConfig(src_vocab_size=9, tgt_vocab_size=9, head="sequence", num_labels=2)
    with pytest.raises(ConfigError, match="num_labels >= 2"):
        encoder("token", 1)
    with pytest.raises(ConfigError, match="num_labels=3 needs a sequence or token head"):
        encoder("generator", 3)
    with pytest.raises(ConfigError, match="head must be"):
        encoder("pooled", 2)
    with pytest.raises(ConfigError, match="pooling must be"):
        encoder("sequence", 2, "max")
    with pytest.raises(ConfigError, match="scores whole texts"):
        encoder("sequence", 2)(batch(), select=batch() > 4)


def test_a_classifier_is_saved_and_loaded_with_its_checkpoint(tmp_path: Path) -> None:
    from dotformer.checkpoint import load_checkpoint, save_checkpoint
    from dotformer.data.tokenize.tokenizer_files import train_tokenizer

    model = encoder("token", 4)
    tokenizer = train_tokenizer("char", ["abcdefghi"])
    save_checkpoint(tmp_path / "ck", model, tokenizer, tokenizer, {"task": "tag", "labels": ["A", "B", "C", "D"]})
    loaded = load_checkpoint(tmp_path / "ck")
    assert loaded.config.head == "token" and loaded.config.num_labels == 4
    assert isinstance(loaded.model.classifier, TokenClassifier)
    assert torch.equal(loaded.model(batch()), model(batch()))
