"""The encoder's tasks: a masked language model (``mlm``), classification (``classify``) and tagging (``tag``).

The lesson's encoder alone (``arch = "encoder-only"``) reads whole texts as BERT does, ``[BOS] ids [EOS]``, and a
head says what it was trained for (:mod:`dotformer.heads`, :mod:`dotformer.training.objective`):

=========  =========================================  ======================  ===============  ======================
task       data                                       head                    objective        ``dotformer evaluate``
=========  =========================================  ======================  ===============  ======================
mlm        text: a file, or the Bible (``bible``)     the generator, tied to  masked-token     masked-token accuracy,
           in lines or blocks of ``block_size``       the embedding                            perplexity
classify   TEXT<TAB>LABEL lines, or the Bible's       a pooled classifier     sequence-label   accuracy, macro-F1
           verses labelled by the genre of their      (``pooling``: cls or
           book (``bible``)                           mean)
tag        WORDS<TAB>LABELS lines or CoNLL columns:   a per-token classifier  token-label      word accuracy,
           a label per word, on its first token                                                macro-F1
=========  =========================================  ======================  ===============  ======================

The data is prepared once (:func:`dotformer.data.prepared.cache.prepared_for`) and the run refers to it
(:mod:`dotformer.runs.run_data`), as every task's: a masked language model's text as a language model's
(:mod:`dotformer.data.prepared.text_kind`: given valid/test files, or whole books of the Bible / pieces of a
file held out, seeded; its tokenizer learned with ``<mask>``), a classifier's or a tagger's texts as the ``labelled``
kind (:mod:`dotformer.data.prepared.labelled_kind`: split by the same dealing, each text of a file on its own, a Bible
verse with its book; each text's ids with its label id, or a label per token). One tokenizer is learned on a sample
of the training text (byte-level BPE by default) or read from a file. A classifier or tagger starts afresh, or from
an encoder's weights with ``--init-from CKPT`` (a ``--task mlm`` run's, or an imported BERT: ``dotformer import
--from bert``): its tokenizer (given to the preparation, so its hash is in the fingerprint) and encoder, a fresh head
(:func:`dotformer.runs.finetune.read_encoder_init`). The labels are the training split's, sorted; the prepared data's
report and every checkpoint record them (``config.json["labels"]``). What batching decides is no part of the
prepared data (:mod:`dotformer.data.labelled`): the block size, a masked language model's unit and its masking,
drawn per (seed, epoch, example), so a resumed run masks exactly as an unbroken one.

In the run directory, ``RUN/data`` holds the reference to the prepared data (data.json), the held-out text
(valid.txt and test.txt of a masked language model; valid.tsv and test.tsv of labelled texts, in the form the
readers read: what ``evaluate --split`` scores), and the one tokenizer as tokenizer_src.json and tokenizer_tgt.json.
"""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dotformer.config import PRESETS, ModelConfig
from dotformer.data.config import DEFAULT_ENCODER_BLOCK, EncoderDataConfig
from dotformer.data.prepared.labelled_kind import PreparedLabelled
from dotformer.data.prepared.text_kind import PreparedText
from dotformer.errors import ConfigError, DataError
from dotformer.runs.pairs import record_data_config
from dotformer.runs.task import EvalReport, EvalRequest, Loaded, Prepared, Task, run_split_file

if TYPE_CHECKING:
    from dotformer.checkpoint import LoadedCheckpoint
    from dotformer.data.labelled import LabelledExamples
    from dotformer.data.labelled_text import LabelledTexts
    from dotformer.decoding.engine import TranslationEngine
    from dotformer.runs.config_files import ConfigSections
    from dotformer.runs.finetune import InitSource

