"""dotformer.export: the Marian copy computes the same logits (also saved and loaded back by HF), the CTranslate2
export the same log-probabilities and greedy outputs, the ONNX graphs (run by onnxruntime) the same logits step by
step, on tiny random models (with padding, post-LN and pre-LN, ReLU and GELU, with and without biases, odd epsilons);
``dotformer export`` is run from the outside (a subprocess, a saved checkpoint)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from tolerance import encoder_sums, logits_tolerance, reordering_bound

from dotformer import ConfigError, ModelConfig, Transformer
from dotformer.data.tokenize.tokenizer_files import train_tokenizer
from dotformer.data.tokenize.tokenizers import BOS_ID, EOS_ID, PAD_ID
from dotformer.export.params import Converter, EngineNames, join, locate

SRC_V, TGT_V = 40, 50


def tiny_model(seed: int = 0, **overrides) -> Transformer:
    """A random tiny model; a generator bias (zero at init) is drawn at random too."""
    torch.manual_seed(seed)
    config = ModelConfig.preset("tiny", **{"src_vocab_size": SRC_V, "tgt_vocab_size": TGT_V, **overrides})
    model = Transformer(config).eval()
    if model.generator.bias is not None:
        torch.nn.init.normal_(model.generator.bias)
    return model


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


G2P_MODERN = {  # configs/g2p-modern.toml's block: pre-norm RMSNorm, SwiGLU, rotary positions, GQA, no biases
    "norm_first": True, "norm": "rmsnorm", "ffn_gated": True, "activation": "silu", "positional": "rotary",
    "bias": False, "num_kv_heads": 2,
}  # fmt: skip
VARIANTS = [
    {},
    {"share_embeddings": True, "src_vocab_size": TGT_V},
    {"tie_output": False},
    {"activation": "gelu", "bias": False},
    {"positional": "learned", "max_len": 32},
    {"scale_embeddings": False, "generator_bias": True},  # what imported models may need
    {"activation": "silu"},  # OPUS-MT's "swish"
]


# -- Hugging Face Marian ------------------------------------------------------------------------------------------


@pytest.mark.numerical
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
    # the same sums in HF's order: the reordering bound of the model's sums (tests/tolerance.py)
    tolerance = logits_tolerance(model.config, ours, src.size(1))
    torch.testing.assert_close(theirs, ours, atol=tolerance, rtol=0)
    # a changed weight changes the output far beyond that bound: the comparison is not vacuous
    with torch.no_grad():
        marian.model.decoder.layers[0].fc2.bias[0] += 0.5  # not uniform: LayerNorm would remove that
        changed = marian(input_ids=src, attention_mask=src != PAD_ID, decoder_input_ids=tgt).logits
    assert (changed - ours).abs().max() > 10 * tolerance


@pytest.mark.numerical
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
    [
        ({"norm_first": True}, "post-LN"),
        ({"arch": "decoder-only", "num_encoder_layers": 0}, "encoder-decoder"),
        ({"layer_norm_eps": 1e-6}, "layer_norm_eps=1e-06"),  # once exported silently with Marian's 1e-5
        ({"layer_norm_eps": 0.5}, "layer_norm_eps=0.5"),
        ({"embedding_norm": True}, "embedding_norm"),
    ],
)
def test_marian_refuses_what_it_cannot_hold(overrides, message):
    pytest.importorskip("transformers")
    from dotformer.export.marian import to_marian

    with pytest.raises(ConfigError, match=message):
        to_marian(tiny_model(**overrides))


def test_marian_eps_refusal_is_not_vacuous():
    """Marian's LayerNorms really are fixed at 1e-5: at eps 0.5 a patched copy would compute another function."""
    pytest.importorskip("transformers")
    from dotformer.export.marian import MARIAN_LAYER_NORM_EPS, to_marian

    model = tiny_model(layer_norm_eps=0.5)
    marian = to_marian(tiny_model(layer_norm_eps=MARIAN_LAYER_NORM_EPS))  # same seed, same weights
    assert {m.eps for m in marian.modules() if isinstance(m, torch.nn.LayerNorm)} == {MARIAN_LAYER_NORM_EPS}
    src, tgt = padded_source(), torch.tensor([[BOS_ID, 5, 6]] * 4)
    with torch.no_grad():
        theirs = marian(input_ids=src, attention_mask=src != PAD_ID, decoder_input_ids=tgt).logits
        assert (theirs - model(src, tgt)).abs().max() > 1e-2


