"""``export --to hf``: a language model loads in ``AutoModelForCausalLM`` (GPT-2's layout, the Llama family's) and an
encoder in ``AutoModel`` (BERT's) with dotformer's logits and hidden states; their tokenizers load in
``AutoTokenizer`` and give dotformer's ids; what no layout holds is refused in one line."""

from __future__ import annotations

import json

import pytest
import torch
from tolerance import encoder_sums, logits_tolerance, reordering_bound

from dotformer import ModelConfig, Transformer
from dotformer.data.tokenize.tokenizers import EOS_ID, NUM_SPECIAL, PAD_ID, SPECIAL_TOKENS, CharTokenizer
from dotformer.errors import ConfigError

pytestmark = pytest.mark.numerical  # run again under another vector unit by scripts/test.sh
transformers = pytest.importorskip("transformers")

CHARS = list("abcdefghij ")
VOCAB = [*SPECIAL_TOKENS, *CHARS]
V = len(VOCAB)


def random_model(seed: int = 3, **overrides) -> Transformer:
    """A tiny model with every weight random (LayerNorm weights and biases too: a norm copied wrong shows)."""
    torch.manual_seed(seed)
    config = ModelConfig.preset("tiny", src_vocab_size=V, tgt_vocab_size=V, max_len=24, **overrides)
    model = Transformer(config).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.2 * torch.randn_like(parameter))
    return model


def lm(**overrides) -> Transformer:
    return random_model(**{"arch": "decoder-only", "norm_first": True, **overrides})


def export_lm(model: Transformer, tmp_path, info=None, tokenizer=None):
    from dotformer.export.hf_lm import write_causal_lm
    from dotformer.export.hf_tokenizer import hf_vocabulary

    tokenizer = tokenizer or CharTokenizer(VOCAB)
    vocabulary = hf_vocabulary(tokenizer, model.tgt_embed.token.weight.detach(), "continuation", info or {})
    out = tmp_path / "hf"
    out.mkdir()
    write_causal_lm(model, vocabulary, out)
    return out


def check_logits(model: Transformer, hf, tokens: torch.Tensor, first_row: int = 0) -> None:
    """HF's logits (B, T, V) equal dotformer's at the real positions of right-padded ``tokens``, within the
    reordering bound; and not vacuously (a changed weight moves them)."""
    keep = tokens != PAD_ID
    with torch.no_grad():
        ours = model(tgt=tokens)[..., first_row:]
        theirs = hf(input_ids=tokens, attention_mask=keep.long()).logits
    tolerance = logits_tolerance(model.config, ours)
    torch.testing.assert_close(theirs[keep], ours[keep], atol=tolerance, rtol=0)
    assert (theirs[keep] - ours[keep]).abs().max() <= tolerance
    with torch.no_grad():
        next(p for n, p in hf.named_parameters() if "layers.0" in n or "h.0" in n).add_(0.5)
        changed = hf(input_ids=tokens, attention_mask=keep.long()).logits
    assert (changed[keep] - ours[keep]).abs().max() > 100 * tolerance


TOKENS = torch.tensor([[EOS_ID, 4, 5, 6, 7, 8, 9], [EOS_ID, 10, 11, 12, PAD_ID, PAD_ID, PAD_ID]])


@pytest.mark.parametrize(
    "overrides",
    [
        {},  # sinusoids written into wpe, embeddings ×√D (folded into ln_f), tied, ReLU
        {"positional": "learned", "scale_embeddings": False, "activation": "gelu"},
        {"tie_output": False, "activation": "silu", "bias": False, "layer_norm_eps": 1e-6},
    ],
)
def test_gpt2_layout_loads_with_dotformers_logits(tmp_path, overrides) -> None:
    from transformers import AutoModelForCausalLM

    model = lm(**overrides)
    out = export_lm(model, tmp_path)
    hf = AutoModelForCausalLM.from_pretrained(str(out)).eval()
    assert type(hf).__name__ == "GPT2LMHeadModel"
    assert hf.config.tie_word_embeddings == model.config.tie_output
    check_logits(model, hf, TOKENS)


def test_gpt2_generate_gives_dotformers_greedy_tokens(tmp_path) -> None:
    """HF ``generate`` with the exported generation_config (PAD and BOS suppressed) continues as dotformer does."""
    from transformers import AutoModelForCausalLM

    model = lm(positional="learned")
    hf = AutoModelForCausalLM.from_pretrained(str(export_lm(model, tmp_path))).eval()
    tokens = TOKENS[:1, :4]
    with torch.no_grad():
        ours = tokens
        for _ in range(12):
            logits = model(tgt=ours)[:, -1]
            logits[:, [0, 1]] = -torch.inf  # dotformer never generates PAD or BOS
            ours = torch.cat([ours, logits.argmax(-1, keepdim=True)], dim=1)
            if int(ours[0, -1]) == EOS_ID:
                break
        theirs = hf.generate(tokens, max_new_tokens=12, do_sample=False)
    assert theirs.tolist() == ours.tolist()


