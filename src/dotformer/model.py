"""The whole Transformer (paper §3, Figure 1): embeddings, the encoder and decoder stacks, the generator.

    memory = Encoder(Embed(src) · √D + PE)                         N encoder layers
    hidden = Decoder(Embed(tgt) · √D + PE, memory)                  N decoder layers
    logits = hidden · W_genᵀ,  P(next token) = softmax(logits)      the generator (§3.4)

The stacks are :mod:`dotformer.stacks`. The same layers also build the other two families (``ModelConfig.arch``): a
decoder-only language model (the decoder alone, no cross-attention), and an encoder-only model (the encoder alone)
whose head (:mod:`dotformer.heads`, ``ModelConfig.head``) is the generator tied to its embedding (a masked language
model, as BERT), a pooled classifier (a label per text) or a per-token classifier (a label per token). Shapes follow
the legend in :mod:`dotformer.attention`.
"""

from __future__ import annotations

from typing import Any, Protocol

import torch
from torch import Tensor, nn

from dotformer.config import ModelConfig
from dotformer.errors import ConfigError, ShapeError
from dotformer.heads import SequenceClassifier, TokenClassifier
from dotformer.layers import LayerSizes, PassMode, make_norm
from dotformer.masks import check_right_padded, padding_mask
from dotformer.multihead import pack, unpack
from dotformer.packing import Packing
from dotformer.positional import InputEmbedding, RotarySettings, TokenEmbedding
from dotformer.stacks import Decoder, DecoderOutput, Encoder, EncoderOutput, StackKeyValues


class DecoderKeyValues(StackKeyValues, Protocol):
    """The decoding cache :meth:`Transformer.decode` takes (:class:`dotformer.decoding.cache.DecoderCache`)."""

    length: int | Tensor  # target positions already decoded: the position of the next token


def layer_sizes(config: ModelConfig) -> LayerSizes:
    """The per-layer subset of a :class:`ModelConfig`."""
    return LayerSizes(
        d_model=config.d_model,
        num_heads=config.num_heads,
        d_ff=config.d_ff,
        dropout=config.dropout,
        attention_dropout=config.attention_dropout,
        activation_dropout=config.activation_dropout,
        activation=config.activation,
        norm_first=config.norm_first,
        layer_norm_eps=config.layer_norm_eps,
        bias=config.bias,
        norm=config.norm,
        norm_unit_offset=config.norm_unit_offset,
        ffn_gated=config.ffn_gated,
        num_kv_heads=config.num_kv_heads,
        head_size=config.head_size,
        qkv_bias=config.qkv_bias,
        qk_norm=config.qk_norm,
        attention_scale=config.attention_scale,
        attention_softcap=config.attention_softcap,
        sandwich_norm=config.sandwich_norm,
        rotary=rotary_settings(config),
        sliding_window=config.sliding_window,
        layer_types=config.layer_types,
    )


def rotary_settings(config: ModelConfig) -> RotarySettings | None:
    """The RoPE of a ``positional="rotary"`` config's self-attention, or None."""
    if config.positional != "rotary":
        return None
    return RotarySettings(
        dims=config.rotary_dims,
        theta=config.rope_theta,
        scaling=config.rope_scaling,
        factor=config.rope_factor,
        low_freq_factor=config.rope_low_freq_factor,
        high_freq_factor=config.rope_high_freq_factor,
        original_max_len=config.rope_original_max_len,
        local_theta=config.rope_local_theta,
        max_len=config.max_len,
    )


def embedding_options(config: ModelConfig) -> dict[str, Any]:
    """The :class:`InputEmbedding` switches of imported models: unscaled embeddings, an embedding norm (LayerNorm or
    RMSNorm, ``config.norm``)."""
    options: dict[str, Any] = {"scale": config.scale_embeddings, "norm": config.embedding_norm}
    if config.embedding_norm and config.norm != "layernorm":
        options["norm_module"] = make_norm(config.d_model, config.norm, config.layer_norm_eps, config.norm_unit_offset)
    return {**options, "eps": config.layer_norm_eps}


