"""An encoder's examples, batches and objectives (data/batch/labelled.py, data/tokenize/words.py,
data/read/labelled_reader.py, training/objective.py): BERT's masking as a pure function of (seed, epoch, example) with
its 15% and 80/10/10, lines and blocks cut from a text's arrays, a word's label on its first token, the three objectives
equal to the cross-entropy written out, the readers' forms and their one-line errors, and the metrics on known
values."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from dotformer.config import ModelConfig
from dotformer.data.batch.labelled import (
    LabelledExamples,
    LabelledSampler,
    Masking,
    encode_texts,
    labelled_examples,
    mask_tokens,
    masked_examples,
)
from dotformer.data.prepared.arrays import LabelledArrays, RaggedArray
from dotformer.data.read.labelled_reader import LabelledReader, bible_genres, read_classified, read_tagged
from dotformer.data.tokenize.tokenizer_files import train_tokenizer
from dotformer.data.tokenize.tokenizers import BOS_ID, EOS_ID, MASK_TOKEN, PAD_ID, Tokenizer
from dotformer.data.tokenize.words import IGNORE_LABEL, WordPieces, token_labels
from dotformer.errors import DataError
from dotformer.model import Transformer
from dotformer.training.loss import label_cross_entropy
from dotformer.training.objective import OBJECTIVES

LINES = ["the cat sat on the mat", "a dog ran in the park today", "we read", "birds sing in the morning light"]


def tokenizer(kind: str = "char"):  # type: ignore[no-untyped-def]
    return train_tokenizer(kind, LINES * 3, 300 if kind == "bpe" else None, mask=True)


def texts_of(tok: Tokenizer, texts: list[str], labels: list[int], block: int) -> LabelledExamples:
    """A classifier's examples of texts, made in memory as prepared data holds them (ids, a label id each)."""
    return labelled_examples(LabelledArrays(encode_texts(texts, tok), np.array(labels)), block)


def tagged(tok: Tokenizer, sentences: list[list[str]], tags: list[list[int]], block: int, subtokens: str = "first"):  # type: ignore[no-untyped-def]
    """A tagger's examples, made in memory as prepared data holds them (ids, a label per token aligned)."""
    tokens = WordPieces(tok).encode_sentences(sentences)
    labels = token_labels(tokens, np.array([t for row in tags for t in row]), subtokens)
    offsets = np.concatenate([[0], np.cumsum(tokens.ids.lengths)])
    arrays = LabelledArrays(RaggedArray(tokens.ids.ids, offsets), tags=RaggedArray(labels.ids, offsets))
    return labelled_examples(arrays, block)


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
    inputs, labels = mask_tokens([BOS_ID, EOS_ID], masking, np.random.default_rng(0))
    assert inputs.tolist() == [BOS_ID, EOS_ID] and labels.tolist() == [-100, -100]


def test_a_batch_is_masked_by_seed_epoch_and_example_alone() -> None:
    tok = tokenizer()
    masking = Masking(tok.mask_id, tok.vocab_size)
    data = masked_examples(encode_texts(LINES * 5, tok, eos=True), 16, masking)
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


def pieces(examples: LabelledExamples) -> list[list[int]]:
    return [
        examples.ids[start : start + size].tolist() for start, size in zip(examples.starts, examples.sizes, strict=True)
    ]


def test_blocks_and_lines_of_text() -> None:
    tok = tokenizer()
    masking = Masking(tok.mask_id, tok.vocab_size)
    text = encode_texts([LINES[0], "", *LINES[1:]], tok, eos=True)  # an empty line: nothing to predict, no example
    lines = masked_examples(text, 12, masking, "lines")
    assert lines.cut == 3 and lines.num_texts == 4 and int(lines.sizes.max()) == 10  # [BOS] + 10 + [EOS]
    assert [t for piece in pieces(lines) for t in piece] == [t for line in LINES for t in tok.encode(line)]
    assert [len(piece) for piece in pieces(lines)][:3] == [10, 10, 2]  # "the cat sat on the mat": 22 characters
    assert (lines.lengths == lines.sizes + 2).all()
    blocks = masked_examples(text, 12, masking, "blocks")
    stream = [t for piece in pieces(blocks) for t in piece]
    assert [t for t in stream if t != EOS_ID] == [t for line in LINES for t in tok.encode(line)]
    assert all(piece[-1] != EOS_ID and 0 < len(piece) <= 10 for piece in pieces(blocks))  # its own EOS ends it


