"""What every decoder-only language model import shares: its vocabulary in dotformer's ids, the text rules (BOS and
EOS) that travel with it, and the reader that copies a family's tensors by its parameter map.

Ids. A released model's tokenizer.json keeps its own ids shifted by four (:mod:`dotformer.data.tokenize.pretrained`),
and the model's embedding gets four rows in front (:class:`LMVocabulary`): dotformer's PAD, BOS, EOS and UNK rows are
copies of the released model's pad, BOS, EOS and unknown rows, so that ``[BOS] ids`` reads as its ``[bos] ids``. The
generator gets a bias of :data:`~dotformer.export.params.SUPPRESSED_LOGIT` on those four rows and 0 elsewhere: the
copies are never produced, and the softmax counts each released token once, as the released model does (its
log-probabilities, not lower by the copies). The pad row is the model's ``pad_token_id``, else its (first) EOS: a model
without a pad token pads with EOS, as transformers' ``generate`` does; padding is masked, so the row only fills the
batch.

Text rules (:class:`~dotformer.decoding.inputs.TextRules`, saved in the checkpoint's config.json under
``"text_rules"``): the families that start every text with BOS (Llama, Mistral, SmolLM, Gemma) get ``add_bos``; GPT-2
and Qwen do not. Generation ends at the model's EOS ids (``generation_config.json``'s ``eos_token_id``, else
``config.json``'s; one id or a list, as Llama 3's), in dotformer's ids. The tokenizer encodes line breaks itself.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from dotformer.checkpoint import save_checkpoint
from dotformer.config import ModelConfig
from dotformer.data.tokenize.pretrained import HFFileTokenizer, hf_from_str
from dotformer.data.tokenize.tokenizers import NUM_SPECIAL
from dotformer.errors import CheckpointError, ConfigError, DataError
from dotformer.export.outdir import fresh_output_dir
from dotformer.export.params import SUPPRESSED_LOGIT, EngineNames, join, locate
from dotformer.imports.common import Copier, TensorReader, TensorSource, read_json_file
from dotformer.model import Transformer

logger = logging.getLogger(__name__)

TOKENIZER_FILE = "tokenizer.json"
GENERATION_FILE = "generation_config.json"
UNUSED_ROW = "<|unused_row_{i}|>"  # a special token standing for an embedding row the tokenizer has no token for


def ids_of(value: Any) -> list[int]:
    """One id or a list of ids (config.json's ``eos_token_id``) as a list; None as []."""
    if value is None:
        return []
    values = value if isinstance(value, list) else [value]
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        raise CheckpointError(f"a token id must be an integer or a list of integers, got {value!r}")
    return [int(v) for v in values]


@dataclass(frozen=True)
class SpecialIds:
    """The released model's own ids (not dotformer's) of what dotformer's four special rows copy, and its text rules.

    Attributes:
        pad: the row of dotformer's PAD: ``pad_token_id``, else the first EOS.
        bos: the row of dotformer's BOS: ``bos_token_id``, else the first EOS.
        eos: the ids generation ends at (at least one).
        unk: the row of dotformer's UNK: the tokenizer's unknown token, else the first EOS.
        add_bos: every text starts with BOS (Llama, Mistral, Gemma; not GPT-2, Qwen).
    """

    pad: int
    bos: int
    eos: tuple[int, ...]
    unk: int
    add_bos: bool


def special_ids(
    directory: Path, hf: Mapping[str, Any], add_bos: bool, unk: int | None, defaults: Mapping[str, Any] | None = None
) -> SpecialIds:
    """The :class:`SpecialIds` of a model directory: ``generation_config.json`` first, then ``config.json``, then
    ``defaults`` (a GGUF file's metadata).

    Raises:
        CheckpointError: no EOS id anywhere, or a family that adds BOS without a BOS id.
    """
    sources: list[Mapping[str, Any]] = []
    if (directory / GENERATION_FILE).is_file():
        generation = read_json_file(directory / GENERATION_FILE)
        if isinstance(generation, dict):
            sources.append(generation)
    sources += [hf, defaults or {}]

    def first(name: str) -> list[int]:
        for source in sources:
            ids = ids_of(source.get(name))
            if ids:
                return ids
        return []

    eos = first("eos_token_id")
    if not eos:
        raise CheckpointError(f"{directory}: no eos_token_id in {GENERATION_FILE} or config.json")
    bos, pad = first("bos_token_id"), first("pad_token_id")
    if add_bos and not bos:
        raise CheckpointError(f"{directory}: the family starts texts with BOS, but no bos_token_id is given")
    return SpecialIds(
        pad=pad[0] if pad else eos[0],
        bos=bos[0] if bos else eos[0],
        eos=tuple(dict.fromkeys(eos)),
        unk=unk if unk is not None else eos[0],
        add_bos=add_bos,
    )


@dataclass(frozen=True)
class LMVocabulary:
    """A released vocabulary in dotformer's ids.

    Attributes:
        tokenizer: the :class:`~dotformer.data.tokenize.pretrained.HFFileTokenizer` (the file's ids + 4), saved with the
            checkpoint.
        rows: (V + 4,) int64: dotformer id i is the released model's row ``rows[i]``.
        specials: the released ids and the text rules.
    """

    tokenizer: Any
    rows: Tensor
    specials: SpecialIds

    @property
    def size(self) -> int:
        """V + 4, dotformer's vocabulary size."""
        return int(self.rows.numel())

    def text_rules(self) -> dict[str, Any]:
        """The checkpoint's ``"text_rules"`` (:class:`~dotformer.decoding.inputs.TextRules`), in dotformer's ids."""
        return {"add_bos": self.specials.add_bos, "eos_ids": [i + NUM_SPECIAL for i in self.specials.eos]}

    def generator_bias(self) -> Tensor:
        """(V + 4,) float32: :data:`SUPPRESSED_LOGIT` on the four copied rows, 0 on the released ones."""
        bias = torch.zeros(self.size)
        bias[:NUM_SPECIAL] = SUPPRESSED_LOGIT
        return bias


def unknown_id(hf_tokenizer: Any) -> int | None:
    """The released id of the tokenizer model's unknown token, or None (byte-level BPE has none)."""
    name = getattr(hf_tokenizer.model, "unk_token", None)
    index = hf_tokenizer.token_to_id(name) if isinstance(name, str) else None
    return None if index is None else int(index)


def lm_vocabulary(
    hf_tokenizer: Any, V: int, directory: Path, hf: Mapping[str, Any], add_bos: bool, source: str
) -> LMVocabulary:
    """The :class:`LMVocabulary` of a ``tokenizers.Tokenizer`` and a model of ``V`` embedding rows.

    A tokenizer with fewer tokens than rows (Qwen pads its tables to a multiple of 64) gets a special token
    ``<|unused_row_i|>`` per missing row: every row stays reachable, as in the released model, and decoding skips them.

    Raises:
        CheckpointError: the tokenizer has more tokens than the model has rows, its first four tokens are dotformer's
            specials (nothing to shift), or a special id is outside the rows.
    """

    size = hf_tokenizer.get_vocab_size(with_added_tokens=True)
    if size > V:
        raise CheckpointError(f"{directory}: the tokenizer has {size} tokens, the model's embedding {V} rows")
    if size < V:
        hf_tokenizer.add_special_tokens([UNUSED_ROW.format(i=i) for i in range(size, V)])
        logger.info("%s: %d embedding rows have no token; named %s", directory, V - size, UNUSED_ROW.format(i="i"))
    tokenizer = HFFileTokenizer(hf_tokenizer, source)
    if tokenizer.offset != NUM_SPECIAL:
        raise CheckpointError(f"{directory}: the tokenizer's first ids are dotformer's <pad> <s> </s> <unk>")
    specials = special_ids(directory, hf, add_bos, unknown_id(hf_tokenizer))
    eos = [("eos", index) for index in specials.eos]
    for name, index in (("pad", specials.pad), ("bos", specials.bos), ("unk", specials.unk), *eos):
        if not 0 <= index < V:
            raise CheckpointError(f"{directory}: {name} id {index} is outside the {V} embedding rows")
    rows = torch.tensor([specials.pad, specials.bos, specials.eos[0], specials.unk, *range(V)], dtype=torch.int64)
    return LMVocabulary(tokenizer, rows, specials)


def read_tokenizer_json(directory: Path) -> Any:
    """The ``tokenizers.Tokenizer`` of ``directory/tokenizer.json``.

    Raises:
        CheckpointError: no tokenizer.json (a sentencepiece-only directory is named), or not a valid one.
    """

    path = directory / TOKENIZER_FILE
    if not path.is_file():
        spm = [name for name in ("tokenizer.model", "spiece.model") if (directory / name).is_file()]
        hint = f" (only {spm[0]}: save the tokenizer with a fast tokenizer, which writes tokenizer.json)" if spm else ""
        raise CheckpointError(f"{path} is missing: the model's tokenizer travels as tokenizer.json{hint}")
    try:
        return hf_from_str(path.read_text(encoding="utf-8"), str(path))
    except DataError as exc:
        raise CheckpointError(str(exc)) from None


# -- a family's parameter map, beyond the 2017 layer's -----------------------------------------------------------


@dataclass(frozen=True)
class LMNames:
    """A decoder-only family's names for every dotformer parameter (dotted paths from the checkpoint's root).

    Attributes:
        engine: the layers' attention, feed-forward (``gate`` when gated) and sublayer norms by role, the final norm,
            the token and position tables and the output projection (:class:`~dotformer.export.params.EngineNames`).
        extra: per layer, dotformer's path (relative to the layer) -> the family's, for the modern parts the 2017 walk
            has no role for: the sandwich norms (``res_self.post_norm``, ``res_ff.post_norm``) and the QK-norms
            (``self_attn.q_norm``, ``self_attn.k_norm``).
        conv1d: the linear weights are stored (in, out) (GPT-2's Conv1D) and are transposed on the way in.
    """

    engine: EngineNames
    extra: Mapping[str, str] = field(default_factory=dict)
    conv1d: bool = False


class LMReader(TensorReader):
    """Copies a decoder-only family's tensors into a dotformer model by its :class:`LMNames`.

    Every linear may lack a bias (Llama) and may hold several roles stacked on its output axis (GPT-2's ``c_attn``:
    q, k, v); a norm is a LayerNorm (weight, bias) or an RMSNorm (weight). Rows of the token table are taken in
    dotformer's id order (:class:`LMVocabulary`).
    """

    def __init__(self, names: LMNames, source: TensorSource, copier: Copier) -> None:
        super().__init__(names.engine, source, copier)
        self.lm_names = names

    def copy_linear(self, ours: Sequence[nn.Linear], theirs: str, roles: tuple[str, ...]) -> None:
        """``theirs.weight`` ((out, in), or (in, out) for Conv1D) split over ``ours`` on the output axis, and
        ``theirs.bias`` when dotformer's layers have one.

        Raises:
            CheckpointError: a tensor is missing, of another shape, or a bias dotformer's layer has no place for.
        """
        out = sum(linear.weight.size(0) for linear in ours)
        shape = (ours[0].weight.size(1), out) if self.lm_names.conv1d else (out, ours[0].weight.size(1))
        weight = self.source.get(theirs + ".weight", shape)
        weight = weight.t() if self.lm_names.conv1d else weight  # (out, in)
        has_bias = {linear.bias is not None for linear in ours}
        if len(has_bias) != 1:
            raise ConfigError(f"{theirs}: dotformer's {'/'.join(roles)} differ in having a bias")
        bias = self.source.get(theirs + ".bias", (out,)) if True in has_bias else None
        if bias is None and self.source.find(theirs + ".bias") is not None:
            raise CheckpointError(f"{self.source.where}: {theirs}.bias has no place in the dotformer model")
        start = 0
        for linear, role in zip(ours, roles, strict=True):
            rows = slice(start, start + linear.weight.size(0))
            self.copier.copy(linear.weight, weight[rows], f"{theirs} ({role})")
            if bias is not None:
                self.copier.copy(linear.bias, bias[rows], f"{theirs}.bias ({role})")
            start = rows.stop

    def copy_norm(self, ours: nn.Module, theirs: str) -> None:
        """``theirs.weight`` (D,) and, for a LayerNorm, ``theirs.bias``."""
        for part in ("weight", "bias"):
            target = getattr(ours, part, None)
            if target is not None:
                self.copier.copy(target, self.source.get(f"{theirs}.{part}", tuple(target.shape)), f"{theirs}.{part}")

    def copy_ffn(self, ours: nn.Module, theirs: str, names: Mapping[str, str]) -> None:
        """W_gate (when gated), W_1, W_2 and the family's linear layers ``names`` under ``theirs``."""
        roles = {"gate": getattr(ours, "W_gate", None), "in": ours.W_1, "out": ours.W_2}
        if (roles["gate"] is None) != ("gate" not in names):
            raise ConfigError(f"{theirs}: the family's feed-forward and dotformer's differ in having a gate")
        for role, name in names.items():
            self.copy_linear([roles[role]], join(theirs, name), (role,))

    def copy_layer(self, ours: Any, names: Any, theirs: str) -> None:
        """The 2017 walk of one layer, then the modern norms of :attr:`LMNames.extra`."""
        super().copy_layer(ours, names, theirs)
        for path, name in self.lm_names.extra.items():
            self.copy_norm(locate(ours, path), join(theirs, name))

    def copy_tables(self, model: Transformer, vocabulary: LMVocabulary) -> None:
        """Token table (rows in dotformer's order), learned positions (GPT-2), the generator (untied) and its bias.

        Raises:
            CheckpointError: a table is missing or of another shape.
        """
        assert model.tgt_embed is not None
        names, (V, D) = self.names, model.tgt_embed.token.lookup.weight.shape
        tokens = self.source.get(names.embeddings["tgt"] + ".weight", (V - NUM_SPECIAL, D))
        self.copier.copy(model.tgt_embed.token.lookup.weight, tokens[vocabulary.rows], names.embeddings["tgt"])
        if "tgt" in names.positions:
            table = model.tgt_embed.position.table.weight
            self.copier.copy(table, self.source.get(names.positions["tgt"] + ".weight", tuple(table.shape)), "pos")
        if not model.config.tie_output:
            assert names.generator is not None
            generator = self.source.get(names.generator + ".weight", (V - NUM_SPECIAL, D))
            self.copier.copy(model.generator.weight, generator[vocabulary.rows], names.generator)
        if model.generator.bias is not None:
            self.copier.copy(model.generator.bias, vocabulary.generator_bias(), "the four special rows' bias")


def read_lm(
    config: ModelConfig, names: LMNames, source: TensorSource, vocabulary: LMVocabulary, ignore: Sequence[str] = ()
) -> Transformer:
    """The decoder-only model (eval mode) of ``config`` filled from ``source`` by ``names``: every dotformer
    parameter gets a tensor and every tensor a place (names ending in one of ``ignore`` aside: buffers a library
    rebuilds, such as GPT-2's causal ``attn.bias``).

    Raises:
        CheckpointError: a tensor is missing, of another shape, or left over.
    """
    model = Transformer(config).eval()
    reader = LMReader(names, source, Copier(model))
    reader.copy_tables(model, vocabulary)
    reader.copy_stacks(model)
    reader.copier.check_all_filled()
    source.check_all_used(ignore=lambda name: name.endswith(tuple(ignore)))
    return model


def save_lm(
    output: Path,
    model: Transformer,
    vocabulary: LMVocabulary,
    origin: dict[str, Any],
    family: str,
    chat: dict[str, str] | None = None,
) -> Path:
    """Write the imported language model as a dotformer checkpoint (task ``lm``) with its tokenizer and text rules
    (and ``chat``, its chat template with the BOS and EOS strings it reads, under ``info["chat"]``, when it has one:
    ``dotformer serve`` answers ``/v1/chat/completions`` with it)."""

    info = {
        "task": "lm",
        "family": family,
        "imported_from": origin,
        "text_rules": vocabulary.text_rules(),
        **({"chat": chat} if chat else {}),
    }
    with fresh_output_dir(output) as tmp:
        save_checkpoint(tmp, model, vocabulary.tokenizer, vocabulary.tokenizer, info)
    return output


def lm_config(**fields: Any) -> ModelConfig:
    """A decoder-only pre-norm :class:`ModelConfig` of an imported family: no dropout, PAD at 0, the generator's
    bias holding the four special rows down (:class:`LMVocabulary`), and ``fields``.

    Raises:
        ConfigError: a field dotformer's config refuses (its message names it).
    """
    V = fields.pop("vocab_size") + NUM_SPECIAL
    return ModelConfig(
        src_vocab_size=V,
        tgt_vocab_size=V,
        num_encoder_layers=0,
        dropout=0.0,
        norm_first=True,
        pad_id=0,
        arch="decoder-only",
        generator_bias=True,
        **fields,
    )


# -- the options every rotary family reads ---------------------------------------------------------------------------

HF_LAYER_TYPES = {"full_attention": "full", "sliding_attention": "sliding"}
ROPE_TYPES = ("default", "linear", "llama3", "yarn")  # HF's rope_type values dotformer's RoPE has
YARN_DEFAULTS = {"beta_fast": 32, "beta_slow": 1, "attention_factor": None, "mscale": None, "mscale_all_dim": None}


def rope_parameters(hf: Mapping[str, Any], layer_type: str | None = None) -> dict[str, Any]:
    """The RoPE settings of a ``config.json``: ``rope_parameters`` (transformers 5; per layer type for Gemma 3:
    ``layer_type`` picks ``full_attention`` or ``sliding_attention``), else ``rope_theta`` and ``rope_scaling``."""
    params = hf.get("rope_parameters")
    if isinstance(params, dict) and layer_type is not None and isinstance(params.get(layer_type), dict):
        params = params[layer_type]
    if isinstance(params, dict) and "rope_theta" in params:
        return dict(params)
    scaling = hf.get("rope_scaling") or {}
    return {"rope_theta": hf.get("rope_theta", 10000.0), **(scaling if isinstance(scaling, dict) else {})}


def rope_fields(params: Mapping[str, Any], where: str) -> dict[str, Any]:
    """The :class:`ModelConfig` RoPE fields of :func:`rope_parameters`' dict.

    Raises:
        ConfigError: a ``rope_type`` dotformer's RoPE has not (``dynamic``, ``longrope``, ...), or yarn settings other
            than its defaults, naming it.
    """
    rope_type = params.get("rope_type", params.get("type", "default")) or "default"
    if rope_type not in ROPE_TYPES:
        raise ConfigError(f"{where}: rope_type {rope_type!r} is not supported (dotformer has {', '.join(ROPE_TYPES)})")
    fields: dict[str, Any] = {"rope_theta": float(params.get("rope_theta", 10000.0))}
    if rope_type == "default":
        return fields
    fields.update(rope_scaling=rope_type, rope_factor=float(params.get("factor", 1.0)))
    if rope_type == "llama3":
        fields.update(
            rope_low_freq_factor=float(params.get("low_freq_factor", 1.0)),
            rope_high_freq_factor=float(params.get("high_freq_factor", 4.0)),
            rope_original_max_len=int(params.get("original_max_position_embeddings", 8192)),
        )
    if rope_type == "yarn":
        other = {k: params[k] for k, v in YARN_DEFAULTS.items() if params.get(k, v) != v}
        if other:
            raise ConfigError(f"{where}: yarn rope settings {other} are not supported (only factor and the length)")
        fields["rope_original_max_len"] = int(params.get("original_max_position_embeddings", 8192))
    return fields


def layer_types(hf: Mapping[str, Any], layers: int, where: str, default: Sequence[str] | None = None) -> list[str]:
    """``"full"`` / ``"sliding"`` per layer: ``config.json``'s ``layer_types`` when given, else ``default``, else
    every layer full.

    Raises:
        ConfigError: a layer type other than full or sliding attention, or a list of another length.
    """
    given = hf.get("layer_types")
    if given is None:
        return list(default) if default is not None else ["full"] * layers
    unknown = sorted({str(t) for t in given} - set(HF_LAYER_TYPES))
    if unknown:
        raise ConfigError(f"{where}: layer type {unknown[0]!r} is not supported (full or sliding attention)")
    if len(given) != layers:
        raise ConfigError(f"{where}: layer_types has {len(given)} entries for {layers} layers")
    return [HF_LAYER_TYPES[t] for t in given]


def window_fields(types: Sequence[str], window: int | None, where: str) -> dict[str, Any]:
    """``sliding_window`` and ``layer_types`` of :class:`ModelConfig` (both None when no layer slides).

    Raises:
        ConfigError: sliding layers without a window.
    """
    if "sliding" not in types:
        return {}
    if not window:
        raise ConfigError(f"{where}: sliding-window layers without a sliding_window")
    return {"sliding_window": int(window), "layer_types": tuple(types)}