def test_the_exported_tokenizer_reads_text_as_dotformer(tmp_path) -> None:
    from transformers import AutoTokenizer

    from dotformer.decoding.inputs import encode_prompt

    tokenizer = CharTokenizer(VOCAB)
    out = export_lm(lm(), tmp_path, tokenizer=tokenizer)
    hf = AutoTokenizer.from_pretrained(str(out))
    for text in ("abc def", "j", "a z"):  # z: unknown
        assert hf(text)["input_ids"] == encode_prompt(tokenizer, text)
    assert hf.decode(tokenizer.encode("head bag"), skip_special_tokens=True) == "head bag"
    assert (hf.bos_token, hf.eos_token, hf.pad_token, hf.unk_token) == ("</s>", "</s>", "<pad>", "<unk>")
    generation = json.loads((out / "generation_config.json").read_text())
    assert generation["eos_token_id"] == EOS_ID and generation["suppress_tokens"] == [0, 1]


def test_a_bpe_tokenizer_keeps_its_pieces(tmp_path) -> None:
    from transformers import AutoTokenizer

    from dotformer.data.tokenize.bpe import train_bpe

    tokenizer = train_bpe(["the cat sat on the mat", "a dog ate the hat"] * 5, vocab_size=280)
    size = tokenizer.vocab_size
    model = Transformer(lm(positional="learned").config.replace(src_vocab_size=size, tgt_vocab_size=size)).eval()
    out = export_lm(model, tmp_path, tokenizer=tokenizer)
    hf = AutoTokenizer.from_pretrained(str(out))
    text = "the hat, ünïcode\tok"
    assert hf(text)["input_ids"] == [EOS_ID, *tokenizer.encode(text)]
    assert hf.decode(hf(text)["input_ids"], skip_special_tokens=True) == text


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"norm_first": False}, "ModelConfig.norm_first=False: a post-LN language model fits no HF causal-LM layout"),
        ({"embedding_norm": True}, "ModelConfig.embedding_norm=True: GPT-2 has no LayerNorm on its embeddings"),
        ({"generator_bias": True}, "ModelConfig.generator_bias=True: the HF causal-LM layouts have no bias"),
    ],
)
def test_what_no_causal_lm_layout_holds_is_refused(tmp_path, overrides, message) -> None:
    with pytest.raises(ConfigError) as caught:
        export_lm(lm(**overrides), tmp_path)
    assert str(caught.value).startswith(message) and "\n" not in str(caught.value)


def test_a_released_vocabulary_goes_back_to_its_own_ids(tmp_path) -> None:
    """An imported model's four front rows copy its own specials: they are dropped, the file's ids come back."""
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers import models, pre_tokenizers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from dotformer.data.tokenize.pretrained import HFFileTokenizer
    from dotformer.export.params import SUPPRESSED_LOGIT

    released = ["[unk]", "[bos]", "[eos]", *CHARS]  # its ids: [unk] 0, [bos] 1, [eos] 2
    hf_tokenizer = HFTokenizer(models.WordLevel({t: i for i, t in enumerate(released)}, unk_token="[unk]"))
    hf_tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    hf_tokenizer.add_special_tokens(["[unk]", "[bos]", "[eos]"])
    tokenizer = HFFileTokenizer(hf_tokenizer)
    assert tokenizer.offset == NUM_SPECIAL
    model = lm(positional="learned", scale_embeddings=False, generator_bias=True)
    model = Transformer(model.config.replace(tgt_vocab_size=len(released) + 4, src_vocab_size=len(released) + 4))
    model.eval()
    with torch.no_grad():
        table = model.tgt_embed.token.weight
        table[:4] = table[[4 + 2, 4 + 1, 4 + 2, 4 + 0]]  # PAD = [eos], BOS = [bos], EOS = [eos], UNK = [unk]
        model.generator.bias.zero_()
        model.generator.bias[:4] = SUPPRESSED_LOGIT
    info = {"text_rules": {"add_bos": True, "eos_ids": [4 + 2]}}
    out = export_lm(model, tmp_path, info, tokenizer)
    hf = AutoModelForCausalLM.from_pretrained(str(out)).eval()
    assert hf.config.vocab_size == len(released)
    assert (hf.config.bos_token_id, hf.config.eos_token_id, hf.config.pad_token_id) == (1, 2, 2)
    tokens = torch.tensor([[1, 3, 4, 5, 2, 6]])  # the released ids
    with torch.no_grad():
        ours = model(tgt=tokens + NUM_SPECIAL)[..., NUM_SPECIAL:]
        theirs = hf(tokens).logits
    torch.testing.assert_close(theirs, ours, atol=logits_tolerance(model.config, ours), rtol=0)
    assert AutoTokenizer.from_pretrained(str(out))("a b")["input_ids"] == [3, 4]