HEADS = {"mlm": "generator", "classify": "sequence", "tag": "token"}
OBJECTIVES = {"mlm": "masked-token", "classify": "sequence-label", "tag": "token-label"}
RECIPES = {"mlm": "mlm-bible", "classify": "classify-bible", "tag": "classify-bible"}  # shipped [model], [train]
TITLES = {"mlm": "a masked language model", "classify": "a classifier", "tag": "a tagger"}
ANY_VOCAB_SIZE = 1 << 20  # the vocabulary size of the model config checked before the text is read


class EncoderTask(Task):
    """An encoder-only model trained for ``name``: "mlm", "classify" or "tag" (module docstring)."""

    fine_tunable = True
    decodes = False

    def __init__(self, name: str) -> None:
        self.name = name
        self.title = TITLES[name]
        self.head = HEADS[name]

    def data_config(self, section: dict[str, Any], source: str) -> EncoderDataConfig:
        return EncoderDataConfig.from_section({**section, "task": self.name}, source)

    def defaults(self, fine_tuning: bool = False) -> ConfigSections:
        from dotformer.runs.config_files import recipe_defaults

        return recipe_defaults(RECIPES[self.name], fine_tuning)

    def default_run_dir(self, data: EncoderDataConfig, model_section: dict[str, Any]) -> Path:
        return Path("runs") / f"{Path(data.dataset.replace(':', '-')).stem}-{self.name}"

    def check_model(self, model_section: dict[str, Any], data: EncoderDataConfig) -> None:
        labels = 0 if self.head == "generator" else 2  # the count is the data's; any two check the fields
        block = data.block_size or DEFAULT_ENCODER_BLOCK
        encoder_model_config(model_section, ANY_VOCAB_SIZE, block, self.head, labels)

    def read_init(self, path: str | Path, model_section: dict[str, Any], data_section: dict[str, Any]) -> InitSource:
        from dotformer.runs.finetune import read_encoder_init

        return read_encoder_init(path, model_section, data_section)

    def prepare(
        self,
        data: EncoderDataConfig,
        seed: int,
        init: InitSource | None,
        extend_vocab: bool,
        progress: bool,
        source: Any = None,
    ) -> tuple[Prepared, InitSource | None]:
        from dotformer.data.prepared.cache import prepared_for
        from dotformer.data.tokenizer_files import TokenizerPair

        if extend_vocab:
            raise ConfigError("--extend-vocab grows the char/symbol vocabularies of pairs; an encoder keeps its own")
        if data.block_size is None:  # the checkpoint's positions, or the default
            block = init.model_config.max_len if init is not None else DEFAULT_ENCODER_BLOCK
            data = dataclasses.replace(data, block_size=block)
        given = None
        if init is not None:  # the checkpoint's tokenizer, given to the preparation (its hash is in the fingerprint)
            given = init.src_tokenizer
            if self.name == "mlm" and given.mask_id is None:
                raise DataError(
                    f"{init.path}: the vocabulary has no mask token (<mask> or [MASK]) for a masked language model"
                )
            data = data_with_tokenizer_of(data, init)
        prepared = source or prepared_for(data, seed, tokenizers=given)
        corpus = {"name": prepared.report["corpus"]["name"], "report": prepared.report["corpus"]["report"]}
        tokenizers = TokenizerPair(prepared.tokenizer, prepared.tokenizer)
        return Prepared(data, corpus, tokenizers, prepared.lines, prepared, given is not None), init

    def save(self, prepared: Prepared, data_dir: Path) -> None:
        from dotformer.runs.run_data import save_reference

        save_reference(prepared.splits, data_dir, prepared.given_tokenizers)

    def model_config(
        self, model_section: dict[str, Any], prepared: Prepared, init: InitSource | None = None
    ) -> tuple[ModelConfig, str | None]:
        labels = 0 if self.name == "mlm" else len(prepared.splits.labels)
        if init is not None:
            config = init.model_config
            if prepared.data.block_size > config.max_len:
                raise ConfigError(
                    f"block_size {prepared.data.block_size} exceeds the {config.max_len} positions of --init-from "
                    f"{init.path}"
                )
            pooling = model_section.get("pooling", config.pooling)
            return config.replace(head=self.head, num_labels=labels, pooling=pooling), init.preset
        vocab = prepared.tokenizers.tgt.vocab_size
        return encoder_model_config(model_section, vocab, prepared.data.block_size, self.head, labels)

    def load(self, run_dir: Path, record: dict[str, Any]) -> Loaded:
        from dotformer.data.labelled import Masking, labelled_examples, masked_examples
        from dotformer.runs.run_data import open_run_data
        from dotformer.training.objective import OBJECTIVES as OBJECTIVE_OF
        from dotformer.training.state import TrainData

        data = record_data_config(self, record, run_dir)
        prepared = open_run_data(run_dir, data)
        tokenizer = prepared.tokenizer  # type: ignore[union-attr]
        names: list[str] = []
        if self.name == "mlm":
            assert isinstance(prepared, PreparedText) and tokenizer.mask_id is not None
            masking = Masking(tokenizer.mask_id, tokenizer.vocab_size, data.mask_probability)
            train = masked_examples(prepared.splits["train"], data.block_size, masking, data.mlm_unit)
            valid = masked_examples(prepared.splits["valid"], data.block_size, masking, data.mlm_unit)
        else:
            assert isinstance(prepared, PreparedLabelled)
            names = prepared.labels
            train = labelled_examples(prepared.splits["train"], data.block_size)
            valid = labelled_examples(prepared.splits["valid"], data.block_size)
        if not len(train):
            raise DataError(f"{prepared.directory}: the training split holds no text to train on")
        train_data = TrainData(
            train=train, valid=valid, src_tokenizer=tokenizer, tgt_tokenizer=tokenizer,
            objective=OBJECTIVE_OF[OBJECTIVES[self.name]],
        )  # fmt: skip
        unknown = int(prepared.report["splits"]["train"].get("unknown", 0))
        line = describe_examples(train, valid, data, names, unknown)
        return Loaded(data, train_data, [line], {"labels": names} if names else {})

    def evaluate(self, engine: TranslationEngine, request: EvalRequest) -> EvalReport:
        """mlm: masked-token accuracy and perplexity of held-out text (masked with ``request.seed``; ``limit``: its
        first N lines); classify and tag: accuracy and macro-F1 of the labels the model gives held-out texts
        (``limit``: a seeded sample of N texts); ``engine`` is the torch engine (its loaded checkpoint's model).

        Raises:
            ConfigError: a ``limit`` below 1. CheckpointError: no run directory and no ``data``. DataError /
                MissingDataError: an unreadable or empty file, labels the model does not know.
        """
        if request.limit is not None and request.limit < 1:
            raise ConfigError(f"--limit must be a positive number, got {request.limit}")
        loaded: Any = engine.checkpoint  # an encoder: the torch engine's loaded checkpoint
        if self.name == "mlm":
            return evaluate_masked(loaded, request)
        return evaluate_labels(loaded, request, self.name)


