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
from tolerance import encoder_sums, logits_tolerance, reordering_bound

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


@pytest.mark.parametrize("kind", ["marian", "opus"])
def test_tokens_are_marians_in_dotformers_order(kind: str, request: pytest.FixtureRequest) -> None:
    import dotformer

    marian = request.getfixturevalue(kind)

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


@pytest.mark.numerical
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
    rows = [vocab_size - 1, 0, 1, *range(2, vocab_size - 1)]  # dotformer's 1..: start (= pad), </s>, <unk>, pieces
    to_ours = {marian_id: i + 1 for i, marian_id in enumerate(rows)}
    src = pad_batch([[*translator.src_tokenizer.encode(t), 2] for t in TEXTS])
    tgt = torch.tensor([[to_ours[int(t)] for t in row[:-1]] for row in out])  # HF's pad is dotformer's BOS here
    tgt[:, 1:][out[:, 1:-1] == pad] = 0  # HF pads finished rows: dotformer's PAD
    with torch.no_grad():
        hf_logits = model(**batch, decoder_input_ids=out[:, :-1]).logits  # (B, T, V_marian)
        our_logits = translator.model(src, tgt)  # (B, T, V_ours)
    # HF's order of the same sums: the reordering bound of the model's sums at the logits' magnitude
    tolerance = logits_tolerance(translator.model.config, our_logits, src.size(1))
    torch.testing.assert_close(our_logits[:, :, 1:], hf_logits[:, :, rows], atol=tolerance, rtol=0)
    assert translator.model.config.generator_bias and translator.model.config.scale_embeddings


def test_import_refuses_pickles_and_unsupported_models(tmp_path: Path) -> None:
    from dotformer.errors import CheckpointError, ConfigError
    from dotformer.imports.marian import import_marian

    make_marian_dir(tmp_path / "tanh", activation_function="tanh")
    with pytest.raises(ConfigError, match="activation_function='tanh'"):
        import_marian(tmp_path / "tanh", tmp_path / "out")
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


@pytest.mark.numerical
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
    c = loaded.model.config  # HF's order of the encoder's sums, and the embeddings' LayerNorm (2 · D)
    sums = [*encoder_sums(c.d_model, c.num_heads, c.d_ff, c.num_encoder_layers, src.size(1)), 2 * c.d_model]
    torch.testing.assert_close(ours[keep], theirs[keep], atol=reordering_bound(sums, float(theirs.abs().max())), rtol=0)
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


@pytest.mark.numerical
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


# -- OPUS-MT: a config identical in every field to a published model's ------------------------------------------------

# Helsinki-NLP/opus-mt-en-de's config.json, field for field, with only the sizes shrunk (vocabulary and pad ids are
# this directory's; the published model has 58101 ids, pad 58100)
OPUS_MT_CONFIG: dict[str, Any] = {
    "_num_labels": 3,
    "activation_dropout": 0.0,
    "activation_function": "swish",
    "add_bias_logits": False,
    "add_final_layer_norm": False,
    "architectures": ["MarianMTModel"],
    "attention_dropout": 0.0,
    "bos_token_id": 0,
    "classif_dropout": 0.0,
    "classifier_dropout": 0.0,
    "d_model": 32,
    "decoder_attention_heads": 4,
    "decoder_ffn_dim": 64,
    "decoder_layerdrop": 0.0,
    "decoder_layers": 2,
    "dropout": 0.1,
    "encoder_attention_heads": 4,
    "encoder_ffn_dim": 64,
    "encoder_layerdrop": 0.0,
    "encoder_layers": 2,
    "eos_token_id": 0,
    "forced_eos_token_id": 0,
    "gradient_checkpointing": False,
    "id2label": {"0": "LABEL_0", "1": "LABEL_1", "2": "LABEL_2"},
    "init_std": 0.02,
    "is_encoder_decoder": True,
    "label2id": {"LABEL_0": 0, "LABEL_1": 1, "LABEL_2": 2},
    "max_length": 512,
    "max_position_embeddings": 512,
    "model_type": "marian",
    "normalize_before": False,
    "normalize_embedding": False,
    "num_beams": 4,
    "num_hidden_layers": 2,
    "scale_embedding": True,
    "share_encoder_decoder_embeddings": True,
    "static_position_embeddings": True,
    "use_cache": True,
}
OPUS_MT_GENERATION = {"bos_token_id": 0, "eos_token_id": 0, "forced_eos_token_id": 0, "max_length": 512, "num_beams": 4}


