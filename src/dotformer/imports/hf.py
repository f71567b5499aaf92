"""``dotformer import --from hf``: a local Hugging Face model directory, its family read from ``config.json``.

``model_type`` picks the family (``architectures`` names it in messages): ``gpt2`` (:mod:`~dotformer.imports.gpt2`),
``llama`` (SmolLM included), ``mistral``, ``qwen2``, ``qwen3`` (:mod:`~dotformer.imports.llama`), ``gemma2``,
``gemma3_text`` (:mod:`~dotformer.imports.gemma`) become decoder-only language models with their tokenizer.json and
text rules (:mod:`~dotformer.imports.decoder`); ``marian`` and ``bert`` go to their own importers. Any other
``model_type`` (a mixture of experts such as ``mixtral``, ``qwen2_moe``; an architecture dotformer has no switch
for) is refused in one line naming it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dotformer.config import ModelConfig
from dotformer.data.tokenize.tokenizers import NUM_SPECIAL
from dotformer.errors import ConfigError
from dotformer.export.outdir import check_output_dir
from dotformer.imports import gemma, gpt2, llama
from dotformer.imports.bert import import_bert
from dotformer.imports.common import TensorSource, read_hf_config, read_safetensors
from dotformer.imports.decoder import LMNames, lm_vocabulary, read_lm, read_tokenizer_json, save_lm
from dotformer.imports.marian import import_marian


@dataclass(frozen=True)
class Family:
    """How one family's directory becomes a dotformer model.

    Attributes:
        config: ``config.json`` (and where, for messages) -> the dotformer config.
        names: the parameter map (given the dotformer config).
        prefixes: the prefixes its tensor names may carry (``model.``, ``transformer.``).
        ignore: ends of tensor names that are buffers the library rebuilds (not weights).
        adds_bos: the family starts every text with BOS.
    """

    config: Callable[[dict[str, Any], str], ModelConfig]
    names: Callable[[ModelConfig], LMNames]
    prefixes: tuple[str, ...]
    ignore: tuple[str, ...]
    adds_bos: bool


def families() -> dict[str, Family]:
    """``model_type`` -> :class:`Family` of every decoder-only family read."""

    table = {
        "gpt2": Family(
            gpt2.gpt2_config, lambda c: gpt2.GPT2_NAMES, gpt2.GPT2_PREFIXES, gpt2.GPT2_BUFFERS, gpt2.ADDS_BOS
        )
    }
    for name in llama.LLAMA_TYPES:
        table[name] = Family(
            llama.llama_config,
            lambda c: llama.llama_names(c.qk_norm),
            llama.LLAMA_PREFIXES,
            llama.LLAMA_BUFFERS,
            llama.ADDS_BOS[name],
        )
    for name in gemma.GEMMA_TYPES:
        table[name] = Family(
            gemma.gemma_config, lambda c: gemma.gemma_names(c.qk_norm), gemma.GEMMA_PREFIXES, (), gemma.ADDS_BOS
        )
    return table


OTHER_IMPORTERS = ("marian", "bert")
REFUSED = {
    "gemma3": "the multimodal Gemma 3; its text model (model_type gemma3_text) is read",
    "gemma": "Gemma 1 is not among the families read (gemma2, gemma3_text are)",
}


def model_type(hf: dict[str, Any], where: Path) -> str:
    """The family of a ``config.json``.

    Raises:
        ConfigError: no model_type, or one dotformer does not read (naming it and its architectures).
    """
    name = hf.get("model_type")
    known = [*families(), *OTHER_IMPORTERS]
    if name in known:
        return str(name)
    what = f"model_type {name!r}" + (f" ({', '.join(hf['architectures'])})" if hf.get("architectures") else "")
    reason = REFUSED.get(str(name), f"dotformer reads {', '.join(known)}")
    raise ConfigError(f"{where}: {what} is not supported: {reason}")


def import_hf(directory: str | Path, output: str | Path) -> Path:
    """Write the model of a local Hugging Face directory as a dotformer checkpoint at ``output`` (absent or empty).

    Returns:
        ``output``: a language model works with ``generate``, ``evaluate --task lm``, ``explore`` and
        ``plot attention``; a Marian or BERT model as their importers say.

    Raises:
        ConfigError: a family or option dotformer cannot represent, or a non-empty ``output``.
        CheckpointError: a file is missing or damaged, only a pickle holds the weights, or tensors do not fit.
    """

    directory, output = Path(directory), check_output_dir(output)
    hf = read_hf_config(directory)
    family = model_type(hf, directory / "config.json")
    if family == "marian":
        return import_marian(directory, output)
    if family == "bert":
        return import_bert(directory, output)

    model, vocabulary = read_hf_lm(directory, hf)
    origin = {"format": f"hf-{family}", "path": str(directory.resolve())}
    return save_lm(output, model, vocabulary, origin, family, chat_template(directory))


def chat_template(directory: Path) -> dict[str, str] | None:
    """The chat template of a Hugging Face directory's ``tokenizer_config.json`` (its ``"chat_template"``, the
    ``"default"`` one of a list of named templates, or ``chat_template.jinja``), with the ``bos_token`` and
    ``eos_token`` strings it reads: ``{"template", "bos_token", "eos_token"}``; None without one.

    Raises:
        CheckpointError: ``tokenizer_config.json`` is not JSON.
    """
    import json

    from dotformer.errors import CheckpointError

    path = directory / "tokenizer_config.json"
    config: dict[str, object] = {}
    if path.is_file():
        try:
            config = json.loads(path.read_text(encoding="utf-8"))
        except ValueError as exc:
            raise CheckpointError(f"{path}: not JSON ({exc})") from None
    template = config.get("chat_template")
    if isinstance(template, list):  # named templates: [{"name": "default", "template": "..."}, ...]
        named = {item.get("name"): item.get("template") for item in template if isinstance(item, dict)}
        template = named.get("default")
    if not isinstance(template, str) and (directory / "chat_template.jinja").is_file():
        template = (directory / "chat_template.jinja").read_text(encoding="utf-8")
    if not isinstance(template, str) or not template.strip():
        return None

    def token(name: str) -> str:
        value = config.get(name)
        value = value.get("content") if isinstance(value, dict) else value  # an AddedToken written out
        return value if isinstance(value, str) else ""

    return {"template": template, "bos_token": token("bos_token"), "eos_token": token("eos_token")}


def read_hf_lm(directory: Path, hf: dict[str, Any]) -> tuple[Any, Any]:
    """The dotformer model (eval mode) and :class:`~dotformer.imports.decoder.LMVocabulary` of a decoder-only
    family's directory.

    Raises:
        as :func:`import_hf`.
    """

    family = families()[model_type(hf, directory / "config.json")]
    config = family.config(hf, str(directory / "config.json"))
    vocabulary = lm_vocabulary(
        read_tokenizer_json(directory),
        config.tgt_vocab_size - NUM_SPECIAL,
        directory,
        hf,
        family.adds_bos,
        str(directory / "tokenizer.json"),
    )
    source = TensorSource(read_safetensors(directory), directory, prefixes=family.prefixes)
    return read_lm(config, family.names(config), source, vocabulary, family.ignore), vocabulary
