"""Sentence embeddings (dotformer.api.embedding, ``dotformer embed``): an imported BERT (random weights, a WordPiece
tokenizer trained here, saved with save_pretrained; no hub) gives HF ``AutoModel`` + the same pooling within 1e-5;
a text's vector does not depend on its batch; an encoder-decoder checkpoint pools its encoder's memory; the command
writes .npy and JSON lines that read back equal to the API; bad input is one line and exit status 2."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from tolerance import encoder_sums, reordering_bound

from dotformer.cli import main
from dotformer.errors import CheckpointError, ConfigError

pytest.importorskip("transformers")

CORPUS = [
    "the cat sat on the mat",
    "a dog ran in the park",
    "the sun is hot today",
    "we read a book at night",
    "birds sing in the morning",
]
# Mixed lengths in one batch, so the shorter rows are padded; "zq" holds unknown symbols; "" is [CLS] [SEP] alone.
TEXTS = [
    "the cat sat on the mat while a dog ran in the park",
    "a bird",
    "we read",
    "zq the sun",
    "birds sing in the morning at night",
    "",
]
# The sums every output value of the BERT below goes through (tests/tolerance.py): its 2 layers (D = 32, H = 4,
# F = 64, at most 24 tokens), the embeddings' LayerNorm (2 · D), and the mean pooling's sum over the 24 rows.
BERT_SUMS = [*encoder_sums(32, 4, 64, 2, 24), 2 * 32, 24]


def make_bert_dir(directory: Path) -> None:
    """A random BertModel (weights drawn wide, so that tokens differ) and a WordPiece tokenizer.json, saved here."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import BertConfig, BertModel

    directory.mkdir(parents=True)
    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.decoder = decoders.WordPiece()
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tokenizer.train_from_iterator(CORPUS * 4, trainers.WordPieceTrainer(vocab_size=80, special_tokens=specials))
    cls, sep = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", cls), ("[SEP]", sep)]
    )
    tokenizer.save(str(directory / "tokenizer.json"))
    config = BertConfig(
        vocab_size=tokenizer.get_vocab_size(),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=40,
        type_vocab_size=2,
        pad_token_id=0,
    )
    torch.manual_seed(2)
    model = BertModel(config).eval()
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            parameter.normal_(1.0 if "LayerNorm.weight" in name else 0.0, 0.1 if parameter.dim() == 1 else 0.3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.save_pretrained(str(directory))


@pytest.fixture(scope="module")
def bert(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The HF directory, its dotformer import, and HF's last hidden states and attention mask for TEXTS."""
    from tokenizers import Tokenizer
    from transformers import AutoModel

    from dotformer.imports.bert import import_bert

    root = tmp_path_factory.mktemp("bert")
    make_bert_dir(root / "hf")
    import_bert(root / "hf", root / "ck")
    tokenizer = Tokenizer.from_file(str(root / "hf" / "tokenizer.json"))
    tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
    encodings = tokenizer.encode_batch(TEXTS)
    ids = torch.tensor([e.ids for e in encodings])  # (B, S) [CLS] ... [SEP] [PAD] ...
    mask = torch.tensor([e.attention_mask for e in encodings])  # (B, S) 1 = real token
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hf = AutoModel.from_pretrained(str(root / "hf")).eval()
    with torch.no_grad():
        hidden = hf(input_ids=ids, attention_mask=mask).last_hidden_state  # (B, S, D)
    return {"hf": root / "hf", "ck": root / "ck", "hidden": hidden, "mask": mask}


def hf_pooling(hidden: torch.Tensor, mask: torch.Tensor, pooling: str, normalize: bool) -> np.ndarray:
    """The pooling as users write it over HF's outputs: masked mean or the [CLS] row, then F.normalize."""
    if pooling == "mean":
        weights = mask.unsqueeze(-1).to(hidden.dtype)  # (B, S, 1)
        vectors = (hidden * weights).sum(dim=1) / weights.sum(dim=1)  # (B, D)
    else:
        vectors = hidden[:, 0]  # (B, D)
    if normalize:
        vectors = F.normalize(vectors, p=2, dim=-1)
    return vectors.numpy()


def load(path: Path) -> Any:
    import dotformer

    return dotformer.load(path, device="cpu")


# -- the API against HF -----------------------------------------------------------------------------------------------


@pytest.mark.numerical
@pytest.mark.parametrize("normalize", [False, True])
@pytest.mark.parametrize("pooling", ["mean", "cls"])
def test_embed_equals_hf_automodel_and_the_same_pooling(bert: dict[str, Any], pooling: str, normalize: bool) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "zq" is read as [UNK], as HF reads it
        ours = load(bert["ck"]).embed(TEXTS, pooling=pooling, normalize=normalize)
    assert isinstance(ours, np.ndarray) and ours.dtype == np.float32 and ours.shape == (len(TEXTS), 32)
    theirs = hf_pooling(bert["hidden"], bert["mask"], pooling, normalize)
    # HF and dotformer sum in other orders: at most the reordering bound of BERT_SUMS at the vectors' magnitude
    tolerance = reordering_bound(BERT_SUMS, float(np.abs(theirs).max()))
    np.testing.assert_allclose(ours, theirs, atol=tolerance, rtol=0)
    if normalize:  # a norm of 32 squares and a division: (32 + 2) roundings of 2^-24 each at most
        np.testing.assert_allclose(np.linalg.norm(ours, axis=1), 1.0, atol=34 * 2.0**-24)


@pytest.mark.numerical
@pytest.mark.filterwarnings("ignore::dotformer.decoding.inputs.UnknownTokenWarning")
def test_mean_pooling_excludes_the_padding(bert: dict[str, Any]) -> None:
    """The padded rows' vectors differ from a mean over all S positions: padding would have counted."""
    ours = load(bert["ck"]).embed(TEXTS[:3])
    hidden, mask = bert["hidden"][:3], bert["mask"][:3]
    assert (mask == 0).any(dim=1).tolist() == [False, True, True]
    over_all = hidden.mean(dim=1).numpy()  # (3, D) padding included
    assert np.abs(ours[1:] - over_all[1:]).max() > 1e-2
    # the longest row has no padding: the same sums, HF's and ours, in other orders
    np.testing.assert_allclose(ours[0], over_all[0], atol=reordering_bound(BERT_SUMS, float(np.abs(ours[0]).max())))


@pytest.mark.filterwarnings("ignore::dotformer.decoding.inputs.UnknownTokenWarning")
def test_cls_and_mean_differ_and_a_string_gives_one_vector(bert: dict[str, Any]) -> None:
    model = load(bert["ck"])
    mean, cls = model.embed(TEXTS[:2]), model.embed(TEXTS[:2], pooling="cls")
    assert np.abs(mean - cls).max() > 1e-2
    one = model.embed(TEXTS[1], pooling="cls")
    assert one.shape == (32,)
    np.testing.assert_array_equal(one, model.embed([TEXTS[1]], pooling="cls")[0])
    assert model.embed([]).shape == (0, 32)


@pytest.mark.numerical
@pytest.mark.parametrize("pooling", ["mean", "cls"])
def test_a_texts_vector_does_not_depend_on_its_batch(bert: dict[str, Any], pooling: str) -> None:
    model = load(bert["ck"])
    texts = [*TEXTS, *(t + " the cat" for t in TEXTS)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        together = model.embed(texts, pooling=pooling)
        alone = np.stack([model.embed([t], pooling=pooling)[0] for t in texts])
        by_tokens = model.embed(texts, pooling=pooling, max_tokens=24)  # a few texts per batch
        by_two = model.embed(texts, pooling=pooling, batch_size=2)
    # Another batch pads a text to another length and hands the matrix products other shapes (another blocking):
    # the same sums in other orders, so the vectors differ by at most the reordering bound of BERT_SUMS at their
    # magnitude; a padded key that leaked would move them by 1e-2.
    tolerance = reordering_bound(BERT_SUMS, float(np.abs(together).max()))
    for other in (alone, by_tokens, by_two):
        np.testing.assert_allclose(together, other, atol=tolerance, rtol=0)


def test_bad_settings_are_refused(bert: dict[str, Any]) -> None:
    model = load(bert["ck"])
    with pytest.raises(ConfigError, match="pooling 'max' is not one of mean, cls"):
        model.embed(["a"], pooling="max")
    with pytest.raises(ConfigError, match="^max_seq_length 41 exceeds this model's learned positional table"):
        model.embed(["a"], max_seq_length=41)  # named as the setting given (not max_input_length)
    with pytest.raises(ConfigError, match="at least 2 tokens"):
        model.embed(["a"], max_seq_length=1)
    with pytest.raises(ConfigError, match="batch_size"):
        model.embed(["a"], batch_size=0)


def test_long_texts_are_cut_to_max_seq_length_as_sentence_transformers_does(bert: dict[str, Any]) -> None:
    """HF's tokenizer truncated to max_length (sentence-transformers' max_seq_length): [CLS] the first pieces [SEP]."""
    from tokenizers import Tokenizer
    from transformers import AutoModel

    from dotformer.decoding.inputs import TruncationWarning

    text = " ".join(CORPUS)  # 29 pieces: [CLS] + 29 + [SEP] = 31 tokens
    tokenizer = Tokenizer.from_file(str(bert["hf"] / "tokenizer.json"))
    tokenizer.enable_truncation(max_length=12)
    ids = torch.tensor([tokenizer.encode(text).ids])  # (1, 12) [CLS] 10 pieces [SEP]
    assert ids.shape == (1, 12)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hf = AutoModel.from_pretrained(str(bert["hf"])).eval()
    with torch.no_grad():
        expected = hf_pooling(hf(input_ids=ids).last_hidden_state, torch.ones_like(ids), "mean", True)
    model = load(bert["ck"])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = model.embed([text, "a bird", text], normalize=True, max_seq_length=12)
    np.testing.assert_allclose(got[[0, 2]], np.repeat(expected, 2, axis=0), atol=1e-5)
    cut = [w for w in caught if issubclass(w.category, TruncationWarning)]
    assert len(cut) == 1 and "2 of 3 input(s) had more than 12 tokens" in str(cut[0].message)


def test_an_imported_sentence_transformers_models_max_seq_length_is_kept(bert: dict[str, Any], tmp_path: Path) -> None:
    import shutil

    from dotformer.decoding.inputs import TruncationWarning
    from dotformer.imports.bert import import_bert

    shutil.copytree(bert["hf"], tmp_path / "st")
    (tmp_path / "st" / "sentence_bert_config.json").write_text('{"max_seq_length": 12, "do_lower_case": false}')
    import_bert(tmp_path / "st", tmp_path / "ck")
    model = load(tmp_path / "ck")
    assert model.info["max_seq_length"] == 12
    text = " ".join(CORPUS)
    with pytest.warns(TruncationWarning, match="cut to max_seq_length = 12"):
        got = model.embed(text)
        np.testing.assert_allclose(got, load(bert["ck"]).embed(text, max_seq_length=12), atol=1e-6)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a text within the limit: no warning
        model.embed("a bird")
    (tmp_path / "st" / "sentence_bert_config.json").write_text('{"max_seq_length": 4000}')
    with pytest.raises(CheckpointError, match="max_seq_length 4000 is not an integer in"):
        import_bert(tmp_path / "st", tmp_path / "ck2")


def make_sentence_transformers_dir(bert_dir: Path, directory: Path, pooling: str, normalize: bool) -> None:
    """``bert_dir`` laid out as sentence-transformers saves a model: modules.json (Transformer, Pooling[, Normalize])
    and 1_Pooling/config.json with one pooling mode on."""
    import shutil

    shutil.copytree(bert_dir, directory)
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    ]
    if normalize:
        modules.append({"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"})
        (directory / "2_Normalize").mkdir()
    (directory / "modules.json").write_text(json.dumps(modules))
    (directory / "1_Pooling").mkdir()
    modes = {"pooling_mode_cls_token": pooling == "cls", "pooling_mode_mean_tokens": pooling == "mean",
             "pooling_mode_max_tokens": False, "pooling_mode_mean_sqrt_len_tokens": False}  # fmt: skip
    (directory / "1_Pooling" / "config.json").write_text(json.dumps({"word_embedding_dimension": 32, **modes}))


@pytest.mark.numerical
@pytest.mark.parametrize(("pooling", "normalize"), [("mean", True), ("cls", True), ("cls", False)])
def test_an_imported_sentence_transformers_models_pooling_and_normalize_are_the_defaults(
    bert: dict[str, Any], tmp_path: Path, pooling: str, normalize: bool
) -> None:
    """As sentence-transformers' encode: its Pooling module's mode, and unit vectors when a Normalize module follows."""
    from dotformer.imports.bert import import_bert

    make_sentence_transformers_dir(bert["hf"], tmp_path / "st", pooling, normalize)
    import_bert(tmp_path / "st", tmp_path / "ck")
    model = load(tmp_path / "ck")
    assert model.info["sentence_embedding"] == {"pooling": pooling, "normalize": normalize}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = model.embed(TEXTS)
        raw = model.embed(TEXTS, normalize=False)
    np.testing.assert_allclose(got, hf_pooling(bert["hidden"], bert["mask"], pooling, normalize), atol=1e-5)
    norms = np.linalg.norm(got, axis=-1)
    assert np.allclose(norms, 1.0, atol=1e-6) if normalize else not np.allclose(norms, 1.0, atol=1e-2)
    assert not np.allclose(np.linalg.norm(raw, axis=-1), 1.0, atol=1e-2)  # normalize=False opts out
    np.testing.assert_allclose(raw, hf_pooling(bert["hidden"], bert["mask"], pooling, False), atol=1e-5)
    plain = load(bert["ck"])  # a plain BERT import: mean pooling, unnormalised
    assert "sentence_embedding" not in plain.info


def test_cli_embed_normalises_by_the_models_normalize_module_and_no_normalize_opts_out(
    bert: dict[str, Any], tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    from dotformer.imports.bert import import_bert

    make_sentence_transformers_dir(bert["hf"], tmp_path / "st", "mean", True)
    import_bert(tmp_path / "st", tmp_path / "ck")
    lines = "".join(t + "\n" for t in TEXTS[:5]).encode("utf-8")
    runs = {}
    for flag in ([], ["--no-normalize"], ["--normalize"]):
        out_file = tmp_path / f"v{len(runs)}.jsonl"
        argv = ["embed", "--checkpoint", str(tmp_path / "ck"), "--output", str(out_file), *flag]
        status, out, err = run_cli(capsysbinary, monkeypatch, *argv, stdin=lines)
        assert status == 0, err
        records = [json.loads(line) for line in out_file.read_text(encoding="utf-8").splitlines()]
        runs[tuple(flag)] = records
    norms = {flag: np.linalg.norm([r["embedding"] for r in records], axis=-1) for flag, records in runs.items()}
    np.testing.assert_allclose(norms[()], 1.0, atol=1e-6)
    np.testing.assert_allclose(norms[("--normalize",)], 1.0, atol=1e-6)
    assert not np.allclose(norms[("--no-normalize",)], 1.0, atol=1e-2)
    assert [r["normalized"] for r in runs[()]] == [True] * 5
    assert [r["normalized"] for r in runs[("--no-normalize",)]] == [False] * 5
    # a plain BERT (no Normalize module): unnormalised by default, --normalize still normalises
    status, out, err = run_cli(capsysbinary, monkeypatch, "embed", "--checkpoint", str(bert["ck"]), "--output-format",
                               "jsonl", "--normalize", "a bird", "we read")  # fmt: skip
    assert status == 0, err
    vectors = [json.loads(line)["embedding"] for line in out.decode().splitlines()]
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=-1), 1.0, atol=1e-6)


def test_a_sentence_transformers_pooling_embed_lacks_is_logged_not_recorded(
    bert: dict[str, Any], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from dotformer.imports.bert import import_bert

    make_sentence_transformers_dir(bert["hf"], tmp_path / "st", "max", True)
    config = tmp_path / "st" / "1_Pooling" / "config.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), "pooling_mode_max_tokens": True}))
    with caplog.at_level("WARNING", logger="dotformer.imports.bert"):
        import_bert(tmp_path / "st", tmp_path / "ck")
    assert "pooling pooling_mode_max_tokens is not one embed has" in caplog.text
    assert load(tmp_path / "ck").info["sentence_embedding"] == {"normalize": True}
    (tmp_path / "st" / "modules.json").write_text("{not json")
    with pytest.raises(CheckpointError, match="modules.json: not a sentence-transformers modules list"):
        import_bert(tmp_path / "st", tmp_path / "ck2")


def test_unknown_symbols_are_one_warning_per_call(bert: dict[str, Any]) -> None:
    from dotformer.decoding.inputs import UnknownTokenWarning

    model = load(bert["ck"])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.embed(["the cat \U0001f600", "a dog \U0001f436 \U0001f436", *["birds \U0001f426"] * 40], batch_size=4)
    unknown = [w for w in caught if issubclass(w.category, UnknownTokenWarning)]
    assert len(unknown) == 1 and "in 42 of 42 input(s)" in str(unknown[0].message)


# -- encoder-decoder and decoder-only checkpoints ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def seq2seq(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A tiny random encoder-decoder checkpoint (characters to words) and a decoder-only one."""
    from dotformer import ModelConfig, Transformer
    from dotformer.checkpoint import save_checkpoint
    from dotformer.data.tokenize.tokenizer_files import train_tokenizer

    root = tmp_path_factory.mktemp("seq2seq")
    letters = train_tokenizer("char", ["abcdefghijklmnopqrstuvwxyz "])
    words = train_tokenizer("symbol", CORPUS)
    torch.manual_seed(0)
    sizes = dict(d_model=32, num_heads=4, d_ff=64, dropout=0.0)
    config = ModelConfig(src_vocab_size=letters.vocab_size, tgt_vocab_size=words.vocab_size, **sizes)
    save_checkpoint(root / "enc-dec", Transformer(config).eval(), letters, words, {"task": "translation"})
    lm = ModelConfig(
        src_vocab_size=words.vocab_size,
        tgt_vocab_size=words.vocab_size,
        arch="decoder-only",
        num_encoder_layers=0,
        **sizes,
    )
    save_checkpoint(root / "lm", Transformer(lm).eval(), words, words, {"task": "lm"})
    return {"enc-dec": root / "enc-dec", "lm": root / "lm"}


@pytest.mark.numerical
def test_an_encoder_decoder_checkpoint_pools_its_encoders_memory(seq2seq: dict[str, Path]) -> None:
    from dotformer.data.tokenize.tokenizers import EOS_ID

    model = load(seq2seq["enc-dec"])
    texts = ["the cat", "a much longer text"]
    with torch.no_grad():
        memories = [
            model.model.encode(torch.tensor([[*model.src_tokenizer.encode(t), EOS_ID]])).memory[0] for t in texts
        ]
    # batched (padded) against alone: the same sums in other orders through the 6 layers (D = 32, H = 4, F = 64,
    # at most 19 tokens) and the mean's 19 rows
    means, firsts = np.stack([m.mean(0).numpy() for m in memories]), np.stack([m[0].numpy() for m in memories])
    scale = max(float(m.abs().max()) for m in memories)
    tolerance = reordering_bound([*encoder_sums(32, 4, 64, 6, 19), 19], scale)
    np.testing.assert_allclose(model.embed(texts), means, atol=tolerance, rtol=0)
    np.testing.assert_allclose(model.embed(texts, pooling="cls"), firsts, atol=tolerance, rtol=0)


def test_a_decoder_only_checkpoint_is_refused(seq2seq: dict[str, Path]) -> None:
    with pytest.raises(ConfigError, match="a decoder-only model has no encoder to embed with"):
        load(seq2seq["lm"]).embed(["the cat"])


# -- the command ------------------------------------------------------------------------------------------------------


def run_cli(
    capsysbinary: pytest.CaptureFixture[bytes], monkeypatch: pytest.MonkeyPatch, *argv: str, stdin: bytes = b""
) -> tuple[int, bytes, str]:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin), encoding="utf-8"))
    status = main(list(argv))
    captured = capsysbinary.readouterr()
    return status, captured.out, captured.err.decode("utf-8")