# -- the modern block: the Llama family ------------------------------------------------------------------------------

MODERN = {
    "norm": "rmsnorm",
    "ffn_gated": True,
    "positional": "rotary",
    "activation": "silu",
    "scale_embeddings": False,
    "bias": False,
}
GEMMA = {**MODERN, "activation": "gelu_tanh", "scale_embeddings": True, "norm_unit_offset": True, "sandwich_norm": True}
LONG = torch.tensor([[EOS_ID, 4, 5, 6, 7, 8, 9, 10, 11], [EOS_ID, 10, 11, 12, 4, 5, PAD_ID, PAD_ID, PAD_ID]])


@pytest.mark.parametrize(
    ("overrides", "architecture"),
    [
        (MODERN, "LlamaForCausalLM"),
        (
            {**MODERN, "bias": True, "tie_output": False, "rope_theta": 5e5, "rope_scaling": "llama3",
             "rope_factor": 8.0, "rope_original_max_len": 16},
            "LlamaForCausalLM",
        ),
        ({**MODERN, "qkv_bias": True}, "Qwen2ForCausalLM"),
        ({**MODERN, "qk_norm": True, "head_size": 32}, "Qwen3ForCausalLM"),
        ({**MODERN, "sliding_window": 3}, "MistralForCausalLM"),
        (
            {**GEMMA, "logit_softcap": 3.0, "sliding_window": 3, "layer_types": ("sliding", "full"),
             "attention_scale": 0.25},
            "Gemma2ForCausalLM",
        ),
        (
            {**GEMMA, "qk_norm": True, "head_size": 32, "sliding_window": 3, "layer_types": ("sliding", "full"),
             "rope_theta": 1e6, "rope_local_theta": 1e4, "rope_scaling": "linear", "rope_factor": 2.0},
            "Gemma3ForCausalLM",
        ),
        ({**MODERN, "num_kv_heads": 2}, "LlamaForCausalLM"),
        ({**MODERN, "scale_embeddings": True}, "LlamaForCausalLM"),  # √D folded into the table and the final norm
        ({**MODERN, "scale_embeddings": True, "tie_output": False}, "LlamaForCausalLM"),
        ({**MODERN, "scale_embeddings": True, "qk_norm": True}, "Qwen3ForCausalLM"),
        ({**GEMMA, "attention_softcap": 5.0}, "Gemma2ForCausalLM"),
    ],
)  # fmt: skip
def test_the_modern_block_loads_in_its_llama_family_layout(tmp_path, overrides, architecture) -> None:
    from transformers import AutoModelForCausalLM

    model = lm(**overrides)
    hf = AutoModelForCausalLM.from_pretrained(str(export_lm(model, tmp_path)), attn_implementation="eager").eval()
    assert type(hf).__name__ == architecture
    check_logits(model, hf, LONG)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({**MODERN, "positional": "learned"}, "ModelConfig.positional='learned': the Llama family's layouts need"),
        ({**MODERN, "rope_fraction": 0.5}, "ModelConfig.rope_fraction=0.5: the Llama family rotates every dimension"),
        ({**MODERN, "sliding_window": 3, "layer_types": ("sliding", "full")}, "ModelConfig.layer_types mixes full"),
    ],
)
def test_what_no_llama_family_layout_holds_is_refused(tmp_path, overrides, message) -> None:
    with pytest.raises(ConfigError) as caught:
        export_lm(lm(**overrides), tmp_path)
    assert str(caught.value).startswith(message) and "\n" not in str(caught.value)


# -- encoders: BERT ----------------------------------------------------------------------------------------------------


def encoder(**overrides) -> Transformer:
    base = {"arch": "encoder-only", "embedding_norm": True, "positional": "learned", "scale_embeddings": False}
    return random_model(**{**base, "activation": "gelu", **overrides})


