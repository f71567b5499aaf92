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

The data is read and split as a language model's (:mod:`dotformer.runs.text`: given valid/test files, or whole
books of the Bible / pieces of a file held out, seeded); labelled texts are split by the same dealing, each text its
own group (a Bible verse: its book). One tokenizer is trained on the training text (byte-level BPE by default; a
masked language model's has ``<mask>``) or read from a file. A classifier or tagger starts afresh, or from an
encoder's weights with ``--init-from CKPT`` (a ``--task mlm`` run's, or an imported BERT: ``dotformer import --from
bert``): its tokenizer and encoder, a fresh head (:func:`dotformer.runs.finetune.read_encoder_init`). The labels are
the training split's, sorted; a checkpoint records them (``config.json["labels"]``).

In the run directory, ``RUN/data`` holds the splits (train/valid/test.txt of text; .tsv of labelled texts, in the
form the readers read), split.json, labels.json, and the one tokenizer as tokenizer_src.json and tokenizer_tgt.json.
"""

from __future__ import annotations

import dataclasses
import json
import random
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dotformer.config import PRESETS, ModelConfig
from dotformer.data.config import DEFAULT_ENCODER_BLOCK, EncoderDataConfig
from dotformer.errors import CheckpointError, ConfigError, DataError
from dotformer.runs.pairs import record_data_config
from dotformer.runs.task import EvalReport, EvalRequest, Loaded, Prepared, Task, run_split_file

if TYPE_CHECKING:
    from dotformer.checkpoint import LoadedCheckpoint
    from dotformer.data.labelled import Encoded
    from dotformer.data.labelled_text import LabelledTexts
    from dotformer.data.text import TextSplits
    from dotformer.data.tokenizers import Tokenizer
    from dotformer.decoding.engine import TranslationEngine
    from dotformer.runs.config_files import ConfigSections
    from dotformer.runs.finetune import InitSource

HEADS = {"mlm": "generator", "classify": "sequence", "tag": "token"}
OBJECTIVES = {"mlm": "masked-token", "classify": "sequence-label", "tag": "token-label"}
RECIPES = {"mlm": "mlm-bible", "classify": "classify-bible", "tag": "classify-bible"}  # shipped [model], [train]
TITLES = {"mlm": "a masked language model", "classify": "a classifier", "tag": "a tagger"}
SPLIT_NAMES = ("train", "valid", "test")
LABELS_FILE = "labels.json"
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
        from dotformer.data.tokenizer_files import TokenizerPair

        if source is not None:
            raise ConfigError(
                f"{source.directory} is prepared data of {source.task}; a {self.name} run reads its files"
            )
        if extend_vocab:
            raise ConfigError("--extend-vocab grows the char/symbol vocabularies of pairs; an encoder keeps its own")
        if self.name == "mlm":
            splits, corpus = make_lm_splits(data, seed)
            train_texts = splits.train
        else:
            splits, corpus = labelled_splits(data, seed, self.name)
            train_texts = splits["train"].texts
        if data.block_size is None:  # the checkpoint's positions, or the default
            block = init.model_config.max_len if init is not None else DEFAULT_ENCODER_BLOCK
            data = dataclasses.replace(data, block_size=block)
        if init is not None:
            tokenizer = init.src_tokenizer
            data = data_with_tokenizer_of(data, init)
        else:
            tokenizer = make_lm_tokenizer(data, train_texts, mask=self.name == "mlm")
        if self.name == "mlm" and tokenizer.mask_id is None:
            raise DataError(
                f"{data.tokenizer_file or (init.path if init else 'the tokenizer')}: the vocabulary has no mask token "
                f"(<mask> or [MASK]) for a masked language model"
            )
        return Prepared(data, corpus, TokenizerPair(tokenizer, tokenizer), [], splits), init

    def save(self, prepared: Prepared, data_dir: Path) -> None:
        from dotformer.checkpoint import SRC_TOKENIZER_FILE, TGT_TOKENIZER_FILE

        if self.name == "mlm":
            save_text_splits(prepared.splits, data_dir)
        else:
            save_labelled_splits(prepared.splits, data_dir)
        for name in (SRC_TOKENIZER_FILE, TGT_TOKENIZER_FILE):
            prepared.tokenizers.tgt.save(data_dir / name)

    def model_config(
        self, model_section: dict[str, Any], prepared: Prepared, init: InitSource | None = None
    ) -> tuple[ModelConfig, str | None]:
        labels = 0 if self.name == "mlm" else len(prepared.splits["labels"])
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
        from dotformer.checkpoint import TGT_TOKENIZER_FILE
        from dotformer.data.tokenizer_files import load_tokenizer
        from dotformer.training.objective import OBJECTIVES as OBJECTIVE_OF
        from dotformer.training.state import TrainData

        data_dir = run_dir / "data"
        data = record_data_config(self, record, run_dir)
        tokenizer = load_tokenizer(data_dir / TGT_TOKENIZER_FILE)
        names: list[str] = []
        if self.name == "mlm":
            from dotformer.runs.text import load_text_split

            train = encode_masked(load_text_split(data_dir, "train"), tokenizer, data)
            valid = encode_masked(load_text_split(data_dir, "valid"), tokenizer, data)
        else:
            names = read_labels(data_dir)
            train = encode_labelled(read_split(data_dir, "train", self.name), names, tokenizer, data, "train")
            valid = encode_labelled(read_split(data_dir, "valid", self.name), names, tokenizer, data, "valid")
        if not len(train.examples):
            raise DataError(f"{data_dir}: the training split holds no text to train on")
        train_data = TrainData(
            train=train.examples, valid=valid.examples, src_tokenizer=tokenizer, tgt_tokenizer=tokenizer,
            objective=OBJECTIVE_OF[OBJECTIVES[self.name]],
        )  # fmt: skip
        return Loaded(
            data, train_data, [describe_encoded(train, valid, data, names)], {"labels": names} if names else {}
        )

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


def labelled_splits(data: EncoderDataConfig, seed: int, task: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The train / valid / test texts of a classifier or tagger, their labels (the training split's, sorted) and
    what was read: given files, or whole groups (Bible books; single texts of a file) dealt by
    :func:`dotformer.data.splits.split_indices`.

    Raises:
        MissingDataError, DataError: a file cannot be read, labels of held-out texts the training texts lack, fewer
            than two labels. ConfigError: test books of a file, bad fractions.
    """
    from dotformer.data.labelled_text import LabelledTexts, label_ids, label_vocabulary, read_labelled
    from dotformer.data.splits import split_indices
    from dotformer.data.types import Corpus, Pair

    def read(spec: str) -> LabelledTexts:
        return read_labelled(spec, task, data.sword_path, data.tag_format)

    corpus = read(data.dataset)
    info: dict[str, Any] = {"corpus": corpus.name, "seed": seed}
    test = read(data.test) if data.test else None
    if data.valid:
        train, valid = corpus, read(data.valid)
        info["valid"] = data.valid
    else:
        books: list[str] = []
        if data.test_books:
            if corpus.report.get("format") != "bible":
                raise ConfigError(f"test books hold out Bible books; {corpus.name} is not a Bible (use --test FILE)")
            from dotformer.data.bible import book_ids

            books = book_ids(list(data.test_books))
        test_fraction = 0.0 if test is not None else data.test_fraction
        stand_in = Corpus(corpus.name, "exact", [Pair("", text) for text in corpus.texts], list(corpus.groups))
        indices = split_indices(stand_in, seed, data.valid_fraction, test_fraction, books or None, True)
        train, valid = corpus.subset(indices.train), corpus.subset(indices.valid)
        if test is None:
            test = corpus.subset(indices.test)
        held = {"test_groups": books} if books else {}
        info.update(valid_fraction=data.valid_fraction, test_fraction=test_fraction, **held)
        if corpus.report.get("format") == "bible":
            info["valid_groups"] = sorted(set(valid.groups))
    if data.test:
        info["test"] = data.test
    if data.limit is not None and data.limit < len(train.texts):  # a seeded sample: a file's head may be one label
        train = train.subset(sorted(random.Random(seed).sample(range(len(train.texts)), data.limit)))
        info["limit"] = data.limit
    test = test if test is not None else LabelledTexts(corpus.name, [], [])
    names = label_vocabulary(train.labels, f"{data.dataset} (the training split)")
    for role, texts in (("valid", valid), ("test", test)):
        label_ids(texts, names, f"{texts.name} (the {role} split)")  # before anything is written
    info["texts"] = {"train": len(train.texts), "valid": len(valid.texts), "test": len(test.texts)}
    splits = {"train": train, "valid": valid, "test": test, "labels": names, "info": info}
    return splits, {"name": corpus.name, "report": corpus.report}


