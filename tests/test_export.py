"""dotformer.export: the Marian copy computes the same logits, the CTranslate2 export the same log-probabilities and
greedy outputs, on tiny random models (with padding, post-LN and pre-LN, ReLU and GELU, with and without biases)."""

from __future__ import annotations

import pytest
import torch

from dotformer import ConfigError, ModelConfig, Transformer
from dotformer.data.tokenizers import BOS_ID, EOS_ID, PAD_ID, train_tokenizer

SRC_V, TGT_V = 40, 50


def tiny_model(seed: int = 0, **overrides) -> Transformer:
    torch.manual_seed(seed)
    config = ModelConfig.preset("tiny", **{"src_vocab_size": SRC_V, "tgt_vocab_size": TGT_V, **overrides})
    return Transformer(config).eval()


def padded_source(seed: int = 1) -> torch.Tensor:
    """(4, 9) ids ending with EOS, rows 1 and 3 right-padded."""
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(4, SRC_V, (4, 9), generator=g)
    src[:, -1] = EOS_ID
    src[1, 5], src[1, 6:] = EOS_ID, PAD_ID
    src[3, 2], src[3, 3:] = EOS_ID, PAD_ID
    return src


def reference_greedy(model: Transformer, src: torch.Tensor, steps: int) -> list[list[int]]:
    """Greedy decoding written out without a cache: the whole prefix re-decoded every step; PAD/BOS never chosen;
    each output ends at its first EOS (included)."""
    with torch.no_grad():
        memory = model.encode(src).memory
        mask = model.source_mask(src)
        ys = torch.full((src.size(0), 1), BOS_ID)
        for _ in range(steps):
            logits = model.generator(model.decode(ys, memory, src_mask=mask).hidden[:, -1])  # (B, V)
            logits[:, [PAD_ID, BOS_ID]] = float("-inf")
            ys = torch.cat([ys, logits.argmax(-1, keepdim=True)], dim=1)
    outputs = []
    for row in ys[:, 1:].tolist():
        out = []
        for token in row:
            out.append(token)
            if token == EOS_ID:
                break
        outputs.append(out)
    return outputs


VARIANTS = [
    {},
    {"share_embeddings": True, "src_vocab_size": TGT_V},
    {"tie_output": False},
    {"activation": "gelu", "bias": False},
    {"positional": "learned", "max_len": 32},
]


# -- Hugging Face Marian ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("overrides", VARIANTS)
def test_marian_copy_gives_the_same_logits(overrides):
    pytest.importorskip("transformers")
    from dotformer.export.marian import to_marian

    model = tiny_model(**overrides)
    if overrides.get("positional") == "learned":  # a trained-looking table, not the zero init
        torch.nn.init.normal_(model.src_embed.position.table.weight)
        torch.nn.init.normal_(model.tgt_embed.position.table.weight)
    marian = to_marian(model)
    src = padded_source() % model.config.src_vocab_size
    tgt = torch.randint(4, TGT_V, (4, 6))
    tgt[:, 0] = BOS_ID
    tgt[2, 4:] = PAD_ID
    with torch.no_grad():
        ours = model(src, tgt)
        theirs = marian(input_ids=src, attention_mask=src != PAD_ID, decoder_input_ids=tgt).logits
    torch.testing.assert_close(theirs, ours, atol=1e-5, rtol=1e-5)
    # a changed weight changes the output: the comparison is not vacuous
    with torch.no_grad():
        marian.model.decoder.layers[0].fc2.bias[0] += 0.5  # not uniform: LayerNorm would remove that
        changed = marian(input_ids=src, attention_mask=src != PAD_ID, decoder_input_ids=tgt).logits
    assert (changed - ours).abs().max() > 1e-3


def test_marian_generate_equals_greedy():
    pytest.importorskip("transformers")
    from dotformer.export.marian import to_marian

    model = tiny_model(seed=3)
    src = padded_source()
    out = to_marian(model).generate(
        input_ids=src,
        attention_mask=src != PAD_ID,
        max_new_tokens=10,
        num_beams=1,
        do_sample=False,
        suppress_tokens=[PAD_ID, BOS_ID],
    )
    theirs = []
    for row in out[:, 1:].tolist():
        cut = row[: row.index(EOS_ID) + 1] if EOS_ID in row else row
        theirs.append([t for t in cut if t != PAD_ID])
    assert theirs == reference_greedy(model, src, 10)