@pytest.mark.parametrize("kind", ["char", "bpe"])
def test_a_words_label_sits_on_its_first_token(kind: str) -> None:
    tok = tokenizer(kind)
    words = ["the", "cat", "sat"]
    ids, positions = WordPieces(tok).encode(words)
    assert ids == tok.encode("the cat sat")  # a word encodes as it reads in its sentence
    firsts = [tok.decode([ids[where[0]]]).strip()[0] for where in positions]
    assert firsts == ["t", "c", "s"]
    batch = LabelledSampler(tagged(tok, [words], [[0, 1, 2]], 32), 400).make_batch([0], 0)
    labelled = [(i, label) for i, label in enumerate(batch.labels[0].tolist()) if label != IGNORE_LABEL]
    assert labelled == [(where[0] + 1, n) for n, where in enumerate(positions)]  # + 1: BOS
    every = LabelledSampler(tagged(tok, [words], [[0, 1, 2]], 32, "all"), 400).make_batch([0], 0)
    assert int(every.scored.sum()) == sum(len(where) for where in positions)
    many = WordPieces(tok).encode_sentences([words, ["a", "dog"], words])  # a batch of sentences: one by one's ids
    assert many.ids.ids.tolist() == [*ids, *tok.encode("a dog"), *ids]
    assert many.ids.lengths.tolist() == [len(ids), len(tok.encode("a dog")), len(ids)]


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
    masked = masked_examples(encode_texts(LINES, tok, eos=True), 40, Masking(tok.mask_id, V))
    batch = LabelledSampler(masked, 400).make_batch([0, 1, 2, 3], 0)
    model = tiny_encoder("generator", 0, V)
    objective = OBJECTIVES["masked-token"]
    sums = objective.loss(objective.predict(model, batch, packed, PAD_ID), 0.0, PAD_ID)
    logits = model(batch.src)  # (B, S, V)
    expected = F.cross_entropy(logits[batch.scored], batch.labels[batch.scored], reduction="sum")
    assert torch.allclose(sums.loss, expected, rtol=1e-5) and int(sums.num_tokens) == batch.num_tgt_tokens

    texts = texts_of(tok, LINES, [0, 1, 0, 2], 40)
    batch = LabelledSampler(texts, 400).make_batch([0, 1, 2, 3], 0)
    model = tiny_encoder("sequence", 3, V)
    objective = OBJECTIVES["sequence-label"]
    sums = objective.loss(objective.predict(model, batch, packed, PAD_ID), 0.1, PAD_ID)
    expected = F.cross_entropy(model(batch.src), torch.tensor([0, 1, 0, 2]), label_smoothing=0.1, reduction="sum")
    assert torch.allclose(sums.loss, expected, rtol=1e-5) and int(sums.num_tokens) == 4
    none = objective.loss(objective.predict(model, batch.without_targets(), packed, PAD_ID), 0.1, PAD_ID)
    assert float(none.loss) == 0.0 and int(none.num_tokens) == 0

    tags = tagged(tok, [line.split() for line in LINES], [[n % 3 for n in range(len(line.split()))]
                                                         for line in LINES], 40)  # fmt: skip
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
    assert json.loads(json.dumps(tags.to_dict()))["per_label"]["PER"]["support"] == 1  # plain numbers: --json
    pos = tagging_score([["DT", "NN"]], [["DT", "VB"]], ["DT", "NN", "VB"])
    assert pos.f1_by == "labels" and pos.accuracy == 50.0


def test_an_example_too_long_for_the_batch_is_one_line() -> None:
    tok = tokenizer()
    data = texts_of(tok, ["the cat sat on the mat"], [0], 64)
    with pytest.raises(DataError, match=r"max_tokens=8 tokens, e.g. example 0 with 24 \(\[BOS\] \+ 22 tokens"):
        LabelledSampler(data, 8)


def test_a_batch_cuts_texts_to_the_block_size_and_reads_only_its_rows() -> None:
    tok = tokenizer()
    data = texts_of(tok, LINES, [0, 1, 0, 2], 10)  # [BOS] + 8 + [EOS]
    assert data.cut == 3 and data.lengths.tolist() == [10, 10, 9, 10]
    batch = LabelledSampler(data, 400).make_batch([2, 0], 0)
    assert batch.src.tolist() == [
        [BOS_ID, *tok.encode("we read"), EOS_ID, PAD_ID],
        [BOS_ID, *tok.encode("the cat "), EOS_ID],
    ]
    assert batch.labels.tolist() == [0, 0] and batch.num_src_tokens == 19 and batch.indices == [2, 0]


def test_the_reader_streams_what_read_whole_gives(tmp_path: Path) -> None:
    path = tmp_path / "t.conll"
    path.write_text("John NNP B-PER\nlives VBZ O\n\n\nParis NNP B-LOC\n")
    reader = LabelledReader(str(path), "tag")
    records = [item for item, _ in reader.records()]
    assert [r.text for r in records] == ["John lives", "Paris"] and records[1].label == ["B-LOC"]
    assert reader.report == read_tagged(path).report == {"format": "conll", "lines": 5, "texts": 2, "words": 3,
                                                          "skipped": 0}  # fmt: skip