def save_labelled_splits(splits: dict[str, Any], directory: Path) -> None:
    """data/train.tsv, valid.tsv, test.tsv (the readers' forms), split.json and labels.json."""
    from dotformer.data.labelled_text import write_labelled
    from dotformer.runs.records import write_json_atomic

    directory.mkdir(parents=True, exist_ok=True)
    for name in SPLIT_NAMES:
        write_labelled(splits[name], directory / f"{name}.tsv")
    write_json_atomic(directory / "split.json", splits["info"])
    write_json_atomic(directory / LABELS_FILE, splits["labels"])


def read_labels(data_dir: Path) -> list[str]:
    """The label names of a run (data/labels.json).

    Raises:
        CheckpointError: missing or not a list of strings.
    """
    path = data_dir / LABELS_FILE
    try:
        names = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"{path}: cannot read the run's labels ({exc})") from None
    if not isinstance(names, list) or not all(isinstance(name, str) for name in names):
        raise CheckpointError(f"{path}: not a list of label names")
    return names


def read_split(data_dir: Path, name: str, task: str) -> LabelledTexts:
    """A saved split of labelled texts."""
    from dotformer.data.labelled_text import read_saved

    return read_saved(data_dir / f"{name}.tsv", task)


def encode_masked(lines: list[str], tokenizer: Tokenizer, data: EncoderDataConfig) -> Encoded:
    """A masked language model's examples of ``lines`` (:func:`dotformer.data.labelled.masked_examples`)."""
    from dotformer.data.labelled import Masking, masked_examples

    assert tokenizer.mask_id is not None
    masking = Masking(tokenizer.mask_id, tokenizer.vocab_size, data.mask_probability)
    return masked_examples(lines, tokenizer, data.block_size, masking, data.mlm_unit)


