"""The Python API in five lines: ``dotformer.load(path).translate(texts)``.

    import dotformer

    model = dotformer.load("runs/g2p")                        # a run directory (its best/) or a checkpoint
    print(model.translate("transformer"))                      # 'T R AE1 N S F AO1 R M ER0'
    print(model.translate(["cat", "dog"], beam=4, n_best=2))   # [['K AE1 T', ...], ['D AO1 G', ...]]
    result = model.translate("cat", details=True, attention=True)  # scores, tokens, attention weights

A thin layer over :mod:`dotformer.decoding` and :mod:`dotformer.engines`: :func:`load` reads the checkpoint onto a
device in a dtype (the same function ``dotformer translate`` and ``dotformer evaluate`` use) and opens it on an engine
(``engine="auto"``: CTranslate2 when it is installed and runs the model, else the lesson's torch decoder), and
:meth:`Translator.translate` builds a :class:`~dotformer.decoding.DecodeConfig`, calls
:func:`~dotformer.decoding.inputs.encode_sources` and the engine's ``decode``; so the API and the CLI give the same
outputs for the same settings. A call that asks for what only torch runs (``attention=True``, another
``alignment_layer``) runs on torch under ``auto``, loading the model then; ``engine="ctranslate2"`` refuses it.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, overload

from dotformer.errors import ConfigError

logger = logging.getLogger(__name__)

if TYPE_CHECKING:
    import torch

    from dotformer.checkpoint import LoadedCheckpoint
    from dotformer.checkpoint.files import CheckpointFiles
    from dotformer.config import ModelConfig
    from dotformer.data.tokenize.tokenizers import Tokenizer
    from dotformer.decoding import DecodeConfig
    from dotformer.decoding.attention_maps import AttentionMaps
    from dotformer.decoding.engine import CheckpointLike, TranslationEngine
    from dotformer.decoding.options import DecodeRequest
    from dotformer.decoding.results import Translation
    from dotformer.engines.ct2_generate import CT2Generate
    from dotformer.engines.ct2_translate import CT2Translate
    from dotformer.model import Transformer


class ArgumentTypeError(ConfigError, TypeError):
    """An argument of the Python API has the wrong type (e.g. ``translate(None)``, ``load(None)``); both a
    :class:`~dotformer.errors.ConfigError` and a :class:`TypeError`."""


Dtype = Literal["float32", "bfloat16", "float16", "int8"]
DTYPES: tuple[str, ...] = ("float32", "bfloat16", "float16", "int8")


def resolve_device(name: str | torch.device, dtype: str = "float32") -> str:
    """``auto`` -> ``cuda`` if available (``cpu`` for int8, whose kernels are CPU-only); other names are checked.

    Raises:
        ConfigError: not a device name, or CUDA asked for but not available.
    """
    import torch

    name = str(name)
    if name == "auto":
        return "cuda" if torch.cuda.is_available() and dtype != "int8" else "cpu"
    try:
        device = torch.device(name)
    except (RuntimeError, ValueError):
        raise ConfigError(f"device {name!r} is not a device (auto, cpu, cuda, cuda:N)") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"device {name}: CUDA is not available on this machine")
    return name


def load_checkpoint_for_decoding(
    path: str | Path, device: str | torch.device = "auto", dtype: str = "float32"
) -> LoadedCheckpoint:
    """Load a checkpoint for decoding on ``device`` with its weights cast to ``dtype`` (int8: quantized, CPU only).

    Args:
        path: a checkpoint directory or a run directory (its best/, else last/).
        device: "auto" (CUDA if available, else CPU; CPU for int8), "cpu", "cuda", "cuda:N".
        dtype: "float32", "bfloat16", "float16" (CUDA only) or "int8" (CPU only; PyTorch dynamic quantization).

    Raises:
        ConfigError: an unknown dtype, float16 on a CPU, int8 on a GPU, or a bad device.
        CheckpointError: see :func:`dotformer.checkpoint.load_checkpoint`.
    """
    import torch

    from dotformer.checkpoint import load_checkpoint

    if dtype not in DTYPES:
        raise ConfigError(f"dtype {dtype!r} is not one of {', '.join(DTYPES)}")
    device = resolve_device(device, dtype)
    if dtype == "float16" and torch.device(device).type != "cuda":
        raise ConfigError("dtype float16 needs a CUDA device; on a CPU use bfloat16")
    if dtype == "int8" and torch.device(device).type != "cpu":
        raise ConfigError(f"dtype int8 is for CPU decoding (device cpu); on {device} use bfloat16")
    loaded = load_checkpoint(path, device=device)
    if dtype == "int8":
        from dotformer.decoding.quantization import quantize_int8

        return dataclasses.replace(loaded, model=quantize_int8(loaded.model))
    loaded.model.to(getattr(torch, dtype))
    return loaded


def refuse_language_model(
    checkpoint: CheckpointLike | Translator, why: str = "translate needs an encoder-decoder model"
) -> None:
    """Refuse a decoder-only checkpoint where a translation model is needed, naming its path and ``generate``.

    Raises:
        ConfigError: the checkpoint is a language model (``why`` ends the message).
    """
    if checkpoint.config.arch == "decoder-only":
        raise ConfigError(f"{checkpoint.path} is a language model: use dotformer generate ({why})")


def load_ensemble_for_decoding(
    paths: Sequence[str | Path], device: str | torch.device = "auto", dtype: str = "float32"
) -> LoadedCheckpoint:
    """Load several checkpoints as one :class:`~dotformer.decoding.ensemble.Ensemble` (the first one's tokenizers
    and info; see :func:`load_checkpoint_for_decoding` for ``device`` and ``dtype``).

    Raises:
        ConfigError: one of the checkpoints is a language model, the checkpoints' tokenizers differ, or see
            :class:`~dotformer.decoding.ensemble.Ensemble`.
        CheckpointError: see :func:`dotformer.checkpoint.load_checkpoint`.
    """
    from dotformer.decoding.ensemble import Ensemble

    loaded = [load_checkpoint_for_decoding(path, device, dtype) for path in paths]
    for checkpoint in loaded:
        refuse_language_model(checkpoint, "an ensemble decodes encoder-decoder models")
    first = loaded[0]
    for other in loaded[1:]:
        for side in ("src_tokenizer", "tgt_tokenizer"):
            if getattr(other, side).to_dict() != getattr(first, side).to_dict():
                raise ConfigError(
                    f"{other.path} and {first.path} have different {side.split('_')[0]} vocabularies: an ensemble's "
                    f"checkpoints must share their tokenizers"
                )
    return dataclasses.replace(first, model=Ensemble([c.model for c in loaded]))


class TranslationResult(NamedTuple):
    """Everything :meth:`Translator.translate` knows about one input (``details=True``).

    Attributes:
        id: 0-based position of the input in the texts given.
        source: the input as given.
        hypotheses: best first (``n_best`` of them), each a :class:`~dotformer.decoding.Translation` with ``text``,
            ``tokens`` (target ids, no BOS/EOS), ``score`` (log P(Y|X) / lp(|Y|), natural log), ``log_probs`` (one
            per step) and ``finished`` (False: cut at the maximum output length); an empty or whitespace-only source
            has one, empty hypothesis (score 0, finished), found without the model.
        unknown_symbols: source symbols read as <unk>.
        attention: with ``attention=True``, the attention maps of the best hypothesis (teacher-forced on its text,
            see :func:`dotformer.decoding.attention_maps.attention_weights`); else None (and None for an empty source).
    """

    id: int
    source: str
    hypotheses: list[Translation]
    unknown_symbols: int
    attention: AttentionMaps | None = None

    @property
    def text(self) -> str:
        """The best hypothesis's text."""
        return self.hypotheses[0].text

    @property
    def score(self) -> float:
        """The best hypothesis's score."""
        return self.hypotheses[0].score

    @property
    def finished(self) -> bool:
        """Whether the best hypothesis ended with EOS (False: cut at the maximum output length)."""
        return self.hypotheses[0].finished


