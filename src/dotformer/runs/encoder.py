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

The data is prepared once and the run refers to it, as every task's: a masked language model's text as a language
model's (:mod:`dotformer.data.prepared.text_kind`, its tokenizer learned with ``<mask>``), a classifier's or a
tagger's texts as the ``labelled`` kind (:mod:`dotformer.data.prepared.labelled_kind`); what batching decides is
applied by :mod:`dotformer.data.batch.labelled`. A task starts afresh, or from an encoder's weights with
``--init-from CKPT`` (a ``--task mlm`` run's, or an imported BERT): its tokenizer and encoder, a fresh head
(:func:`dotformer.runs.finetune.read_encoder_init`). The labels are the training split's, sorted; the prepared data's
report and every checkpoint record them (``config.json["labels"]``).

In the run directory, ``RUN/data`` holds the reference to the prepared data (data.json), the held-out text
(valid.txt and test.txt of a masked language model; valid.tsv and test.tsv of labelled texts, in the form the
readers read: what ``evaluate --split`` scores), and the one tokenizer as tokenizer_src.json and tokenizer_tgt.json.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import logging
import random
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from dotformer.checkpoint import SRC_TOKENIZER_FILE
from dotformer.config import ModelConfig
from dotformer.data.config import DEFAULT_ENCODER_BLOCK, EncoderDataConfig
from dotformer.data.prepared.cache import prepared_for
from dotformer.data.prepared.text_kind import PreparedText
from dotformer.data.read.labelled_reader import LabelledTexts, label_ids, read_labelled, read_saved
from dotformer.data.tokenize.tokenizer_files import TokenizerPair
from dotformer.data.tokenize.tokenizers import Tokenizer
from dotformer.data.tokenize.words import WordPieces
from dotformer.errors import ConfigError, DataError
from dotformer.runs.task import (
    ANY_VOCAB_SIZE,
    EvalReport,
    EvalRequest,
    Loaded,
    Prepared,
    Task,
    corpus_record,
    pop_preset,
    run_split_file,
)

if TYPE_CHECKING:
    from collections.abc import Mapping

    from dotformer.checkpoint import LoadedCheckpoint
    from dotformer.data.batch.labelled import LabelledExamples
    from dotformer.decoding.classify import LabelScores
    from dotformer.decoding.engine import TranslationEngine
    from dotformer.metrics.labels import LabelScore
    from dotformer.runs.finetune import InitSource

logger = logging.getLogger(__name__)  # "dotformer.runs.encoder": what the validation figures leave out

LONG_TEXT_BLOCKS = 4  # a training text longer than this many blocks is warned about (it is cut short to one)


class EncoderTask(Task):
    """What the encoder's tasks share: an encoder-only model with the task's head, data prepared as the task's kind,
    fine-tuned from an encoder's weights (module docstring); a subclass says what differs.

    Class attributes:
        head: the model's head ("generator", "sequence", "token").
        objective: the training objective's name (:data:`dotformer.training.objective.OBJECTIVES`).
        unit: what a text is called in messages ("line", "text", "sentence").
        cut: what becomes of a text longer than a block, in the data line.
    """

    fine_tunable = True
    decodes = False
    reads_pairs = False  # its --data is text, or labelled texts in the form of the checkpoint's data
    seeded = True  # --seed draws the sample of --limit texts, and a masked language model's masked positions
    head: ClassVar[str]
    objective: ClassVar[str]
    unit: ClassVar[str]
    cut: ClassVar[str] = "cut short"

    def data_config(self, section: dict[str, Any], source: str) -> EncoderDataConfig:
        return EncoderDataConfig.from_section({**section, "task": self.name}, source)

    def read_init(
        self,
        path: str | Path,
        model_section: dict[str, Any],
        data_section: dict[str, Any],
        origins: Mapping[str, str] | None = None,
    ) -> InitSource:
        """An encoder's checkpoint: its tokenizer and encoder (:func:`~dotformer.runs.finetune.read_encoder_init`)."""
        from dotformer.runs.finetune import read_encoder_init

        return read_encoder_init(path, model_section, data_section, origins)

    def check_model(self, model_section: dict[str, Any], data: EncoderDataConfig) -> None:
        block = data.block_size or DEFAULT_ENCODER_BLOCK
        encoder_model_config(model_section, ANY_VOCAB_SIZE, block, self.head, self.num_labels(None))

    def prepare(
        self,
        data: EncoderDataConfig,
        seed: int,
        init: InitSource | None,
        extend_vocab: bool,
        progress: bool,
        source: Any = None,
    ) -> tuple[Prepared, InitSource | None]:

        if extend_vocab:
            raise ConfigError("--extend-vocab grows the char/symbol vocabularies of pairs; an encoder keeps its own")
        if data.block_size is None:  # the checkpoint's positions, or the default
            block = init.model_config.max_len if init is not None else DEFAULT_ENCODER_BLOCK
            data = dataclasses.replace(data, block_size=block)
        given = None
        if init is not None:  # the checkpoint's tokenizer, given to the preparation (its hash is in the fingerprint)
            given = init.src_tokenizer
            self.check_tokenizer(init)
            tokenizer_file = str(init.path / SRC_TOKENIZER_FILE)  # where its tokenizer came from
            data = dataclasses.replace(data, tokenizer_file=tokenizer_file, vocab_size=None)
        prepared = source or prepared_for(data, seed, tokenizers=given)
        tokenizers = TokenizerPair(prepared.tokenizer, prepared.tokenizer)
        warnings = [*prepared.warnings, *self.long_texts(prepared, data.block_size)]
        record = corpus_record(prepared)
        return Prepared(data, record, tokenizers, prepared.lines, prepared, given is not None, warnings), init

    def long_texts(self, prepared: Any, block: int) -> list[str]:
        """A warning when the longest training text is far longer than a block (over :data:`LONG_TEXT_BLOCKS`
        blocks): it is cut short, which is rarely meant (a file whose texts run together: a CoNLL file without the
        blank lines between its sentences)."""
        longest = int(prepared.splits["train"].text.lengths.max(initial=0)) + 2  # [BOS] and [EOS]
        if longest <= LONG_TEXT_BLOCKS * block:
            return []
        return [
            f"{prepared.report['corpus']['name']}: a training {self.unit} of {longest:,} tokens is over "
            f"{LONG_TEXT_BLOCKS} times the block size {block}, and is cut short: is every {self.unit} apart?"
        ]

    def check_tokenizer(self, init: InitSource) -> None:
        """Check the ``--init-from`` checkpoint's tokenizer for the task (nothing to check by default).

        Raises:
            DataError: a tokenizer the task cannot use.
        """

    def num_labels(self, prepared: Any) -> int:
        """The head's outputs: the prepared data's labels (any two before the data is read: they check the fields)."""
        return 2 if prepared is None else len(prepared.labels)

    def model_config(
        self, model_section: dict[str, Any], prepared: Prepared, init: InitSource | None = None
    ) -> tuple[ModelConfig, str | None]:
        labels = self.num_labels(prepared.splits)
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

    def examples(self, prepared: Any, data: EncoderDataConfig) -> tuple[LabelledExamples, LabelledExamples, list[str]]:
        """The training and validation examples of the prepared data, and the label names (none for no labels)."""
        from dotformer.data.batch.labelled import labelled_examples

        train = labelled_examples(prepared.splits["train"], data.block_size)
        return train, labelled_examples(prepared.splits["valid"], data.block_size), prepared.labels

    def load(self, run_dir: Path, record: dict[str, Any]) -> Loaded:
        from dotformer.runs.run_data import open_run_data
        from dotformer.training.objective import OBJECTIVES
        from dotformer.training.state import TrainData

        data = self.record_data(record, run_dir)
        prepared = open_run_data(run_dir, data)
        train, valid, names = self.examples(prepared, data)
        if not len(train):
            raise DataError(f"{prepared.directory}: the training split holds no text to train on")
        tokenizer = prepared.tokenizer  # type: ignore[union-attr]
        figures = self.valid_figures(run_dir, data, tokenizer, names, int(record["model"]["max_len"]))
        train_data = TrainData(
            train=train, valid=valid, src_tokenizer=tokenizer, tgt_tokenizer=tokenizer,
            objective=OBJECTIVES[self.objective], best_metrics=self.best_metrics, figures=figures,
        )  # fmt: skip
        unknown = int(prepared.report["splits"]["train"].get("unknown", 0))
        line = describe_examples(train, valid, data, names, unknown, self.unit, self.cut)
        return Loaded(data, train_data, [line], {"labels": names} if names else {})

    def valid_figures(
        self, run_dir: Path, data: EncoderDataConfig, tokenizer: Tokenizer, names: list[str], max_len: int
    ) -> LabelFigures | None:
        """The figures of each validation pass beside the loss: the accuracy and macro-F1 of the labels the model
        gives the run's validation texts (``RUN/data/valid.tsv``), as ``dotformer evaluate --split valid`` computes
        them (:class:`LabelFigures`). None without labels (a masked language model), without validation texts the
        model reads (:meth:`readable`), or without the packages that compute them (the ``eval`` extra: a warning
        says so; ``--best-metric accuracy`` or ``f1`` checks for them before the run starts).
        """

        if not names:
            return None
        texts = read_saved(run_dir / "data" / "valid.tsv", data.task)
        if not texts.texts:
            return None
        missing = [module for module in self.figure_packages(names) if importlib.util.find_spec(module) is None]
        if missing:
            logger.warning(
                f"validation shows only the loss: its accuracy and macro-F1 need {' and '.join(missing)} "
                f'(pip install "dotformer[eval]")'
            )
            return None
        readable = self.readable(texts, tokenizer, max_len)
        return LabelFigures(self, readable, names, tokenizer) if readable.texts else None

    def figure_packages(self, names: list[str]) -> list[str]:
        """The modules :meth:`label_score` needs for these labels."""
        return ["sklearn"]

    def readable(self, texts: LabelledTexts, tokenizer: Tokenizer, max_len: int) -> LabelledTexts:
        """The validation texts the figures are computed on: every one (a text longer than the model reads is cut
        there, as in evaluation)."""
        return texts

    def labels_given(
        self, model: Any, tokenizer: Tokenizer, texts: LabelledTexts, names: list[str], batch_size: int
    ) -> tuple[LabelScore, LabelScores]:
        """The score of the labels ``model`` gives ``texts`` (:meth:`label_score`), and their probabilities: what
        ``dotformer evaluate`` and each validation pass compute, one code path."""
        from dotformer.decoding.classify import label_texts

        scores = label_texts(model, tokenizer, texts.texts, min(batch_size, 512))
        predicted = [[names[int(i)] for i in p.argmax(dim=-1).tolist()] if p.dim() == 2 else names[int(p.argmax())]
                     for p in scores.probabilities]  # fmt: skip
        return self.label_score(texts.labels, predicted, names), scores

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
        return self.score(engine.checkpoint, request)  # an encoder: the torch engine's loaded checkpoint

    def score(self, loaded: Any, request: EvalRequest) -> EvalReport:
        """Accuracy and macro-F1 of the labels the model gives (:mod:`dotformer.metrics.labels`)."""
        from dotformer.decoding.classify import check_classifier, checkpoint_labels
        from dotformer.training.progress import count

        head = check_classifier(loaded.model, loaded.path)
        if head != self.head:
            raise ConfigError(f"{loaded.path} has a {head} head, not {self.title}'s")
        names = checkpoint_labels(loaded)
        texts, where = held_out_texts(loaded, request, self.name)
        label_ids(texts, names, where)  # every label is one the model knows
        score, scores = self.labels_given(loaded.model, loaded.src_tokenizer, texts, names, request.batch_size)
        sample = f", a random sample (seed {request.seed})" if request.limit is not None else ""
        description = f"({count(len(texts.texts), self.unit)}{sample}), task {self.name}, "
        description += count(len(names), "label")
        were = "was" if scores.cut == 1 else "were"
        warnings = [f"{count(scores.cut, 'text')} longer than the model reads {were} cut short"] if scores.cut else []
        payload = {"metrics": score.to_dict(), "labels": names}
        return EvalReport(where, description, score.table(), warnings=warnings, payload=payload)

    def label_score(self, gold: list[Any], predicted: list[Any], names: list[str]) -> LabelScore:
        """The score of the labels predicted against the gold ones (one label a text)."""
        from dotformer.metrics.labels import classification_score

        return classification_score(gold, predicted, names)


class MaskedLanguageModelTask(EncoderTask):
    """A masked language model (BERT's): running text, a token in 15% masked, the generator head predicts it."""

    name = "mlm"
    title = "a masked language model"
    head = "generator"
    objective = "masked-token"
    recipe = "mlm-bible"
    unit = "line"
    cut = "cut into pieces"

    def check_tokenizer(self, init: InitSource) -> None:
        if init.src_tokenizer.mask_id is None:
            raise DataError(
                f"{init.path}: the vocabulary has no mask token (<mask> or [MASK]) for a masked language model"
            )

    def num_labels(self, prepared: Any) -> int:
        return 0

    def long_texts(self, prepared: Any, block: int) -> list[str]:
        return []  # running text: a long line is cut into pieces, none lost

    def examples(
        self, prepared: PreparedText, data: EncoderDataConfig
    ) -> tuple[LabelledExamples, LabelledExamples, list[str]]:
        from dotformer.data.batch.labelled import Masking, masked_examples

        tokenizer = prepared.tokenizer
        assert tokenizer.mask_id is not None
        masking = Masking(tokenizer.mask_id, tokenizer.vocab_size, data.mask_probability)
        train = masked_examples(prepared.splits["train"], data.block_size, masking, data.mlm_unit)
        return train, masked_examples(prepared.splits["valid"], data.block_size, masking, data.mlm_unit), []

    def score(self, loaded: Any, request: EvalRequest) -> EvalReport:
        return evaluate_masked(loaded, request)


class ClassifyTask(EncoderTask):
    """A classifier: a label a text (TEXT<TAB>LABEL lines, or Bible verses by genre), from a pooled encoder."""

    name = "classify"
    title = "a classifier"
    head = "sequence"
    objective = "sequence-label"
    recipe = "classify-bible"
    unit = "text"
    best_metrics = ("loss", "accuracy", "f1")  # of the labels given the validation texts (LabelFigures)


class TagTask(EncoderTask):
    """A tagger: a label a word (WORDS<TAB>LABELS lines or CoNLL columns), on the word's first token."""

    name = "tag"
    title = "a tagger"
    head = "token"
    objective = "token-label"
    recipe = "classify-bible"
    unit = "sentence"
    best_metrics = ("loss", "accuracy", "f1")  # word accuracy and macro-F1 of the validation sentences

    def label_score(self, gold: list[Any], predicted: list[Any], names: list[str]) -> LabelScore:
        from dotformer.metrics.labels import tagging_score

        return tagging_score(gold, predicted, names)

    def figure_packages(self, names: list[str]) -> list[str]:
        from dotformer.metrics.labels import BIO

        bio = all(BIO.match(label) for label in names) and "O" in names
        return ["sklearn", "seqeval"] if bio else ["sklearn"]

    def readable(self, texts: LabelledTexts, tokenizer: Tokenizer, max_len: int) -> LabelledTexts:
        """The validation sentences the model reads whole (a longer one, cut in training, could not have a label
        for each of its words; evaluation refuses it): those are left out of the figures, and counted."""

        tokens = WordPieces(tokenizer).encode_sentences([text.split() for text in texts.texts]).ids.lengths
        kept = [i for i, n in enumerate(tokens.tolist()) if n + 2 <= max_len]  # + 2: BOS and EOS
        if len(kept) < len(texts.texts):
            left = len(texts.texts) - len(kept)
            logger.warning(
                f"{texts.name}: {left:,} of {len(texts.texts):,} validation sentences are longer than the model's "
                f"{max_len} tokens and are left out of the validation accuracy and macro-F1"
            )
        return texts.subset(kept)


class LabelFigures:
    """A classifier's or a tagger's figures of a validation pass (a :class:`~dotformer.training.best_metrics.
    ValidFigures`): the accuracy and macro-F1 (``"accuracy"``, ``"f1"``, percent) of the labels the model gives the
    validation texts, by :meth:`EncoderTask.labels_given`, the code of ``dotformer evaluate``: at a checkpoint they
    equal what ``dotformer evaluate --checkpoint CKPT --split valid`` prints.

    Args:
        task: the classifier's or tagger's task (its :meth:`~EncoderTask.label_score`).
        texts: the validation texts and their labels. names: the labels, one per output of the head.
        tokenizer: the model's.
    """

    names = ("accuracy", "f1")

    def __init__(self, task: EncoderTask, texts: LabelledTexts, names: list[str], tokenizer: Tokenizer) -> None:
        self.task, self.texts, self.labels, self.tokenizer = task, texts, names, tokenizer

    def __call__(self, model: Any) -> dict[str, float]:
        if not self.texts.texts:
            return {}
        was_training = model.training
        model.eval()
        try:
            score, _ = self.task.labels_given(model, self.tokenizer, self.texts, self.labels, EvalRequest().batch_size)
        finally:
            model.train(was_training)
        return {"accuracy": score.accuracy, "f1": score.macro_f1}


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
    preset = pop_preset(section)
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


# -- the data ----------------------------------------------------------------------------------------------------------


def describe_examples(
    train: LabelledExamples, valid: LabelledExamples, data: EncoderDataConfig, names: list[str], unknown: int,
    unit: str, what: str,
) -> str:  # fmt: skip
    """The data line before training: texts (each called ``unit``), examples, what was cut (``what`` became of them),
    unknown tokens, labels."""
    from dotformer.training.progress import count

    text = (
        f"{train.num_texts:,} train / {valid.num_texts:,} valid {unit}s "
        f"({len(train):,} / {len(valid):,} examples of at most {data.block_size} tokens)"
    )
    if names:
        text += f"; {count(len(names), 'label')}: {', '.join(names[:12])}{', ...' if len(names) > 12 else ''}"
    cut = train.cut + valid.cut
    if cut:
        text += f"; {count(cut, 'text')} longer than {data.block_size} tokens {what}"
    if unknown:
        text += f"; {unknown:,} training tokens read as <unk>"
    return text


# -- evaluation --------------------------------------------------------------------------------------------------------


def evaluate_masked(loaded: LoadedCheckpoint, request: EvalRequest) -> EvalReport:
    """Masked-token accuracy and perplexity (:func:`dotformer.metrics.labels.masked_token_score`): the lines encoded
    as prepared text is, and cut into examples and masked as the run's were (its unit; ``request.seed``)."""
    from dotformer.data.batch.labelled import LabelledSampler, Masking, encode_texts, masked_examples
    from dotformer.metrics.labels import masked_token_score
    from dotformer.runs.text import held_out_lines
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
    return EvalReport(where, description, table, payload={**score.to_dict(), "seed": request.seed})


_MASKING_FIELDS = ("task", "block_size", "mlm_unit", "mask_probability")


def held_out_texts(loaded: LoadedCheckpoint, request: EvalRequest, task: str) -> tuple[LabelledTexts, str]:
    """The labelled texts a classifier or tagger is scored on (a seeded sample of ``limit`` of them), and where; read
    in the form of the checkpoint's data (its data config's task, else ``task``)."""

    saved = loaded.info.get("data") if isinstance(loaded.info.get("data"), dict) else {}
    task = str(saved.get("task", task))
    if request.data is not None:
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


__all__ = [
    "ClassifyTask",
    "EncoderTask",
    "LabelFigures",
    "MaskedLanguageModelTask",
    "TagTask",
    "encoder_model_config",
]
