"""Language models on a CTranslate2 ``Generator``: ``dotformer generate``'s continuations, as the lesson's decoder
gives them (:func:`dotformer.decoding.generate.generate`).

==========================  ======================================================================================
dotformer                   CTranslate2
==========================  ======================================================================================
the prompt (a line start)   the start tokens, ``</s>`` first (:func:`dotformer.decoding.inputs.encode_prompt`)
greedy, sampling            ``generate_batch`` (``end_token=[]``: run on across line ends for max_new_tokens)
an imported model's text    its prompt as the torch engine reads it (BOS first where the family adds one, no line
                            start); ``end_token`` = its EOS ids' strings, the end token kept (``return_end_token``)
sampling settings, seed     ``sampling_topk`` / ``_topp`` / ``_temperature``; a fresh ``Generator`` after
                            ``set_random_seed`` (CTranslate2 seeds a thread's generator once, on first use)
n samples                   the prompt n times in one batch: samples in draw order
beam K, n best              ``beam_size`` K, searched in rounds until dotformer's search stops (by its
                            ``beam_stop`` rule), ranked as dotformer ranks them, each ending at ``</s>`` (the line's
                            end)
streaming                   ``generate_tokens``: each token as it comes
repetition_penalty,         ``repetition_penalty``, ``no_repeat_ngram_size``, ``suppress_sequences``; both read the
no_repeat_ngram_size,       new tokens only (``include_prompt_in_result=False``), as the torch engine does
suppress
end_token                   ``end_token`` (beside an imported model's EOS ids); a continuation stops before the
                            first of them; with beam search, the torch engine runs (CTranslate2's beam search runs on
                            past an end token other than ``</s>``)
PAD and BOS                 ``suppress_sequences=[["<pad>"], ["<s>"]]``; an imported model's four copied special
                            rows (held down by its generator's bias) all four
==========================  ======================================================================================

Beam search over an imported model's several EOS ids ranks as the torch engine's
(:func:`dotformer.decoding.generate.end_of_text`): a hypothesis ends at any of them, scored with the likeliest.
CTranslate2 keeps one finished hypothesis per EOS id that ends it, so it is asked for K + E of them (E EOS ids), the
copies of one text are merged into the best scored, and the rest are ranked as dotformer ranks them.

The torch engine slides its view when the text outgrows the model's context window (the block size it trained on);
CTranslate2 has no such window, so a prompt and ``max_new_tokens`` longer than it run on the torch engine only; so
does a prompt longer than a model's sliding window W (CTranslate2 reads such a prompt in pieces of W tokens, and
its outputs then differ from the window's).
Greedy and beam outputs are the torch engine's (tested); samples follow the same distribution with another random
generator.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from dotformer.data.tokenize.tokenizers import EOS_ID, NUM_SPECIAL
from dotformer.decoding.control_tokens import control_token_ids
from dotformer.decoding.options import has_controls
from dotformer.engines.choice import EngineOptionError
from dotformer.engines.ct2_translate import (
    EOS,
    SUPPRESSED,
    CT2Copy,
    beam_settled,
    finished_step,
    first_round,
    gnmt_penalty,
    read_vocabulary,
)

END_TOKEN_BEAM = "CTranslate2's beam search runs on past an end token other than </s>"

if TYPE_CHECKING:
    from dotformer.decoding.config import DecodeConfig
    from dotformer.decoding.engine import TokenCallback


class CT2Generate(CT2Copy):
    """A language model's CTranslate2 copy, continuing prompts as
    :meth:`~dotformer.engines.torch.TorchEngine.generate` does (arguments:
    :class:`~dotformer.engines.ct2_translate.CT2Copy`).
    """

    runner = "Generator"

    def opened(self) -> None:
        """The ``Generator`` and the vocabulary."""
        self.generator = self.open()
        self.vocab = read_vocabulary(self.model_dir / "vocabulary.json")
        self.ids = {token: i for i, token in enumerate(self.vocab)}

    def generate(
        self,
        prompt: Sequence[int],
        config: DecodeConfig,
        window: int,
        on_token: TokenCallback | None = None,
        stop_ids: Sequence[int] = (),
    ) -> list[list[int]]:
        """The new ids of each continuation of ``prompt``, as :func:`dotformer.decoding.generate.generate` gives them
        (the arguments of :meth:`~dotformer.decoding.engine.GenerationEngine.generate`; ``on_token`` is called with
        ``[token]`` for each token of a single greedy or sampled continuation).

        Raises:
            EngineOptionError: ``use_cache=False``, a prompt and ``max_new_tokens`` beyond ``window``, or a prompt
                longer than the model's ``sliding_window``.
        """
        tokens = self.prompt_tokens(prompt, config, window)
        generator, sampling = self.generator, self.sampling(config)
        if config.strategy == "sample":
            generator = self.open(config.seed)
        end_ids, _ = control_token_ids(config, self.checkpoint.tgt_tokenizer)  # an unknown token, named as torch's
        user_ends = [self.vocab[i] for i in end_ids]
        ends = [self.vocab[i] for i in stop_ids] + user_ends  # empty: run on across line ends
        suppressed = self.suppressed(bool(stop_ids)) + [list(sequence) for sequence in config.suppress]
        common = dict(
            max_length=config.max_len_b, suppress_sequences=suppressed, repetition_penalty=config.repetition_penalty,
            no_repeat_ngram_size=config.no_repeat_ngram_size, **sampling,
        )  # fmt: skip
        if config.strategy == "beam":
            if user_ends:
                raise EngineOptionError(f"end_token with beam search runs on the torch engine only ({END_TOKEN_BEAM})")
            return self.beam(generator, tokens, config, common, ends)
        if on_token is not None and config.n_best == 1:
            produced: list[int] = []
            for step in generator.generate_tokens(tokens, end_token=ends, **common):
                if int(step.token_id) in end_ids:
                    break
                produced.append(int(step.token_id))
                on_token([produced[-1]])
            return [produced]
        results = generator.generate_batch(
            [tokens] * config.n_best, beam_size=1, end_token=ends, return_end_token=True,
            include_prompt_in_result=False, **common,
        )  # fmt: skip
        outputs = [[self.ids[t] for t in result.sequences[0]] for result in results]
        return [ids[:-1] if ids and ids[-1] in end_ids else ids for ids in outputs]

    def greedy_batch(
        self, prompts: Sequence[Sequence[int]], config: DecodeConfig, window: int, stop_ids: Sequence[int] = ()
    ) -> list[list[int]]:
        """The greedy continuation of each prompt, one ``generate_batch`` call per prompt length: each row's is the
        one :meth:`generate` gives it alone. Prompts of one length share a call (greedy decoding reads nothing of the
        other rows); prompts of different lengths do not, because CTranslate2 forwards the shortest prompt's length
        at once and the rest of each longer prompt step by step, in other sums than alone, which can turn a near-tie
        of the argmax the other way.

        Raises:
            EngineOptionError: as :meth:`generate`, for the first prompt it refuses.
            ValueError: a strategy other than greedy, or ``n_best`` > 1.
        """
        if config.strategy != "greedy" or config.n_best != 1 or has_controls(config):
            raise ValueError("greedy_batch continues each prompt once, greedily, without controls")
        rows = [self.prompt_tokens(prompt, config, window) for prompt in prompts]
        by_length: dict[int, list[int]] = {}
        for i, row in enumerate(rows):
            by_length.setdefault(len(row), []).append(i)
        options = dict(
            beam_size=1, end_token=[self.vocab[i] for i in stop_ids], return_end_token=True,
            include_prompt_in_result=False, max_length=config.max_len_b,
            suppress_sequences=self.suppressed(bool(stop_ids)),
        )  # fmt: skip
        outputs: list[list[int]] = [[] for _ in rows]
        for indices in by_length.values():
            results = self.generator.generate_batch([rows[i] for i in indices], **options)
            for i, result in zip(indices, results, strict=True):
                outputs[i] = [self.ids[t] for t in result.sequences[0][: config.max_len_b]]
        return outputs

    def prompt_tokens(self, prompt: Sequence[int], config: DecodeConfig, window: int) -> list[str]:
        """The prompt as the copy's tokens (empty: EOS, a new line), once it is known to fit.

        Raises:
            EngineOptionError: ``use_cache=False``, a prompt and ``max_new_tokens`` beyond ``window``, or a prompt
                longer than the model's ``sliding_window``.
        """
        new = config.max_len_b
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
        return tokens

    def suppressed(self, imported: bool) -> list[list[str]]:
        """The tokens never generated: PAD and BOS (dotformer's rule); an imported model's four copied special rows
        (:mod:`dotformer.imports.decoder`: its generator's bias holds them down, this keeps them out)."""
        return [[token] for token in self.vocab[:NUM_SPECIAL]] if imported else SUPPRESSED

    def beam(
        self, generator: Any, tokens: list[str], config: DecodeConfig, common: dict[str, Any], ends: list[str]
    ) -> list[list[int]]:
        """The ``n_best`` continuations of beam search, found and ranked as dotformer finds and ranks them: searched
        in rounds until dotformer's search would have stopped by its ``beam_stop`` rule (K finished:
        :func:`~dotformer.engines.ct2_translate.finished_step`; exact: :meth:`CT2Translate.beam_rounds
        <dotformer.engines.ct2_translate.CT2Translate.beam_rounds>`), the summed log-probabilities (the end token
        included) divided by dotformer's length penalty. The end tokens are EOS, or an imported model's EOS ids
        ``ends``: a text that ends at several of them counts once, with its best score (the likeliest EOS, as
        :func:`~dotformer.decoding.generate.end_of_text` scores it)."""

        k, alpha, most = config.beam_size, config.length_penalty, common["max_length"]
        ends = ends or [EOS]
        steps = first_round(0, most)  # a continuation's length does not follow its prompt's
        while True:
            (result,) = generator.generate_batch(
                [tokens], beam_size=k, num_hypotheses=k * (steps + 1), patience=steps + 1, length_penalty=alpha,
                end_token=ends, return_scores=True, return_end_token=True, include_prompt_in_result=False,
                **{**common, "max_length": steps},
            )  # fmt: skip
            found = self.texts_of(result, ends, alpha)
            stop = finished_step([hyp[:3] for hyp in found], k) if config.beam_stop == "finished" else None
            if stop is not None and stop < most:  # K finished before the limit: those up to that step
                found = [hyp for hyp in found if hyp[2] and hyp[1] <= stop]
                break
            if steps >= most:
                break
            if config.beam_stop != "finished" and beam_settled([hyp[:3] for hyp in found], steps, most, k, alpha):
                found = [hyp for hyp in found if hyp[2]]
                break
            steps = min(2 * steps, most)
        ranked = [(total / gnmt_penalty(length, alpha), body) for total, length, _, body in found]
        ranked.sort(key=lambda item: -item[0])  # stable: CTranslate2's order among ties
        return [list(ids) for _, ids in ranked[: config.n_best]]

    def texts_of(self, result: Any, ends: list[str], alpha: float) -> list[tuple[float, int, bool, tuple[int, ...]]]:
        """One round's hypotheses as ``(summed log-probability, |Y| with the end token, finished, ids without it)``,
        one per distinct text and state: a text ending at several end tokens once, with its best score."""
        best: dict[tuple[tuple[int, ...], bool], tuple[float, int, bool, tuple[int, ...]]] = {}
        for sequence, score in zip(result.sequences, result.scores, strict=True):
            finished = bool(sequence) and sequence[-1] in ends
            body = tuple(self.ids[t] for t in (sequence[:-1] if finished else sequence))
            hyp = (score * len(sequence) ** alpha, len(sequence), finished, body)
            if (body, finished) not in best or hyp[0] > best[body, finished][0]:
                best[body, finished] = hyp
        return list(best.values())

    @staticmethod
    def sampling(config: DecodeConfig) -> dict[str, Any]:
        """The sampling options of ``config`` (greedy and beam search: none, CTranslate2's greedy choice)."""
        if config.strategy != "sample":
            return {}
        return dict(sampling_topk=config.top_k, sampling_topp=config.top_p, sampling_temperature=config.temperature)