@pytest.mark.numerical
@pytest.mark.parametrize("overrides", [{}, {"share_embeddings": True, "src_vocab_size": TGT_V}, {"tie_output": False}])
def test_saved_marian_loads_back_with_the_same_logits(tmp_path, overrides):
    """HF rebuilds Marian's sinusoids (sines first) on load: the export permutes D so that its table is dotformer's."""
    pytest.importorskip("transformers")
    from transformers import MarianMTModel

    from dotformer.export.marian import save_marian

    model = tiny_model(seed=4, **overrides)
    save_marian(model, tmp_path / "marian")
    marian = MarianMTModel.from_pretrained(str(tmp_path / "marian")).eval()
    src = padded_source() % model.config.src_vocab_size
    tgt = torch.tensor([[BOS_ID, 5, 6, 7, 8]] * 4)
    with torch.no_grad():
        theirs = marian(input_ids=src, attention_mask=src != PAD_ID, decoder_input_ids=tgt).logits
    with torch.no_grad():
        ours = model(src, tgt)
    torch.testing.assert_close(theirs, ours, atol=logits_tolerance(model.config, ours, src.size(1)), rtol=0)
    out = marian.generate(
        input_ids=src,
        attention_mask=src != PAD_ID,
        max_new_tokens=10,
        num_beams=1,
        do_sample=False,
        suppress_tokens=[PAD_ID, BOS_ID],
    )
    theirs_greedy = []
    for row in out[:, 1:].tolist():
        cut = row[: row.index(EOS_ID) + 1] if EOS_ID in row else row
        theirs_greedy.append([t for t in cut if t != PAD_ID])
    assert theirs_greedy == reference_greedy(model, src, 10)


def test_save_marian_refuses_a_learned_table(tmp_path):
    pytest.importorskip("transformers")
    from dotformer.export.marian import save_marian

    with pytest.raises(ConfigError, match="learned"):
        save_marian(tiny_model(positional="learned", max_len=32), tmp_path / "m")
    assert not (tmp_path / "m").exists()


# -- CTranslate2 --------------------------------------------------------------------------------------------------


@pytest.mark.numerical
@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"norm_first": True},
        {"activation": "gelu", "bias": False},
        {"layer_norm_eps": 0.5},
        {"scale_embeddings": False, "generator_bias": True},
        {"activation": "silu"},
        G2P_MODERN,
        {**G2P_MODERN, "norm_first": False, "norm_unit_offset": True, "activation": "gelu_tanh", "rope_fraction": 0.5,
         "rope_scaling": "llama3", "rope_factor": 8.0, "rope_original_max_len": 4, "rope_theta": 5e5, "num_kv_heads": 1,
         "head_size": 24, "qkv_bias": True, "attention_scale": 0.2, "logit_softcap": 3.0},
        {"positional": "rotary", "rope_scaling": "linear", "rope_factor": 2.0, "ffn_gated": True, "activation": "gelu"},
    ],
    ids=lambda overrides: ",".join(f"{k}={v}" for k, v in overrides.items()) or "2017",
)  # fmt: skip
def test_ct2_export_scores_and_greedy_match(tmp_path, overrides):
    """Log-probabilities within the float32 bound of the logits (two log-softmaxes of logits each within
    :func:`~tolerance.logits_tolerance` differ by at most twice it), the same greedy outputs, int8 runs: the 2017 block
    and the modern one (configs/g2p-modern.toml's, and every other switch the Translator carries)."""
    ctranslate2 = pytest.importorskip("ctranslate2")
    from dotformer.export.ct2 import export_ctranslate2, id_vocabulary, ids_to_tokens, tokens_to_ids

    model = tiny_model(seed=2, **overrides)
    with torch.no_grad():  # norms off their initial value: a norm copied wrong shows
        for name, parameter in model.named_parameters():
            if "norm" in name:
                parameter.add_(0.3 * torch.randn_like(parameter))
    before = {name: parameter.clone() for name, parameter in model.state_dict().items()}
    translator = ctranslate2.Translator(str(export_ctranslate2(model, tmp_path / "ct2")), device="cpu")
    assert all(torch.equal(before[name], parameter) for name, parameter in model.state_dict().items())  # untouched
    src_vocab, tgt_vocab = id_vocabulary(SRC_V), id_vocabulary(TGT_V)
    src = padded_source()
    batch = [ids_to_tokens([t for t in row if t not in (PAD_ID, EOS_ID)], src_vocab) for row in src.tolist()]

    # log-probabilities of a given target, EOS included: dotformer's over the tokens it can generate (the export
    # suppresses PAD and BOS in the model), the source's </s> added by CTranslate2 (add_source_eos)
    target = [[5, 6, 7], [8], [9, 10, 11, 12], [13, 14]]
    scored = translator.score_batch(batch, [ids_to_tokens(t, tgt_vocab) for t in target])
    with torch.no_grad():
        for i, tokens in enumerate(target):
            row = src[i : i + 1, : int((src[i] != PAD_ID).sum())]
            logits = model(row, torch.tensor([[BOS_ID, *tokens]]))[0]  # (T, V)
            bound = 2 * logits_tolerance(model.config, logits[None], row.size(1))
            softcap = model.config.logit_softcap  # a capped SUPPRESSED_LOGIT is -c: PAD and BOS keep some mass
            suppressed = float("-inf") if softcap is None else -softcap
            log_probs = logits.index_fill(-1, torch.tensor([PAD_ID, BOS_ID]), suppressed).log_softmax(-1)
            ours = [log_probs[t, y].item() for t, y in enumerate([*tokens, EOS_ID])]
            assert scored[i].log_probs == pytest.approx(ours, abs=bound) and bound < 0.01

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
    with pytest.raises(ConfigError, match="export_language_model"):  # a Translator needs an encoder
        export_ctranslate2(tiny_model(arch="decoder-only", num_encoder_layers=0), tmp_path / "lm")
    from dotformer.export.ct2_lm import export_language_model

    lm = export_language_model(tiny_model(arch="decoder-only", num_encoder_layers=0), tmp_path / "lm")
    assert [p.name for p in lm.glob("*vocabulary.json")] == ["vocabulary.json"]  # the decoder-only spec's one list


