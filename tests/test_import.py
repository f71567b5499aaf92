"""dotformer.imports: a Hugging Face Marian directory (random weights, sentencepiece models trained here, saved with
save_pretrained; no hub) becomes a checkpoint whose tokens, logits and greedy outputs are HF's; translate, evaluate
--dtype int8 and explore run on it from the command line; pickles are refused."""

from __future__ import annotations

import io
import json
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import Cli

pytest.importorskip("transformers")
spm = pytest.importorskip("sentencepiece")

SOURCES = [
    "the cat sat on the mat",
    "a dog ran in the park",
    "the sun is hot today",
    "we read a book at night",
    "birds sing in the morning",
]
TARGETS = [
    "le chat est sur le tapis",
    "un chien court au parc",
    "le soleil est chaud",
    "nous lisons un livre la nuit",
    "les oiseaux chantent le matin",
]
TEXTS = ["the cat ran", "a bird sings at night in the park", "zq the", "", "  we  read  "]


def train_spm(texts: list[str]) -> bytes:
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(texts * 4),
        model_writer=model,
        vocab_size=40,
        model_type="unigram",
        character_coverage=1.0,
        hard_vocab_limit=False,
        minloglevel=2,
    )
    return model.getvalue()


def marian_vocab(directory: Path) -> dict[str, int]:
    """Marian's layout: </s> 0, <unk> 1, the pieces of both spm models, <pad> last."""
    pieces: list[str] = []
    for name in ("source", "target"):
        sp = spm.SentencePieceProcessor(model_proto=(directory / f"{name}.spm").read_bytes())
        for i in range(sp.get_piece_size()):
            if not (sp.is_control(i) or sp.is_unknown(i)) and sp.id_to_piece(i) not in pieces:
                pieces.append(sp.id_to_piece(i))
    vocab = {"</s>": 0, "<unk>": 1, **{piece: i + 2 for i, piece in enumerate(pieces)}}
    vocab["<pad>"] = len(vocab)
    return vocab