def encode_labelled(
    texts: LabelledTexts, names: list[str], tokenizer: Tokenizer, data: EncoderDataConfig, role: str
) -> Encoded:
    """A classifier's or a tagger's examples of ``texts``.

    Raises:
        DataError: a label not among ``names``.
    """
    from dotformer.data.labelled import sequence_examples, token_examples
    from dotformer.data.labelled_text import label_ids

    ids = label_ids(texts, names, f"{texts.name} ({role})")
    if data.task == "classify":
        return sequence_examples(texts.texts, ids, tokenizer, data.block_size)
    words = [text.split() for text in texts.texts]
    return token_examples(words, ids, tokenizer, data.block_size, data.label_subtokens)


def describe_encoded(train: Encoded, valid: Encoded, data: EncoderDataConfig, names: list[str]) -> str:
    """The data line before training: texts, examples, what was cut, unknown tokens, labels."""
    from dotformer.training.progress import count

    unit = {"mlm": "lines", "classify": "texts", "tag": "sentences"}[data.task]
    text = (
        f"{train.examples.num_texts:,} train / {valid.examples.num_texts:,} valid {unit} "
        f"({len(train.examples):,} / {len(valid.examples):,} examples of at most {data.block_size} tokens)"
    )
    if names:
        text += f"; {count(len(names), 'label')}: {', '.join(names[:12])}{', ...' if len(names) > 12 else ''}"
    cut = train.cut + valid.cut
    if cut:
        what = "cut into pieces" if data.task == "mlm" else "cut short"
        text += f"; {count(cut, 'text')} longer than {data.block_size} tokens {what}"
    if train.unknown:
        text += f"; {train.unknown:,} training tokens read as <unk>"
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
    """Masked-token accuracy and perplexity (:func:`dotformer.metrics.labels.masked_token_score`)."""
    from dotformer.data.labelled import LabelledSampler
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
    data = _with_block(data, min(data.block_size or positions, positions))
    encoded = encode_masked(lines, loaded.tgt_tokenizer, data)
    block = data.block_size
    sampler = LabelledSampler(encoded.examples, max(block, request.batch_size * block), request.seed, shuffle=False)
    score = masked_token_score(loaded.model, sampler.batches(0))
    description = (
        f"({shown}, {score.masked:,} masked tokens, masking seed {request.seed}), task mlm, "
        f"{data.mlm_unit} of at most {block} tokens"
    )
    table = f"masked-token accuracy {score.accuracy:.2f}%  perplexity {score.perplexity:.3f}"
    return EvalReport(where, description, table, payload=score.to_dict())


