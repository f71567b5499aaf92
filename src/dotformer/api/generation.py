"""Text in, text out for a language-model checkpoint: the glue that ``dotformer generate`` and
``dotformer.load(path).generate(prompt)`` share, so both give the same text for the same settings.

    import dotformer

    lm = dotformer.load("runs/lm")
    print(lm.generate("In the beginning", max_new_tokens=200, top_k=20, seed=1))
    print(lm.generate("And God said", n=3, temperature=0.8))        # three samples
    print(lm.generate("Blessed are the", strategy="beam"))          # the most likely end of the line
    print(lm.generate("Blessed are the", strategy="beam", length_penalty=1.0, beam_stop="exact"))  # longer ends

A prompt is read as the start of a line (the text stream before it ends with a line end), each of its own line
breaks an EOS; the continuation's EOS tokens come back as line breaks
(:func:`~dotformer.decoding.inputs.generated_text`). An imported model reads text by its own rules
(:class:`~dotformer.decoding.inputs.TextRules`): BOS first when its family adds one, and its continuation ends at
its EOS. The model reads at most its training block size of tokens at once. Either engine continues the prompt
(:meth:`dotformer.engines.torch.TorchEngine.generate`, :meth:`dotformer.engines.ct2_generate.CT2Generate.generate`);
nothing here imports torch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from dotformer.decoding.inputs import encode_prompt, generated_text, text_rules
from dotformer.errors import ConfigError

if TYPE_CHECKING:
    from dotformer.decoding.config import DecodeConfig
    from dotformer.decoding.engine import CheckpointLike, GenerationEngine

TextCallback = Callable[[str], None]  # called with each new piece of the first continuation's text
Misplaced = Callable[[Sequence[str], str, str], str]  # (settings, their strategy, the strategy asked) -> message


def generate_text(
    engine: GenerationEngine,
    prompt: str,
    config: DecodeConfig,
    on_text: TextCallback | None = None,
    on_end: Callable[[], None] | None = None,
) -> list[str]:
    """The continuations of ``prompt`` (without the prompt), one per sample or beam, as text.

    Args:
        engine: what continues it (a decoder-only checkpoint's :class:`~dotformer.engines.torch.TorchEngine` or
            :class:`~dotformer.engines.ct2_generate.CT2Generate`). prompt: the text to continue.
        config: from :func:`generation_settings`.
        on_text: called with each new piece of the first row's text as it is produced (greedy and sampling).
        on_end: called once, after the decoding, when the first row ended before ``max_new_tokens`` tokens: at an
            end token (``end_token``) or at an imported model's EOS (OpenAI's ``finish_reason`` "stop").

    Raises:
        ConfigError: the checkpoint is not a language model. ShapeError: see
            :func:`dotformer.decoding.generate.generate`. EngineOptionError: a prompt CTranslate2 cannot continue.
    """
    checkpoint = engine.checkpoint
    if checkpoint.config.arch != "decoder-only":
        raise ConfigError(not_a_language_model(checkpoint.path, checkpoint.config.arch))
    tokenizer, rules = checkpoint.tgt_tokenizer, text_rules(checkpoint.info)
    on_token = None
    if on_text is not None:
        produced: list[int] = []
        shown = [0]  # characters of the first row's text passed on so far

        def on_token(tokens: Any) -> None:
            produced.append(int(tokens[0]))
            text = generated_text(tokenizer, produced, rules)
            if len(text) > shown[0] and not text.endswith("\ufffd"):  # a byte piece waits for the rest of its char
                on_text(text[shown[0] :])
                shown[0] = len(text)

    ids = encode_prompt(tokenizer, prompt, rules)
    outputs = engine.generate(ids, config, checkpoint.context_window, on_token, rules.eos_ids)
    if on_end is not None and outputs:
        first = outputs[0]
        if len(first) < config.max_len_b or (first and first[-1] in rules.eos_ids):
            on_end()
    return [generated_text(tokenizer, tokens, rules) for tokens in outputs]


def greedy_texts(engine: GenerationEngine, prompts: Sequence[str], config: DecodeConfig) -> list[str]:
    """The greedy continuation of each prompt, as text, in one engine call (each the ``generate_text`` of it alone).

    Raises:
        ConfigError: the checkpoint is not a language model. EngineOptionError: a prompt CTranslate2 cannot continue.
    """
    checkpoint = engine.checkpoint
    if checkpoint.config.arch != "decoder-only":
        raise ConfigError(not_a_language_model(checkpoint.path, checkpoint.config.arch))
    tokenizer, rules = checkpoint.tgt_tokenizer, text_rules(checkpoint.info)
    rows = [encode_prompt(tokenizer, prompt, rules) for prompt in prompts]
    outputs = engine.greedy_batch(rows, config, checkpoint.context_window, rules.eos_ids)
    return [generated_text(tokenizer, tokens, rules) for tokens in outputs]


def warn_unknown_prompt(checkpoint: CheckpointLike, prompt: str, where: str | None = None) -> None:
    """Issue one :class:`~dotformer.decoding.inputs.UnknownTokenWarning` when ``prompt`` holds symbols outside the
    model's vocabulary (read as <unk>), as translate warns about unknown source symbols; ``where`` names the prompt
    (``<stdin>:LINE``; default: the prompt itself)."""
    import warnings

    from dotformer.decoding.inputs import UnknownTokenWarning, encode_target

    unknown = [symbol for line in prompt.split("\n") for symbol in encode_target(checkpoint, line).unknown]
    if unknown:
        example = prompt if len(prompt) <= 40 else prompt[:37] + "..."
        name = where if where is not None else f"prompt {example!r}"
        warnings.warn(
            f"{len(unknown)} prompt symbol(s) are not in the model's vocabulary and were read as <unk>: "
            f"{', '.join(dict.fromkeys(unknown))} ({name})",
            UnknownTokenWarning,
            stacklevel=3,
        )


def api_misplaced(names: Sequence[str], wanted: str, strategy: str) -> str:
    """``generate(): top_k only applies to strategy='sample', not strategy='greedy'`` (translate()'s wording)."""
    from dotformer.decoding.options import only_apply

    return f"generate(): {only_apply(names, f'strategy={wanted!r}')}, not strategy={strategy!r}"


def generation_settings(
    max_new_tokens: int = 200,
    strategy: str = "sample",
    n: int = 1,
    temperature: float | None = None,
    top_k: int | None = None,
    top_p: float | None = None,
    seed: int | None = None,
    beam_size: int | None = None,
    length_penalty: float | None = None,
    beam_stop: str | None = None,
    use_cache: bool = True,
    repetition_penalty: float | None = None,
    no_repeat_ngram_size: int | None = None,
    end_token: str | Sequence[str] | None = None,
    suppress: str | Sequence[str | Sequence[str]] | None = None,
    misplaced: Misplaced = api_misplaced,
) -> DecodeConfig:
    """The :class:`DecodeConfig` of the API's and the CLI's keyword arguments (see :func:`generation_config`).

    ``temperature`` (1.0), ``top_k`` (0: all), ``top_p`` (1.0) and ``seed`` (1) apply to strategy "sample" only,
    ``beam_size``, ``length_penalty`` (GNMT's α: beams ranked by summed log-probability / ((5 + length) / 6)^α;
    generation's default 0 ranks them by summed log-probability) and ``beam_stop`` ("finished", the default, or
    "exact": :data:`~dotformer.decoding.config.BEAM_STOPS`) to strategy "beam" only; None: not given.
    ``repetition_penalty``, ``no_repeat_ngram_size``, ``end_token`` and ``suppress`` are the controls of
    :data:`~dotformer.decoding.options.CONTROL_OPTIONS` (:mod:`dotformer.decoding.controls`), for every strategy.

    Raises:
        ConfigError: a value out of range (the message names it), or a setting of another strategy (the message,
            from ``misplaced``, names them).
    """
    from dotformer.decoding.config import generation_config

    sampling = {"temperature": temperature, "top_k": top_k, "top_p": top_p, "seed": seed}
    given: dict[str, Any] = {name: value for name, value in sampling.items() if value is not None}
    if given and strategy != "sample":
        raise ConfigError(misplaced(list(given), "sample", strategy))
    search = {"beam_size": beam_size, "length_penalty": length_penalty, "beam_stop": beam_stop}
    beam = {name: value for name, value in search.items() if value is not None}
    if beam and strategy != "beam":
        raise ConfigError(misplaced(list(beam), "beam", strategy))
    given.update(beam)
    controls = {
        "repetition_penalty": repetition_penalty, "no_repeat_ngram_size": no_repeat_ngram_size,
        "end_token": end_token, "suppress": suppress,
    }  # fmt: skip
    given.update({name: value for name, value in controls.items() if value is not None})
    return generation_config(max_new_tokens, strategy, n, use_cache=use_cache, **given)


def not_a_language_model(path: Any, arch: str) -> str:
    """The one line refusing ``generate`` of a model that is not decoder-only, naming the command that reads it: an
    encoder classifies or embeds texts, an encoder-decoder translates them."""
    use = (
        "classify or embed texts with it: dotformer classify, dotformer embed"
        if arch == "encoder-only"
        else "translate with it: dotformer translate"
    )
    return (
        f"{path} is an {arch} model: generate continues text with a language model (dotformer train --task lm); {use}"
    )