def make_opus_dir(directory: Path, seed: int = 5) -> tuple[Any, Any]:
    """An OPUS-MT-shaped directory: :data:`OPUS_MT_CONFIG` (pad = decoder start = the last id, forbidden by
    bad_words_ids), its generation config, random weights whose outputs end within a few tokens."""
    from transformers import GenerationConfig, MarianConfig, MarianMTModel, MarianTokenizer

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
    ids = {"vocab_size": V, "decoder_vocab_size": V, "pad_token_id": V - 1, "decoder_start_token_id": V - 1}
    fields = {**OPUS_MT_CONFIG, **ids, "bad_words_ids": [[V - 1]]}
    torch.manual_seed(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = MarianMTModel(MarianConfig(**fields)).eval()
        model.generation_config = GenerationConfig(
            **OPUS_MT_GENERATION, pad_token_id=V - 1, decoder_start_token_id=V - 1, bad_words_ids=[[V - 1]]
        )
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "layer_norm.weight" in name:
                parameter.normal_(1.0, 0.1)
            elif "embed_positions" not in name:
                parameter.normal_(0.0, 0.2 if parameter.dim() > 1 else 0.05)
        model.final_logits_bias.normal_(0.0, 0.5)
        model.final_logits_bias[0, V - 1] += 1.0  # the pad/start logit is large: counting it twice would show
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.save_pretrained(str(directory))
    saved = json.loads((directory / "config.json").read_text())  # newer transformers drop generation fields here
    (directory / "config.json").write_text(json.dumps({**saved, **fields}, indent=2))  # the published file holds them
    return model, tokenizer


@pytest.fixture(scope="module")
def opus(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    from dotformer.imports.marian import import_marian

    root = tmp_path_factory.mktemp("opus")
    model, tokenizer = make_opus_dir(root / "hf")
    import_marian(root / "hf", root / "ck")
    return {"root": root, "hf": root / "hf", "ck": root / "ck", "model": model, "tokenizer": tokenizer}


def test_opus_config_is_the_published_ones(opus: dict[str, Any]) -> None:
    saved = json.loads((opus["hf"] / "config.json").read_text())
    for name, value in OPUS_MT_CONFIG.items():
        assert saved[name] == value, name
    generation = json.loads((opus["hf"] / "generation_config.json").read_text())
    V = saved["vocab_size"]
    assert generation["bad_words_ids"] == [[V - 1]] and generation["decoder_start_token_id"] == V - 1
    assert generation["num_beams"] == 4


@pytest.mark.numerical
def test_opus_logits_and_log_probabilities_equal_hf(opus: dict[str, Any]) -> None:
    import dotformer
    from dotformer.data.tokenize.tokenizers import BOS_ID, PAD_ID
    from dotformer.decoding.translate import pad_batch

    translator = dotformer.load(opus["ck"], device="cpu")
    model, tokenizer = opus["model"], opus["tokenizer"]
    assert translator.model.config.activation == "silu"
    V, pad = model.config.vocab_size, model.config.pad_token_id
    rows = [pad, 0, 1, *range(2, V - 1)]  # dotformer's BOS, EOS, UNK, pieces: Marian's ids; dotformer's PAD is new
    to_ours = {marian_id: i + 1 for i, marian_id in enumerate(rows)}
    batch = tokenizer(TEXTS, return_tensors="pt", padding=True)
    out = model.generate(**batch, num_beams=1, max_new_tokens=12)  # (B, 1 + T), starts with pad
    src = pad_batch([[*translator.src_tokenizer.encode(t), 2] for t in TEXTS])
    tgt = torch.tensor([[to_ours[int(t)] for t in row[:-1]] for row in out])
    tgt[:, 1:][out[:, 1:-1] == pad] = PAD_ID  # HF pads rows that ended early
    assert (tgt[:, 0] == BOS_ID).all()
    with torch.no_grad():
        theirs = model(**batch, decoder_input_ids=out[:, :-1]).logits  # (B, T, V)
        ours = translator.model(src, tgt)  # (B, T, V + 1)
    keep = tgt != PAD_ID  # (B, T) real positions
    # HF's order of the same sums; the log-softmax adds a sum over V terms (its log-sum-exp)
    tolerance = logits_tolerance(translator.model.config, ours, src.size(1))
    torch.testing.assert_close(ours[:, :, 1:][keep], theirs[:, :, rows][keep], atol=tolerance, rtol=0)
    log_probs = ours.log_softmax(-1)
    tolerance += reordering_bound([V], float(log_probs[:, :, 1:].abs().max()))
    torch.testing.assert_close(
        log_probs[:, :, 1:][keep], theirs.log_softmax(-1)[:, :, rows][keep], atol=tolerance, rtol=0
    )
    assert (log_probs[:, :, PAD_ID] < -1000).all()  # dotformer's PAD: never a second copy of the pad row
    assert theirs.softmax(-1)[:, :, pad][keep].max() > 0.05  # the pad's probability is not negligible here


@pytest.mark.numerical
def test_opus_greedy_and_beam_equal_hf_generate(opus: dict[str, Any]) -> None:
    import dotformer

    translator = dotformer.load(opus["ck"], device="cpu")
    model, tokenizer = opus["model"], opus["tokenizer"]
    texts = [t for t in TEXTS if t.strip()]  # an empty input is answered "" without running the model
    batch = tokenizer(texts, return_tensors="pt", padding=True)
    # the model's own generation config, but a short length limit: a random model's outputs may run on, and
    # forced_eos_token_id would then force an EOS dotformer's limit does not add
    short = {"max_new_tokens": 12, "forced_eos_token_id": None}
    with torch.no_grad():
        greedy = model.generate(**batch, num_beams=1, **short)
        beam = model.generate(**batch, length_penalty=0.0, **short)  # num_beams=4; dotformer's α = 0 ranks the same
    limit = {"max_len_a": 0.0, "max_len_b": 12}
    ours_greedy = translator.translate(texts, strategy="greedy", **limit)
    # Hugging Face's beam search runs until no alive beam can beat the K-th finished one, which for α = 0 is the
    # exact rule (the default rule stops once K have finished)
    ours_beam = translator.translate(texts, beam=4, length_penalty=0.0, beam_stop="exact", **limit)
    assert ours_greedy == tokenizer.batch_decode(greedy, skip_special_tokens=True)
    assert ours_beam == tokenizer.batch_decode(beam, skip_special_tokens=True)
    assert ours_beam != ours_greedy and len({*ours_beam, *ours_greedy}) > 2  # the searches differ; varied outputs


@pytest.mark.numerical
def test_opus_round_trip_is_bit_for_bit(opus: dict[str, Any], tmp_path: Path) -> None:
    """import -> export --to marian -> import: the same config and weights, bit for bit."""
    import shutil

    from dotformer.checkpoint import load_checkpoint
    from dotformer.export.marian import save_marian
    from dotformer.imports.marian import read_marian

    loaded = load_checkpoint(opus["ck"])
    save_marian(loaded.model, tmp_path / "m")
    for name, tokenizer in (("vocab.json", loaded.src_tokenizer), ("target_vocab.json", loaded.tgt_tokenizer)):
        pieces = [tokenizer.id_to_token(i) for i in range(tokenizer.vocab_size)]
        (tmp_path / "m" / name).write_text(json.dumps({p: i for i, p in enumerate(pieces)}))
    for name in ("source.spm", "target.spm"):
        shutil.copyfile(opus["hf"] / name, tmp_path / "m" / name)
    back, src_tokenizer, _ = read_marian(tmp_path / "m")
    assert back.config == loaded.model.config
    ours, theirs = loaded.model.state_dict(), back.state_dict()
    assert set(ours) == set(theirs)
    for name in ours:
        assert torch.equal(theirs[name], ours[name]), name
    for text in TEXTS:
        assert src_tokenizer.encode(text).ids == loaded.src_tokenizer.encode(text)


def test_opus_bad_words_other_than_pad_are_named(
    opus: dict[str, Any], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    import logging
    import shutil

    from dotformer.imports.marian import read_marian

    with caplog.at_level(logging.WARNING, logger="dotformer.imports.marian"):
        read_marian(opus["hf"])  # OPUS-MT's rule (the pad) is dotformer's own: nothing to say
    assert not caplog.records
    shutil.copytree(opus["hf"], tmp_path / "m")
    generation = json.loads((tmp_path / "m" / "generation_config.json").read_text())
    generation["bad_words_ids"] = [*generation["bad_words_ids"], [7]]
    (tmp_path / "m" / "generation_config.json").write_text(json.dumps(generation))
    with caplog.at_level(logging.WARNING, logger="dotformer.imports.marian"):
        read_marian(tmp_path / "m")
    assert len(caplog.records) == 1 and "bad_words_ids forbids 7" in caplog.records[0].getMessage()


# -- fine-tuning an imported model ------------------------------------------------------------------------------------

WORDS = {"the": "le", "cat": "chat", "dog": "chien", "sun": "soleil", "park": "parc", "book": "livre", "hot": "chaud"}


def word_pairs(count: int, seed: int) -> list[tuple[str, str]]:
    """Random 2-5 word sentences and their word-by-word translations (pieces both spm models know)."""
    g = torch.Generator().manual_seed(seed)
    english = list(WORDS)
    pairs = []
    for _ in range(count):
        words = [
            english[int(i)]
            for i in torch.randint(len(english), (int(torch.randint(2, 6, (), generator=g)),), generator=g)
        ]
        pairs.append((" ".join(words), " ".join(WORDS[w] for w in words)))
    return pairs


def test_fine_tune_an_imported_model_keeps_its_tokenizers_and_learns(
    opus: dict[str, Any], tmp_path: Path, cli: Cli
) -> None:
    import dotformer

    held_out = word_pairs(30, seed=2)
    train = [pair for pair in word_pairs(300, seed=1) if pair not in held_out]  # held out: never trained on
    (tmp_path / "mine.tsv").write_text("".join(f"{s}\t{t}\n" for s, t in train))
    (tmp_path / "held.tsv").write_text("".join(f"{s}\t{t}\n" for s, t in held_out))

    def held_out_nll(checkpoint: Path) -> float:
        out = tmp_path / f"{checkpoint.parent.name}-{checkpoint.name}.json"
        args = ["--checkpoint", str(checkpoint), "--data", str(tmp_path / "held.tsv"), "--json", str(out)]
        result = cli("evaluate", *args, "--strategy", "greedy", "--max-len-b", "5")
        assert result.returncode == 0, result.stderr
        return json.loads(out.read_text())["metrics"]["nll_per_token"]

    before = held_out_nll(opus["ck"])
    recipe = ["--lr-schedule", "inverse_sqrt", "--lr-peak", "3e-4", "--warmup", "10", "--max-steps", "60"]
    run = tmp_path / "run"
    result = cli(
        "train", "--init-from", str(opus["ck"]), "--data", str(tmp_path / "mine.tsv"), "--out", str(run), *recipe
    )
    assert result.returncode == 0, result.stderr
    after = held_out_nll(run / "last")
    assert after < before - 0.5, (before, after)

    imported, tuned = dotformer.load(opus["ck"], device="cpu"), dotformer.load(run / "last", device="cpu")
    assert tuned.model.config == imported.model.config  # the shape, the activation, the ids
    for text in [*TEXTS, *(s for s, _ in held_out[:5])]:  # each side keeps its own sentencepiece segmenter
        assert tuned.src_tokenizer.encode(text) == imported.src_tokenizer.encode(text)
    for text in [*TARGETS, *(t for _, t in held_out[:5])]:
        assert tuned.tgt_tokenizer.encode(text) == imported.tgt_tokenizer.encode(text)
    assert tuned.tgt_tokenizer.encode("le chat") != tuned.src_tokenizer.encode("le chat")


def test_opus_cli_round_trip_is_bit_for_bit(opus: dict[str, Any], tmp_path: Path, cli: Cli) -> None:
    """dotformer import -> export --to marian -> import, from the command line: weights, config and tokenizers."""
    from dotformer.checkpoint import load_checkpoint

    exported, back = tmp_path / "exported", tmp_path / "back"
    assert cli("export", "--to", "marian", str(opus["ck"]), str(exported)).returncode == 0
    result = cli("import", "--from", "marian", str(exported), str(back))
    assert result.returncode == 0, result.stderr
    first, second = load_checkpoint(opus["ck"]), load_checkpoint(back)
    assert second.config == first.config
    ours, theirs = first.model.state_dict(), second.model.state_dict()
    assert set(ours) == set(theirs) and all(torch.equal(theirs[name], ours[name]) for name in ours)
    for text in [*TEXTS, *TARGETS]:
        assert second.src_tokenizer.encode(text) == first.src_tokenizer.encode(text)
        assert second.tgt_tokenizer.encode(text) == first.tgt_tokenizer.encode(text)