def make_marian_dir(directory: Path, seed: int = 0, **config: Any) -> tuple[Any, Any]:
    """Write a random MarianMTModel and its MarianTokenizer into ``directory``; return both."""
    from transformers import MarianConfig, MarianMTModel, MarianTokenizer

    directory.mkdir(parents=True)
    (directory / "source.spm").write_bytes(train_spm(SOURCES))
    (directory / "target.spm").write_bytes(train_spm(TARGETS))
    vocab = marian_vocab(directory)
    (directory / "vocab.json").write_text(json.dumps(vocab))
    tokenizer = MarianTokenizer(
        str(directory / "source.spm"), str(directory / "target.spm"), str(directory / "vocab.json")
    )
    tokenizer.save_pretrained(str(directory))
    V = len(vocab)
    fields = dict(
        vocab_size=V,
        decoder_vocab_size=V,
        d_model=32,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        max_position_embeddings=64,
        pad_token_id=V - 1,
        eos_token_id=0,
        decoder_start_token_id=V - 1,
        forced_eos_token_id=None,
        scale_embedding=True,
        activation_function="relu",
    )
    fields.update(config)
    torch.manual_seed(seed)
    model = MarianMTModel(MarianConfig(**fields)).eval()
    with torch.no_grad():
        for name, parameter in model.named_parameters():  # a trained-looking model: varied outputs, some short
            if "layer_norm.weight" in name:
                parameter.normal_(1.0, 0.1)
            elif "embed_positions" not in name:
                parameter.normal_(0.0, 0.2 if parameter.dim() > 1 else 0.05)
        model.final_logits_bias.normal_(0.0, 0.5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.save_pretrained(str(directory))
    return model, tokenizer


@pytest.fixture(scope="module")
def marian(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    from dotformer.imports.marian import import_marian

    root = tmp_path_factory.mktemp("marian")
    model, tokenizer = make_marian_dir(root / "hf")
    import_marian(root / "hf", root / "ck")
    return {"root": root, "hf": root / "hf", "ck": root / "ck", "model": model, "tokenizer": tokenizer}


def test_tokens_are_marians_in_dotformers_order(marian: dict[str, Any]) -> None:
    import dotformer

    translator = dotformer.load(marian["ck"], device="cpu")
    vocab = json.loads((marian["hf"] / "vocab.json").read_text())
    piece_of = {i: p for p, i in vocab.items()}
    tokenizer = marian["tokenizer"]
    for text in TEXTS:
        theirs = tokenizer(text).input_ids  # pieces + </s>
        ours = [*translator.src_tokenizer.encode(text), 2]
        assert [translator.src_tokenizer.id_to_token(i) for i in ours[:-1]] == [
            "<unk>" if i == vocab["<unk>"] else piece_of[i] for i in theirs[:-1]
        ]
        assert len(ours) == len(theirs)
    assert translator.src_tokenizer.count_unknown("zq the") == 1  # "zq" is not in the source spm
    # the target side decodes as MarianTokenizer does
    ids = tokenizer(text_target="le chat est sur le tapis").input_ids[:-1]
    ours = translator.tgt_tokenizer.encode("le chat est sur le tapis")
    assert translator.tgt_tokenizer.decode(ours) == tokenizer.decode(ids, skip_special_tokens=True)


def test_logits_and_greedy_outputs_equal_hf(marian: dict[str, Any]) -> None:
    import dotformer
    from dotformer.decoding.translate import pad_batch

    translator = dotformer.load(marian["ck"], device="cpu")
    model, tokenizer = marian["model"], marian["tokenizer"]
    batch = tokenizer(TEXTS, return_tensors="pt", padding=True)
    pad = (
        model.config.pad_token_id
    )  # OPUS models' generation configs forbid it (bad_words_ids); dotformer never picks it
    out = model.generate(**batch, num_beams=1, do_sample=False, max_new_tokens=12, suppress_tokens=[pad])  # (B, 1 + T)
    theirs = tokenizer.batch_decode(out, skip_special_tokens=True)
    ours = translator.translate(TEXTS, strategy="greedy", max_len_a=0.0, max_len_b=12)
    # an empty input is answered "" without running the model (dotformer.decoding.translate); HF decodes it
    assert [o for o, t in zip(ours, TEXTS, strict=True) if t.strip()] == [
        h for h, t in zip(theirs, TEXTS, strict=True) if t.strip()
    ]
    assert [o for o, t in zip(ours, TEXTS, strict=True) if not t.strip()] == [""]
    assert len(set(theirs)) > 2 and max(len(t) for t in theirs) > 10  # varied, non-trivial outputs

    # teacher-forced logits on HF's own outputs, columns in dotformer's order
    vocab_size = model.config.vocab_size
    rows = [vocab_size - 1, vocab_size - 1, 0, 1, *range(2, vocab_size - 1)]  # pad, start, </s>, <unk>, pieces
    to_ours = {marian_id: i for i, marian_id in enumerate(rows) if i != 1}
    src = pad_batch([[*translator.src_tokenizer.encode(t), 2] for t in TEXTS])
    tgt = torch.tensor([[1, *[to_ours[int(t)] for t in row[1:-1]]] for row in out])  # BOS + HF tokens (PAD -> 0)
    with torch.no_grad():
        hf_logits = model(**batch, decoder_input_ids=out[:, :-1]).logits  # (B, T, V_marian)
        our_logits = translator.model(src, tgt)  # (B, T, V_ours)
    torch.testing.assert_close(our_logits, hf_logits[:, :, rows], atol=1e-4, rtol=1e-4)
    assert translator.model.config.generator_bias and translator.model.config.scale_embeddings


def test_import_refuses_pickles_and_unsupported_models(tmp_path: Path) -> None:
    from dotformer.errors import CheckpointError, ConfigError
    from dotformer.imports.marian import import_marian

    make_marian_dir(tmp_path / "swish", activation_function="swish")
    with pytest.raises(ConfigError, match="activation_function='swish'"):
        import_marian(tmp_path / "swish", tmp_path / "out")
    assert not (tmp_path / "out").exists()

    pickled = tmp_path / "pickled"
    make_marian_dir(pickled)
    (pickled / "model.safetensors").rename(pickled / "pytorch_model.bin")  # never opened: refused by name
    with pytest.raises(CheckpointError, match="safetensors only"):
        import_marian(pickled, tmp_path / "out")
    assert not (tmp_path / "out").exists()


# -- the command line -------------------------------------------------------------------------------------------------


def test_cli_import_then_translate_evaluate_explore(marian: dict[str, Any], tmp_path: Path, cli: Cli) -> None:
    import dotformer

    ck = tmp_path / "ck"
    result = cli("import", "--from", "marian", str(marian["hf"]), str(ck))
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"wrote {ck}")
    expected = dotformer.load(marian["ck"], device="cpu").translate(TEXTS[:2], strategy="greedy")

    result = cli("translate", "--checkpoint", str(ck), "--strategy", "greedy", *TEXTS[:2])
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == expected

    test_file = tmp_path / "test.tsv"
    test_file.write_text("".join(f"{s}\t{t}\n" for s, t in zip(SOURCES, TARGETS, strict=True)))
    result = cli("evaluate", "--checkpoint", str(ck), "--data", str(test_file), "--dtype", "int8")
    assert result.returncode == 0, result.stderr
    assert "BLEU" in result.stdout

    page = tmp_path / "page.html"
    result = cli("explore", "--checkpoint", str(ck), "--write", str(page), "--text", "the cat")
    assert result.returncode == 0, result.stderr
    assert page.stat().st_size > 1000

    result = cli("import", "--from", "marian", str(marian["hf"]), str(ck))  # ck is not empty now
    assert result.returncode == 2
    assert result.stderr.startswith("dotformer import: error: ") and "not empty" in result.stderr
    assert result.stderr.count("\n") == 1


# -- BERT -------------------------------------------------------------------------------------------------------------

BERT_TEXTS = ["the cat sat on the mat", "a dog ran in the park today", "zq", "the sun"]


def make_bert_dir(directory: Path, **config: Any) -> tuple[Any, Any]:
    """A random BertModel and a WordPiece tokenizer.json trained here, saved into ``directory``."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import BertConfig, BertModel

    directory.mkdir(parents=True)
    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.decoder = decoders.WordPiece()
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tokenizer.train_from_iterator(SOURCES * 4, trainers.WordPieceTrainer(vocab_size=80, special_tokens=specials))
    cls, sep = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", cls), ("[SEP]", sep)]
    )
    tokenizer.save(str(directory / "tokenizer.json"))
    fields = dict(
        vocab_size=tokenizer.get_vocab_size(),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=40,
        type_vocab_size=2,
        pad_token_id=0,
    )
    fields.update(config)
    torch.manual_seed(1)
    model = BertModel(BertConfig(**fields)).eval()
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            parameter.normal_(1.0 if "LayerNorm.weight" in name else 0.0, 0.1 if parameter.dim() == 1 else 0.3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.save_pretrained(str(directory))
    return model, tokenizer


def test_bert_last_hidden_state_is_dotformers_memory(tmp_path: Path) -> None:
    from dotformer.checkpoint import load_checkpoint
    from dotformer.imports.bert import bert_inputs, import_bert

    bert, tokenizer = make_bert_dir(tmp_path / "bert")
    import_bert(tmp_path / "bert", tmp_path / "ck")
    loaded = load_checkpoint(tmp_path / "ck")
    config = loaded.config
    assert config.arch == "encoder-only" and not config.scale_embeddings and config.embedding_norm
    assert config.layer_norm_eps == 1e-12

    encodings = tokenizer.encode_batch(BERT_TEXTS)
    width = max(len(e.ids) for e in encodings)
    ids = torch.tensor([e.ids + [0] * (width - len(e.ids)) for e in encodings])  # (B, S) [CLS] ... [SEP] [PAD]...
    keep = ids != 0
    src = bert_inputs(loaded.src_tokenizer, BERT_TEXTS)
    assert src.shape == ids.shape and torch.equal(src != 0, keep)
    with torch.no_grad():
        theirs = bert(input_ids=ids, attention_mask=keep.long()).last_hidden_state  # (B, S, D)
        ours = loaded.model.encode(src).memory  # (B, S, D)
    torch.testing.assert_close(ours[keep], theirs[keep], atol=1e-5, rtol=1e-5)
    assert loaded.src_tokenizer.count_unknown("zq") >= 1  # BERT's [UNK] is dotformer's UNK
    with torch.no_grad():  # the token-type row is part of the function: without it the states differ
        loaded.model.src_embed.position.table.weight.sub_(bert.embeddings.token_type_embeddings.weight[0])
        assert (loaded.model.encode(src).memory[keep] - theirs[keep]).abs().max() > 1e-2


def test_cli_import_bert_and_refusals(tmp_path: Path, cli: Cli) -> None:
    make_bert_dir(tmp_path / "bert")
    result = cli("import", "--from", "bert", str(tmp_path / "bert"), str(tmp_path / "ck"))
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "ck" / "model.safetensors").is_file()

    make_bert_dir(tmp_path / "relative", position_embedding_type="relative_key")
    result = cli("import", "--from", "bert", str(tmp_path / "relative"), str(tmp_path / "ck2"))
    assert result.returncode == 2 and "position_embedding_type='relative_key'" in result.stderr
    assert result.stderr.count("\n") == 1 and not (tmp_path / "ck2").exists()


@pytest.mark.parametrize("overrides", [{}, {"share_embeddings": False, "src_vocab_size": 40, "generator_bias": True}])
def test_export_to_marian_then_import_is_the_same_model(tmp_path: Path, overrides: dict[str, Any]) -> None:
    """dotformer -> save_marian -> read_marian gives back the same config and weights (ids and D axis restored)."""
    from dotformer import ModelConfig, Transformer
    from dotformer.export.marian import save_marian
    from dotformer.imports.marian import read_marian

    torch.manual_seed(3)
    fields = {"src_vocab_size": 50, "tgt_vocab_size": 50, "share_embeddings": True, **overrides}
    model = Transformer(ModelConfig.preset("tiny", max_len=64, **fields)).eval()
    if model.generator.bias is not None:
        torch.nn.init.normal_(model.generator.bias)
    save_marian(model, tmp_path / "m")
    for name, size in (("vocab.json", fields["src_vocab_size"]), ("target_vocab.json", fields["tgt_vocab_size"])):
        pieces = ["<pad>", "<s>", "</s>", "<unk>", *(f"t{i}" for i in range(4, size))]
        (tmp_path / "m" / name).write_text(json.dumps({p: i for i, p in enumerate(pieces)}))
    (tmp_path / "m" / "source.spm").write_bytes(train_spm(SOURCES))
    (tmp_path / "m" / "target.spm").write_bytes(train_spm(TARGETS))
    back, _, _ = read_marian(tmp_path / "m")
    assert back.config == model.config
    ours, theirs = model.state_dict(), back.state_dict()
    assert set(ours) == set(theirs)
    for name in ours:
        torch.testing.assert_close(theirs[name], ours[name], atol=0, rtol=0, msg=name)