# -- the model ---------------------------------------------------------------------------------------------------------


def encoder_model_config(
    model_section: dict[str, Any], vocab_size: int, block_size: int, head: str, num_labels: int
) -> tuple[ModelConfig, str]:
    """The encoder-only ModelConfig: the preset (default "small") + the section's fields, no decoder, ``max_len`` =
    the block size unless set, the task's head.

    Raises:
        ConfigError: an unknown preset, an ``arch`` other than encoder-only, a ``head`` or ``num_labels`` set by
            hand, a ``max_len`` below the block size, or an invalid field.
    """
    section = dict(model_section)
    preset = section.pop("preset", None) or "small"
    if preset not in PRESETS:
        raise ConfigError(f"unknown model preset {preset!r}; choose one of {', '.join(PRESETS)}")
    if section.setdefault("arch", "encoder-only") != "encoder-only":
        raise ConfigError(f"an encoder task's model is encoder-only; [model] arch = {section['arch']!r}")
    for key in ("head", "num_labels"):
        if key in section:
            raise ConfigError(f"[model] {key} is the task's (mlm: the generator; classify, tag: the training labels)")
    if section.setdefault("max_len", block_size) < block_size:
        raise ConfigError(f"[model] max_len = {section['max_len']} is shorter than the block size {block_size}")
    section.update(num_decoder_layers=0, head=head, num_labels=num_labels)
    config = ModelConfig.preset(preset, src_vocab_size=vocab_size, tgt_vocab_size=vocab_size, **section)
    return config, preset