def test_cli_writes_npy_and_jsonl_equal_to_the_api(
    bert: dict[str, Any], tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    ck = str(bert["ck"])
    lines = "".join(t + "\n" for t in TEXTS).encode("utf-8")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = load(bert["ck"]).embed(TEXTS, pooling="cls", normalize=True)

    status, out, err = run_cli(capsysbinary, monkeypatch, "embed", "--checkpoint", ck, "--pooling", "cls",
                               "--normalize", stdin=lines)  # fmt: skip
    assert status == 0, err
    np.testing.assert_array_equal(np.load(io.BytesIO(out)), expected)
    assert "<unk>" in err and err.count("\n") == 1  # "zq": one warning line

    source = tmp_path / "texts.txt"
    source.write_bytes(lines)
    jsonl = tmp_path / "out" / "vectors.jsonl"
    argv = ["embed", "--checkpoint", ck, "--pooling", "cls", "--normalize", "--input", str(source)]
    status, out, err = run_cli(capsysbinary, monkeypatch, *argv, "--output", str(jsonl))
    assert status == 0, err
    assert out.decode().startswith(f"wrote {jsonl}: 6 x 32 float32, cls pooling, L2-normalised")
    records = [json.loads(line) for line in jsonl.read_text(encoding="utf-8").splitlines()]
    assert [(r["id"], r["text"], r["pooling"], r["normalized"]) for r in records] == [
        (i, t, "cls", True) for i, t in enumerate(TEXTS)
    ]
    np.testing.assert_array_equal(np.array([r["embedding"] for r in records], dtype=np.float32), expected)

    npy = tmp_path / "vectors.npy"
    status, out, err = run_cli(capsysbinary, monkeypatch, "embed", "--checkpoint", ck, "--input", str(source),
                               "--output", str(npy))  # fmt: skip
    assert status == 0, err
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        np.testing.assert_array_equal(np.load(npy), load(bert["ck"]).embed(TEXTS))
    sidecar = json.loads((tmp_path / "vectors.npy.json").read_text())
    assert sidecar["pooling"] == "mean" and sidecar["normalized"] is False
    assert (sidecar["count"], sidecar["dim"], sidecar["dtype"]) == (6, 32, "float32")

    status, out, _ = run_cli(capsysbinary, monkeypatch, "embed", "--checkpoint", ck, "--output-format", "jsonl",
                             "a bird", "we read")  # fmt: skip
    assert status == 0
    vectors = [json.loads(line)["embedding"] for line in out.decode().splitlines()]
    np.testing.assert_array_equal(np.array(vectors, dtype=np.float32), load(bert["ck"]).embed(["a bird", "we read"]))


@pytest.mark.parametrize(
    ("which", "argv", "stdin", "message"),
    [
        ("bert", [], b"", "<stdin>: no input lines to embed"),
        ("bert", ["--pooling", "max"], b"a\n", "error: --pooling 'max' is not one of mean, cls"),
        ("bert", ["a\udcff"], b"", "error: input 1: byte 0xff at byte offset 1 is not valid UTF-8 (invalid start"),
        ("bert", ["--output-format", "csv"], b"a\n", "--output-format 'csv' is not one of npy, jsonl"),
        ("bert", ["--max-seq-length", "0"], b"a\n", "--max-seq-length must be a positive integer, got 0"),
        ("bert", ["--max-seq-length", "100000"], b"a\n", "error: --max-seq-length 100000 exceeds this model's learned"),
        ("lm", [], b"the cat\n", "a decoder-only model has no encoder to embed with"),
    ],
)
def test_cli_errors_are_one_line_and_exit_2(
    bert: dict[str, Any],
    seq2seq: dict[str, Path],
    capsysbinary: pytest.CaptureFixture[bytes],
    monkeypatch: pytest.MonkeyPatch,
    which: str,
    argv: list[str],
    stdin: bytes,
    message: str,
) -> None:
    checkpoint = bert["ck"] if which == "bert" else seq2seq["lm"]
    status, out, err = run_cli(capsysbinary, monkeypatch, "embed", "--checkpoint", str(checkpoint), *argv, stdin=stdin)
    assert status == 2 and out == b""
    assert err.startswith("dotformer embed: error: ") and message in err
    assert err.count("\n") == 1


def test_cli_through_a_shell_pipe(bert: dict[str, Any], tmp_path: Path) -> None:
    """``dotformer embed --checkpoint CK < lines > vectors.npy`` as a user types it."""
    source, target = tmp_path / "lines.txt", tmp_path / "vectors.npy"
    source.write_text("a bird\nwe read\n", encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "OMP_NUM_THREADS": "1"}
    with source.open("rb") as stdin, target.open("wb") as stdout:
        result = subprocess.run(
            [sys.executable, "-m", "dotformer", "embed", "--checkpoint", str(bert["ck"]), "--normalize"],
            stdin=stdin,
            stdout=stdout,
            stderr=subprocess.PIPE,
            text=True,
            timeout=240,
            env=env,
        )
    assert result.returncode == 0, result.stderr
    expected = load(bert["ck"]).embed(["a bird", "we read"], normalize=True)
    np.testing.assert_array_equal(np.load(target), expected)


def test_cli_writes_no_binary_to_a_terminal(bert: dict[str, Any]) -> None:
    """``.npy`` bytes would garble a terminal: refused in one line; JSON lines are text and go there."""
    import pty

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "dotformer", "embed", "--checkpoint", str(bert["ck"]), "a bird"]
    for extra, status in (([], 2), (["--output-format", "jsonl"], 0)):
        leader, follower = pty.openpty()
        try:
            result = subprocess.run(
                [*command, *extra], stdout=follower, stderr=subprocess.PIPE, text=True, timeout=240, env=env
            )
        finally:
            os.close(follower)
            os.close(leader)
        assert result.returncode == status, result.stderr
        if status == 2:
            assert result.stderr == (
                "dotformer embed: error: a .npy matrix is binary: redirect standard output, give --output FILE or "
                "use jsonl\n"
            )