def test_ct2_export_never_replaces_a_non_empty_directory(tmp_path):
    pytest.importorskip("ctranslate2")
    from dotformer.export.ct2 import export_ctranslate2

    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    with pytest.raises(ConfigError, match="not empty"):
        export_ctranslate2(tiny_model(), tmp_path / "mine")
    assert [p.name for p in (tmp_path / "mine").iterdir()] == ["notes.txt"]
    (tmp_path / "empty").mkdir()
    assert (export_ctranslate2(tiny_model(), tmp_path / "empty") / "model.bin").is_file()


# -- the one parameter map ---------------------------------------------------------------------------------------


def engine_tables() -> dict[str, Any]:
    from dotformer.export.ct2 import CT2_NAMES
    from dotformer.export.marian import MARIAN_NAMES
    from dotformer.export.torch_nn import TORCH_NAMES
    from dotformer.imports.bert import BERT_NAMES

    return {"ct2": CT2_NAMES, "marian": MARIAN_NAMES, "torch": TORCH_NAMES, "bert": BERT_NAMES}


@pytest.mark.parametrize("engine", ["ct2", "marian", "torch", "bert"])
def test_every_engine_names_each_role_of_a_layer_once(engine):
    """Every engine table holds q, k, v, o of each attention sublayer once (alone or stacked), in and out of the
    feed-forward, and a LayerNorm per sublayer."""
    names = engine_tables()[engine]
    assert set(names.layers) <= {"encoder", "decoder"} and "encoder" in names.layers
    for layer in names.layers.values():
        assert "{i}" in layer.path
        assert set(layer.projections) == set(layer.attention)
        for projections in layer.projections.values():
            assert sorted(role for roles in projections.values() for role in roles) == ["k", "o", "q", "v"]
        assert sorted(layer.ffn) == ["in", "out"]
        assert set(layer.norms) == {*layer.attention, "ffn"}
    if "decoder" in names.layers:
        assert sorted(names.layers["decoder"].attention) == ["cross", "self"]


class Recorder(Converter):
    """A Converter that records what the walk hands over: dotformer's parameters and the engine's names."""

    def __init__(self, names: EngineNames) -> None:
        super().__init__(names)
        self.ours: list[int] = []
        self.theirs: list[str] = []

    def copy_linear(self, ours, theirs, roles):
        assert len(ours) == len(roles)
        self.ours += [id(p) for linear in ours for p in linear.parameters()]
        self.theirs.append(theirs)

    def copy_norm(self, ours, theirs):
        self.ours += [id(p) for p in ours.parameters()]
        self.theirs.append(theirs)


