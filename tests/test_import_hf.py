"""dotformer import --from hf: for each released family, a tiny model built by transformers from a config (random
weights, saved with save_pretrained beside a tokenizer.json trained here; no hub) is imported and gives the logits of
transformers within the derived tolerance, and the greedy tokens of transformers' generate for 32 steps, with and
without the KV cache, against a batch of left-padded prompts; options dotformer cannot represent are refused."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import Cli
from tolerance import logits_tolerance

transformers = pytest.importorskip("transformers")

CORPUS = [
    "the cat sat on the mat and the dog ran in the park",
    "a bird sings at night while we read a book",
    "numbers 0123456789 and symbols ,.;:!? go here",
    "The Quick Brown Fox Jumps Over The Lazy Dog",
]
PROMPTS = ["the cat sat", "a bird sings at night while we"]
STEPS = 32


def train_tokenizer(specials: list[str]) -> Any:
    """A byte-level BPE tokenizer.json of about 300 tokens, ``specials`` at ids 0, 1, ..."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(CORPUS * 3, trainer)
    return tokenizer


# family -> (its special tokens, ids of (pad, bos, eos), config fields of a 2-layer model)
GPT2 = (["<|endoftext|>"], (None, 0, 0), dict(model_type="gpt2", n_embd=64, n_layer=2, n_head=4, n_positions=128))
LLAMA_FIELDS = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2)
LLAMA_FIELDS |= dict(intermediate_size=96, max_position_embeddings=128)
FAMILIES: dict[str, tuple[list[str], tuple[int | None, int | None, int | list[int]], dict[str, Any]]] = {
    "gpt2": GPT2,
    "llama": (["<unk>", "<s>", "</s>"], (None, 1, 2), dict(model_type="llama", **LLAMA_FIELDS)),
    "llama3": (
        ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"],
        (None, 0, [1, 2]),
        dict(
            model_type="llama",
            rope_theta=500000.0,
            rope_scaling=dict(
                rope_type="llama3",
                factor=8.0,
                low_freq_factor=1.0,
                high_freq_factor=4.0,
                original_max_position_embeddings=64,
            ),
            tie_word_embeddings=True,
            **LLAMA_FIELDS,
        ),
    ),
    "mistral": (["<unk>", "<s>", "</s>"], (None, 1, 2), dict(model_type="mistral", sliding_window=5, **LLAMA_FIELDS)),
    "qwen2": (
        ["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        (None, None, 0),
        dict(model_type="qwen2", **LLAMA_FIELDS),
    ),
    "qwen3": (
        ["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        (0, None, 2),
        dict(model_type="qwen3", head_dim=32, tie_word_embeddings=True, **LLAMA_FIELDS),
    ),
    "gemma2": (
        ["<pad>", "<eos>", "<bos>", "<unk>"],
        (0, 2, 1),
        dict(model_type="gemma2", head_dim=16, query_pre_attn_scalar=24, sliding_window=5, **LLAMA_FIELDS),
    ),
    "gemma3_text": (
        ["<pad>", "<eos>", "<bos>", "<unk>"],
        (0, 2, 1),
        dict(
            model_type="gemma3_text",
            head_dim=16,
            query_pre_attn_scalar=16,
            sliding_window=5,
            layer_types=["sliding_attention", "full_attention"],
            rope_theta=1000000.0,
            rope_local_base_freq=10000.0,
            rope_scaling=dict(rope_type="linear", factor=8.0),
            **LLAMA_FIELDS,
        ),
    ),
}


def save_family(family: str, directory: Path, **changes: Any) -> Any:
    """Build the family's tiny HF model (seeded random weights, float32), save it and its tokenizer.json in
    ``directory``; return the HF model (eval mode)."""
    specials, (pad, bos, eos), fields = FAMILIES[family]
    tokenizer = train_tokenizer(specials)
    fields = {**fields, **changes}
    model_type = fields.pop("model_type")
    config = transformers.AutoConfig.for_model(
        model_type,
        vocab_size=tokenizer.get_vocab_size(),
        pad_token_id=pad,
        bos_token_id=bos,
        eos_token_id=eos,
        initializer_range=0.2,
        **fields,
    )
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="eager").float().eval()
    with torch.no_grad():  # norms away from their init (1, or 0 for Gemma's 1 + w) so that a wrong norm shows
        for name, parameter in model.named_parameters():
            if "norm" in name and parameter.dim() == 1:
                parameter.add_(0.1 * torch.randn_like(parameter))
    model.save_pretrained(directory)
    tokenizer.save(str(directory / "tokenizer.json"))
    return model


def import_dir(directory: Path, out: Path) -> Any:
    from dotformer.checkpoint import load_checkpoint
    from dotformer.imports.hf import import_hf

    import_hf(directory, out)
    return load_checkpoint(out)


def prompt_ids(loaded: Any, text: str) -> list[int]:
    from dotformer.decoding.inputs import encode_prompt, text_rules

    return encode_prompt(loaded.tgt_tokenizer, text, text_rules(loaded.info))


def left_padded(rows: list[list[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, T) ids left-padded with ``pad`` and the (B, T) attention mask, as transformers' generate wants them."""
    T = max(map(len, rows))
    ids = torch.tensor([[pad] * (T - len(r)) + r for r in rows])
    mask = torch.tensor([[0] * (T - len(r)) + [1] * len(r) for r in rows])
    return ids, mask


@pytest.mark.numerical
@pytest.mark.parametrize("family", list(FAMILIES))
def test_logits_and_greedy_tokens_equal_transformers(family: str, tmp_path: Path) -> None:
    from dotformer.decoding.config import generation_config
    from dotformer.decoding.generate import generate
    from dotformer.decoding.inputs import text_rules
    from dotformer.decoding.translate import pad_batch

    hf_model = save_family(family, tmp_path / "hf")
    loaded = import_dir(tmp_path / "hf", tmp_path / "ckpt")
    model, rules = loaded.model.eval(), text_rules(loaded.info)
    specials, (pad, bos, eos), _ = FAMILIES[family]
    rows = [prompt_ids(loaded, text) for text in PROMPTS]  # dotformer's ids: BOS (1, a copy of bos), the released + 4
    theirs = [[bos if i == 1 else i - 4 for i in row] for row in rows]
    assert all(min(row) >= 0 for row in theirs)
    assert rules.add_bos == (family in ("llama", "llama3", "mistral", "gemma2", "gemma3_text"))
    assert [r[0] for r in theirs] == ([bos] * 2 if rules.add_bos else [r[0] for r in theirs])
    eos_ids = eos if isinstance(eos, list) else [eos]
    assert list(rules.eos_ids) == [i + 4 for i in eos_ids]

    # logits: a right-padded batch through dotformer, each row alone through transformers
    with torch.no_grad():
        ours = model(tgt=pad_batch(rows)).float()  # (B, T, V + 4)
        for b, row in enumerate(theirs):
            reference = hf_model(torch.tensor([row])).logits[0]  # (T_b, V)
            tolerance = logits_tolerance(model.config, reference[None])
            got = ours[b, : len(row), 4:]
            assert (got - reference).abs().max() <= tolerance, family
            assert ours[b, : len(row), :4].max() < reference.min()  # the copied special rows are never chosen

    # greedy: transformers' generate on the left-padded batch; dotformer's generate per prompt, cached or not
    ids, mask = left_padded(theirs, pad if pad is not None else eos_ids[0])
    with torch.no_grad():
        out = hf_model.generate(
            input_ids=ids, attention_mask=mask, max_new_tokens=STEPS, do_sample=False, eos_token_id=eos_ids,
            pad_token_id=pad if pad is not None else eos_ids[0],
        )[:, ids.size(1) :]  # fmt: skip
    for b, row in enumerate(rows):
        expected = cut_at_eos([int(t) + 4 for t in out[b]], rules.eos_ids)
        for use_cache in (True, False):
            config = generation_config(STEPS, "greedy", 1, use_cache=use_cache)
            (generation,) = generate(model, row, config, stop_ids=rules.eos_ids)
            assert cut_at_eos(generation.tokens, rules.eos_ids) == expected, (family, b, use_cache)


def cut_at_eos(tokens: list[int], eos_ids: tuple[int, ...]) -> list[int]:
    """The tokens up to and including the first EOS."""
    for i, token in enumerate(tokens):
        if token in eos_ids:
            return tokens[: i + 1]
    return tokens


@pytest.mark.parametrize(
    ("family", "changes", "message"),
    [
        (
            "llama",
            {"rope_parameters": {"rope_type": "dynamic", "factor": 2.0, "rope_theta": 1e4}},
            "rope_type 'dynamic'",
        ),
        ("llama", {"attention_bias": True}, "attention_bias=True with mlp_bias=False"),
        ("gpt2", {"scale_attn_by_inverse_layer_idx": True}, "scale_attn_by_inverse_layer_idx"),
    ],
)
def test_options_dotformer_cannot_represent_are_refused(
    family: str, changes: dict[str, Any], message: str, tmp_path: Path
) -> None:
    from dotformer.errors import ConfigError
    from dotformer.imports.hf import import_hf

    save_family(family, tmp_path / "hf")
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    (tmp_path / "hf" / "config.json").write_text(json.dumps({**config, **changes}))
    with pytest.raises(ConfigError, match=message):
        import_hf(tmp_path / "hf", tmp_path / "out")


def test_unknown_families_are_refused_naming_them(tmp_path: Path) -> None:
    from dotformer.errors import ConfigError
    from dotformer.imports.hf import import_hf

    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "config.json").write_text(json.dumps({"model_type": "mixtral", "architectures": ["X"]}))
    with pytest.raises(ConfigError, match=r"model_type 'mixtral' \(X\) is not supported"):
        import_hf(tmp_path / "hf", tmp_path / "out")


def test_import_then_generate_from_the_command_line(tmp_path: Path, cli: Cli) -> None:
    """dotformer import --from hf, then dotformer generate --greedy: the text of transformers' greedy tokens."""
    hf_model = save_family("llama", tmp_path / "hf")
    out = tmp_path / "ckpt"
    result = cli("import", "--from", "hf", str(tmp_path / "hf"), str(out))
    assert result.returncode == 0, result.stderr
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(tmp_path / "hf" / "tokenizer.json"))
    prompt = PROMPTS[0]
    ids = [1, *tokenizer.encode(prompt, add_special_tokens=False).ids]
    with torch.no_grad():
        new = hf_model.generate(torch.tensor([ids]), max_new_tokens=12, do_sample=False)[0, len(ids) :].tolist()
    new = new[: new.index(2)] if 2 in new else new
    result = cli(
        "generate", "--checkpoint", str(out), "--prompt", prompt, "--greedy", "--max-new-tokens", "12",
        "--engine", "torch",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout == prompt + tokenizer.decode(new, skip_special_tokens=True) + "\n"


@pytest.mark.numerical
@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_evaluate_lm_scores_the_text_as_transformers_reads_it(family: str, tmp_path: Path, cli: Cli) -> None:
    """dotformer evaluate --task lm on an imported model: the text as its tokenizer encodes it (line breaks
    included), BOS first for Llama and not for GPT-2, no EOS added; its nats per token are transformers' mean
    next-token cross-entropy on the same ids (each within 2 logit tolerances: a log-sum-exp and a target logit)."""
    import torch.nn.functional as F
    from tokenizers import Tokenizer

    from dotformer.checkpoint import load_checkpoint

    hf_model = save_family(family, tmp_path / "hf")
    import_dir(tmp_path / "hf", tmp_path / "ckpt")
    text = "the cat sat on the mat\n\na bird sings at night while we read\n"
    (tmp_path / "text.txt").write_text(text, encoding="utf-8")
    result = cli(
        "evaluate", "--checkpoint", str(tmp_path / "ckpt"), "--data", str(tmp_path / "text.txt"),
        "--json", str(tmp_path / "score.json"),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    score = json.loads((tmp_path / "score.json").read_text())

    tokenizer = Tokenizer.from_file(str(tmp_path / "hf" / "tokenizer.json"))
    _, (_, bos, _), _ = FAMILIES[family]
    add_bos = family == "llama"
    ids = [bos] * add_bos + tokenizer.encode(text, add_special_tokens=False).ids
    with torch.no_grad():
        logits = hf_model(torch.tensor([ids])).logits[0]  # (T, V)
    nll = F.cross_entropy(logits[:-1].double(), torch.tensor(ids[1:]), reduction="sum").item()
    unscored = 0 if add_bos else len(tokenizer.decode(ids[:1]))  # the first token has no context
    assert score["tokens"] == len(ids) - 1
    assert score["characters"] == len(text) - unscored
    tolerance = 2 * logits_tolerance(load_checkpoint(tmp_path / "ckpt").config, logits[None])
    assert abs(score["nats_per_token"] - nll / (len(ids) - 1)) <= tolerance


@pytest.mark.numerical
@pytest.mark.parametrize("family", ["llama", "llama3"])
def test_beam_search_ends_at_the_models_eos_ids_as_transformers_does(family: str, tmp_path: Path) -> None:
    """Beam search on an imported model ends its hypotheses at the model's EOS ids (Llama 3: either of two), not
    only at dotformer's: with α = 0, beams of 1 and 4 give transformers' beam search tokens, cached or not. The
    last EOS's output row is made a slightly larger copy of a token the model often produces, so that the text ends
    well within the limit."""
    from tokenizers import Tokenizer

    from dotformer.decoding.config import generation_config
    from dotformer.decoding.generate import generate
    from dotformer.decoding.inputs import text_rules

    hf_model = save_family(family, tmp_path / "hf")
    _, (_, bos, eos), _ = FAMILIES[family]
    eos_ids = eos if isinstance(eos, list) else [eos]
    tokenizer = Tokenizer.from_file(str(tmp_path / "hf" / "tokenizer.json"))
    prompt = torch.tensor([[bos, *tokenizer.encode(PROMPTS[0], add_special_tokens=False).ids]])
    settings: dict[str, Any] = dict(max_new_tokens=STEPS, do_sample=False, eos_token_id=eos_ids)
    settings["pad_token_id"] = eos_ids[0]
    with torch.no_grad():
        greedy = hf_model.generate(prompt, **settings)[0, prompt.size(1) :].tolist()
        frequent = max(set(greedy), key=greedy.count)
        hf_model.lm_head.weight[eos_ids[-1]] = 1.02 * hf_model.lm_head.weight[frequent]
    hf_model.save_pretrained(tmp_path / "hf")
    loaded = import_dir(tmp_path / "hf", tmp_path / "ckpt")
    rules = text_rules(loaded.info)
    row = prompt_ids(loaded, PROMPTS[0])
    for K in (1, 4):
        with torch.no_grad():
            beams = {"num_beams": K, "length_penalty": 0.0} if K > 1 else {}
            theirs = hf_model.generate(prompt, **settings, **beams)[0, prompt.size(1) :].tolist()
        assert theirs[-1] in eos_ids and len(theirs) < STEPS, (K, theirs)
        for use_cache in (True, False):
            # Hugging Face stops once no alive beam can beat the K-th finished: for α = 0, the exact rule
            config = generation_config(STEPS, "beam", 1, beam_size=K, use_cache=use_cache, beam_stop="exact")
            (ours,) = generate(loaded.model, row, config, stop_ids=rules.eos_ids)
            assert [t - 4 for t in ours.tokens] == theirs[:-1], (K, use_cache)  # a finished beam: its EOS dropped
            assert len(ours.log_probs) == len(theirs)  # ... and its log-probability kept
