"""A checkpoint's tokenizer as Hugging Face files: ``tokenizer.json``, ``tokenizer_config.json`` (and the ids that the
model's ``config.json`` and ``generation_config.json`` name), so that ``AutoTokenizer.from_pretrained`` reads the
exported directory and turns text into the ids the exported model reads.

Two kinds of vocabulary, told apart by the tokenizer's ids (:class:`HFVocabulary`):

* **dotformer's own** (``char``, ``symbol``, ``bpe``, or a tokenizer.json whose first four tokens are
  ``<pad> <s> </s> <unk>``): the exported ids are dotformer's, every embedding row is kept. ``char`` and ``symbol``
  become a ``WordLevel`` model (one piece per character, with a decoder that joins them; one per whitespace-separated
  symbol), ``bpe`` its own byte-level BPE file. A language model reads a text as dotformer does, a line end first
  (:func:`dotformer.decoding.inputs.encode_prompt`): the tokenizer's post-processor puts ``</s>`` in front, and
  ``</s>`` is both the BOS and the EOS token, as GPT-2's ``<|endoftext|>`` is. An encoder reads ``<s> ids </s>``
  (BERT's ``[CLS] ids [SEP]``). dotformer never generates PAD or BOS: ``generation_config.json`` suppresses them.
* **a released model's** (an imported model: its tokenizer.json's ids shifted by four, rows 0..3 copies of its own
  pad, BOS, EOS and unknown rows, see :mod:`dotformer.imports`): the four copied rows are dropped, and the file's
  own tokenizer.json, ids and text rules (``add_bos``, the EOS ids of the checkpoint's ``"text_rules"``) are written
  back; dotformer's BOS and PAD are found again as the released rows they copy.

A sentencepiece tokenizer has no tokenizer.json and is refused (one line).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch
from torch import Tensor

from dotformer.data.tokenize.tokenizers import BOS_ID, EOS_ID, NUM_SPECIAL, PAD_ID, SPECIAL_TOKENS, UNK_ID, Tokenizer
from dotformer.errors import ConfigError

TOKENIZER_FILE = "tokenizer.json"
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"
Reader = Literal["continuation", "encoder"]  # how the model reads a text: a line end first, or [BOS] ids [EOS]


@dataclass(frozen=True)
class HFVocabulary:
    """The exported vocabulary: the tokenizer.json, which embedding rows it names, and the special ids (HF's ids).

    Attributes:
        tokenizer_json: the tokenizer.json's contents.
        first_row: 0 (dotformer's ids: every row exported) or 4 (a released vocabulary: HF id i is row i + 4).
        size: V, the rows exported.
        bos, eos, pad, unk: HF ids of the special tokens (``eos`` one or more; None: the model has none).
        add_bos: the tokenizer puts BOS in front of every text (``bos`` is then what it puts).
        suppress: HF ids ``generate`` must never produce (dotformer's PAD and BOS of its own vocabularies).
        mask: HF id of the masked language model's mask token, or None.
    """

    tokenizer_json: dict[str, Any]
    first_row: int
    size: int
    bos: int | None
    eos: tuple[int, ...]
    pad: int | None
    unk: int | None
    add_bos: bool
    suppress: tuple[int, ...] = ()
    mask: int | None = None

    def rows(self, table: Tensor) -> Tensor:
        """The exported rows of a (V_dotformer, ...) table: (V, ...)."""
        return table[self.first_row :]

    def token(self, index: int | None) -> str | None:
        """The string of HF id ``index`` (None for None)."""
        if index is None:
            return None
        model = self.tokenizer_json.get("model", {})
        added = {entry["id"]: entry["content"] for entry in self.tokenizer_json.get("added_tokens", [])}
        if index in added:
            return str(added[index])
        vocab = model.get("vocab", {})
        pieces = {i: piece for piece, i in vocab.items()} if isinstance(vocab, dict) else {}
        if index not in pieces:
            raise ConfigError(f"the tokenizer has no token of id {index}")
        return str(pieces[index])

    def tokenizer_config(self, max_len: int) -> dict[str, Any]:
        """The contents of ``tokenizer_config.json``: the fast tokenizer class and the special tokens by string."""
        config: dict[str, Any] = {
            "tokenizer_class": "PreTrainedTokenizerFast",
            "model_max_length": max_len,
            "clean_up_tokenization_spaces": False,
        }
        eos = self.eos[0] if self.eos else None
        for name, index in (("bos", self.bos), ("eos", eos), ("pad", self.pad), ("unk", self.unk)):
            if index is not None:
                config[f"{name}_token"] = self.token(index)
        if self.mask is not None:
            config["mask_token"] = self.token(self.mask)
        return config

    def write(self, directory: Path, max_len: int) -> None:
        """``tokenizer.json`` and ``tokenizer_config.json`` into ``directory``."""
        (directory / TOKENIZER_FILE).write_text(json.dumps(self.tokenizer_json, ensure_ascii=False), encoding="utf-8")
        config = json.dumps(self.tokenizer_config(max_len), indent=2, ensure_ascii=False)
        (directory / TOKENIZER_CONFIG_FILE).write_text(config + "\n", encoding="utf-8")


def hf_vocabulary(tokenizer: Tokenizer, table: Tensor, reader: Reader, info: dict[str, Any]) -> HFVocabulary:
    """The :class:`HFVocabulary` of a checkpoint's tokenizer and its model's token table.

    Args:
        tokenizer: the checkpoint's (target, or an encoder's source) tokenizer.
        table: (V_dotformer, D) the model's token embedding, to find the rows a released vocabulary's specials copy.
        reader: ``"continuation"`` (a language model's text: a line end first) or ``"encoder"`` (``[BOS] ids [EOS]``).
        info: the checkpoint's config.json (a released vocabulary's ``"text_rules"``).

    Raises:
        ConfigError: a sentencepiece tokenizer, a tokenizer whose size is not the table's, or a released vocabulary
            without its EOS ids.
    """
    if tokenizer.vocab_size != table.size(0):
        raise ConfigError(f"the tokenizer has {tokenizer.vocab_size} ids, the model's embedding {table.size(0)} rows")
    data = tokenizer.to_dict()
    if data["kind"] == "sentencepiece":
        raise ConfigError(
            "the checkpoint's tokenizer is a sentencepiece model, which has no tokenizer.json: export to ct2 or onnx"
        )
    if data["kind"] == "hf" and getattr(tokenizer, "offset", 0) == NUM_SPECIAL:
        mask = tokenizer.mask_id
        return _released(data["hf_tokenizer"], table, reader, info, None if mask is None else mask - NUM_SPECIAL)
    own = data["hf_tokenizer"] if data["kind"] in ("bpe", "hf") else _word_level(data["vocab"], data["kind"])
    tokenizer_json = {**own, "post_processor": _template(reader), "padding": None, "truncation": None}
    added = {entry["id"] for entry in tokenizer_json.get("added_tokens", [])}
    missing = [
        {"id": i, "content": token, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
         "special": True}
        for i, token in enumerate(SPECIAL_TOKENS) if i not in added
    ]  # fmt: skip
    tokenizer_json["added_tokens"] = sorted([*tokenizer_json.get("added_tokens", []), *missing], key=lambda e: e["id"])
    bos = EOS_ID if reader == "continuation" else BOS_ID  # what the tokenizer puts in front of a text
    return HFVocabulary(
        tokenizer_json=tokenizer_json,
        first_row=0,
        size=table.size(0),
        bos=bos,
        eos=(EOS_ID,),
        pad=PAD_ID,
        unk=UNK_ID,
        add_bos=True,
        suppress=(PAD_ID, BOS_ID),
        mask=tokenizer.mask_id,
    )


def _template(reader: Reader) -> dict[str, Any]:
    """The post-processor: ``</s> $A`` (a language model's line start), or ``<s> $A </s>`` (an encoder's text)."""
    bos, eos = SPECIAL_TOKENS[BOS_ID], SPECIAL_TOKENS[EOS_ID]
    if reader == "continuation":
        single = [{"SpecialToken": {"id": eos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}]
        pair = [*single, {"SpecialToken": {"id": eos, "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 0}}]
    else:
        single = [
            {"SpecialToken": {"id": bos, "type_id": 0}},
            {"Sequence": {"id": "A", "type_id": 0}},
            {"SpecialToken": {"id": eos, "type_id": 0}},
        ]
        pair = [*single, {"Sequence": {"id": "B", "type_id": 0}}, {"SpecialToken": {"id": eos, "type_id": 0}}]
    specials = {token: {"id": token, "ids": [SPECIAL_TOKENS.index(token)], "tokens": [token]} for token in {bos, eos}}
    return {"type": "TemplateProcessing", "single": single, "pair": pair, "special_tokens": specials}


def _word_level(vocab: list[str], kind: str) -> dict[str, Any]:
    """A ``char`` or ``symbol`` vocabulary as a tokenizer.json: ``WordLevel`` over dotformer's ids, split into single
    characters (joined back by a ``Fuse`` decoder) or at whitespace (joined back with spaces)."""
    if kind == "char":
        pre_tokenizer = {
            "type": "Split", "pattern": {"Regex": r"[\s\S]"}, "behavior": "Isolated", "invert": False,
        }  # fmt: skip
        decoder: dict[str, Any] | None = {"type": "Fuse"}
    else:
        pre_tokenizer, decoder = {"type": "WhitespaceSplit"}, None
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [],
        "normalizer": None,
        "pre_tokenizer": pre_tokenizer,
        "post_processor": None,
        "decoder": decoder,
        "model": {"type": "WordLevel", "vocab": {token: i for i, token in enumerate(vocab)}, "unk_token": "<unk>"},
    }


def released_row(table: Tensor, row: int) -> int | None:
    """The HF id (``j - 4``) of the first row ``j >= 4`` of ``table`` equal to its row ``row`` (a copied special's
    original), or None when none is."""
    equal = (table[NUM_SPECIAL:] == table[row]).all(dim=-1).nonzero()  # (n, 1)
    return int(equal[0, 0]) if equal.numel() else None


def _released(
    tokenizer_json: dict[str, Any], table: Tensor, reader: Reader, info: dict[str, Any], mask: int | None
) -> HFVocabulary:
    """A released vocabulary (ids shifted by four in dotformer): rows 0..3 dropped, its own ids and text rules."""
    rules = info.get("text_rules") or {}
    eos = tuple(int(i) - NUM_SPECIAL for i in rules.get("eos_ids", ()) if int(i) >= NUM_SPECIAL)
    if reader == "continuation" and not eos:
        raise ConfigError("the checkpoint's released vocabulary has no EOS ids (its config.json 'text_rules')")
    with torch.no_grad():
        bos, pad, unk = (released_row(table, row) for row in (BOS_ID, PAD_ID, UNK_ID))
        if not eos:  # an encoder (BERT): [SEP] is the row dotformer's EOS copies
            sep = released_row(table, EOS_ID)
            eos = (sep,) if sep is not None else ()
    return HFVocabulary(
        tokenizer_json=tokenizer_json,
        first_row=NUM_SPECIAL,
        size=table.size(0) - NUM_SPECIAL,
        bos=bos,
        eos=eos,
        pad=pad,
        unk=unk,
        add_bos=bool(rules.get("add_bos", reader == "encoder")),
        mask=mask,
    )