@pytest.mark.parametrize("engine", ["ct2", "marian", "torch"])
@pytest.mark.parametrize("norm_first", [False, True])
def test_the_walk_hands_over_every_stack_parameter_once(engine, norm_first):
    names = engine_tables()[engine]
    model = tiny_model(norm_first=norm_first)
    recorder = Recorder(names)
    recorder.copy_stacks(model)
    assert model.encoder is not None and model.decoder is not None
    stacks = [*model.encoder.parameters(), *model.decoder.parameters()]
    final_norms = [
        id(p) for stack in (model.encoder, model.decoder) if stack.final_norm for p in stack.final_norm.parameters()
    ]
    expected = sorted(id(p) for p in stacks)
    if engine == "marian":  # post-LN only: no final norms
        expected = sorted(i for i in expected if i not in final_norms)
    assert sorted(recorder.ours) == expected
    assert len(set(recorder.theirs)) == len(recorder.theirs)  # each engine name once
    example = {  # the second decoder layer's cross-attention keys
        "ct2": "decoder.layer.1.attention.linear.1",  # stacked with the values
        "marian": "decoder.layers.1.encoder_attn.k_proj",
        "torch": "decoder.layers.1.multihead_attn.in_proj",  # stacked with the queries and values
    }
    assert example[engine] in recorder.theirs


def test_the_walk_refuses_a_layer_that_lacks_the_engines_sublayer():
    decoder_names = engine_tables()["marian"].layers["decoder"]
    model = tiny_model(arch="decoder-only")
    with pytest.raises(ConfigError, match="self attention, the engine's layer self/cross"):
        Recorder(EngineNames(layers={"decoder": decoder_names})).copy_stacks(model)
    with pytest.raises(ConfigError, match="has a encoder"):
        Recorder(engine_tables()["ct2"]).copy_stacks(model)


def test_locate_and_join_follow_dotted_paths():
    tree = torch.nn.Module()
    tree.layers = torch.nn.ModuleList([torch.nn.Linear(2, 3), torch.nn.Linear(3, 4)])
    assert locate(tree, "layers.1") is tree.layers[1]
    assert locate({"a": 1}, "") == {"a": 1}
    assert locate(type("Spec", (), {"linear": ["x", "y"]}), "linear.-1") == "y"
    assert join("", "encoder", "", "norm") == "encoder.norm"


# -- ONNX -----------------------------------------------------------------------------------------------------------


@pytest.mark.numerical
@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"norm_first": True, "activation": "gelu", "bias": False},
        {"positional": "learned", "max_len": 32, "tie_output": False},
        {"layer_norm_eps": 0.5, "activation": "silu"},
        {"scale_embeddings": False, "embedding_norm": True, "generator_bias": True},
    ],
)
def test_onnx_graphs_give_dotformers_logits_step_by_step(tmp_path, overrides):
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    from dotformer.export.onnx import OnnxTranslator, export_onnx

    model = tiny_model(seed=5, **overrides)
    if overrides.get("positional") == "learned":
        torch.nn.init.normal_(model.src_embed.position.table.weight)
        torch.nn.init.normal_(model.tgt_embed.position.table.weight)
    translator = OnnxTranslator(export_onnx(model, tmp_path / "onnx"))
    src = padded_source()
    outputs, step_logits = translator.greedy(src.numpy(), max_steps=12)
    assert outputs == reference_greedy(model, src, 12)
    # every step's logits equal the teacher-forced logits of the same prefix (rows fed EOS once finished)
    steps = len(step_logits)
    prefix = torch.full((4, steps), EOS_ID)
    prefix[:, 0] = BOS_ID
    for row, out in enumerate(outputs):
        body = out[: steps - 1]
        prefix[row, 1 : 1 + len(body)] = torch.tensor(body, dtype=torch.int64)
    with torch.no_grad():
        ours = model(src, prefix)  # (B, T, V)
    theirs = torch.from_numpy(__import__("numpy").stack(step_logits, axis=1))  # (B, T, V)
    torch.testing.assert_close(theirs, ours, atol=logits_tolerance(model.config, ours, src.size(1)), rtol=0)
    # the memory too, and a different source gives different logits (the comparison is not vacuous)
    memory = translator.encode(src.numpy())["memory"]
    expected = model.encode(src).memory.detach()
    c = model.config
    bound = reordering_bound(encoder_sums(c.d_model, c.num_heads, c.d_ff, c.num_encoder_layers, src.size(1)), 1.0)
    torch.testing.assert_close(torch.from_numpy(memory), expected, atol=bound * float(expected.abs().max()), rtol=0)
    other, other_logits = translator.greedy(((src + 1) % SRC_V).clamp(min=4).numpy(), max_steps=1)
    assert abs(other_logits[0] - step_logits[0]).max() > 1e-3