class Translator:
    """A checkpoint ready to decode, on an engine: its tokenizers, its task, and the model or its CTranslate2 copy.

    Build one with :func:`load`. Attributes: ``files`` (the checkpoint without its model: config, tokenizers,
    info), ``checkpoint`` (the :class:`~dotformer.checkpoint.LoadedCheckpoint`; on the CTranslate2 engine it is
    loaded when first used), ``model``, ``config`` (its :class:`~dotformer.ModelConfig`), ``src_tokenizer``,
    ``tgt_tokenizer``, ``task`` ("g2p", "translation", "synthetic", ...), ``info`` (the checkpoint's config.json),
    ``path``, ``engine`` ("torch" or "ctranslate2": what decodes by default), ``device``, ``dtype`` and
    ``max_input_length`` (tokens, EOS included, an input may have by default).

    Args:
        checkpoint: a loaded checkpoint, or its files (:func:`~dotformer.checkpoint.files.read_checkpoint_files`).
        dtype: the weights' precision (see :func:`load`).
        engine: "torch" (a checkpoint's files are then loaded now), or an engine that opens the checkpoint's
            CTranslate2 copy: "auto" (torch runs the calls CTranslate2 cannot, loading the model then) or
            "ctranslate2" (those calls are refused). :func:`load` chooses it.
        device, intra_threads, inter_threads: where CTranslate2 runs and on how many threads (see :func:`load`);
            ``device`` is also where a model loaded later goes.

    Raises:
        ConfigError: an unknown engine, or one CTranslate2 cannot run (see :func:`load`).
    """

    def __init__(
        self,
        checkpoint: LoadedCheckpoint | CheckpointFiles,
        dtype: str = "float32",
        engine: str = "torch",
        device: str = "auto",
        intra_threads: int = 0,
        inter_threads: int = 1,
    ) -> None:
        from dotformer.decoding.inputs import default_max_input_length
        from dotformer.engines.choice import check_engine

        self.requested = check_engine(engine)
        self.files: CheckpointLike = checkpoint
        self.dtype = dtype
        self._device = str(device)
        self._checkpoint: LoadedCheckpoint | None = checkpoint if hasattr(checkpoint, "model") else None  # type: ignore[assignment]
        self._ct2: CT2Translate | CT2Generate | None = None
        if engine == "torch" and self._checkpoint is None:  # files, asked to run on torch: load the model now
            self._checkpoint = load_checkpoint_for_decoding(checkpoint.path, self._device, dtype)
        elif engine != "torch":
            from dotformer.checkpoint.files import read_checkpoint_files
            from dotformer.engines.load import open_ct2

            files = checkpoint if self._checkpoint is None else read_checkpoint_files(checkpoint.path)
            self.files = files
            self._ct2 = open_ct2(files, dtype, self._device, intra_threads, inter_threads)  # type: ignore[arg-type]
        self.max_input_length = default_max_input_length(checkpoint.config)

    @property
    def engine(self) -> str:
        """What decodes a call that asks for nothing only torch runs: "ctranslate2" or "torch"."""
        return "torch" if self._ct2 is None else self._ct2.name

    @property
    def checkpoint(self) -> LoadedCheckpoint:
        """The :class:`~dotformer.checkpoint.LoadedCheckpoint` (on the CTranslate2 engine, loaded on first use on
        ``device`` in ``dtype``)."""
        if self._checkpoint is None:
            self._checkpoint = load_checkpoint_for_decoding(self.path, self._device, self.dtype)
        return self._checkpoint

    @property
    def model(self) -> Transformer:
        """The :class:`~dotformer.Transformer` (eval mode; loaded on first use on the CTranslate2 engine)."""
        return self.checkpoint.model

    @property
    def config(self) -> ModelConfig:
        """The model's :class:`~dotformer.ModelConfig`."""
        return self.files.config

    @property
    def device(self) -> str:
        """Where the default engine runs: the model's device (torch), or CTranslate2's (``cpu``, ``cuda:N``)."""
        if self._ct2 is not None:
            return self._ct2.device
        from dotformer.decoding.translate import model_device

        return str(model_device(self.checkpoint.model))

    @property
    def batch_groups(self) -> int:
        """How many groups of clients a server's engine calls take turns between (the default engine's own:
        :class:`~dotformer.api.batcher.Batcher`, "Groups")."""
        return self.translation_engine().batch_groups

    @property
    def src_tokenizer(self) -> Tokenizer:
        """The source tokenizer."""
        return self.files.src_tokenizer

    @property
    def tgt_tokenizer(self) -> Tokenizer:
        """The target tokenizer."""
        return self.files.tgt_tokenizer

    @property
    def info(self) -> dict[str, Any]:
        """The checkpoint's config.json."""
        return self.files.info

    @property
    def task(self) -> str:
        """The task the model was trained for (``info["task"]``; "synthetic" when not recorded)."""
        return str(self.files.info.get("task", "synthetic"))

    @property
    def path(self) -> Path:
        """The checkpoint directory that was read."""
        return self.files.path

    def translation_engine(self, torch_only: Sequence[str] = ()) -> TranslationEngine:
        """The engine that decodes a call asking for ``torch_only`` (the settings only torch runs, as the caller
        names them): CTranslate2 when it is open and nothing is asked for that it lacks, else torch.

        Raises:
            EngineOptionError: ``engine="ctranslate2"`` and a torch-only setting (the message names it).
        """
        from dotformer.engines.choice import EngineOptionError, torch_only_message

        if self._ct2 is None or not torch_only:
            return self._ct2 if self._ct2 is not None else self._torch_engine()  # type: ignore[return-value]
        if self.requested == "ctranslate2":
            raise EngineOptionError(torch_only_message(torch_only[0], "engine="))
        return self._torch_engine()

    def _torch_engine(self) -> Any:
        from dotformer.engines.torch import TorchEngine

        return TorchEngine(self.checkpoint)

    def _run(self, torch_only: Sequence[str], call: Any) -> Any:
        """``call(engine)`` on :meth:`translation_engine`; under ``engine="auto"`` a call CTranslate2 refuses for
        its data (an output longer than its copy's positions, a prompt beyond its window) runs on torch instead."""
        from dotformer.engines.choice import EngineOptionError

        engine = self.translation_engine(torch_only)
        try:
            return call(engine)
        except EngineOptionError:
            if self.requested != "auto" or engine.name == "torch":
                raise
            return call(self._torch_engine())

    def generate(self, prompt: str = "", n: int = 1, **settings: Any) -> str | list[str]:
        """Continue ``prompt`` with a language model (a ``task = "lm"`` checkpoint): the new text, without the prompt.

        Settings: ``max_new_tokens`` (200), ``strategy`` ("sample", "greedy" or "beam"), ``temperature``, ``top_k``,
        ``top_p``, ``seed`` (sampling), ``beam_size``, ``length_penalty`` (GNMT's α; 0, the default: beams ranked by
        summed log-probability), ``beam_stop`` ("finished", the default, or "exact") (beam search), ``use_cache``,
        and the controls ``repetition_penalty``, ``no_repeat_ngram_size``, ``end_token``, ``suppress``
        (:func:`dotformer.api.generation.generation_settings`).
        Returns one string, or a list of ``n`` (samples in draw order, beams best first) when ``n`` > 1.

        Raises:
            ArgumentTypeError: ``prompt`` is not a string (e.g. None, 123, a list), or an unknown setting.
            ConfigError: not a language model, a setting out of range, or a setting of another strategy (sampling
            settings without strategy "sample", ``beam_size``, ``length_penalty`` or ``beam_stop`` without strategy
            "beam").
            EngineOptionError: ``engine="ctranslate2"`` and ``use_cache=False`` or a text longer than the model's
            context window (only torch slides it).

        Warns:
            UnknownTokenWarning: when the prompt holds symbols outside the model's vocabulary.
        """
        import inspect

        from dotformer.api.generation import generation_settings, warn_unknown_prompt

        if not isinstance(prompt, str):
            raise ArgumentTypeError(f"generate() takes a string, got {type(prompt).__name__}")
        known = [name for name in inspect.signature(generation_settings).parameters if name not in ("n", "misplaced")]
        unknown = [name for name in settings if name not in known]
        if unknown:
            raise ArgumentTypeError(
                f"generate(): unknown argument(s) {', '.join(unknown)}; the settings are {', '.join(known)}"
            )
        config = generation_settings(n=n, **settings)
        warn_unknown_prompt(self.files, prompt)
        texts = self.generate_texts(prompt, config)
        return texts if n > 1 else texts[0]

    def generate_texts(self, prompt: str, config: DecodeConfig, on_text: Any = None, on_end: Any = None) -> list[str]:
        """The continuations of ``prompt`` for a ready :class:`~dotformer.decoding.DecodeConfig`
        (:func:`dotformer.api.generation.generate_text` on this translator's engine; ``on_text`` streams the first,
        ``on_end`` is called when the first ended before the token limit).

        Raises:
            See :meth:`generate`.
        """
        from dotformer.api.generation import generate_text
        from dotformer.decoding.options import DecodeRequest
        from dotformer.engines.choice import torch_only_settings

        torch_only = torch_only_settings(DecodeRequest(config=config))  # use_cache=False, end tokens with beam search
        return list(self._run(torch_only, lambda engine: generate_text(engine, prompt, config, on_text, on_end)))

    def greedy_continuations(self, prompts: Sequence[str], config: DecodeConfig) -> list[str]:
        """The greedy continuation of each of ``prompts`` in one engine call, each the text :meth:`generate_texts`
        gives it alone (``config``: greedy, one continuation; :func:`dotformer.api.generation.greedy_texts`).

        Raises:
            See :meth:`generate`.
        """
        from dotformer.api.generation import greedy_texts

        torch_only = [] if config.use_cache else ["use_cache=False"]
        return list(self._run(torch_only, lambda engine: greedy_texts(engine, prompts, config)))

    def __repr__(self) -> str:
        where = f"path={str(self.path)!r}, task={self.task!r}"
        return f"Translator({where}, engine={self.engine!r}, device={self.device!r}, dtype={self.dtype!r})"

    @overload
    def translate(self, texts: str, request: DecodeRequest | None = ..., /, **options: Any) -> Any: ...
    @overload
    def translate(self, texts: Sequence[str], request: DecodeRequest | None = ..., /, **options: Any) -> list[Any]: ...

    def translate(self, texts: str | Sequence[str], request: DecodeRequest | None = None, /, **options: Any) -> Any:
        """Decode one text or a list of texts, on the engine :mod:`dotformer.engines.choice` picks for the request.

        Args:
            texts: a string (one input) or a sequence of strings; each is normalised as the checkpoint's training
                sources were (e.g. lower case for CMUdict) and may be empty.
            request: the whole request, ready (:class:`~dotformer.decoding.options.DecodeRequest`: what the CLI and
                the server build); or else the keywords below, the options of
                :data:`~dotformer.decoding.options.DECODE_OPTIONS` and the request's fields.
            options: the decoding options of :data:`~dotformer.decoding.options.DECODE_OPTIONS` by keyword
                (``beam``, ``n_best``, ``strategy``, ``length_penalty``, the length limits, the sampling settings,
                ``prefix``, ``alignments``, ``replace_unk``, the controls: see their help and
                :class:`~dotformer.decoding.DecodeConfig`), or a ready ``config`` in place of the search options;
                and the fields of :class:`~dotformer.decoding.options.DecodeRequest` (``batch_size``, ``max_tokens``,
                ``max_input_length``, ``progress``, ``details``, ``attention``, ``scores``).

        Returns:
            ``details`` False: the best text (n_best = 1) or the n_best texts, best first, for a string input; a list
            of those for a sequence. ``details`` True: a :class:`TranslationResult`, or a list of them.

        Raises:
            ArgumentTypeError: ``texts`` is not a string or a sequence of strings (e.g. None, 123), an unknown
            keyword, or ``request`` beside keywords. ConfigError: a bad setting (the message names it), ``beam``
            without beam search, a sampling argument (``temperature``, ``top_k``, ``top_p``, ``seed``) without
            sampling. InputTooLongError: an input longer than ``max_input_length`` (a ShapeError naming it,
            1-based). EngineOptionError: on ``engine="ctranslate2"``, a setting only the torch engine runs
            (``attention``, another ``alignment_layer``; the message names it).

        Warns:
            UnknownTokenWarning: once per call when inputs hold symbols outside the source vocabulary, and once
                when prefixes hold symbols outside the target vocabulary (naming them).
        """
        from dotformer.decoding.inputs import check_max_input_length, encode_prefixes, encode_sources, warn_unknown
        from dotformer.engines.choice import torch_only_settings

        request = _request(request, options)
        single = isinstance(texts, str)
        inputs = [texts] if single else _text_list(texts)
        config = request.config
        limit = self.max_input_length if request.max_input_length is None else request.max_input_length
        encoded = encode_sources(self.files, inputs, check_max_input_length(self.config, limit))
        warn_unknown(encoded)
        prefix = request.prefix
        prefixes = None if prefix is None else encode_prefixes(self.files, _prefix_list(prefix, single, len(inputs)))
        wanted = request.wants_details
        check_tokens(config, self.tgt_tokenizer)  # an unknown token is named before an engine is chosen for it
        outputs = self._run(
            torch_only_settings(request, self.config),
            lambda engine: engine.decode(
                encoded, config, request.batch_size, request.progress, request.max_tokens, prefixes,
                wanted and request.scores,
            ),
        )  # fmt: skip
        if not wanted:
            texts_out = [[h.text for h in hyps] for hyps in outputs]
            flat: list[Any] = [hyps[0] for hyps in texts_out] if config.n_best == 1 else texts_out
            return flat[0] if single else flat
        results = [
            TranslationResult(
                i, source, hyps, encoded.unknown_counts[i], self._attention(source, hyps, request.attention)
            )
            for i, (source, hyps) in enumerate(zip(inputs, outputs, strict=True))
        ]
        return results[0] if single else results

    def embed(
        self,
        texts: str | Sequence[str],
        *,
        pooling: str | None = None,
        normalize: bool | None = None,
        batch_size: int = 64,
        max_tokens: int | None = None,
        max_seq_length: int | None = None,
    ) -> Any:
        """Sentence embeddings: the encoder's memory pooled per text (:mod:`dotformer.api.embedding`).

        Args:
            texts: a string or a sequence of strings. pooling: "mean" (real tokens, padding excluded) or "cls"
                (the first token); default: an imported sentence-transformers model's own, else mean. normalize:
                L2-normalise each vector; default: if the model has a Normalize module (False opts out).
                batch_size, max_tokens: batching by texts and padded tokens. max_seq_length: most tokens (special
                tokens included) a text keeps, a longer one cut there as sentence-transformers cuts it (default:
                the imported model's ``max_seq_length``, else the model's ``max_len``).

        Returns:
            float32 numpy array: (N, D) for a sequence, (D,) for a string.

        Raises:
            ArgumentTypeError: ``texts`` is not a string or a sequence of strings. ConfigError: an unknown pooling,
            a decoder-only model, or a bad ``max_seq_length``.

        Warns:
            UnknownTokenWarning, TruncationWarning: once per call each.
        """
        from dotformer.api.embedding import embed_texts

        self.translation_engine(["embed()"])  # the encoder's memory: the torch engine only
        single = isinstance(texts, str)
        inputs = [texts] if single else _text_list(texts, "embed")
        vectors = embed_texts(self.checkpoint, inputs, pooling, normalize, batch_size, max_tokens, max_seq_length)
        return vectors[0] if single else vectors

    def classify(self, texts: str | Sequence[str], *, batch_size: int = 64, max_tokens: int | None = None) -> Any:
        """Labels from a classifier (``--task classify``) or a tagger (``--task tag``): :mod:`dotformer.api.classifier`.

        Returns:
            a :class:`~dotformer.api.classifier.Classification` (label, probability, probabilities) or a
            :class:`~dotformer.api.classifier.Tagging` (words, labels, probabilities) for a string; a list for a
            sequence.

        Raises:
            ArgumentTypeError: ``texts`` is not a string or a sequence of strings. ConfigError: not a classifier or
            tagger. InputTooLongError: a text to tag longer than the model reads.
        """
        from dotformer.api.classifier import classify_texts

        single = isinstance(texts, str)
        results = classify_texts(self.checkpoint, [texts] if single else _text_list(texts, "classify"), batch_size,
                                 max_tokens)  # fmt: skip
        return results[0] if single else results

    def _attention(self, source: str, hyps: list[Translation], wanted: bool) -> AttentionMaps | None:
        """The attention maps of the best hypothesis of ``source`` (None when not ``wanted``, or for an empty or
        whitespace-only source, which the model does not read)."""
        from dotformer.decoding.inputs import is_empty_source

        if not wanted or is_empty_source(source):
            return None
        import warnings

        from dotformer.decoding.attention_maps import attention_weights
        from dotformer.decoding.inputs import UnknownTokenWarning

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UnknownTokenWarning)  # translate() has warned already
            from dotformer.decoding.ensemble import Ensemble

            checkpoint = self.checkpoint
            if isinstance(checkpoint.model, Ensemble):  # an ensemble shows its first model's attention
                checkpoint = dataclasses.replace(checkpoint, model=checkpoint.model.models[0])
            return attention_weights(checkpoint, source, target=hyps[0].text)