@pytest.mark.parametrize(
    "overrides",
    [{}, {"positional": "sinusoidal", "scale_embeddings": True, "bias": False, "activation": "relu"}],
)
def test_bert_layout_loads_with_dotformers_hidden_states(tmp_path, overrides) -> None:
    from transformers import AutoModel, AutoTokenizer

    from dotformer.export.hf_encoder import write_bert
    from dotformer.export.hf_tokenizer import hf_vocabulary

    model, tokenizer = encoder(**overrides), CharTokenizer(VOCAB)
    vocabulary = hf_vocabulary(tokenizer, model.src_embed.token.weight.detach(), "encoder", {})
    (tmp_path / "bert").mkdir()
    write_bert(model, vocabulary, tmp_path / "bert")
    hf, hf_tokenizer = (
        AutoModel.from_pretrained(str(tmp_path / "bert")).eval(),
        AutoTokenizer.from_pretrained(str(tmp_path / "bert")),
    )
    assert type(hf).__name__ == "BertModel"
    batch = hf_tokenizer(["abc de", "hij"], padding=True, return_tensors="pt")
    assert batch["input_ids"][1].tolist() == [1, *tokenizer.encode("hij"), 2, 0, 0, 0]  # [BOS] ids [EOS], padded
    keep = batch["attention_mask"].bool()
    with torch.no_grad():
        ours = model.encode(batch["input_ids"]).memory  # (B, S, D)
        theirs = hf(**batch).last_hidden_state
    c = model.config
    tolerance = reordering_bound(encoder_sums(c.d_model, c.num_heads, c.d_ff, 2, 8), float(ours.abs().max()))
    torch.testing.assert_close(theirs[keep], ours[keep], atol=tolerance, rtol=0)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"norm_first": True}, "ModelConfig.norm_first=True: BERT is post-LN"),
        ({"embedding_norm": False}, "ModelConfig.embedding_norm=False: BERT always has a LayerNorm on its embeddings"),
    ],
)
def test_what_bert_cannot_hold_is_refused(overrides, message) -> None:
    from dotformer.export.hf_encoder import bert_problem

    assert bert_problem(encoder(**overrides).config).startswith(message)


def test_an_encoder_is_pointed_only_to_exports_that_hold_it(tmp_path, cli) -> None:
    """A refused encoder export names another export only where that one writes it: the pre-LN 2017 encoder goes
    to ONNX; the modern encoder (classify-bible-modern's: RMSNorm, GeGLU, rotary positions, no biases) is refused by
    BERT's layout, the ONNX export and CTranslate2 alike, so none of them sends it to another."""
    modern = dict(norm_first=True, norm="rmsnorm", ffn_gated=True, positional="rotary", bias=False)
    pre_ln = save(tmp_path, encoder(norm_first=True), "pre_ln", "classify")
    result = cli("export", "--to", "hf", str(pre_ln), str(tmp_path / "pre_ln-hf"))
    assert result.returncode == 2 and result.stderr.endswith("(export to onnx)\n")
    bert_shaped = save(tmp_path, encoder(), "bert_shaped", "classify")
    result = cli("export", "--to", "ct2", str(bert_shaped), str(tmp_path / "bert_shaped-ct2"))
    assert result.returncode == 2 and result.stderr.endswith(
        "export an encoder with --to hf (BertModel) or --to onnx\n"
    )
    checkpoint = save(tmp_path, encoder(**modern), "modern", "classify")
    for to in ("hf", "onnx", "ct2"):
        result = cli("export", "--to", to, str(checkpoint), str(tmp_path / f"modern-{to}"))
        assert result.returncode == 2 and len(result.stderr.splitlines()) == 1, result.stderr
        assert "--to" not in result.stderr and "export to" not in result.stderr, result.stderr


# -- the command -------------------------------------------------------------------------------------------------------


def save(tmp_path, model: Transformer, name: str, task: str):
    from dotformer.checkpoint import save_checkpoint

    tokenizer = CharTokenizer(VOCAB)
    save_checkpoint(tmp_path / name, model, tokenizer, tokenizer, {"task": task})
    return tmp_path / name


def test_cli_export_to_hf_writes_every_family(tmp_path, cli) -> None:
    from transformers import AutoModel, AutoModelForCausalLM, AutoTokenizer, MarianMTModel

    checkpoints = {
        "lm": (save(tmp_path, lm(), "lm", "lm"), AutoModelForCausalLM),
        "encoder": (save(tmp_path, encoder(), "encoder", "encoder"), AutoModel),
        "translation": (save(tmp_path, random_model(), "translation", "translation"), MarianMTModel),
    }
    for name, (checkpoint, loader) in checkpoints.items():
        out = tmp_path / f"{name}-hf"
        result = cli("export", "--to", "hf", str(checkpoint), str(out))
        assert result.returncode == 0, result.stderr
        assert result.stdout == f"wrote {out} (hf)\n"
        loader.from_pretrained(str(out))
        if name != "translation":
            AutoTokenizer.from_pretrained(str(out))


def test_cli_export_to_hf_refuses_a_post_ln_language_model_in_one_line(tmp_path, cli) -> None:
    checkpoint = save(tmp_path, lm(norm_first=False), "postln", "lm")
    result = cli("export", "--to", "hf", str(checkpoint), str(tmp_path / "out"))
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "ModelConfig.norm_first=False" in lines[0], result.stderr
    assert not (tmp_path / "out").exists()