def test_onnx_refuses_what_it_cannot_hold(tmp_path):
    pytest.importorskip("onnx")
    from dotformer.export.onnx import export_onnx

    with pytest.raises(ConfigError, match="encoder-decoder"):
        export_onnx(tiny_model(arch="decoder-only", num_encoder_layers=0), tmp_path / "x")


# -- the command line -------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def checkpoint_dir(tmp_path_factory) -> Path:
    """A saved checkpoint of a tiny random model with char tokenizers (what ``dotformer train`` writes)."""
    from dotformer.checkpoint import save_checkpoint

    texts = ["hello world", "attention is all you need", "the quick brown fox"]
    src_tok, tgt_tok = train_tokenizer("char", texts), train_tokenizer("char", [t.upper() for t in texts])
    model = tiny_model(seed=6, src_vocab_size=src_tok.vocab_size, tgt_vocab_size=tgt_tok.vocab_size)
    path = tmp_path_factory.mktemp("export") / "ck"
    save_checkpoint(path, model, src_tok, tgt_tok, {"task": "translation"})
    return path


def test_cli_export_onnx_ct2_marian(checkpoint_dir, tmp_path, cli):
    pytest.importorskip("onnxruntime")
    pytest.importorskip("ctranslate2")
    pytest.importorskip("transformers")
    from dotformer.checkpoint import load_checkpoint
    from dotformer.export.onnx import OnnxTranslator

    loaded = load_checkpoint(checkpoint_dir)
    src = torch.tensor([[*loaded.src_tokenizer.encode("hello"), EOS_ID]])
    expected = reference_greedy(loaded.model, src, 8)
    for fmt in ("onnx", "ct2", "marian"):
        result = cli("export", "--to", fmt, str(checkpoint_dir), str(tmp_path / fmt))
        assert result.returncode == 0, result.stderr
        assert result.stdout == f"wrote {tmp_path / fmt} ({fmt})\n"
        assert (tmp_path / fmt / "tokenizer_src.json").read_bytes() == (
            checkpoint_dir / "tokenizer_src.json"
        ).read_bytes()
    outputs, _ = OnnxTranslator(tmp_path / "onnx").greedy(src.numpy(), 8)
    assert outputs == expected

    import ctranslate2

    translator = ctranslate2.Translator(str(tmp_path / "ct2"), device="cpu")
    pieces = [loaded.src_tokenizer.id_to_token(i) for i in src[0, :-1].tolist()]  # the model adds </s>
    (result,) = translator.translate_batch([pieces], beam_size=1, max_decoding_length=8, return_end_token=True)
    vocab = [loaded.tgt_tokenizer.id_to_token(i) for i in range(loaded.tgt_tokenizer.vocab_size)]
    assert [vocab.index(t) for t in result.hypotheses[0]] == expected[0]

    from transformers import MarianMTModel

    marian = MarianMTModel.from_pretrained(str(tmp_path / "marian")).eval()
    tgt = torch.tensor([[BOS_ID, *expected[0][:-1]]])
    with torch.no_grad():
        ours = loaded.model(src, tgt)
        tolerance = logits_tolerance(loaded.model.config, ours, src.size(1))
        torch.testing.assert_close(marian(input_ids=src, decoder_input_ids=tgt).logits, ours, atol=tolerance, rtol=0)


def test_cli_export_refuses_a_non_empty_output_and_bad_models(checkpoint_dir, tmp_path, cli):
    out = tmp_path / "out"
    out.mkdir()
    (out / "mine.txt").write_text("keep me")
    result = cli("export", "--to", "onnx", str(checkpoint_dir), str(out))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dotformer export: error: ") and "not empty" in lines[0]
    assert [p.name for p in out.iterdir()] == ["mine.txt"] and (out / "mine.txt").read_text() == "keep me"

    result = cli("export", "--to", "onnx", str(tmp_path / "missing"), str(tmp_path / "new"))
    assert result.returncode == 2 and "does not exist" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "new").exists()
    result = cli("export", "--to", "ct2", str(checkpoint_dir), str(tmp_path / "q"), "--quantization", "int4x")
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert not (tmp_path / "q").exists() and not list(tmp_path.glob(".q.tmp-*"))


