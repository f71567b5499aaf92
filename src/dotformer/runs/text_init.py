"""A language model fine-tuned from a checkpoint (``train --task lm --init-from CKPT``): the checkpoint's decoder-only
model and tokenizer, the user's text.

The run keeps the checkpoint's tokenizer (its embedding rows are what the weights learned) and its model config
(flags may change the dropout rates); its text is prepared with that tokenizer. Its blocks are those the checkpoint
trained on, or (an imported model, whose context may be thousands of tokens) the default block size within its
positions, unless ``--block-size`` sets them. A setting that would change the model or the tokenizer is refused in
one line naming both values. Any decoder-only checkpoint serves: a ``--task lm`` run's, an imported one's, an
adapted one's (its adapters merged).

An imported model (its config.json has ``"text_rules"``: :mod:`dotformer.imports`) reads its text as its released
tokenizer reads a document (``text_form = "document"``, BOS first where its family adds it:
:mod:`~dotformer.data.prepared.text_kind`), not as dotformer's stream of lines, so its first training loss is the loss
``evaluate --task lm`` reports on the same text; and the continued checkpoints keep what ``generate``, ``evaluate``
and ``export`` read of the base (:data:`CARRIED`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dotformer import checkpoint as ckpt
from dotformer.config import ModelConfig
from dotformer.data.config import DEFAULT_BLOCK_SIZE
from dotformer.errors import CheckpointError, ConfigError
from dotformer.runs.finetune import InitSource, asked, model_changes, saved_preset, tuned, where_asked

# the [data] names of a language model's tokenizer settings (one tokenizer: both sides' names are its own)
LM_KEYS = {"src_tokenizer": "tokenizer", "tgt_tokenizer": "tokenizer", "src_tokenizer_file": "tokenizer_file",
           "tgt_tokenizer_file": "tokenizer_file"}  # fmt: skip
# what a continued checkpoint keeps of its base's config.json: how its text becomes ids and back (prompts, scoring,
# export's tokenizer rules), its family and where it was imported from
CARRIED = ("text_rules", "family", "imported_from")


def read_text_init(
    path: str | Path,
    model_section: dict[str, Any],
    data_section: dict[str, Any],
    origins: Mapping[str, str] | None = None,
) -> InitSource:
    """Read the decoder-only checkpoint of ``--init-from`` for a language model (``origins``: where the fields asked
    for came from, for the messages: :func:`~dotformer.runs.finetune.where_asked`).

    Returns:
        :class:`~dotformer.runs.finetune.InitSource` whose ``data`` holds the [data] fields the run takes from the
        checkpoint: its tokenizer file, its block size unless the run sets one, and an imported model's text form;
        its ``carried`` the base's :data:`CARRIED` facts.

    Raises:
        CheckpointError: a missing or damaged checkpoint, one that is not decoder-only, a model field or tokenizer
            setting asked for that differs from the checkpoint's, or a block size beyond its positions.
    """
    path, info, config = ckpt.open_checkpoint(path)
    where = path / ckpt.CONFIG_FILE
    if config.arch != "decoder-only":
        raise CheckpointError(
            f"{path} is an {config.arch} model; --task lm --init-from needs a decoder-only checkpoint"
        )
    changes = model_changes(model_section, config, path, origins)
    saved_data = info.get("data") if isinstance(info.get("data"), dict) else {}
    for name in ("tokenizer", "vocab_size", "tokenizer_file", *LM_KEYS):
        key, value = LM_KEYS.get(name, name), data_section.get(name)
        if value is not None and (key == "tokenizer_file" or saved_data.get(key) not in (None, value)):
            raise CheckpointError(
                f"--init-from {path}: {asked(name, value, where_asked(origins, 'data', name))}; fine-tuning "
                "keeps the checkpoint's tokenizer "
                f"({path / ckpt.TGT_TOKENIZER_FILE})"
            )
    tokenizer = ckpt.load_tokenizer_file(path / ckpt.TGT_TOKENIZER_FILE)
    ckpt.check_vocabulary(config, tokenizer, tokenizer, path)
    trained = saved_data.get("block_size")  # the blocks it trained on; else (an import) the default, within max_len
    window = trained if isinstance(trained, int) and trained > 1 else min(config.max_len, DEFAULT_BLOCK_SIZE)
    data: dict[str, Any] = {"tokenizer_file": str(path.resolve() / ckpt.TGT_TOKENIZER_FILE), "vocab_size": None}
    if saved_data.get("tokenizer") in ("char", "bpe"):
        data["tokenizer"] = saved_data["tokenizer"]
    carried = {key: info[key] for key in CARRIED if key in info}
    if isinstance(info.get("text_rules"), dict):  # an imported model: its text read as its tokenizer reads a document
        data["text_form"] = "document"
        data["add_bos"] = bool(info["text_rules"].get("add_bos", False))
    block = data_section.get("block_size")
    if block is None:
        data["block_size"] = window
    elif isinstance(block, int) and block > config.max_len:
        raise CheckpointError(
            f"--init-from {path}: block_size {block} exceeds the {config.max_len} positions of the checkpoint ({where})"
        )
    return InitSource(path, tuned(config, changes, path), saved_preset(info), data, tokenizer, tokenizer, carried)


def text_init_model_config(init: InitSource, block_size: int) -> tuple[ModelConfig, str | None]:
    """The model config of a language model fine-tuned from ``init``: the checkpoint's.

    Raises:
        ConfigError: blocks longer than the checkpoint's positions.
    """
    if block_size > init.model_config.max_len:
        raise ConfigError(
            f"block_size {block_size} exceeds the {init.model_config.max_len} positions of --init-from {init.path}"
        )
    return init.model_config, init.preset