def _request(request: Any, options: dict[str, Any]) -> DecodeRequest:
    """The :class:`~dotformer.decoding.options.DecodeRequest` of one :meth:`Translator.translate` call.

    Raises:
        ArgumentTypeError: ``request`` is not a DecodeRequest, or is given beside keywords; an unknown keyword.
        ConfigError: see :func:`~dotformer.decoding.options.decode_request`.
    """
    from dotformer.decoding.options import REQUEST_NAMES, DecodeRequest, decode_request

    if request is not None:
        if not isinstance(request, DecodeRequest):
            raise ArgumentTypeError(f"translate(): request is a DecodeRequest, got {type(request).__name__}")
        if options:
            raise ArgumentTypeError(f"translate(): request= holds every setting; leave out {', '.join(options)}")
        return request
    unknown = [name for name in options if name not in REQUEST_NAMES]
    if unknown:
        known = ", ".join(REQUEST_NAMES)
        raise ArgumentTypeError(f"translate(): unknown argument(s) {', '.join(unknown)}; the arguments are {known}")
    return decode_request(options, _api_misplaced)


def _api_misplaced(options: list[Any], wanted: str, strategy: str) -> str:
    """``translate(): temperature only applies to strategy='sample', not strategy='beam'``."""
    from dotformer.decoding.options import misplaced_message

    return f"translate(): {misplaced_message(options, wanted, strategy)}"


