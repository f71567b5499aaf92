"""The whole Transformer: torch.nn.Transformer equivalence, causality, padding, caching, shapes, parameter counts."""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch import nn

from dotformer import ModelConfig, Transformer
from dotformer.decoding.cache import DecoderCache
from dotformer.errors import ConfigError, ShapeError
from dotformer.export.torch_nn import to_torch_transformer
from dotformer.model import expected_num_parameters

pytestmark = pytest.mark.numerical  # run again under another vector unit by scripts/test.sh

V = 13  # the tiny models' vocabulary (conftest.make_model)


def _perturb(model: nn.Module) -> nn.Module:
    """Random LayerNorm and bias values, so that a swapped parameter shows in a comparison."""
    with torch.no_grad():
        for sub in model.modules():
            if isinstance(sub, nn.LayerNorm):
                sub.weight.normal_(1.0, 0.3)
                sub.bias.normal_(0.0, 0.3)
            elif isinstance(sub, nn.Linear) and sub.bias is not None:
                sub.bias.normal_(0.0, 0.3)
    return model


def _batch(B: int = 3, S: int = 7, T: int = 6, lengths: tuple[int, ...] = (7, 4, 1)):
    """Right-padded source ids (PAD=0 after ``lengths``) and target ids without padding."""
    src = torch.randint(4, V, (B, S))
    for b, n in enumerate(lengths):
        src[b, n:] = 0
    return src, torch.randint(4, V, (B, T))


# -- against torch.nn.Transformer ------------------------------------------------------------------------------------


@pytest.mark.parametrize("norm_first", [False, True])
def test_equals_torch_transformer_with_copied_weights(make_model, norm_first):
    model = _perturb(make_model(norm_first=norm_first))
    theirs = to_torch_transformer(model).eval()
    assert (theirs.encoder.norm is None) == (not norm_first)
    src, tgt = _batch()
    src_mask = model.source_mask(src)
    memory = model.encode(src).memory
    hidden = model.decode(tgt, memory, src_mask).hidden
    keep = src_mask[:, 0, 0]  # (B, S)
    expected = theirs(
        model.src_embed(src),
        model.tgt_embed(tgt),
        tgt_mask=nn.Transformer.generate_square_subsequent_mask(tgt.size(1)),
        tgt_is_causal=True,
        src_key_padding_mask=~keep,
        memory_key_padding_mask=~keep,
    )
    torch.testing.assert_close(hidden, expected)
    torch.testing.assert_close(memory, theirs.encoder(model.src_embed(src), src_key_padding_mask=~keep))
    torch.testing.assert_close(model(src, tgt), model.generator(expected))


# -- properties of the whole model -------------------------------------------------------------------------------------


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.sampled_from(["encoder-decoder", "decoder-only"]), st.booleans(), st.integers(2, 7), st.data())
def test_future_target_tokens_never_change_earlier_outputs(make_model, arch, norm_first, T, data):
    model = make_model(arch=arch, norm_first=norm_first)
    t = data.draw(st.integers(1, T - 1))
    src, tgt = _batch(T=T)
    changed = tgt.clone()
    changed[:, t:] = torch.randint(1, V, (3, T - t))  # no PAD: a PAD before a real token is refused
    src_arg = src if arch == "encoder-decoder" else None
    before, after = model(src_arg, tgt), model(src_arg, changed)
    torch.testing.assert_close(after[:, :t], before[:, :t])


@pytest.mark.parametrize("norm_first", [False, True])
def test_source_padding_content_never_changes_real_outputs(make_model, norm_first):
    model = make_model(norm_first=norm_first)
    src, tgt = _batch()
    src_mask = model.source_mask(src)
    reference = model.decode(tgt, model.encode(src).memory, src_mask).hidden
    # Any token ids beyond the mask ...
    noisy = torch.where(src_mask[:, 0, 0], src, torch.randint(1, V, src.shape))
    memory = model.encode(noisy, src_mask).memory
    torch.testing.assert_close(model.decode(tgt, memory, src_mask).hidden, reference)
    # ... and even 1e10 embeddings at the padded positions (the PAD row of the source table).
    with torch.no_grad():
        model.src_embed.token.lookup.weight[0] = 1e10
    memory = model.encode(src).memory
    assert bool(memory[src_mask[:, 0, 0]].isfinite().all())
    torch.testing.assert_close(model.decode(tgt, memory, src_mask).hidden, reference)