def test_cli_export_ct2_of_an_encoder_names_the_models_that_export(tmp_path, cli):
    """An encoder-only model is refused in one line that names what CTranslate2 holds, language models included."""
    pytest.importorskip("ctranslate2")
    from dotformer.checkpoint import save_checkpoint

    tok = train_tokenizer("char", ["hello world", "the quick brown fox"])
    model = tiny_model(seed=6, arch="encoder-only", num_decoder_layers=0, src_vocab_size=tok.vocab_size,
                       tgt_vocab_size=tok.vocab_size)  # fmt: skip
    save_checkpoint(tmp_path / "enc", model, tok, tok, {"task": "encoder"})
    result = cli("export", "--to", "ct2", str(tmp_path / "enc"), str(tmp_path / "out"))
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert "encoder-decoders (a Translator) and language models (a Generator), not an arch='encoder-only'" in line
    assert "--to onnx" in line and "only encoder-decoder" not in line
    assert "--to hf" not in line  # BERT's layout refuses it (no LayerNorm on its embeddings): not a way out
    assert not (tmp_path / "out").exists()


# -- the engines' default options -------------------------------------------------------------------------------------


def near_tie_model() -> Transformer:
    """A random model whose PAD and BOS are often the argmax when not forbidden; EOS a little likelier (a few outputs
    are empty, the others run on to the length limits)."""
    model = tiny_model(seed=7, max_len=64, generator_bias=True)
    with torch.no_grad():
        model.generator.bias.zero_()
        model.generator.bias[EOS_ID] = 2.0
        model.generator.bias[[PAD_ID, BOS_ID]] = 0.5  # ... and PAD and BOS likelier still: a missing rule shows
    return model


def sources(count: int = 50) -> list[list[int]]:
    """``count`` random sources of 3 to 10 ids, without EOS."""
    g = torch.Generator().manual_seed(11)
    return [
        torch.randint(4, SRC_V, (int(torch.randint(3, 11, (), generator=g)),), generator=g).tolist()
        for _ in range(count)
    ]


def dotformer_greedy(model: Transformer, rows: list[list[int]], steps: int) -> list[list[int]]:
    """dotformer's greedy outputs (EOS included) of each source (EOS appended, as dotformer's tokenizers do)."""
    return [reference_greedy(model, torch.tensor([[*row, EOS_ID]]), steps)[0] for row in rows]


def test_saved_marian_generates_dotformers_greedy_outputs_with_default_options(tmp_path):
    pytest.importorskip("transformers")
    from transformers import MarianMTModel

    from dotformer.export.marian import save_marian

    model = near_tie_model()
    save_marian(model, tmp_path / "marian")
    marian = MarianMTModel.from_pretrained(str(tmp_path / "marian")).eval()
    rows = sources()
    ours = dotformer_greedy(model, rows, 63)  # HF's max_length (max_len = 64) counts the decoder start

    def generate(**options) -> list[list[int]]:
        outputs = []
        for row in rows:
            with torch.no_grad():
                out = marian.generate(input_ids=torch.tensor([[*row, EOS_ID]]), **options)[0, 1:].tolist()
            outputs.append(out[: out.index(EOS_ID) + 1] if EOS_ID in out else out)
        return outputs

    assert generate() == ours  # the model's generation config: greedy, BOS start, PAD/BOS forbidden, max length
    from transformers import GenerationConfig

    marian.generation_config = GenerationConfig(  # the same without the rule against PAD and BOS
        decoder_start_token_id=BOS_ID, eos_token_id=EOS_ID, pad_token_id=PAD_ID, max_length=64
    )
    without_rule = generate()
    assert sum(a != b for a, b in zip(without_rule, ours, strict=True)) >= 2  # the rule matters on this model
    assert sum(out.count(PAD_ID) + out.count(BOS_ID) for out in without_rule) > 10
    rules = json.loads((tmp_path / "marian" / "generation_config.json").read_text())
    assert rules["bad_words_ids"] == [[PAD_ID], [BOS_ID]] and rules["decoder_start_token_id"] == BOS_ID
    assert rules["eos_token_id"] == EOS_ID and rules["max_length"] == 64