def _prefix_list(prefix: Any, single: bool, count: int) -> list[str | None]:
    """``prefix=`` of :meth:`Translator.translate` as one entry per text.

    Raises:
        ArgumentTypeError: a sequence for a string input, a string for a sequence, or not one entry per text.
    """
    if single:
        if not isinstance(prefix, str):
            raise ArgumentTypeError(f"translate(): prefix= for one text is a string, got {type(prefix).__name__}")
        return [prefix]
    if isinstance(prefix, str) or not isinstance(prefix, Sequence):
        raise ArgumentTypeError("translate(): prefix= for a list of texts is a list with one string or None per text")
    if len(prefix) != count:
        raise ArgumentTypeError(f"translate(): {len(prefix)} prefixes for {count} texts; give one per text")
    return list(prefix)


def _text_list(texts: Any, method: str = "translate") -> list[str]:
    """``texts`` of :meth:`Translator.translate` (or of the Translator ``method`` named) as a list of strings.

    Raises:
        ArgumentTypeError: not a string or a sequence of strings (the message names the method and the type, or the
            first bad item).
    """
    if texts is None or isinstance(texts, bytes | bytearray) or not isinstance(texts, Sequence | Iterable):
        raise ArgumentTypeError(f"{method}() takes a string or a sequence of strings, got {type(texts).__name__}")
    inputs = list(texts)
    for i, text in enumerate(inputs):
        if not isinstance(text, str):
            raise ArgumentTypeError(
                f"{method}() takes a string or a sequence of strings; item {i} is {type(text).__name__}"
            )
    return inputs