_MASKING_FIELDS = ("task", "block_size", "mlm_unit", "mask_probability")


def _with_block(data: EncoderDataConfig, block: int) -> EncoderDataConfig:
    return dataclasses.replace(data, block_size=block)


def held_out_texts(loaded: LoadedCheckpoint, request: EvalRequest, task: str) -> tuple[LabelledTexts, str]:
    """The labelled texts a classifier or tagger is scored on (a seeded sample of ``limit`` of them), and where."""
    from dotformer.data.labelled_text import read_labelled

    if request.data is not None:
        saved = loaded.info.get("data") if isinstance(loaded.info.get("data"), dict) else {}
        texts, where = read_labelled(request.data, task, saved.get("sword_path"), saved.get("tag_format")), request.data
    else:
        path = run_split_file(loaded.path, f"{request.split}.tsv")
        texts, where = read_split(path.parent, request.split, task), str(path)
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


__all__ = ["EncoderTask", "encoder_model_config", "labelled_splits"]


# -- the text of a masked language model, in memory ------------------------------------------------------------------


def make_lm_splits(data: Any, seed: int) -> tuple[TextSplits, dict[str, Any]]:
    """The train / valid / test lines: given files, or whole groups held out of ``data.dataset`` (seeded); and the
    corpus description for run.json. ``data``: an :class:`LMDataConfig` (or any config with its fields of the text
    and its split, as :class:`~dotformer.data.config.EncoderDataConfig`).

    Raises:
        MissingDataError, DataError: a text cannot be read. ConfigError: bad fractions or books.
    """
    from dotformer.data.text import TextSplits, check_books, read_file_text, read_text_corpus, split_text

    corpus = read_text_corpus(data.dataset, data.sword_path)
    test_file = read_file_text(data.test).lines if data.test else None
    if data.valid:
        splits = TextSplits(corpus.lines, read_file_text(data.valid).lines, test_file or [], {"valid": data.valid})
    else:
        books = check_books(corpus, data.test_books or ())
        test_fraction = 0.0 if test_file is not None else data.test_fraction
        splits = split_text(corpus, seed, data.valid_fraction, test_fraction, books or None)
        if test_file is not None:
            splits = TextSplits(splits.train, splits.valid, test_file, {**splits.info, "test": data.test})
    if data.limit is not None and data.limit < len(splits.train):
        splits = TextSplits(splits.train[: data.limit], splits.valid, splits.test, {**splits.info, "limit": data.limit})
    return splits, {"name": corpus.name, "report": corpus.report}


def make_lm_tokenizer(data: Any, train_lines: list[str], mask: bool = False) -> Tokenizer:
    """The tokenizer file when given, else a char or BPE tokenizer trained on the training lines (with the mask token
    ``<mask>`` when ``mask``: a masked language model's).

    Raises:
        MissingDataError, DataError: the file cannot be read, or it reads more than half of the training text's
            tokens as <unk> (the tokenizer of another text: the model would learn <unk>). ConfigError: a bad
            vocabulary size.
    """
    from dotformer.data.tokenizer_files import train_tokenizer

    if data.tokenizer_file:
        from dotformer.data.tokenizer_files import read_tokenizer_file
        from dotformer.decoding.evaluation import unknown_fraction

        tokenizer = read_tokenizer_file(data.tokenizer_file)
        share = unknown_fraction(tokenizer, train_lines)
        if share > 0.5:
            raise DataError(
                f"{data.tokenizer_file}: {share:.0%} of the training text's tokens are unknown to this tokenizer "
                f"(<unk>): is it the tokenizer of this text?"
            )
        return tokenizer
    return train_tokenizer(data.tokenizer, train_lines, data.vocab_size, mask=mask)


def save_text_splits(splits: TextSplits, directory: Path) -> None:
    """data/train.txt, valid.txt, test.txt (one line each, newline-terminated) and split.json."""
    from dotformer.runs.records import write_json_atomic

    directory.mkdir(parents=True, exist_ok=True)
    for name in SPLIT_NAMES:
        lines = getattr(splits, name)
        (directory / f"{name}.txt").write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    write_json_atomic(directory / "split.json", splits.info)