def data_with_tokenizer_of(data: EncoderDataConfig, init: InitSource) -> EncoderDataConfig:
    """``data`` saying where its tokenizer came from: the ``--init-from`` checkpoint's file."""
    from dotformer.checkpoint import SRC_TOKENIZER_FILE

    return dataclasses.replace(data, tokenizer_file=str(init.path / SRC_TOKENIZER_FILE), vocab_size=None)


# -- the data ----------------------------------------------------------------------------------------------------------


def describe_examples(
    train: LabelledExamples, valid: LabelledExamples, data: EncoderDataConfig, names: list[str], unknown: int
) -> str:
    """The data line before training: texts, examples, what was cut, unknown tokens, labels."""
    from dotformer.training.progress import count

    unit = {"mlm": "lines", "classify": "texts", "tag": "sentences"}[data.task]
    text = (
        f"{train.num_texts:,} train / {valid.num_texts:,} valid {unit} "
        f"({len(train):,} / {len(valid):,} examples of at most {data.block_size} tokens)"
    )
    if names:
        text += f"; {count(len(names), 'label')}: {', '.join(names[:12])}{', ...' if len(names) > 12 else ''}"
    cut = train.cut + valid.cut
    if cut:
        what = "cut into pieces" if data.task == "mlm" else "cut short"
        text += f"; {count(cut, 'text')} longer than {data.block_size} tokens {what}"
    if unknown:
        text += f"; {unknown:,} training tokens read as <unk>"
    return text


# -- evaluation --------------------------------------------------------------------------------------------------------


def held_out_lines(loaded: LoadedCheckpoint, request: EvalRequest) -> tuple[list[str], str]:
    """The lines a masked language model is scored on, and where they come from."""
    from dotformer.data.text import read_text_corpus
    from dotformer.runs.text import load_text_split

    if request.data is not None:
        return read_text_corpus(request.data).lines, request.data
    path = run_split_file(loaded.path, f"{request.split}.txt")
    return load_text_split(path.parent, request.split), str(path)


def evaluate_masked(loaded: LoadedCheckpoint, request: EvalRequest) -> EvalReport:
    """Masked-token accuracy and perplexity (:func:`dotformer.metrics.labels.masked_token_score`): the lines encoded
    as prepared text is, and cut into examples and masked as the run's were (its unit; ``request.seed``)."""
    from dotformer.data.labelled import LabelledSampler, Masking, encode_texts, masked_examples
    from dotformer.metrics.labels import masked_token_score
    from dotformer.training.progress import count

    if loaded.model.config.head != "generator":
        raise ConfigError(f"{loaded.path} has a {loaded.model.config.head} head, not a masked language model's")
    lines, where = held_out_lines(loaded, request)
    lines = [line for line in lines if line.strip()]
    if not lines:
        raise DataError(f"{where} holds no text to score")
    shown = count(len(lines), "line")
    if request.limit is not None:
        shown = f"the first {min(request.limit, len(lines)):,} of {shown}"
        lines = lines[: request.limit]
    data = EncoderDataConfig.from_section(
        {k: v for k, v in (loaded.info.get("data") or {}).items() if k in _MASKING_FIELDS}, "the checkpoint's data"
    )
    positions = loaded.model.config.max_len
    block = min(data.block_size or positions, positions)
    tokenizer = loaded.tgt_tokenizer
    if tokenizer.mask_id is None:
        raise DataError(f"{loaded.path}: the vocabulary has no mask token (<mask> or [MASK]) to score masked tokens")
    masking = Masking(tokenizer.mask_id, tokenizer.vocab_size, data.mask_probability)
    examples = masked_examples(encode_texts(lines, tokenizer, eos=True), block, masking, data.mlm_unit)
    sampler = LabelledSampler(examples, max(block, request.batch_size * block), request.seed, shuffle=False)
    score = masked_token_score(loaded.model, sampler.batches(0))
    description = (
        f"({shown}, {score.masked:,} masked tokens, masking seed {request.seed}), task mlm, "
        f"{data.mlm_unit} of at most {block} tokens"
    )
    table = f"masked-token accuracy {score.accuracy:.2f}%  perplexity {score.perplexity:.3f}"
    return EvalReport(where, description, table, payload=score.to_dict())


