"""What the Hugging Face exporters share: a :class:`~dotformer.export.params.Converter` that writes dotformer's
weights under an HF layout's names into a dict of tensors (:class:`StateDictWriter`), and the files of an HF model
directory (``config.json``, ``model.safetensors``, ``generation_config.json``, the tokenizer's files).

No HF model is built to export one: the tensors are written by name, straight into safetensors, and the tests load
the directory back with transformers' own ``from_pretrained`` (which refuses missing or unexpected tensors of the
layout, so a name written wrong fails there).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from dotformer.errors import ConfigError
from dotformer.export.hf_tokenizer import HFVocabulary
from dotformer.export.params import Converter, EngineNames, join

WEIGHTS_FILE = "model.safetensors"


def tensor(parameter: Tensor) -> Tensor:
    """A parameter as written: float32, on the CPU, out of autograd, its own contiguous memory (safetensors refuses
    tensors that share it, such as a tied table)."""
    return parameter.detach().float().cpu().contiguous().clone()


class StateDictWriter(Converter):
    """Writes a dotformer model's weights under an HF layout's names (:attr:`tensors`).

    Args:
        names: the layout's names for dotformer's roles (dotted, from :attr:`prefix`).
        prefix: the names' root in the HF state dict (``"transformer"`` for GPT-2, ``"model"`` for Llama).
        conv1d: the layout stores linear weights as (in, out) (GPT-2's ``Conv1D``): transposed.
        biases: None: a linear layer's bias is written when dotformer has one; True: always (zeros for dotformer's
            bias-free layers: GPT-2 and BERT always have biases); False: never (refused where dotformer has one).
    """

    def __init__(self, names: EngineNames, prefix: str, conv1d: bool = False, biases: bool | None = None) -> None:
        super().__init__(names)
        self.prefix = prefix
        self.conv1d = conv1d
        self.biases = biases
        self.tensors: dict[str, Tensor] = {}

    def put(self, name: str, value: Tensor, root: bool = False) -> None:
        """``value`` under ``name`` (from the prefix; from the state dict's root with ``root``)."""
        self.tensors[name if root else join(self.prefix, name)] = tensor(value)

    def copy_linear(self, ours: Sequence[nn.Linear], theirs: str, roles: tuple[str, ...]) -> None:
        """The weights stacked on the output axis ((out, in); (in, out) for ``Conv1D``) and the biases."""
        weight = torch.cat([linear.weight.detach() for linear in ours])  # (sum of outs, in)
        self.put(f"{theirs}.weight", weight.T if self.conv1d else weight)
        has_bias = [linear.bias is not None for linear in ours]
        if self.biases is False and any(has_bias):
            raise ConfigError(f"{theirs}: the HF layout has no bias there, and the dotformer model has one")
        if self.biases or any(has_bias):
            parts = [
                linear.bias.detach() if linear.bias is not None else torch.zeros(linear.out_features) for linear in ours
            ]
            self.put(f"{theirs}.bias", torch.cat(parts))

    def copy_norm(self, ours: nn.Module, theirs: str) -> None:
        """A norm's ``weight`` (and ``bias``, a LayerNorm's)."""
        self.put(f"{theirs}.weight", ours.weight)
        if getattr(ours, "bias", None) is not None:
            self.put(f"{theirs}.bias", ours.bias)


def save_hf_directory(
    directory: Path,
    hf_config: Any,
    tensors: dict[str, Tensor],
    vocabulary: HFVocabulary,
    max_len: int,
    causal: bool,
) -> None:
    """``config.json``, ``model.safetensors``, a causal LM's ``generation_config.json`` (its EOS, BOS, PAD and the
    tokens never generated) and the tokenizer's files, into ``directory`` (which exists and is empty)."""
    from safetensors.torch import save_file

    hf_config.save_pretrained(str(directory))
    save_file(tensors, str(directory / WEIGHTS_FILE), metadata={"format": "pt"})
    if causal:
        from transformers import GenerationConfig

        eos = list(vocabulary.eos)
        generation = GenerationConfig(
            bos_token_id=vocabulary.bos,
            eos_token_id=eos[0] if len(eos) == 1 else eos,
            pad_token_id=vocabulary.pad,
            suppress_tokens=list(vocabulary.suppress) or None,
        )
        generation.save_pretrained(str(directory))
    vocabulary.write(directory, max_len)


def generator_rows(model: nn.Module, vocabulary: HFVocabulary) -> torch.Tensor:
    """(V, D) the generator's exported rows, after checking that their bias (if any) is zero: a released vocabulary's
    generator carries a bias only to keep the four copied rows from being produced, and those rows are dropped.

    Raises:
        ConfigError: a generator bias that is not zero on an exported row.
    """
    bias = model.generator.bias
    if bias is not None and bool(vocabulary.rows(bias.detach()).ne(0).any()):
        raise ConfigError("ModelConfig.generator_bias=True: the HF causal-LM layouts have no bias on their lm_head")
    return vocabulary.rows(model.generator.weight.detach())


def unheld_option(config: Any, layout: str, fields: Sequence[str]) -> str | None:
    """The first of ``fields`` that ``config`` sets (a switch on, an option not None) and ``layout`` ("GPT-2's",
    "BERT's") has no place for, or a ``qkv_bias`` unlike ``bias``: one line naming the field; None when none is set."""
    for field in fields:
        value, switch = getattr(config, field, None), field in ("ffn_gated", "qk_norm", "sandwich_norm")
        if value if switch else value is not None:
            return f"ModelConfig.{field}={'True' if switch else repr(value)}: {layout} layout has no such option"
    if getattr(config, "qkv_bias", None) is not None and config.qkv_bias != config.bias:
        return f"ModelConfig.qkv_bias={config.qkv_bias} differs from bias={config.bias}: not in {layout} layout"
    return None