def test_a_sentence_decodes_the_same_alone_and_in_a_padded_batch(make_model):
    model = make_model()
    src, tgt = _batch()
    batched = model(src, tgt)
    for b, n in enumerate((7, 4, 1)):
        alone = model(src[b : b + 1, :n], tgt[b : b + 1])
        torch.testing.assert_close(alone[0], batched[b])


@pytest.mark.parametrize("arch", ["encoder-decoder", "decoder-only", "encoder-only"])
def test_dropout_only_in_training(make_model, arch):
    model = make_model(arch=arch, attention_dropout=0.2)
    src, tgt = _batch()
    src_arg = None if arch == "decoder-only" else src
    tgt_arg = None if arch == "encoder-only" else tgt
    torch.testing.assert_close(model(src_arg, tgt_arg), model(src_arg, tgt_arg))
    model.train()
    assert not torch.allclose(model(src_arg, tgt_arg), model(src_arg, tgt_arg))


@pytest.mark.parametrize("S, T", [(0, 0), (0, 3), (3, 0), (1, 1), (1, 4), (5, 1)])
def test_empty_and_single_token_sequences(make_model, S, T):
    model = make_model()
    src, tgt = torch.randint(4, V, (2, S)), torch.randint(4, V, (2, T))
    logits = model(src, tgt)
    assert logits.shape == (2, T, V) and bool(logits.isfinite().all())
    assert model.encode(src, need_weights=True).memory.shape == (2, S, 64)


def test_an_all_padding_source_gives_finite_outputs(make_model):
    model = make_model()
    src, tgt = torch.zeros(2, 4, dtype=torch.long), torch.randint(4, V, (2, 3))
    logits = model(src, tgt)
    assert bool(logits.isfinite().all())
    model.train()
    model(src, tgt).logsumexp(-1).sum().backward()
    assert all(bool(p.grad.isfinite().all()) for p in model.parameters() if p.grad is not None)


# -- cached incremental decoding -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"norm_first": True},
        {"positional": "learned", "max_len": 16},
        {"arch": "decoder-only"},
        {"arch": "decoder-only", "norm_first": True},
    ],
)
def test_cached_one_token_at_a_time_equals_full_decode(make_model, overrides):
    model = make_model(**overrides)
    src, tgt = _batch(T=7)
    memory = src_mask = None
    if model.encoder is not None:
        src_mask = model.source_mask(src)
        memory = model.encode(src).memory
    full = model.decode(tgt, memory, src_mask, need_weights=True)
    cache = DecoderCache()
    steps = [model.decode(tgt[:, t : t + 1], memory, src_mask, cache=cache) for t in range(tgt.size(1))]
    assert cache.length == tgt.size(1)
    torch.testing.assert_close(torch.cat([s.hidden for s in steps], dim=1), full.hidden)
    # Two chunks, with weights, also agree; the last chunk's weights are the bottom rows of the full ones.
    cache = DecoderCache()
    model.decode(tgt[:, :4], memory, src_mask, cache=cache)
    last = model.decode(tgt[:, 4:], memory, src_mask, cache=cache, need_weights=True)
    torch.testing.assert_close(last.hidden, full.hidden[:, 4:])
    torch.testing.assert_close(last.self_weights[-1], full.self_weights[-1][:, :, 4:])


def test_cache_reorder_follows_beams(make_model):
    model = make_model()
    src, tgt = _batch()
    src_mask, memory = model.source_mask(src), model.encode(src).memory
    cache = DecoderCache()
    model.decode(tgt[:, :3], memory, src_mask, cache=cache)
    index = torch.tensor([1, 1, 0])
    cache.reorder(index)
    step = model.decode(tgt[index, 3:], memory[index], src_mask[index], cache=cache).hidden
    torch.testing.assert_close(step, model.decode(tgt[index], memory[index], src_mask[index]).hidden[:, 3:])


