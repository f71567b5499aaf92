"""An encoder's examples, batches and objectives (data/labelled.py, data/labelled_text.py, training/objective.py):
BERT's masking as a pure function of (seed, epoch, example) with its 15% and 80/10/10, the three objectives equal to
the cross-entropy written out, the readers' forms and their one-line errors, and the metrics on known values."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from dotformer.config import ModelConfig
from dotformer.data.labelled import (
    IGNORE_LABEL,
    LabelledSampler,
    Masking,
    WordPieces,
    mask_tokens,
    masked_examples,
    sequence_examples,
    token_examples,
)
from dotformer.data.labelled_text import bible_genres, read_classified, read_tagged
from dotformer.data.tokenizer_files import train_tokenizer
from dotformer.data.tokenizers import BOS_ID, EOS_ID, MASK_TOKEN, PAD_ID
from dotformer.errors import DataError
from dotformer.model import Transformer
from dotformer.training.loss import label_cross_entropy
from dotformer.training.objective import OBJECTIVES

LINES = ["the cat sat on the mat", "a dog ran in the park today", "we read", "birds sing in the morning light"]


def tokenizer(kind: str = "char"):  # type: ignore[no-untyped-def]
    return train_tokenizer(kind, LINES * 3, 300 if kind == "bpe" else None, mask=True)


def test_a_masked_language_models_vocabulary_has_mask_at_id_4() -> None:
    for kind in ("char", "symbol", "bpe"):
        tok = tokenizer(kind)
        assert tok.mask_id == 4 and tok.id_to_token(4) == MASK_TOKEN
        assert train_tokenizer(kind, LINES, 300 if kind == "bpe" else None).mask_id is None
    assert 4 not in tokenizer("char").encode("a <mask> b")  # typed in a text, it is text


def test_masking_follows_berts_recipe() -> None:
    masking = Masking(mask_id=4, vocab_size=50)
    ids = [BOS_ID, *range(5, 45), EOS_ID]  # 40 real tokens
    chosen, masked, randomised, kept = 0, 0, 0, 0
    draws = 4000
    for n in range(draws):
        inputs, labels = mask_tokens(ids, masking, np.random.default_rng(n))
        positions = [i for i, label in enumerate(labels) if label != IGNORE_LABEL]
        assert len(positions) == round(40 * 0.15) == 6  # max(1, round(0.15 n)) of the real tokens
        assert labels[0] == labels[-1] == IGNORE_LABEL and inputs[0] == BOS_ID and inputs[-1] == EOS_ID
        for i in positions:
            assert labels[i] == ids[i]
            masked += inputs[i] == 4
            kept += inputs[i] == ids[i]
            randomised += inputs[i] not in (4, ids[i])
        assert [x for i, x in enumerate(inputs) if i not in positions] == [
            x for i, x in enumerate(ids) if i not in positions
        ]
        chosen += len(positions)
    # the shares are binomial: within 5 standard deviations of 0.8, 0.1 and 0.1 (a random draw may hit the same token
    # or the mask: 2 of the 45 ids a random replacement draws from)
    for share, expected in ((masked, 0.8 + 0.1 / 46), (kept, 0.1 + 0.1 / 46), (randomised, 0.1 - 0.2 / 46)):
        assert abs(share / chosen - expected) < 5 * math.sqrt(expected * (1 - expected) / chosen)
    assert mask_tokens([BOS_ID, EOS_ID], masking, np.random.default_rng(0)) == ([BOS_ID, EOS_ID], [-100, -100])


def test_a_batch_is_masked_by_seed_epoch_and_example_alone() -> None:
    tok = tokenizer()
    masking = Masking(tok.mask_id, tok.vocab_size)
    data = masked_examples(LINES * 5, tok, 16, masking).examples
    sampler = LabelledSampler(data, max_tokens=64, seed=3)
    one = sampler.make_batch([2, 7, 11], epoch=1)
    again = LabelledSampler(data, max_tokens=64, seed=3, rank=1, world_size=2).make_batch([11, 2, 7], epoch=1)
    for row, index in enumerate([2, 7, 11]):  # the same example, in any batch, on any rank: the same masking
        other = [11, 2, 7].index(index)
        assert torch.equal(one.src[row], again.src[other]) and torch.equal(one.labels[row], again.labels[other])
    assert not torch.equal(one.src, sampler.make_batch([2, 7, 11], epoch=2).src)  # masked anew each epoch
    assert one.num_tgt_tokens == int(one.scored.sum()) > 0
    assert one.src.shape == one.labels.shape and one.num_src_tokens == int((one.src != PAD_ID).sum())
    empty = one.without_targets()
    assert empty.num_tgt_tokens == 0 and not empty.scored.any()


def test_blocks_and_lines_of_text() -> None:
    tok = tokenizer()
    masking = Masking(tok.mask_id, tok.vocab_size)
    lines = masked_examples(LINES, tok, 12, masking, "lines")
    assert lines.cut == 3 and all(len(e.src) <= 11 for e in lines.examples.examples)  # [BOS] + 10, EOS added later
    assert sum(len(e.src) - 1 for e in lines.examples.examples) == sum(len(line) for line in LINES)  # nothing lost
    blocks = masked_examples(LINES, tok, 12, masking, "blocks")
    stream = [t for e in blocks.examples.examples for t in e.src[1:]]
    assert [t for t in stream if t != EOS_ID] == [t for line in LINES for t in tok.encode(line)]


@pytest.mark.parametrize("kind", ["char", "bpe"])
def test_a_words_label_sits_on_its_first_token(kind: str) -> None:
    tok = tokenizer(kind)
    words = ["the", "cat", "sat"]
    ids, positions = WordPieces(tok).encode(words)
    assert ids == tok.encode("the cat sat")  # a word encodes as it reads in its sentence
    firsts = [tok.decode([ids[where[0]]]).strip()[0] for where in positions]
    assert firsts == ["t", "c", "s"]
    example = token_examples([words], [[0, 1, 2]], tok, 32).examples.examples[0]
    labelled = [(i, label) for i, label in enumerate(example.tgt) if label != IGNORE_LABEL]
    assert labelled == [(where[0] + 1, n) for n, where in enumerate(positions)]  # + 1: BOS
    every = token_examples([words], [[0, 1, 2]], tok, 32, "all").examples.examples[0]
    assert sum(label != IGNORE_LABEL for label in every.tgt) == sum(len(where) for where in positions)


def tiny_encoder(head: str, labels: int, vocab: int) -> Transformer:
    torch.manual_seed(0)
    config = ModelConfig(
        src_vocab_size=vocab, tgt_vocab_size=vocab, d_model=16, num_heads=2, d_ff=24, num_encoder_layers=2,
        num_decoder_layers=0, arch="encoder-only", head=head, num_labels=labels, dropout=0.0,
    )  # fmt: skip
    return Transformer(config)


@pytest.mark.parametrize("packed", [True, False])
def test_the_objectives_are_the_cross_entropy_of_their_scored_positions(packed: bool) -> None:
    tok = tokenizer()
    V = tok.vocab_size
    masked = masked_examples(LINES, tok, 40, Masking(tok.mask_id, V)).examples
    batch = LabelledSampler(masked, 400).make_batch([0, 1, 2, 3], 0)
    model = tiny_encoder("generator", 0, V)
    objective = OBJECTIVES["masked-token"]
    sums = objective.loss(objective.predict(model, batch, packed, PAD_ID), 0.0, PAD_ID)
    logits = model(batch.src)  # (B, S, V)
    expected = F.cross_entropy(logits[batch.scored], batch.labels[batch.scored], reduction="sum")
    assert torch.allclose(sums.loss, expected, rtol=1e-5) and int(sums.num_tokens) == batch.num_tgt_tokens

    texts = sequence_examples(LINES, [0, 1, 0, 2], tok, 40).examples
    batch = LabelledSampler(texts, 400).make_batch([0, 1, 2, 3], 0)
    model = tiny_encoder("sequence", 3, V)
    objective = OBJECTIVES["sequence-label"]
    sums = objective.loss(objective.predict(model, batch, packed, PAD_ID), 0.1, PAD_ID)
    expected = F.cross_entropy(model(batch.src), torch.tensor([0, 1, 0, 2]), label_smoothing=0.1, reduction="sum")
    assert torch.allclose(sums.loss, expected, rtol=1e-5) and int(sums.num_tokens) == 4
    none = objective.loss(objective.predict(model, batch.without_targets(), packed, PAD_ID), 0.1, PAD_ID)
    assert float(none.loss) == 0.0 and int(none.num_tokens) == 0

    tags = token_examples([line.split() for line in LINES], [[n % 3 for n in range(len(line.split()))]
                                                             for line in LINES], tok, 40).examples  # fmt: skip
    batch = LabelledSampler(tags, 400).make_batch([0, 1, 2, 3], 0)
    model = tiny_encoder("token", 3, V)
    objective = OBJECTIVES["token-label"]
    sums = objective.loss(objective.predict(model, batch, packed, PAD_ID), 0.0, PAD_ID)
    expected = F.cross_entropy(model(batch.src)[batch.scored], batch.labels[batch.scored], reduction="sum")
    assert torch.allclose(sums.loss, expected, rtol=1e-5) and int(sums.num_tokens) == sum(
        map(len, (s.split() for s in LINES))
    )


def test_label_smoothing_of_labels_is_spread_over_every_label() -> None:
    logits = torch.randn(5, 4)
    labels = torch.tensor([0, 3, 1, 1, 2])
    sums = label_cross_entropy(logits, labels, 0.2)
    log_p = logits.log_softmax(-1)
    nll = -log_p[torch.arange(5), labels]
    assert torch.allclose(sums.loss, (0.8 * nll - 0.2 * log_p.mean(-1)).sum(), rtol=1e-5)
    assert torch.allclose(sums.nll, nll.sum(), rtol=1e-5)


def test_the_readers_forms_and_their_errors(tmp_path: Path) -> None:
    path = tmp_path / "c.tsv"
    path.write_text("text\tlabel\nthe cat\tanimal\n\nthe sun\tsky\n")
    texts = read_classified(path)
    assert texts.texts == ["the cat", "the sun"] and texts.labels == ["animal", "sky"]
    assert texts.report["blank"] == 1 and texts.report["header"] == 1
    path.write_text("the cat\tanimal\nno tab here\n")
    with pytest.raises(DataError, match=r"c.tsv:2: 0 tabs"):
        read_classified(path)
    conll = tmp_path / "t.conll"
    conll.write_text("-DOCSTART- O\n\nJohn NNP B-PER\nlives VBZ O\n\nParis NNP B-LOC\n")
    tagged = read_tagged(conll)
    assert tagged.report["format"] == "conll" and tagged.texts == ["John lives", "Paris"]
    assert tagged.labels == [["B-PER", "O"], ["B-LOC"]]
    tsv = tmp_path / "t.tsv"
    tsv.write_text("John lives\tB-PER O\nParis\tB-LOC\n")
    assert read_tagged(tsv).labels == tagged.labels and read_tagged(tsv).report["format"] == "tsv"
    tsv.write_text("John lives\tB-PER\n")
    with pytest.raises(DataError, match=r"t.tsv:1: 2 words and 1 labels"):
        read_tagged(tsv)


def test_the_genre_table_names_every_book_once() -> None:
    genres = bible_genres()
    assert len(genres) == 66 and set(genres.values()) == {"law", "history", "poetry", "prophets", "gospels", "letters"}
    assert (genres["Gen"], genres["Esth"], genres["Ps"], genres["Mal"], genres["Acts"], genres["Rev"]) == (
        "law",
        "history",
        "poetry",
        "prophets",
        "gospels",
        "letters",
    )


def test_the_metrics_on_known_values() -> None:
    pytest.importorskip("sklearn")
    pytest.importorskip("seqeval")
    from dotformer.metrics.labels import classification_score, tagging_score

    score = classification_score(["a", "a", "b", "c"], ["a", "b", "b", "c"], ["a", "b", "c"])
    # F1: a 2/3 (p 1, r 1/2), b 2/3 (p 1/2, r 1), c 1: macro 7/9
    assert score.accuracy == pytest.approx(75.0) and score.macro_f1 == pytest.approx(700 / 9)
    tags = tagging_score([["B-PER", "I-PER", "O"]], [["B-PER", "O", "O"]], ["B-PER", "I-PER", "O"])
    assert tags.f1_by == "entities" and tags.macro_f1 == 0.0  # the span's end is wrong: the entity is missed
    assert tags.accuracy == pytest.approx(200 / 3)
    pos = tagging_score([["DT", "NN"]], [["DT", "VB"]], ["DT", "NN", "VB"])
    assert pos.f1_by == "labels" and pos.accuracy == 50.0


def test_an_example_too_long_for_the_batch_is_one_line() -> None:
    tok = tokenizer()
    data = sequence_examples(["the cat sat on the mat"], [0], tok, 64).examples
    with pytest.raises(DataError, match="max_tokens=8"):
        LabelledSampler(data, 8)