@pytest.mark.parametrize(
    "overrides, message",
    [({"norm_first": True}, "post-LN"), ({"arch": "decoder-only", "num_encoder_layers": 0}, "encoder-decoder")],
)
def test_marian_refuses_what_it_cannot_hold(overrides, message):
    pytest.importorskip("transformers")
    from dotformer.export.marian import to_marian

    with pytest.raises(ConfigError, match=message):
        to_marian(tiny_model(**overrides))


# -- CTranslate2 --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("overrides", [{}, {"norm_first": True}, {"activation": "gelu", "bias": False}])
def test_ct2_export_scores_and_greedy_match(tmp_path, overrides):
    ctranslate2 = pytest.importorskip("ctranslate2")
    from dotformer.export.ct2 import export_ctranslate2, id_vocabulary, ids_to_tokens, tokens_to_ids

    model = tiny_model(seed=2, **overrides)
    translator = ctranslate2.Translator(str(export_ctranslate2(model, tmp_path / "ct2")), device="cpu")
    src_vocab, tgt_vocab = id_vocabulary(SRC_V), id_vocabulary(TGT_V)
    src = padded_source()
    batch = [ids_to_tokens([t for t in row if t != PAD_ID], src_vocab) for row in src.tolist()]

    # log-probabilities of a given target, EOS included
    target = [[5, 6, 7], [8], [9, 10, 11, 12], [13, 14]]
    scored = translator.score_batch(batch, [ids_to_tokens(t, tgt_vocab) for t in target])
    with torch.no_grad():
        for i, tokens in enumerate(target):
            row = src[i : i + 1, : int((src[i] != PAD_ID).sum())]
            log_probs = model(row, torch.tensor([[BOS_ID, *tokens]])).log_softmax(-1)[0]  # (T, V)
            ours = [log_probs[t, y].item() for t, y in enumerate([*tokens, EOS_ID])]
            assert scored[i].log_probs == pytest.approx(ours, abs=1e-4)

    # greedy outputs, the batch decoded together
    results = translator.translate_batch(
        batch,
        beam_size=1,
        max_decoding_length=12,
        min_decoding_length=0,  # CTranslate2's default 1 forbids EOS first; dotformer allows it
        return_end_token=True,
        suppress_sequences=[["<pad>"], ["<s>"]],
    )
    theirs = [tokens_to_ids(r.hypotheses[0], tgt_vocab) for r in results]
    ours = reference_greedy(model, src, 12)
    assert theirs == ours
    assert max(len(o) for o in ours) > 3  # long enough to mean something

    # int8: quantised on load, still runs and returns tokens of the vocabulary
    int8 = ctranslate2.Translator(str(tmp_path / "ct2"), device="cpu", compute_type="int8")
    assert all(set(r.hypotheses[0]) <= set(tgt_vocab) for r in int8.translate_batch(batch, max_decoding_length=5))


def test_ct2_vocabularies(tmp_path):
    pytest.importorskip("ctranslate2")
    from dotformer.export.ct2 import export_ctranslate2, id_vocabulary, tokenizer_vocabulary

    assert id_vocabulary(6) == ["<pad>", "<s>", "</s>", "<unk>", "t4", "t5"]
    with pytest.raises(ConfigError):
        id_vocabulary(3)
    tokenizer = train_tokenizer("char", ["hello world"])
    vocab = tokenizer_vocabulary(tokenizer)
    assert vocab[:4] == ["<pad>", "<s>", "</s>", "<unk>"] and len(vocab) == tokenizer.vocab_size
    model = tiny_model(src_vocab_size=tokenizer.vocab_size, tgt_vocab_size=tokenizer.vocab_size)
    path = export_ctranslate2(model, tmp_path / "chars", vocab, vocab)
    assert (path / "model.bin").is_file()
    (vocab_file,) = path.glob("*vocabulary.json")  # one shared file: source and target are the same list
    assert vocab_file.read_text().count('"o"') == 1

    model = tiny_model()
    with pytest.raises(ConfigError, match="has 3 tokens"):
        export_ctranslate2(model, tmp_path / "x", src_vocab=["<pad>", "<s>", "</s>"])
    with pytest.raises(ConfigError, match="duplicate"):
        export_ctranslate2(model, tmp_path / "x", src_vocab=[*id_vocabulary(SRC_V - 1), "t4"])
    with pytest.raises(ConfigError, match="encoder-decoder"):
        export_ctranslate2(tiny_model(arch="decoder-only", num_encoder_layers=0), tmp_path / "x")