def load(
    path: str | Path | Sequence[str | Path],
    device: str | torch.device = "auto",
    dtype: Dtype = "float32",
    engine: str = "auto",
    *,
    intra_threads: int = 0,
    inter_threads: int = 1,
) -> Translator:
    """Load a checkpoint (or a run directory's best/) for decoding, on an engine; see :class:`Translator`.

    Args:
        path: a checkpoint directory, or a run directory (best/, else last/); a list of them: an ensemble
            (:mod:`dotformer.decoding.ensemble`, same vocabularies; the torch engine only).
        device: "auto" (CUDA if available, else CPU; CPU for int8 on torch), "cpu", "cuda", "cuda:N".
        dtype: "float32" (default), "bfloat16", "float16" (CUDA only) or "int8" (torch: CPU only); on CTranslate2,
            its compute type of that name.
        engine: "auto" (default: CTranslate2 when it is installed and runs the model in ``dtype`` on ``device``,
            else torch), "torch" (the lesson's decoder) or "ctranslate2" (:mod:`dotformer.engines`). The first
            CTranslate2 use of a checkpoint converts it (with torch) into a cache beside it; later ones do not load
            torch.
        intra_threads: CTranslate2's threads per batch (0: its default); torch's threads are
            ``torch.set_num_threads``. inter_threads: batches CTranslate2 decodes at once (1).

    Returns:
        A :class:`Translator`; call ``.translate(texts, beam=4, n_best=1, ...)``.

    Raises:
        ArgumentTypeError: ``path`` is not a str or a path (e.g. None).
        ConfigError: a bad device, dtype or engine; ``engine="ctranslate2"`` with an ensemble, or where CTranslate2
            cannot run (the message says why). CheckpointError: a missing, corrupted or mismatched checkpoint.
    """
    if isinstance(path, list | tuple) and path and all(isinstance(p, str | os.PathLike) for p in path):
        return open_translator(list(path), device, dtype, engine, flag="engine=", ensemble="a list of paths")
    if not isinstance(path, str | os.PathLike):
        raise ArgumentTypeError(
            f"load() takes the path of a checkpoint or run directory (str or Path), got {type(path).__name__}"
        )
    return open_translator(
        [path], device, dtype, engine, flag="engine=", intra_threads=intra_threads, inter_threads=inter_threads
    )