_MASKING_FIELDS = ("task", "block_size", "mlm_unit", "mask_probability")


def held_out_texts(loaded: LoadedCheckpoint, request: EvalRequest, task: str) -> tuple[LabelledTexts, str]:
    """The labelled texts a classifier or tagger is scored on (a seeded sample of ``limit`` of them), and where."""
    from dotformer.data.labelled_text import read_labelled, read_saved

    if request.data is not None:
        saved = loaded.info.get("data") if isinstance(loaded.info.get("data"), dict) else {}
        texts, where = read_labelled(request.data, task, saved.get("sword_path"), saved.get("tag_format")), request.data
    else:
        path = run_split_file(loaded.path, f"{request.split}.tsv")
        texts, where = read_saved(path, task), str(path)
    if not texts.texts:
        hint = " (the run was trained on given files without --test)" if request.split == "test" else ""
        raise DataError(f"{where} holds no labelled texts{hint}; pass --data FILE to evaluate a test file")
    if request.limit is not None and request.limit < len(texts.texts):
        chosen = sorted(random.Random(request.seed).sample(range(len(texts.texts)), request.limit))
        texts = texts.subset(chosen)
    return texts, where


def evaluate_labels(loaded: LoadedCheckpoint, request: EvalRequest, task: str) -> EvalReport:
    """Accuracy and macro-F1 of the labels the model gives (:mod:`dotformer.metrics.labels`)."""
    from dotformer.data.labelled_text import label_ids
    from dotformer.decoding.classify import check_classifier, checkpoint_labels, label_texts
    from dotformer.metrics.labels import classification_score, tagging_score
    from dotformer.training.progress import count

    head = check_classifier(loaded.model, loaded.path)
    if head != HEADS[task]:
        raise ConfigError(f"{loaded.path} has a {head} head, not {TITLES[task]}'s")
    names = checkpoint_labels(loaded)
    texts, where = held_out_texts(loaded, request, task)
    label_ids(texts, names, where)  # every label is one the model knows
    scores = label_texts(loaded.model, loaded.src_tokenizer, texts.texts, min(request.batch_size, 512))
    predicted = [[names[int(i)] for i in p.argmax(dim=-1).tolist()] if p.dim() == 2 else names[int(p.argmax())]
                 for p in scores.probabilities]  # fmt: skip
    if task == "classify":
        score = classification_score(texts.labels, predicted, names)
    else:
        score = tagging_score(texts.labels, predicted, names)
    sample = f", a random sample (seed {request.seed})" if request.limit is not None else ""
    noun = "text" if task == "classify" else "sentence"
    description = f"({count(len(texts.texts), noun)}{sample}), task {task}, {count(len(names), 'label')}"
    cut = f"{count(scores.cut, 'text')} longer than the model reads {'was' if scores.cut == 1 else 'were'} cut short"
    warnings = [cut] if scores.cut else []
    payload = {"metrics": score.to_dict(), "labels": names}
    return EvalReport(where, description, score.table(), warnings=warnings, payload=payload)


__all__ = ["EncoderTask", "encoder_model_config"]