def test_grouped_cache_reorder_moves_each_sentences_memory_along(make_model):
    """2 sentences of 2 rows each (beam search's layout: N = 4 target rows over B = 2 memory rows)."""
    model = make_model()
    src, tgt = _batch(B=2, lengths=(7, 4))
    src_mask, memory = model.source_mask(src), model.encode(src).memory
    rows = torch.randint(4, V, (4, 5))  # (N, T): rows 0, 1 read sentence 0; rows 2, 3 read sentence 1
    expanded_memory, expanded_mask = memory.repeat_interleave(2, 0), src_mask.repeat_interleave(2, 0)
    for index in (torch.tensor([1, 0, 3, 2]), torch.tensor([2, 3, 0, 1]), torch.tensor([3, 3, 1, 0]), None):
        cache = DecoderCache()
        model.decode(rows[:, :3], memory, src_mask, cache=cache)
        if index is None:  # drop sentence 0: keep rows 3, 2 of sentence 1
            index = torch.tensor([3, 2])
        cache.reorder(index)
        # Row i now continues row index[i], reads that row's sentence: as if decoded from the expanded memory.
        sentences = index // 2
        kept = sentences[::2]
        step = model.decode(rows[index, 3:], memory[kept], src_mask[kept], cache=cache).hidden
        full = model.decode(rows[index], expanded_memory[index], expanded_mask[index]).hidden
        torch.testing.assert_close(step, full[:, 3:])
    cache = DecoderCache()
    model.decode(rows[:, :3], memory, src_mask, cache=cache)
    with pytest.raises(ShapeError, match="each 2 consecutive entries must be rows of one sentence"):
        cache.reorder(torch.tensor([1, 2, 0, 3]))  # rows 0 and 1 would read another sentence's memory
    with pytest.raises(ShapeError, match=r"outside the cache's 4 rows"):
        cache.reorder(torch.tensor([0, 1, 4, 5]))  # was a raw IndexError at the next step


@pytest.mark.parametrize("call", ["encode", "decode", "forward", "forward_packed"])
def test_left_padding_is_refused_at_every_entry_point(make_model, call):
    """Left padding would shift every position (issue case: encode([[0,0,5,6,2]]) != encode([[5,6,2]]))."""
    model = make_model()
    left, right = torch.tensor([[0, 0, 5, 6, 2]]), torch.tensor([[5, 6, 2, 0, 0]])
    memory, src_mask = model.encode(right).memory, model.source_mask(right)
    tgt = torch.tensor([[1, 7, 8]])
    calls = {
        "encode": lambda ids: model.encode(ids),
        "decode": lambda ids: model.decode(ids, memory, src_mask),
        "forward": lambda ids: model(ids, tgt),
        "forward_packed": lambda ids: model(ids, tgt, packed=True),
    }
    name = "tgt" if call == "decode" else "src"
    with pytest.raises(ShapeError, match=rf"{name} must be right-padded .* row 0 has PAD before a real token"):
        calls[call](left)
    calls[call](right)  # right padding is fine
    if call == "forward":
        with pytest.raises(ShapeError, match="tgt must be right-padded"):
            model(right, torch.tensor([[1, 0, 8]]))


@pytest.mark.parametrize("tie", [True, False])
def test_pad_row_gradient_is_as_documented(make_model, tie):
    """The lookup gives the PAD row no gradient; tied, the generator's gradient (and only it) reaches the row."""
    model = make_model(tie_output=tie)
    src, tgt = _batch()
    tgt[:, -2:] = 0  # PAD inputs in the target too
    logits = model(src, tgt)
    logits.retain_grad()
    (logits * torch.randn_like(logits)).sum().backward()
    embedding = model.tgt_embed.token.weight
    if not tie:
        assert float(embedding.grad[0].abs().max()) == 0.0
        return
    hidden = model.decode(tgt, model.encode(src).memory, model.source_mask(src)).hidden.detach()  # (B, T, D)
    generator_part = torch.einsum("btd,bt->d", hidden, logits.grad[..., 0])  # ∂/∂W_gen[PAD] = Σ h · ∂L/∂logit_PAD
    assert float(generator_part.abs().max()) > 0
    torch.testing.assert_close(embedding.grad[0], generator_part)


# -- weights, shapes of other architectures, errors -------------------------------------------------------------------


def test_need_weights_returns_every_layers_weights(make_model):
    model = make_model()
    src, tgt = _batch()
    enc = model.encode(src, need_weights=True)
    assert len(enc.self_weights) == 2 and enc.self_weights[0].shape == (3, 4, 7, 7)
    dec = model.decode(tgt, enc.memory, model.source_mask(src), need_weights=True)
    assert len(dec.self_weights) == 2 and dec.self_weights[1].shape == (3, 4, 6, 6)
    assert dec.cross_weights[0].shape == (3, 4, 6, 7)
    assert bool((dec.cross_weights[0][2, :, :, 1:] == 0).all()), "sentence 2 has 1 real source token"
    torch.testing.assert_close(dec.hidden, model.decode(tgt, enc.memory, model.source_mask(src)).hidden)


