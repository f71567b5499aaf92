"""Language models on a CTranslate2 ``Generator``: ``dotformer generate``'s continuations, as the lesson's decoder
gives them (:func:`dotformer.decoding.generate.generate`).

==========================  ======================================================================================
dotformer                   CTranslate2
==========================  ======================================================================================
the prompt (a line start)   the start tokens, ``</s>`` first (:func:`dotformer.decoding.inputs.encode_prompt`)
greedy, sampling            ``generate_batch`` (``end_token=[]``: run on across line ends for max_new_tokens)
sampling settings, seed     ``sampling_topk`` / ``_topp`` / ``_temperature``; a fresh ``Generator`` after
                            ``set_random_seed`` (CTranslate2 seeds a thread's generator once, on first use)
n samples                   the prompt n times in one batch: samples in draw order
beam K, n best              ``beam_size`` K, searched in rounds until dotformer's search stops, ranked as dotformer
                            ranks them, each ending at ``</s>`` (the line's end)
streaming                   ``generate_tokens``: each token as it comes
PAD and BOS                 ``suppress_sequences=[["<pad>"], ["<s>"]]``
==========================  ======================================================================================

The torch engine slides its view when the text outgrows the model's context window (the block size it trained on);
CTranslate2 has no such window, so a prompt and ``max_new_tokens`` longer than it run on the torch engine only; so
does a prompt longer than a model's sliding window W (CTranslate2 reads such a prompt in pieces of W tokens, and
its outputs then differ from the window's).
Greedy and beam outputs are the torch engine's (tested); samples follow the same distribution with another random
generator.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dotformer.data.tokenizers import EOS_ID
from dotformer.engines.choice import EngineOptionError, ct2_model_options
from dotformer.engines.ct2_translate import MAX_SEED, SUPPRESSED, read_vocabulary

if TYPE_CHECKING:
    from dotformer.checkpoint.files import CheckpointFiles
    from dotformer.decoding.config import DecodeConfig
    from dotformer.decoding.engine import TokenCallback


class CT2Generate:
    """A language model's CTranslate2 copy, continuing prompts as
    :meth:`~dotformer.engines.torch.TorchEngine.generate` does.

    Args:
        checkpoint: the checkpoint's files. model_dir: its CTranslate2 copy (:func:`dotformer.engines.cache.ct2_copy`).
        device, compute_type, intra_threads, inter_threads: as :class:`~dotformer.engines.ct2_translate.CT2Translate`.
    """

    name = "ctranslate2"

    def __init__(
        self,
        checkpoint: CheckpointFiles,
        model_dir: Path,
        device: str = "cpu",
        compute_type: str = "float32",
        intra_threads: int = 0,
        inter_threads: int = 1,
    ) -> None:
        import ctranslate2

        self.checkpoint = checkpoint
        self.model_dir = model_dir
        self.options = ct2_model_options(device, compute_type, intra_threads, inter_threads)
        kind, index = self.options["device"], self.options["device_index"]
        self.device = kind if kind == "cpu" else f"cuda:{index}"
        self.generator = ctranslate2.Generator(str(model_dir), **self.options)
        self.vocab = read_vocabulary(model_dir / "vocabulary.json")
        self.ids = {token: i for i, token in enumerate(self.vocab)}

    def __repr__(self) -> str:
        return f"CT2Generate({str(self.model_dir)!r}, {self.options['compute_type']}, {self.device})"

    def generate(
        self,
        prompt: Sequence[int],
        config: DecodeConfig,
        window: int,
        on_token: TokenCallback | None = None,
        stop_ids: Sequence[int] = (),
    ) -> list[list[int]]:
        """The new ids of each continuation of ``prompt`` (ids, EOS = a line end; empty: a new line).

        Args:
            prompt: the prompt's ids. config: from :func:`dotformer.api.generation.generation_settings`.
            window: the model's context (its block size): the prompt and the new tokens must fit in it.
            on_token: called with ``[token]`` for each token of a single greedy or sampled continuation, as it comes.

        Returns:
            ``n_best`` continuations: samples in draw order, beams best first (ending at EOS, which is left out, or at
            ``max_new_tokens``).

        Raises:
            EngineOptionError: ``use_cache=False``, ``stop_ids`` (an imported model's EOS: the torch engine's), a
                prompt and ``max_new_tokens`` beyond ``window``, or a prompt longer than the model's ``sliding_window``.
        """
        new = config.max_len_b
        if stop_ids:
            raise EngineOptionError("an imported model's EOS rules run on the torch engine only")
        if not config.use_cache:
            raise EngineOptionError("use_cache=False runs on the torch engine only (CTranslate2 always caches)")
        tokens = [self.vocab[t] for t in (list(prompt) or [EOS_ID])]
        if len(tokens) + new > window:
            raise EngineOptionError(
                f"the prompt ({len(tokens)} tokens) and the {new} new tokens asked for exceed the model's context "
                f"window ({window} tokens): only the torch engine slides its window along a longer text"
            )
        window_of_layers = self.checkpoint.config.sliding_window
        if window_of_layers is not None and len(tokens) > window_of_layers:
            raise EngineOptionError(
                f"the prompt ({len(tokens)} tokens) is longer than the model's sliding window ({window_of_layers}): "
                "CTranslate2 reads it in pieces that do not keep to the window, only the torch engine does"
            )
        generator, sampling = self.generator, self.sampling(config)
        if config.strategy == "sample":  # a fresh Generator: CTranslate2 seeds a thread's generator once, on first use
            import ctranslate2

            ctranslate2.set_random_seed(config.seed % (MAX_SEED + 1))
            generator = ctranslate2.Generator(str(self.model_dir), **{**self.options, "inter_threads": 1})
        common = dict(max_length=new, suppress_sequences=SUPPRESSED, **sampling)
        if config.strategy != "beam" and on_token is not None and config.n_best == 1:
            produced = []
            for step in generator.generate_tokens(tokens, end_token=[], **common):
                produced.append(int(step.token_id))
                on_token([produced[-1]])
            return [produced]
        if config.strategy == "beam":
            return self.beam(generator, tokens, config, common)
        results = generator.generate_batch(
            [tokens] * config.n_best, beam_size=1, end_token=[], include_prompt_in_result=False, **common
        )
        return [[self.ids[t] for t in result.sequences[0]] for result in results]

    def beam(self, generator: Any, tokens: list[str], config: DecodeConfig, common: dict[str, Any]) -> list[list[int]]:
        """The ``n_best`` continuations of beam search, found and ranked as dotformer finds and ranks them: searched
        in rounds until dotformer's search would have stopped (:meth:`CT2Translate.beam_rounds
        <dotformer.engines.ct2_translate.CT2Translate.beam_rounds>`), the summed log-probabilities (EOS included)
        divided by dotformer's length penalty."""
        from dotformer.engines.ct2_translate import EOS, beam_settled, first_round, gnmt_penalty

        k, alpha, most = config.beam_size, config.length_penalty, common["max_length"]
        steps = first_round(0, most)  # a continuation's length does not follow its prompt's
        while True:
            (result,) = generator.generate_batch(
                [tokens], beam_size=k, num_hypotheses=k * (steps + 1), patience=steps + 1, length_penalty=alpha,
                return_scores=True, return_end_token=True, include_prompt_in_result=False,
                **{**common, "max_length": steps},
            )  # fmt: skip
            found = [
                (score * len(sequence) ** alpha, len(sequence), bool(sequence) and sequence[-1] == EOS, sequence)
                for sequence, score in zip(result.sequences, result.scores, strict=True)
            ]  # (summed log-probability, |Y| with the EOS, finished, tokens)
            if steps >= most:
                break
            if beam_settled([hyp[:3] for hyp in found], steps, most, k, alpha):
                found = [hyp for hyp in found if hyp[2]]
                break
            steps = min(2 * steps, most)
        ranked = []
        for total, length, finished, sequence in found:
            body = sequence[:-1] if finished else sequence
            ranked.append((total / gnmt_penalty(length, alpha), [self.ids[t] for t in body]))
        ranked.sort(key=lambda item: -item[0])  # stable: CTranslate2's order among ties
        return [ids for _, ids in ranked[: config.n_best]]

    @staticmethod
    def sampling(config: DecodeConfig) -> dict[str, Any]:
        """The sampling options of ``config`` (greedy and beam search: none, CTranslate2's greedy choice)."""
        if config.strategy != "sample":
            return {}
        return dict(sampling_topk=config.top_k, sampling_topp=config.top_p, sampling_temperature=config.temperature)