@pytest.mark.numerical
def test_ct2_translates_dotformers_greedy_outputs_with_default_options(tmp_path, monkeypatch):
    ctranslate2 = pytest.importorskip("ctranslate2")
    from dotformer.export.ct2 import export_ctranslate2, id_vocabulary, ids_to_tokens, tokens_to_ids
    from dotformer.export.ct2_rules import CT2_POSITIONS

    model = near_tie_model()
    translator = ctranslate2.Translator(str(export_ctranslate2(model, tmp_path / "ct2")), device="cpu")
    src_vocab, tgt_vocab = id_vocabulary(SRC_V), id_vocabulary(TGT_V)
    rows = sources()
    ours = dotformer_greedy(model, rows, 63)
    # every option CTranslate2's default but the search (its default is a beam of 2); sources without </s>
    results = translator.translate_batch([ids_to_tokens(row, src_vocab) for row in rows], beam_size=1)
    theirs = [tokens_to_ids(r.hypotheses[0], tgt_vocab) for r in results]
    # CTranslate2's default min_decoding_length=1 forbids an empty output, which dotformer allows (documented)
    # and its default max_decoding_length is 256: outputs that run on are compared over dotformer's 63 steps
    kept = [(t[: len(o)], o) for t, o in zip(theirs, ours, strict=True) if len(o) > 1]
    assert len(kept) >= 40 and all(t == o for t, o in kept)

    # the same export with the projection's own bias (no suppression) emits PAD and BOS: the rule matters here
    monkeypatch.setattr("dotformer.export.ct2.SUPPRESSED_LOGIT", 0.5)  # the bias near_tie_model gives PAD and BOS
    export_ctranslate2(model, tmp_path / "bare")
    bare = ctranslate2.Translator(str(tmp_path / "bare"), device="cpu")
    results = bare.translate_batch([ids_to_tokens(row, src_vocab) for row in rows], beam_size=1)
    assert sum(token in ("<pad>", "<s>") for r in results for token in r.hypotheses[0]) > 10

    # positions past max_len (64): a source of 200 and an output of 100 tokens, as dotformer decodes them
    long_source = [4 + i % (SRC_V - 4) for i in range(200)]
    (result,) = translator.translate_batch(
        [ids_to_tokens(long_source, src_vocab)], beam_size=1, max_decoding_length=100
    )
    expected = reference_greedy(model, torch.tensor([[*long_source, EOS_ID]]), 100)[0]
    assert len(expected) == 100 and EOS_ID not in expected and CT2_POSITIONS >= 1024
    assert tokens_to_ids(result.hypotheses[0], tgt_vocab) == expected


def test_ct2_refuses_what_it_cannot_hold(tmp_path):
    pytest.importorskip("ctranslate2")
    from dotformer.export.ct2 import transformer_spec

    config = ModelConfig.preset("tiny", src_vocab_size=SRC_V, tgt_vocab_size=TGT_V)
    model = Transformer(config)
    object.__setattr__(model.config, "activation", "tanh")  # a config no engine has: refused, never mapped
    with pytest.raises(ConfigError, match="activation='tanh'"):
        transformer_spec(model)


def test_torch_transformer_takes_silu():
    from dotformer.export.torch_nn import load_from_torch_transformer, to_torch_transformer

    model = tiny_model(seed=8, activation="silu")
    theirs = to_torch_transformer(model).eval()
    assert theirs.encoder.layers[0].activation is torch.nn.functional.silu
    src = padded_source()
    x = model.src_embed(src)
    with torch.no_grad():
        expected = model.encode(src).memory
        got = theirs.encoder(x, src_key_padding_mask=src == PAD_ID)
    keep = src != PAD_ID
    c = model.config
    sums = encoder_sums(c.d_model, c.num_heads, c.d_ff, c.num_encoder_layers, src.size(1))  # torch's order of them
    tolerance = reordering_bound(sums, float(expected.abs().max()))
    torch.testing.assert_close(got[keep], expected[keep], atol=tolerance, rtol=0)
    back = load_from_torch_transformer(tiny_model(seed=9, activation="silu"), theirs)
    assert back.config.activation == "silu"
    with pytest.raises(ConfigError, match="activation"):
        load_from_torch_transformer(tiny_model(seed=9, activation="gelu"), theirs)