class Generator(nn.Linear):
    """The generator (§3.4): logits = hidden · W_genᵀ (+ b), the next token's scores over the vocabulary.

    ``softcap`` c bounds them: logits = c · tanh(logits / c) (Gemma 2's final_logit_softcapping); None leaves them.

    Shape: (..., D) -> (..., V).
    """

    def __init__(self, d_model: int, vocab_size: int, bias: bool = False, softcap: float | None = None) -> None:
        super().__init__(d_model, vocab_size, bias=bias)
        self.softcap = softcap

    def forward(self, hidden: Tensor) -> Tensor:
        """(..., D) -> (..., V) logits."""
        logits = super().forward(hidden)  # (..., V)
        if self.softcap is None:
            return logits
        return torch.tanh(logits / self.softcap) * self.softcap  # (..., V) in (-c, c)


class Transformer(nn.Module):
    """The Transformer of "Attention Is All You Need" (encoder-decoder), or a decoder-only / encoder-only model
    built from the same layers, per ``config.arch``.

    Args:
        config: a :class:`ModelConfig`.

    Initialisation (documented choice): every weight matrix of a linear layer is Xavier/Glorot-uniform with zero
    bias, as in the Annotated Transformer and ``torch.nn.Transformer``; token embeddings are N(0, D^-1/2) with a zero
    PAD row (as in fairseq), so that after the ·√D scaling they have unit variance, which also suits the tied
    generator. LayerNorms start at weight 1, bias 0. With ``config.init_std`` = σ every linear and embedding weight is
    N(0, σ²) instead (zero biases and PAD rows), as BERT and HF's Marian (σ = 0.02): smaller residual branches and
    embeddings at the start, which measured faster early on the Bible pair (docs/benchmarks.md).
    """

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        c = config
        sizes = layer_sizes(c)
        self.src_embed: InputEmbedding | None = None
        self.tgt_embed: InputEmbedding | None = None
        self.encoder: Encoder | None = None
        self.decoder: Decoder | None = None
        if c.arch in ("encoder-decoder", "encoder-only"):
            self.src_embed = InputEmbedding(
                c.src_vocab_size, c.d_model, c.pad_id, c.dropout, c.positional, c.max_len, **embedding_options(c)
            )
            self.encoder = Encoder(sizes, c.num_encoder_layers)
        if c.arch in ("encoder-decoder", "decoder-only"):
            shared: TokenEmbedding | None = None
            if c.share_embeddings and self.src_embed is not None:
                shared = self.src_embed.token
            self.tgt_embed = InputEmbedding(
                c.tgt_vocab_size,
                c.d_model,
                c.pad_id,
                c.dropout,
                c.positional,
                c.max_len,
                token=shared,
                **embedding_options(c),
            )
            self.decoder = Decoder(sizes, c.num_decoder_layers, cross_attention=c.arch == "encoder-decoder")
        self.generator = Generator(c.d_model, c.tgt_vocab_size, bias=c.generator_bias, softcap=c.logit_softcap)
        self.classifier: SequenceClassifier | TokenClassifier | None = None  # an encoder's labels (dotformer.heads)
        if c.head == "sequence":
            self.classifier = SequenceClassifier(c.d_model, c.num_labels, c.pooling, c.dropout)
        elif c.head == "token":
            self.classifier = TokenClassifier(c.d_model, c.num_labels, c.dropout)
        self.reset_parameters()
        output_embed = self.tgt_embed if self.tgt_embed is not None else self.src_embed
        if c.tie_output and output_embed is not None and output_embed.token.weight.shape == self.generator.weight.shape:
            self.generator.weight = output_embed.token.lookup.weight

    def reset_parameters(self) -> None:
        """Xavier-uniform linear weights, zero biases, N(0, D^-1/2) embeddings with zero PAD rows (``init_std`` = σ:
        N(0, σ²) weights for both)."""
        std = self.config.init_std
        for module in self.modules():
            if isinstance(module, nn.Linear):
                if std is None:
                    nn.init.xavier_uniform_(module.weight)
                else:
                    nn.init.normal_(module.weight, mean=0.0, std=std)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Embedding):
                nn.init.normal_(module.weight, mean=0.0, std=self.config.d_model**-0.5 if std is None else std)
                if module.padding_idx is not None:
                    with torch.no_grad():
                        module.weight[module.padding_idx].zero_()

    # -- the three entry points -------------------------------------------------------------------------------------

    def source_mask(self, src: Tensor) -> Tensor:
        """(B, S) ids -> (B, 1, 1, S) bool padding mask (True = real token) from ``config.pad_id``."""
        return padding_mask(src, self.config.pad_id)

    def encode(
        self, src: Tensor, src_mask: Tensor | None = None, need_weights: bool = False, packing: Packing | None = None
    ) -> EncoderOutput:
        """Encode a batch of source sentences.

        Args:
            src: (B, S) int64 token ids, right-padded with ``config.pad_id``. Left padding (PAD before a real token)
                is refused: positions count from the first column, so it would shift every position.
            src_mask: bool broadcastable to (B, H, S, S); default: the padding mask of ``src``.
            need_weights: also return every layer's (B, H, S, S) self-attention weights.
            packing: run the stack on the real tokens only (``Packing.of_tokens(src, pad_id)``, see
                :mod:`dotformer.packing`); the memory is then (N_S, D).

        Returns:
            :class:`EncoderOutput` with ``memory`` (B, S, D), or (N_S, D) when packed.

        Raises:
            ConfigError: the model has no encoder. ShapeError: ``src`` is not (B, S), is not right-padded, or holds
                ids outside [0, V).
        """
        if self.encoder is None or self.src_embed is None:
            raise ConfigError(f"a {self.config.arch} model has no encoder")
        if src.dim() != 2:
            raise ShapeError(f"src must be (B, S) token ids, got {tuple(src.shape)}")
        check_right_padded(src, self.config.pad_id, "src")
        mask = self.source_mask(src) if src_mask is None else src_mask
        x = pack(self.src_embed(src), packing)  # (B, S, D), or (N_S, D): the real tokens only (dotformer.packing)
        return self.encoder(x, mask, PassMode(need_weights, packing))

    def decode(
        self,
        tgt: Tensor,
        memory: Tensor | None = None,
        src_mask: Tensor | None = None,
        tgt_mask: Tensor | None = None,
        cache: DecoderKeyValues | None = None,
        need_weights: bool = False,
        packing: Packing | None = None,
        memory_packing: Packing | None = None,
    ) -> DecoderOutput:
        """Run the decoder over target tokens (teacher forcing) or over the newest tokens (with a cache).

        Args:
            tgt: (B, T) int64 target ids starting with BOS, right-padded (left padding, a PAD before a real token,
                is refused: it would shift the positions), or only the new ids when ``cache`` holds the earlier
                positions (a chunk is checked alone: feed no PAD before real tokens across chunks).
            memory: (B, S, D) the encoder output (None for decoder-only models). ``tgt`` may hold B·G rows, G per
                sentence (rows g·G … g·G + G - 1 read sentence g: beam search's beams); with a cache,
                cross-attention then reads each sentence's keys/values once for its G rows (the cache's
                :meth:`~dotformer.multihead.KeyValueCache.layout`); without one, the memory is expanded.
            src_mask: bool broadcastable to (B, H, T, S), the source padding mask, e.g. ``model.source_mask(src)``
                (per sentence, B rows, when ``tgt`` has G rows per sentence).
            tgt_mask: optional extra bool mask broadcastable to (B, H, T, T_total), ANDed with the causal mask.
            cache: a :class:`dotformer.decoding.cache.DecoderCache` (``DecoderCache()``, empty at first), updated in
                place.
            need_weights: also return the weights of every layer.
            packing: run the stack on the real target tokens only (``Packing.of_tokens(tgt, pad_id)``); ``tgt`` must
                be right-padded, and ``hidden`` is then (N_T, D).
            memory_packing: the packing of a packed (N_S, D) ``memory`` (from :meth:`encode` with ``packing``).

        Returns:
            :class:`DecoderOutput` with ``hidden`` (B, T, D) (or (N_T, D)); apply :attr:`generator` for the logits.
            With G target rows per sentence, B·G rows in place of B.

        Raises:
            ConfigError: the model has no decoder, or an encoder-decoder model got no memory.
            ShapeError: ``tgt`` is not (B, T) or not right-padded, or ids outside [0, V), or its rows are not B or a
                multiple of B.
        """
        if self.decoder is None or self.tgt_embed is None:
            raise ConfigError(f"an {self.config.arch} model has no decoder")  # encoder-only
        if tgt.dim() != 2:
            raise ShapeError(f"tgt must be (B, T) token ids, got {tuple(tgt.shape)}")
        if tgt.size(1) > 1:  # one new token per row (a decoding step) cannot be left-padded: no host sync
            check_right_padded(tgt, self.config.pad_id, "tgt")
        if self.encoder is not None and memory is None:
            raise ConfigError("an encoder-decoder model needs the encoder memory to decode")
        groups = self.check_memory(tgt, memory, packing, memory_packing)
        if groups > 1 and cache is None:  # G target rows per sentence: each row reads its own copy of the memory
            memory = memory.repeat_interleave(groups, dim=0) if memory is not None else None  # (B·G, S, D)
            if src_mask is not None and src_mask.dim() == 4 and src_mask.size(0) > 1:
                src_mask = src_mask.repeat_interleave(groups, dim=0)  # (B·G, 1, 1, S)
        offset = cache.length if cache is not None else 0
        if packing is not None and cache is not None:
            raise ConfigError("packed inputs are for training: decode with a cache on the (B, T, D) layout")
        x = pack(self.tgt_embed(tgt, offset), packing)  # (B, T, D), or (N_T, D): the real tokens only
        out = self.decoder(x, memory, tgt_mask, src_mask, cache, PassMode(need_weights, packing, memory_packing))
        if cache is not None:
            cache.length += tgt.size(1)
        return out

    def check_memory(
        self, tgt: Tensor, memory: Tensor | None, packing: Packing | None, memory_packing: Packing | None
    ) -> int:
        """Return G, the target rows per memory row (1, or B·G / B for beam search's layout), after checking that
        ``memory`` fits ``tgt``.

        Raises:
            ShapeError: the memory is not (B, S, D) (or packed without ``memory_packing``), or holds a number of
                sentences that is neither tgt's rows nor (unpacked) a divisor of them.
        """
        if memory is None:
            return 1
        if memory_packing is None and memory.dim() != 3:
            raise ShapeError(f"memory must be (B, S, D), got {tuple(memory.shape)} (packed: pass memory_packing)")
        memory_batch = memory.size(0) if memory_packing is None else memory_packing.batch_size
        grouped = memory_packing is None and packing is None
        rows = tgt.size(0)
        if memory_batch == rows:
            return 1
        if grouped and 0 < memory_batch < rows and rows % memory_batch == 0:
            return rows // memory_batch
        hint = " (tgt may hold a multiple of B rows, G per sentence)" if grouped else ""
        raise ShapeError(
            f"memory holds B={memory_batch} sentences ({tuple(memory.shape)}), tgt {tuple(tgt.shape)} holds "
            f"B={rows}: different batch sizes{hint}"
        )

    def forward(
        self,
        src: Tensor | None = None,
        tgt: Tensor | None = None,
        src_mask: Tensor | None = None,
        tgt_mask: Tensor | None = None,
        packed: bool = False,
        select: Tensor | None = None,
    ) -> Tensor:
        """Logits of the next token at every target position (teacher forcing), or, for encoder-only models, the
        head's scores of the source (:meth:`head_scores`).

        Args:
            src: (B, S) int64 source ids, right-padded (encoder-decoder, encoder-only).
            tgt: (B, T) int64 target input ids, BOS first, right-padded (encoder-decoder, decoder-only). Left padding
                is refused (ShapeError), as in :meth:`encode` and :meth:`decode`.
            src_mask, tgt_mask: as in :meth:`encode` / :meth:`decode`.
            packed: compute only the real (non-PAD) positions (:mod:`dotformer.packing`): every layer and the
                generator skip the padding, which is what training wants. Targets must be right-padded, and a
                custom ``src_mask`` must hide the PAD keys (the default padding mask does), since packing drops them.
            select: encoder-only models with a per-position head (generator, token): (B, S) bool, True at the
                positions whose scores are wanted (real tokens only); the head then runs on those alone (a masked
                language model scores its masked positions, a tagger its labelled ones).

        Returns:
            (B, T, V) float logits; ``log_softmax`` of them gives log-probabilities. Encoder-only: (B, S, V) with the
            generator, (B, C) with a sequence head, (B, S, C) with a token head. With ``packed``: (N, V) (or (N, C))
            of the N non-PAD positions of ``tgt`` (``src`` for encoder-only) in row-major order, equal to
            ``logits[tgt != pad_id]`` of the unpacked call (tested); the matching gold tokens are
            ``tgt_out[tgt != pad_id]``. With ``select``: (N_sel, V) (or (N_sel, C)) of the selected positions, in
            row-major order.

        Raises:
            ConfigError: a required input is missing, or ``select`` for a model or head that scores no positions.
            ShapeError: wrong shapes.
        """
        arch = self.config.arch
        if arch == "encoder-only":
            if src is None:
                raise ConfigError("an encoder-only model needs src")
            packing = self.packings(src, None, src_mask)[0] if packed else None
            memory = self.encode(src, src_mask, packing=packing).memory  # (B, S, D) or (N_S, D)
            return self.head_scores(memory, src, packing, select)
        if select is not None:
            raise ConfigError("select picks an encoder's positions; a model with a decoder scores every target")
        if tgt is None:
            raise ConfigError("forward needs tgt (the target input ids, starting with BOS)")
        memory, memory_packing, packing = None, None, None
        if arch == "encoder-decoder":
            if src is None:
                raise ConfigError("an encoder-decoder model needs src")
            if src.dim() == 2 and tgt.dim() == 2 and src.size(0) != tgt.size(0):
                raise ShapeError(f"src {tuple(src.shape)} and tgt {tuple(tgt.shape)} hold different batch sizes")
        if packed:  # decode checks that tgt is right-padded
            memory_packing, packing = self.packings(src if arch == "encoder-decoder" else None, tgt, src_mask)
        if arch == "encoder-decoder":
            assert src is not None
            src_mask = self.source_mask(src) if src_mask is None else src_mask
            memory = self.encode(src, src_mask, packing=memory_packing).memory  # (B, S, D) or (N_S, D)
        hidden = self.decode(
            tgt, memory, src_mask=src_mask, tgt_mask=tgt_mask, packing=packing, memory_packing=memory_packing
        ).hidden  # (B, T, D) or (N_T, D)
        return self.generator(hidden)  # (B, T, V) or (N_T, V)

    def head_scores(
        self, memory: Tensor, src: Tensor, packing: Packing | None = None, select: Tensor | None = None
    ) -> Tensor:
        """An encoder-only model's head on its memory (:mod:`dotformer.heads`).

        Args:
            memory: (B, S, D) from :meth:`encode`, or (N_S, D) packed with ``packing``.
            src: (B, S) the ids it read (their PAD positions are the padding).
            packing: the packing of a packed memory. select: (B, S) bool, the positions to score (see
                :meth:`forward`).

        Returns:
            generator: (B, S, V) token logits (N_S or N_sel rows when packed or selected); sequence head: (B, C);
            token head: (B, S, C) (N_S or N_sel rows).

        Raises:
            ConfigError: ``select`` with a sequence head (it scores texts, not positions).
        """
        if isinstance(self.classifier, SequenceClassifier):
            if select is not None:
                raise ConfigError("a sequence head scores whole texts: select picks positions")
            return self.classifier(unpack(memory, packing), src != self.config.pad_id)  # (B, C)
        if select is not None:
            rows = select[src != self.config.pad_id] if packing is not None else select  # (N_S,) or (B, S) bool
            memory = memory[rows]  # (N_sel, D)
        head = self.classifier if self.classifier is not None else self.generator
        return head(memory)  # (B, S, V or C), or (N, V or C)

    def keep_packings_eager(self) -> None:
        """Call before ``torch.compile(model)``: :meth:`packings` (data-dependent sizes) then runs outside the graph.

        One graph break, before the layers. Not a decorator: ``torch.compiler.disable`` imports ``torch._dynamo``
        (~1.5 s added to the start of every command that imports the model and never compiles).
        """
        self.packings = torch.compiler.disable(self.packings)  # type: ignore[method-assign]

    def packings(
        self, src: Tensor | None, tgt: Tensor | None, src_mask: Tensor | None = None
    ) -> tuple[Packing | None, Packing | None]:
        """The packings of ``forward(packed=True)``: of ``src`` (:meth:`source_packing`) and of ``tgt``, or None.

        Raises:
            ShapeError: as :meth:`source_packing` and :meth:`packing_of`.
        """
        source = self.source_packing(src, src_mask) if src is not None else None
        return source, (self.packing_of(tgt) if tgt is not None else None)

    def source_packing(self, src: Tensor, src_mask: Tensor | None) -> Packing:
        """The packing of ``src``, after checking that ``src_mask`` (if given) hides every PAD key.

        Raises:
            ShapeError: ``src_mask`` lets a query attend to a PAD key, which the packed computation drops.
        """
        if src_mask is not None:
            pad_keys = (src == self.config.pad_id)[:, None, None, :]  # (B, 1, 1, S)
            if bool((src_mask & pad_keys).any()):
                raise ShapeError(
                    "packed=True drops the PAD positions, but src_mask lets queries attend to PAD keys; mask them "
                    "(model.source_mask(src) does) or call with packed=False"
                )
        return self.packing_of(src)

    def packing_of(self, tokens: Tensor, right_padded: bool = False) -> Packing:
        """The :class:`Packing` of the non-PAD ids of a (B, L) batch (``config.pad_id``).

        Raises:
            ShapeError: ``tokens`` is not (B, L), or ``right_padded`` is asked and a row has a PAD inside.
        """
        return Packing.of_tokens(tokens, self.config.pad_id, right_padded)

    def num_parameters(self) -> int:
        """Number of distinct trainable parameters (tied weights counted once)."""
        return sum(p.numel() for p in self.parameters())