def open_translator(
    paths: Sequence[str | Path],
    device: str | torch.device = "auto",
    dtype: str = "float32",
    engine: str = "auto",
    *,
    request: DecodeRequest | None = None,
    purpose: str = "any",
    torch_only: Sequence[str] = (),
    names: Mapping[str, str] | None = None,
    flag: str = "--engine",
    ensemble: str = "several --checkpoint",
    intra_threads: int = 0,
    inter_threads: int = 1,
) -> Translator:
    """A :class:`Translator` of ``paths`` (several: an ensemble) on the engine :func:`~dotformer.engines.choice
    .choose_engine` picks for ``request``; what :func:`load` and the commands run.

    Args:
        request: the decoding the caller will ask for (its torch-only settings, :func:`~dotformer.engines.choice
            .torch_only_settings`, make ``auto`` choose torch and ``ctranslate2`` refuse); None: nothing yet.
        purpose: what the model is opened for (:data:`PURPOSES`), checked before anything is converted or loaded:
            "translate" refuses a language model, "generate" anything else, "evaluate" runs the evaluation of a
            task that scores text (a language model's perplexity) on torch; "any" checks nothing.
        torch_only: other settings asked for that only torch runs, as the surface names them (``--no-cache``).
        names: how the surface names the request's fields (flags; None: keywords), for the messages.
        flag: how the surface names its engine setting (``--engine``, ``engine=``), for the messages.
        ensemble: how the surface names several checkpoints (an ensemble runs on torch only).

    Under ``engine="auto"``, a CTranslate2 copy that cannot be written anywhere (:class:`~dotformer.engines.cache
    .CopyWriteError`) is one logged warning naming the places tried, and the model runs on torch.

    Raises:
        ConfigError: a checkpoint that does not serve ``purpose`` (the message names the right command); or see
            :func:`load`. CopyWriteError: ``engine="ctranslate2"`` and the copy cannot be written.
    """
    from dotformer.engines.choice import check_engine, choose_engine, ct2_problem, torch_only_settings

    check_engine(engine, flag)
    if purpose not in PURPOSES:
        raise ConfigError(f"purpose must be one of {', '.join(PURPOSES)}, got {purpose!r}")
    if len(paths) > 1:
        asked = torch_only_settings(request, None, names) if request is not None else []
        choose_engine(engine, [ensemble + " (an ensemble)", *torch_only, *asked], None, flag)  # ctranslate2 refuses
        translator = Translator(load_ensemble_for_decoding(paths, device, dtype), dtype)
        if request is not None:  # an unknown token is named before anything is decoded
            check_tokens(request.config, translator.tgt_tokenizer, names)
        return translator
    if engine == "torch" or (engine == "auto" and torch_only):
        loaded = load_checkpoint_for_decoding(paths[0], device, dtype)
        check_purpose(loaded, purpose)
        if request is not None:
            check_tokens(request.config, loaded.tgt_tokenizer, names)
        return Translator(loaded, dtype)
    from dotformer.checkpoint.files import read_checkpoint_files
    from dotformer.engines.choice import ctranslate2_installed
    from dotformer.engines.digests import checkpoint_sha256

    # the copy's key: digests remembered beside the cache by (size, mtime, inode), where there is a cache to find
    files = (
        read_checkpoint_files(paths[0], checkpoint_sha256)
        if ctranslate2_installed()
        else read_checkpoint_files(paths[0])
    )
    asked = [*torch_only, *check_purpose(files, purpose)]
    if request is not None:  # an unknown token is named before an engine is chosen for it
        check_tokens(request.config, files.tgt_tokenizer, names)
        asked += torch_only_settings(request, files.config, names)
    chosen = choose_engine(engine, asked, ct2_problem(files.config, dtype, str(device)), flag)
    if chosen == "torch":
        return Translator(load_checkpoint_for_decoding(paths[0], device, dtype), dtype)
    from dotformer.engines.cache import CopyWriteError

    try:
        return Translator(files, dtype, engine, str(device), intra_threads, inter_threads)
    except CopyWriteError as exc:  # no place for the CTranslate2 copy: `auto` runs on torch, `ctranslate2` fails
        if engine != "auto":
            raise
        logger.warning("%s; running on the torch engine", exc)
        return Translator(load_checkpoint_for_decoding(paths[0], device, dtype), dtype)