def test_decoder_only_and_encoder_only_shapes(make_model):
    decoder_only = make_model(arch="decoder-only", num_encoder_layers=0)
    assert decoder_only.encoder is None and decoder_only.src_embed is None
    assert decoder_only(tgt=torch.randint(1, V, (2, 5))).shape == (2, 5, V)
    assert decoder_only.decode(torch.randint(1, V, (2, 5)), need_weights=True).cross_weights is None
    encoder_only = make_model(arch="encoder-only", num_decoder_layers=0)
    assert encoder_only.decoder is None and encoder_only.tgt_embed is None
    assert encoder_only(torch.randint(1, V, (2, 4))).shape == (2, 4, V)


def test_tied_and_shared_embeddings(make_model):
    model = make_model(share_embeddings=True, tie_output=True)
    assert model.src_embed.token is model.tgt_embed.token
    assert model.generator.weight is model.tgt_embed.token.weight
    untied = make_model(tie_output=False)
    assert untied.generator.weight is not untied.tgt_embed.token.weight


@pytest.mark.parametrize("init_std", [None, 0.02])
def test_initialisation_is_as_documented(init_std):
    """Default: Xavier-uniform linears (std √(2 / (fan_in + fan_out))), N(0, 1/D) embeddings; init_std σ: N(0, σ²)
    for both; zero biases and PAD rows either way, and the tied generator is the embedding."""
    torch.manual_seed(0)
    config = ModelConfig.preset("small", src_vocab_size=4000, tgt_vocab_size=4000, share_embeddings=True)
    model = Transformer(config.replace(init_std=init_std))
    ffn_in = next(m for n, m in model.named_modules() if isinstance(m, nn.Linear) and m.weight.shape == (1024, 256))
    expected_linear = (2 / (256 + 1024)) ** 0.5 if init_std is None else init_std
    assert ffn_in.weight.std().item() == pytest.approx(expected_linear, rel=0.02)
    assert ffn_in.bias.abs().max().item() == 0.0
    embedding = model.src_embed.token.weight
    assert embedding[1:].std().item() == pytest.approx(256**-0.5 if init_std is None else init_std, rel=0.02)
    assert embedding[config.pad_id].abs().max().item() == 0.0 and model.generator.weight is embedding
    for bad in (0.0, -0.02, True):
        with pytest.raises(ConfigError, match="init_std"):
            config.replace(init_std=bad)


def test_errors_name_the_problem(make_model):
    model = make_model()
    src, tgt = _batch()
    with pytest.raises(ShapeError, match=r"\(7,\)"):
        model(src[0], tgt)
    with pytest.raises(ShapeError, match=r"\[0, 13\)"):
        model(src + 20, tgt)
    with pytest.raises(ShapeError, match="different batch sizes"):
        model(src, tgt[:2])
    with pytest.raises(ShapeError, match=r"\(3, 1, 1, 5\)"):
        model(src, tgt, src_mask=torch.ones(3, 1, 1, 5, dtype=torch.bool))
    with pytest.raises(ShapeError, match="do not broadcast"):
        model(src, tgt, tgt_mask=torch.ones(3, 1, 1, 4, dtype=torch.bool))
    with pytest.raises(ConfigError, match="needs src"):
        model(tgt=tgt)
    with pytest.raises(ConfigError, match="needs tgt"):
        model(src)
    with pytest.raises(ConfigError, match="memory"):
        model.decode(tgt)
    with pytest.raises(ConfigError, match="no decoder"):
        make_model(arch="encoder-only").decode(tgt)
    with pytest.raises(ConfigError, match="no encoder"):
        make_model(arch="decoder-only").encode(src)
    with pytest.raises(ShapeError, match="max_len=4"):
        make_model(positional="learned", max_len=4)(src, tgt)


# -- parameter counts -------------------------------------------------------------------------------------------------


def _distinct_parameter_count(model: nn.Module) -> int:
    """Count every parameter tensor once, however many modules hold it (independent of Transformer.num_parameters)."""
    seen = {}
    for _, p in model.named_parameters(remove_duplicate=False):
        seen[id(p)] = p.numel()
    return sum(seen.values())