def expected_num_parameters(config: ModelConfig) -> int:
    """The analytic parameter count of ``Transformer(config)``, term by term.

    attention = 4·D² (+ 4·D biases); FFN = 2·D·F (+ F + D biases); LayerNorm = 2·D;
    encoder layer = attention + FFN + 2 LayerNorms; decoder layer = 2 attentions + FFN + 3 LayerNorms
    (1 attention and 2 LayerNorms without cross-attention); pre-LN adds one LayerNorm per stack;
    embeddings V·D each (shared once), plus max_len·D per learned positional table; generator V·D unless tied;
    ``embedding_norm`` adds a LayerNorm per embedding, ``generator_bias`` V; a classifier head C·D + C.

    The modern switches: with H heads of Dh and H_kv key/value heads, attention = D·H·Dh (W_q) + 2·D·H_kv·Dh (W_k,
    W_v) + H·Dh·D (W_o), biases H·Dh + 2·H_kv·Dh (``qkv_bias``) and D (``bias``), QK-norm 2·Dh; a gated FFN adds D·F
    (+ F); an RMSNorm is D; a sandwich norm doubles each sublayer's norms.
    """
    c = config
    D, F, H, Dh, Hkv = c.d_model, c.d_ff, c.num_heads, c.head_dim, c.kv_heads
    qkv_bias = c.bias if c.qkv_bias is None else c.qkv_bias
    attention = 2 * D * H * Dh + 2 * D * Hkv * Dh + ((H + 2 * Hkv) * Dh if qkv_bias else 0) + (D if c.bias else 0)
    attention += 2 * Dh if c.qk_norm else 0
    ffn = (3 if c.ffn_gated else 2) * D * F + ((F + D + (F if c.ffn_gated else 0)) if c.bias else 0)
    norm = 2 * D if c.norm == "layernorm" else D
    sub_norm = norm * (2 if c.sandwich_norm else 1)  # the norms around one sublayer
    total = 0
    has_encoder = c.arch in ("encoder-decoder", "encoder-only")
    has_decoder = c.arch in ("encoder-decoder", "decoder-only")
    if has_encoder:
        total += c.num_encoder_layers * (attention + ffn + 2 * sub_norm) + (norm if c.norm_first else 0)
        total += c.src_vocab_size * D + (c.max_len * D if c.positional == "learned" else 0)
    if has_decoder:
        cross = c.arch == "encoder-decoder"
        per_layer = (2 if cross else 1) * attention + ffn + (3 if cross else 2) * sub_norm
        total += c.num_decoder_layers * per_layer + (norm if c.norm_first else 0)
        total += c.max_len * D if c.positional == "learned" else 0
        if not (c.share_embeddings and has_encoder):
            total += c.tgt_vocab_size * D
    embeddings = int(has_encoder) + int(has_decoder)
    total += embeddings * norm if c.embedding_norm else 0
    total += c.tgt_vocab_size if c.generator_bias else 0
    out_vocab = c.tgt_vocab_size if has_decoder else c.src_vocab_size
    if not (c.tie_output and out_vocab == c.tgt_vocab_size):
        total += c.tgt_vocab_size * D
    if c.head != "generator":  # a classifier: W_c (C, D) and b_c (C,)
        total += c.num_labels * D + c.num_labels
    return total