PURPOSES: tuple[str, ...] = ("any", "translate", "generate", "evaluate")


def check_purpose(checkpoint: CheckpointLike, purpose: str) -> list[str]:
    """Whether ``checkpoint`` serves ``purpose`` (see :func:`open_translator`); returns what of it only torch runs.

    Raises:
        ConfigError: "translate" of a language model (naming ``generate``) or of an encoder (naming ``classify`` and
            ``embed``), "generate" of another model (naming ``translate``).
    """
    if purpose == "translate":
        refuse_language_model(checkpoint)
        if checkpoint.config.arch == "encoder-only":  # no decoder: nothing to decode with
            raise ConfigError(
                f"{checkpoint.path} is an encoder-only model: translate needs an encoder-decoder model; classify or "
                "embed texts with it: dotformer classify, dotformer embed"
            )
    elif purpose == "generate" and checkpoint.config.arch != "decoder-only":
        from dotformer.api.generation import not_a_language_model

        raise ConfigError(not_a_language_model(checkpoint.path, checkpoint.config.arch))
    elif purpose == "evaluate":
        from dotformer.runs.tasks import task_named

        name = checkpoint.info.get("task")
        if name is not None and not task_named(str(name)).decodes:
            return ["a language model's evaluation (it scores text)"]
    return []


def check_tokens(config: DecodeConfig, tokenizer: Tokenizer, names: Mapping[str, str] | None = None) -> None:
    """Check that the end tokens and suppressed tokens of ``config`` are tokens of the target ``tokenizer``.

    Args:
        names: how the surface names ``end_token`` and ``suppress`` (``--end-token``), for the message; None: so.

    Raises:
        ConfigError: one that is not (named), as either engine refuses it.
    """
    if config.end_token or config.suppress:
        from dotformer.decoding.controls import controls_of

        try:
            controls_of(config, tokenizer)
        except ConfigError as exc:
            field, sep, rest = str(exc).partition(": ")  # "end_token: 'zzz' is not a token of ..."
            if not sep or names is None or field not in names:
                raise
            raise ConfigError(f"{names[field]}: {rest}") from None