@settings(max_examples=25, deadline=None)
@given(
    arch=st.sampled_from(["encoder-decoder", "decoder-only", "encoder-only"]),
    norm_first=st.booleans(),
    bias=st.booleans(),
    positional=st.sampled_from(["sinusoidal", "learned"]),
    share=st.booleans(),
    tie=st.booleans(),
    same_vocab=st.booleans(),
    head=st.sampled_from(["generator", "sequence", "token"]),
)
def test_expected_num_parameters_matches_the_model(arch, norm_first, bias, positional, share, tie, same_vocab, head):
    tgt_vocab = 11 if same_vocab else 17
    head = head if arch == "encoder-only" else "generator"
    config = ModelConfig(
        src_vocab_size=11,
        tgt_vocab_size=tgt_vocab,
        d_model=8,
        num_heads=2,
        d_ff=12,
        num_encoder_layers=0 if arch == "decoder-only" else 2,
        num_decoder_layers=0 if arch == "encoder-only" else 3,
        norm_first=norm_first,
        bias=bias,
        positional=positional,
        max_len=5,
        share_embeddings=share and same_vocab,
        tie_output=tie,
        arch=arch,
        head=head,
        num_labels=0 if head == "generator" else 3,
    )
    model = Transformer(config)
    assert model.num_parameters() == expected_num_parameters(config) == _distinct_parameter_count(model)


def _paper_count(d_model: int, d_ff: int, layers: int, vocab: int) -> int:
    """The count by hand for a shared source/target vocabulary with the generator tied to it (biases included)."""
    attention = 4 * d_model * d_model + 4 * d_model
    ffn = 2 * d_model * d_ff + d_ff + d_model
    encoder_layer = attention + ffn + 2 * 2 * d_model
    decoder_layer = 2 * attention + ffn + 3 * 2 * d_model
    return vocab * d_model + layers * (encoder_layer + decoder_layer)


def test_base_model_has_the_papers_65_million_parameters():
    config = ModelConfig.preset("base", src_vocab_size=37000, tgt_vocab_size=37000, share_embeddings=True)
    assert config.tie_output
    model = Transformer(config)
    count = model.num_parameters()
    assert count == expected_num_parameters(config) == _distinct_parameter_count(model)
    assert count == _paper_count(512, 2048, 6, 37000) == 63_082_496
    assert abs(count - 65e6) / 65e6 < 0.05


def test_big_model_has_the_papers_213_million_parameters():
    config = ModelConfig.preset("big", src_vocab_size=37000, tgt_vocab_size=37000, share_embeddings=True)
    with torch.device("meta"):  # shapes only: no memory, no initialisation cost
        model = Transformer(config)
    count = model.num_parameters()
    assert count == expected_num_parameters(config) == _distinct_parameter_count(model)
    assert count == _paper_count(1024, 4096, 6, 37000) == 214_245_376
    assert abs(count - 213e6) / 213e6 < 0.05


def test_a_per_sentence_mask_is_refused_when_the_batch_size_equals_the_heads(make_model):
    """The Annotated Transformer's (B, 1, S) source mask with B == H would be read as one mask per head."""
    model = make_model()  # H = 4
    src, tgt = _batch(B=4, lengths=(7, 4, 1, 2))
    with pytest.raises(ShapeError, match=r"mask \(4, 1, 7\) .*\(B, 1, 1, S\)"):
        model(src, tgt, src_mask=(src != 0)[:, None, :])
    torch.testing.assert_close(model(src, tgt, src_mask=(src != 0)[:, None, None, :]), model(src, tgt))


@pytest.mark.parametrize("name", ["silu", "swish"])
def test_silu_feed_forward(make_model, name):
    """FFN(x) = SiLU(x·W_1 + b_1)·W_2 + b_2 with SiLU(z) = z·σ(z); "swish" is stored as "silu"."""
    model = make_model(activation=name)
    assert model.config.activation == "silu"
    assert ModelConfig.from_dict(model.config.to_dict()).activation == "silu"
    ffn = model.encoder.layers[0].feed_forward
    x = torch.randn(2, 3, model.config.d_model)
    torch.testing.assert_close(ffn(x), torch.nn.functional.silu(ffn.W_1(x)) @ ffn.W_2.weight.T + ffn.W_2.bias)
    src, tgt = _batch()
    assert model(src, tgt).isfinite().all()
