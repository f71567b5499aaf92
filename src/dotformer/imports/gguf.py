"""``dotformer import --from gguf FILE OUT``: a GGUF file (llama.cpp's format) of the Llama family.

The file is read with the ``gguf`` package (``pip install "dotformer[gguf]"``): its metadata says the family
(``general.architecture``: ``llama`` (Llama 2/3, Mistral, SmolLM), ``qwen2``, ``qwen3``) and the shape
(``{arch}.embedding_length``, ``.block_count``, ``.attention.head_count(_kv)``, ``.rope.freq_base``, ...), from which
the same ``config.json`` fields as an HF directory's are made; the family's HF config then goes through
:mod:`dotformer.imports.llama`, and the tensors, renamed to HF's names, through the same parameter map. Each tensor
is dequantized to float32 by gguf's own :func:`gguf.quants.dequantize` (F32, F16, BF16, Q8_0, Q4_0, the K-quants and
every type it reads), so the model holds exactly the dequantized weights.

llama.cpp's converter permutes the rows of W_q and W_k of the ``llama`` architecture (its rotary positions pair
dimensions i and i + Dh/2 of a head the other way round, as Meta's original checkpoints did); the import undoes it
(:func:`unpermute`). Qwen's are stored unpermuted.

The tokenizer: the ``tokenizer.json`` beside the file (the released model's, saved with it), checked against the
file's vocabulary (``tokenizer.ggml.tokens``); rebuilding one from the GGUF vocabulary alone would need llama.cpp's
pre-tokenizer rules, so a file without one is refused, naming what to put there. BOS and EOS come from
``tokenizer.ggml.bos_token_id``, ``eos_token_id``, ``padding_token_id`` and ``add_bos_token``.

Refused in one line: another architecture (Gemma's and GPT-2's GGUF layouts are not read; import their HF
directories), Llama 3's rope frequencies stored as a ``rope_freqs`` tensor, a rope scaling type other than linear,
tensors left over.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from dotformer.config import ModelConfig
from dotformer.errors import CheckpointError, ConfigError, require_extra
from dotformer.export.outdir import check_output_dir
from dotformer.imports.common import TensorSource
from dotformer.imports.decoder import lm_vocabulary, read_lm, read_tokenizer_json, save_lm
from dotformer.imports.hf import families

GGUF_ARCHITECTURES = {"llama": "llama", "qwen2": "qwen2", "qwen3": "qwen3"}  # general.architecture -> model_type
PERMUTED = ("llama",)  # architectures whose W_q, W_k rows llama.cpp's converter permutes

# GGUF's tensor names -> HF's (per layer: blk.{i}.X -> model.layers.{i}.Y)
LAYER_NAMES = {
    "attn_norm": "input_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm",
    "ffn_norm": "post_attention_layernorm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
TOP_NAMES = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}


def read_gguf(path: Path) -> tuple[dict[str, Any], dict[str, Tensor]]:
    """The metadata (key -> value) and every tensor (name -> float32 tensor in PyTorch's (out, in) order,
    dequantized by ``gguf.quants.dequantize``) of a GGUF file.

    Raises:
        MissingExtraError: the gguf package is not installed. CheckpointError: not a GGUF file.
    """

    gguf = require_extra("gguf", "gguf", "reading GGUF files")
    dequantize = require_extra("gguf", "gguf.quants", "reading GGUF files").dequantize
    if not path.is_file():
        what = "is a directory" if path.is_dir() else "is missing"
        raise CheckpointError(f"{path} {what} (give a .gguf file)")
    try:
        reader = gguf.GGUFReader(str(path))
    except (ValueError, OSError, KeyError) as exc:
        raise CheckpointError(f"{path} is not a GGUF file ({exc})") from None
    meta = {name: field.contents() for name, field in reader.fields.items() if not name.startswith("GGUF.")}
    tensors: dict[str, Tensor] = {}
    for tensor in reader.tensors:
        values = dequantize(tensor.data, tensor.tensor_type)  # (..., ne1, ne0) float32
        shape = tuple(int(n) for n in reversed(tensor.shape.tolist()))  # GGUF lists the innermost dimension first
        tensors[tensor.name] = torch.from_numpy(values.astype("float32").reshape(shape).copy())
    return meta, tensors


def unpermute(weight: Tensor, heads: int) -> Tensor:
    """Undo llama.cpp's row permutation of a (heads·Dh, D) W_q or W_k: within each head it moved the row pairs
    (i, Dh/2 + i) to (2i, 2i + 1); this puts them back (HF's order, rotate_half's)."""
    rows, D = weight.shape
    Dh = rows // heads
    return weight.reshape(heads, Dh // 2, 2, D).transpose(1, 2).reshape(rows, D)  # (H, Dh/2, 2, D) -> (H·Dh, D)


def gguf_options(meta: dict[str, Any], arch: str, where: Path) -> dict[str, Any]:
    """The optional ``config.json`` fields of a GGUF file's metadata: RoPE scaling, sliding window, special ids.

    Raises:
        ConfigError: a rope scaling other than linear.
    """
    options: dict[str, Any] = {}
    scaling = meta.get(f"{arch}.rope.scaling.type", "none")
    if scaling == "linear":
        options["rope_scaling"] = {"rope_type": "linear", "factor": float(meta.get(f"{arch}.rope.scaling.factor", 1.0))}
    elif scaling not in ("none", None):
        raise ConfigError(f"{where}: rope scaling {scaling!r} in GGUF is not supported (linear is)")
    window = meta.get(f"{arch}.attention.sliding_window")
    if window:
        options["sliding_window"] = int(window)
        if arch != "llama":
            options["use_sliding_window"], options["max_window_layers"] = True, 0
    for ours, theirs in (("bos_token_id", "bos_token_id"), ("eos_token_id", "eos_token_id")):
        if f"tokenizer.ggml.{theirs}" in meta:
            options[ours] = int(meta[f"tokenizer.ggml.{theirs}"])
    if "tokenizer.ggml.padding_token_id" in meta:
        options["pad_token_id"] = int(meta["tokenizer.ggml.padding_token_id"])
    return options


def hf_config(meta: dict[str, Any], tensors: dict[str, Tensor], where: Path) -> dict[str, Any]:
    """The HF ``config.json`` fields of a GGUF file's metadata.

    Raises:
        ConfigError: an architecture or rope scaling not read (module docstring).
    """
    arch = meta.get("general.architecture")
    if arch not in GGUF_ARCHITECTURES:
        raise ConfigError(
            f"{where}: general.architecture {arch!r} is not supported in GGUF (read: {', '.join(GGUF_ARCHITECTURES)})"
        )
    if "rope_freqs.weight" in tensors:
        raise ConfigError(f"{where}: rope frequencies stored as a tensor (rope_freqs: Llama 3.1's scaling) not read")

    def key(name: str, default: Any = None) -> Any:
        return meta.get(f"{arch}.{name}", default)

    heads = int(key("attention.head_count"))
    D = int(key("embedding_length"))
    config: dict[str, Any] = {
        "model_type": GGUF_ARCHITECTURES[arch],
        "vocab_size": int(tensors["token_embd.weight"].size(0)),
        "hidden_size": D,
        "num_hidden_layers": int(key("block_count")),
        "intermediate_size": int(key("feed_forward_length")),
        "num_attention_heads": heads,
        "num_key_value_heads": int(key("attention.head_count_kv", heads)),
        "head_dim": int(key("attention.key_length", D // heads)),
        "rms_norm_eps": float(key("attention.layer_norm_rms_epsilon", 1e-6)),
        "max_position_embeddings": int(key("context_length", 2048)),
        "tie_word_embeddings": "output.weight" not in tensors,
        "rope_theta": float(key("rope.freq_base", 10000.0)),
        "attention_bias": False,
    }
    config.update(gguf_options(meta, arch, where))
    return config


def hf_tensors(tensors: dict[str, Tensor], config: dict[str, Any], permuted: bool) -> dict[str, Tensor]:
    """GGUF's tensors under HF's names, W_q and W_k unpermuted when ``permuted``.

    Raises:
        CheckpointError: a tensor name the map has no place for (naming it).
    """
    out: dict[str, Tensor] = {}
    heads = {"attn_q": config["num_attention_heads"], "attn_k": config["num_key_value_heads"]}
    for name, tensor in tensors.items():
        base, _, part = name.rpartition(".")
        pieces = base.split(".")
        if pieces[0] == "blk" and len(pieces) == 3 and pieces[2] in LAYER_NAMES:
            if permuted and pieces[2] in heads and part == "weight":
                tensor = unpermute(tensor, heads[pieces[2]])
            out[f"model.layers.{pieces[1]}.{LAYER_NAMES[pieces[2]]}.{part}"] = tensor
        elif base in TOP_NAMES:
            out[f"{TOP_NAMES[base]}.{part}"] = tensor
        else:
            raise CheckpointError(f"GGUF tensor {name!r} has no place in the dotformer model")
    return out


def check_vocabulary(tokenizer: Any, meta: dict[str, Any], where: Path) -> None:
    """Raise CheckpointError unless the tokenizer.json's tokens are the GGUF vocabulary's (same ids)."""
    tokens = meta.get("tokenizer.ggml.tokens")
    if tokens is None:
        return
    for index, token in enumerate(tokens):
        if tokenizer.id_to_token(index) != token:
            raise CheckpointError(
                f"{where}: tokenizer.json's token {index} is {tokenizer.id_to_token(index)!r}, the GGUF "
                f"vocabulary's {token!r}: not this model's tokenizer"
            )


def import_gguf(file: str | Path, output: str | Path) -> Path:
    """Write the model of a GGUF file as a dotformer language-model checkpoint at ``output`` (absent or empty).

    Raises:
        ConfigError: an architecture or option not read (module docstring), or a non-empty ``output``.
        CheckpointError: not a GGUF file, no tokenizer.json beside it, or tensors that do not fit.
        MissingExtraError: the gguf package is not installed.
    """

    file, output = Path(file), check_output_dir(output)
    model, vocabulary, family = read_gguf_lm(file)
    origin = {"format": f"gguf-{family}", "path": str(file.resolve())}
    return save_lm(output, model, vocabulary, origin, family)


def read_gguf_lm(file: Path) -> tuple[Any, Any, str]:
    """The dotformer model (eval mode), its :class:`~dotformer.imports.decoder.LMVocabulary` and family.

    Raises:
        as :func:`import_gguf`.
    """

    meta, tensors = read_gguf(file)
    hf = hf_config(meta, tensors, file)
    if not (file.parent / "tokenizer.json").is_file():
        raise CheckpointError(
            f"{file}: no tokenizer.json beside it; put the released model's tokenizer.json in {file.parent} "
            f"(dotformer does not rebuild a tokenizer from the GGUF vocabulary)"
        )
    family = families()[hf["model_type"]]
    config: ModelConfig = family.config(hf, str(file))
    tokenizer = read_tokenizer_json(file.parent)
    check_vocabulary(tokenizer, meta, file)
    add_bos = bool(meta.get("tokenizer.ggml.add_bos_token", family.adds_bos))
    vocabulary = lm_vocabulary(tokenizer, int(hf["vocab_size"]), file.parent, hf, add_bos, str(file))
    permuted = meta.get("general.architecture") in PERMUTED
    source = TensorSource(hf_tensors(tensors, hf, permuted), file, prefixes=family.prefixes)
    return read_lm(config, family.names(config), source, vocabulary), vocabulary, str(hf["model_type"])
