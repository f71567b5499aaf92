"""dotformer's decoding options on a CTranslate2 ``Translator``: the same outputs as the lesson's decoder, faster.

Every option of :data:`~dotformer.decoding.options.DECODE_OPTIONS` maps onto ``Translator.translate_batch``:

==============================  ========================================================================
dotformer                       CTranslate2
==============================  ========================================================================
greedy / beam K / sample        ``beam_size`` 1 / K / 1 with ``sampling_topk``, ``sampling_topp``,
                                ``sampling_temperature`` (top_k 0: the whole vocabulary)
beam_stop                       finished: ``patience`` 1, ``num_hypotheses`` K; exact: searched in rounds (below)
n_best                          beam: the hypotheses returned, ranked as dotformer ranks them (see below)
max_len_a, max_len_b            ``max_decoding_length`` (steps, EOS included; a prefix counts)
min_len_a, min_len_b            ``min_decoding_length`` (tokens before EOS; a prefix counts)
seed                            ``ctranslate2.set_random_seed`` before a fresh ``Translator``
prefix                          ``target_prefix`` (kept in the output, as dotformer keeps it)
repetition_penalty              ``repetition_penalty`` (:mod:`dotformer.decoding.controls`: the same rule on the logits)
no_repeat_ngram_size            ``no_repeat_ngram_size``
end_token                       ``end_token`` (``</s>`` and those tokens, left out of the output); greedy and sampling
                                only: CTranslate2's beam search runs on past an end token other than ``</s>``
suppress                        ``suppress_sequences`` (beside PAD and BOS)
alignments                      ``return_attention`` (the last layer's heads averaged, as dotformer's)
replace_unk                     dotformer's own replacement, on those alignments
PAD and BOS never generated     ``suppress_sequences=[["<pad>"], ["<s>"]]``
batch_size / max_tokens         ``max_batch_size`` with ``batch_type`` "examples" / "tokens": the limit that binds
==============================  ========================================================================

The source goes in as its pieces *without* ``</s>``: the copy's ``add_source_eos`` appends it, as dotformer's
decoding does (a second one would change every output).

**Scores.** CTranslate2 reports a hypothesis's summed log-probability (over the tokens after a prefix, its EOS
included) divided by ``|Y|^β``, β the length penalty it is given (α / 2 for a beam search, :func:`search_alpha`);
dotformer's is the sum over every token (the prefix's included) divided by the GNMT penalty ``((5 + |Y|) / 6)^α``,
|Y| counting the EOS. The sum is recovered (``score · |Y|^β``, plus the prefix's log-probability from
``score_batch``) and divided by dotformer's penalty, and a beam's finished hypotheses are ranked by that, as
dotformer's beam search ranks them (CTranslate2 first cuts them to ``num_hypotheses`` by its own penalty: see "Beam
search" for how none that dotformer keeps is lost). Those log-probabilities are CTranslate2's search's, where PAD
and BOS are suppressed before the softmax; dotformer's leave the model's probabilities untouched. With
``scores=True`` (the default) each returned hypothesis is therefore scored once more with ``score_batch`` on the
copy, whose generator is the checkpoint's own (PAD and BOS not suppressed): its ``log_probs`` and ``score`` are then
dotformer's, to float precision. With ``scores=False`` (the CLI's text output, evaluation) that pass is skipped:
``score`` is the search's and ``log_probs`` is empty.

**Beam search.** Both searches take the K best non-EOS of 2K candidates at each step and finish the EOS among the
best K, so they search the same beams, to float rounding, as long as PAD and BOS carry no probability: CTranslate2
takes them out before its softmax, dotformer after (its log-probabilities stay the model's), so where a model gives
them mass (a few percent per step on the tests' briefly fitted model, about 10⁻⁵ on a trained one) the two rank
candidates slightly differently and near-ties may break either way. When each stops is ``beam_stop``
(:mod:`dotformer.decoding.beam`):

- ``"finished"`` (the default) is CTranslate2's own rule: its ``BeamSearch`` stops once ``round(K · patience)``
  hypotheses have finished (each EOS among the best K candidates of a step counts), so one ``translate_batch`` call
  with ``patience`` 1 stops where dotformer's search stops. It then returns the ``num_hypotheses`` best of them by
  its own score (the sum over ``|Y|^β``), and allows at most ``round(K · patience)`` = K of them, while the last
  step may bring the count to as many as 2K - 1. A finished hypothesis left out scored at most the lowest returned
  by that score and is no longer than the stop's step, which bounds its dotformer score (:func:`cut_is_safe`):
  where the ``n_best``-th best returned scores above the bound, the returned ones hold dotformer's ``n_best``; the
  few other sources are searched again up to that step with every hypothesis returned
  (:meth:`CT2Translate.beam_uncut`). β = α / 2 keeps CTranslate2's ranking close to dotformer's, so those are few.
- ``"exact"``: dotformer's search stops once no alive hypothesis can still win (its bound with ``L_max``), which
  CTranslate2 has no rule for (asked for K + 1 hypotheses, it stopped before the best output had finished on 1 to 3%
  of a reversal model's inputs). So it runs in rounds: M steps with a patience no search reaches (every finished
  hypothesis and, at step M, the K best candidates are returned), after which :func:`beam_settled` checks
  dotformer's stopping rule on them; a source whose search would go on is searched again for 2M steps, up to its
  limit. Every source decodes at least M steps with all its hypotheses kept, which makes this rule the slower one.

**Where outputs differ.** Greedy decoding chooses the same token at every step (the argmax does not depend on the
suppressed mass). Beam search: above. Sampling draws from the same distribution with another random generator: the
same seed gives the same samples on one engine, not across engines. CTranslate2's length limit holds per batch,
dotformer's per sentence: greedy, sampling and beam search to K finished decode a batch to its longest limit, and
the few inputs whose output reaches their own limit are decoded again with it; an exact beam search's last round runs
to each input's own limit.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, NamedTuple

from dotformer.data.tokenize.tokenizers import EOS_ID, UNK_ID
from dotformer.decoding.alignment import check_alignment_layer, check_replace_unk, unknowns_replaced
from dotformer.decoding.control_tokens import control_token_ids
from dotformer.decoding.engine import NLLResult
from dotformer.decoding.inputs import check_prefixes, is_empty_source
from dotformer.decoding.order import check_batch_limits, show_progress
from dotformer.decoding.results import Translation, empty_translation
from dotformer.engines.choice import EngineOptionError, ct2_model_options, torch_only_fields, torch_only_reason
from dotformer.errors import DataError
from dotformer.export.ct2_rules import exported_positions

if TYPE_CHECKING:
    from dotformer.checkpoint.files import CheckpointFiles
    from dotformer.data.read.types import Pair
    from dotformer.decoding.config import DecodeConfig
    from dotformer.decoding.inputs import EncodedTexts

EOS = "</s>"
SUPPRESSED = [["<pad>"], ["<s>"]]  # PAD and BOS are never generated (dotformer's rule, decoding/rules.py)
MAX_SEED = 2**32 - 2  # CTranslate2's seeds are 32-bit, and 2**32 - 1 means "random": seeds are taken modulo this + 1
PROGRESS_CHUNK = 8  # with a progress bar, inputs go to CTranslate2 in chunks of this many batches
FIRST_ROUND_EXTRA = 4  # a beam search's first round: 1.25 times the source's length plus this (first_round)
NEG_INF = float("-inf")
TINY_ALPHA = 1e-30  # CTranslate2's length penalty for α = 0 (search_alpha): |Y|^1e-30 is 1.0 in float32


class Ranked(NamedTuple):
    """One hypothesis in dotformer's terms, ranked.

    Attributes:
        ids: the target ids (the prefix's included, no EOS). finished: the model ended it with EOS (or an end token).
        score: the search's summed log-probability over dotformer's length penalty.
        alignment: ``(source index, output index)`` per token, when attention was asked for.
        end: the id of the end token that finished it, when not EOS.
    """

    ids: list[int]
    finished: bool
    score: float
    alignment: list[tuple[int, int]] | None
    end: int | None = None


class Found(NamedTuple):
    """One hypothesis as CTranslate2's search returned it.

    Attributes:
        tokens: the target pieces, the prefix's included, ``</s>`` last when the model ended it.
        score: CTranslate2's score (its sum over the tokens after the prefix, divided by ``len(tokens)^α``).
        attention: per token, its weights over the source pieces (EOS excluded); None unless asked for.
    """

    tokens: list[str]
    score: float
    attention: list[list[float]] | None


def read_vocabulary(path: Path) -> list[str]:
    """The token strings of a CTranslate2 vocabulary file (a JSON list; id i is the i-th string)."""
    return list(json.loads(path.read_text(encoding="utf-8")))


def read_vocabularies(model_dir: Path) -> tuple[list[str], list[str]]:
    """The source and target token strings of a CTranslate2 ``Translator`` directory (one shared file when the two
    vocabularies are equal)."""
    shared = model_dir / "shared_vocabulary.json"
    if shared.is_file():
        vocabulary = read_vocabulary(shared)
        return vocabulary, vocabulary
    return read_vocabulary(model_dir / "source_vocabulary.json"), read_vocabulary(model_dir / "target_vocabulary.json")


def end_pieces(config: DecodeConfig) -> list[str]:
    """The pieces that end an output: ``</s>`` and the config's end tokens (:mod:`dotformer.decoding.controls`)."""
    return [EOS, *(token for token in config.end_token if token != EOS)]


def ended(tokens: Sequence[str], ends: Sequence[str]) -> bool:
    """Whether a hypothesis's pieces end with one of ``ends`` (it finished)."""
    return bool(tokens) and tokens[-1] in ends


def gnmt_penalty(length: int, alpha: float) -> float:
    """dotformer's GNMT length penalty ((5 + |Y|) / 6)^α (:func:`dotformer.decoding.length_penalty`), in Python."""
    return float(((5.0 + length) / 6.0) ** alpha)


def search_alpha(alpha: float) -> float:
    """The length penalty β CTranslate2's beam search is given for dotformer's α: α / 2, and :data:`TINY_ALPHA` for
    α = 0. CTranslate2 ranks its candidates by summed log-probability and reads β only at the end, to rank the
    finished hypotheses by sum / |Y|^β and cut them to ``num_hypotheses`` (the sums are recovered as score · |Y|^β
    and ranked by dotformer's penalty, "Scores"). |Y|^(α/2) is the GNMT penalty ((5 + |Y|) / 6)^α times
    (36|Y| / (5 + |Y|)²)^(α/2), a factor from 1 to 1.8^(α/2) for |Y| from 1 to 25: close enough that the cut
    rarely drops a hypothesis dotformer ranks higher (:func:`cut_is_safe`). For α = 0 CTranslate2 would stop once
    its best candidate finished instead of counting finished hypotheses; 10⁻³⁰ keeps the count and changes no
    score."""
    return alpha / 2 if alpha > 0 else TINY_ALPHA


def first_round(source_length: int, most: int) -> int:
    """Steps of a source's first beam-search round (:meth:`CT2Translate.beam_rounds`): 1.25 times its length plus
    :data:`FIRST_ROUND_EXTRA` (where a search of an output up to a quarter longer than its source has mostly
    stopped), at most its limit ``most``. Any value gives the same outputs; this one only sets the cost: every
    round runs all its steps, so a longer first round costs each source its extra steps, a shorter one costs the
    sources it does not settle a second round of twice its steps (on a trained G2P model, 1.25n + 4 decodes 1,000
    test words in 0.63x the CPU time of 1.5n + 8)."""
    return min(most, (5 * source_length) // 4 + FIRST_ROUND_EXTRA)


def finished_step(hyps: Sequence[tuple[float, int, bool]], beam_size: int) -> int | None:
    """The step at which the K-th hypothesis finished (``beam_stop`` "finished", :func:`dotformer.decoding.beam.is_done`
    stops there), from a round's hypotheses ``(summed log-probability, |Y|, finished)`` that hold every finished one;
    None while fewer than K have finished. A hypothesis finished at step |Y|."""
    lengths = sorted(length for _, length, done in hyps if done)
    return lengths[beam_size - 1] if len(lengths) >= beam_size else None


def beam_settled(hyps: Sequence[tuple[float, int, bool]], steps: int, most: int, beam_size: int, alpha: float) -> bool:
    """True when dotformer's beam search has stopped by step ``steps`` (:func:`dotformer.decoding.beam.is_done`): it
    holds K finished hypotheses and the best beam alive at step ``steps``, divided by the penalty of the limit
    ``most``, cannot beat the K-th of them.

    Args:
        hyps: one round's hypotheses as ``(summed log-probability, |Y|, finished)``: every finished one, and the K
            best candidates of its last step (alive, or ending there). The best alive beam is the best unfinished
            one among those K; when all K end with EOS, every alive beam scores at most the last of them.
        steps: the round's steps. most: the search's limit L_max. beam_size: K. alpha: the length penalty's α.
    """
    finished = sorted((total / gnmt_penalty(length, alpha) for total, length, done in hyps if done), reverse=True)
    if len(finished) < beam_size:
        return False
    alive = [total for total, _, done in hyps if not done]
    last = [total for total, length, done in hyps if done and length == steps]
    best_alive = max(alive) if alive else min(last, default=NEG_INF)
    return best_alive / gnmt_penalty(most, alpha) <= finished[beam_size - 1]


def ranking_scores(hyps: Sequence[Found], alpha: float, beta: float, prefix_sum: float) -> list[float]:
    """dotformer's score of each hypothesis: CTranslate2's sum recovered (``score · |Y|^β``; β 0 where the search
    was given no length penalty), plus the prefix's sum, over the GNMT penalty of |Y| (the prefix and the EOS
    included), as dotformer's beam search ranks its finished hypotheses (module docstring, "Scores")."""
    lengths = [len(hyp.tokens) for hyp in hyps]
    return [(hyp.score * n**beta + prefix_sum) / gnmt_penalty(n, alpha) for hyp, n in zip(hyps, lengths, strict=True)]


def cut_is_safe(hyps: Sequence[Found], config: DecodeConfig, prefix_sum: float) -> bool:
    """Whether the hypotheses CTranslate2 returned for a source hold dotformer's ``n_best`` best of all it finished
    (module docstring, "Beam search"). It returns the K best by its own score, a sum s over |Y|^β
    (:func:`search_alpha`); one left out scored m or less (m: the lowest returned), and its length L is from 1 to
    the stop's step T (the longest returned), so with the prefix's sum p its dotformer score is

        (s + p) / lp(L) ≤ max over L = 1..T of (m · L^β + p) / lp(L)

    The cut is safe when the ``n_best``-th best returned scores above that; fewer than K returned (none left out)
    and α = 0 (both rank by the sum) are safe too.

    Args:
        hyps: a source's hypotheses from a beam search with ``num_hypotheses`` K. config: the decoding options.
        prefix_sum: the summed log-probability of the source's prefix (0 without one).
    """
    alpha, beta = config.length_penalty, search_alpha(config.length_penalty)
    if len(hyps) < config.beam_size or alpha == 0:
        return True
    ours = sorted(ranking_scores(hyps, alpha, beta, prefix_sum), reverse=True)
    lowest, longest = min(hyp.score for hyp in hyps), max(len(hyp.tokens) for hyp in hyps)
    # without a prefix the bound is m · min(L^β / lp(L)): that ratio rises, then falls, so its least is at an end
    candidates = (1, longest) if prefix_sum == 0 else range(1, longest + 1)
    bound = max((lowest * n**beta + prefix_sum) / gnmt_penalty(n, alpha) for n in candidates)
    return ours[config.n_best - 1] > bound


class CT2Copy:
    """A checkpoint's CTranslate2 copy on a device: what :class:`CT2Translate` and
    :class:`~dotformer.engines.ct2_generate.CT2Generate` share (a runner opens its model in :meth:`opened`).

    Args:
        checkpoint: the checkpoint's files (config, tokenizers).
        model_dir: its CTranslate2 copy (:func:`dotformer.engines.cache.ct2_copy`).
        device: cpu, cuda, cuda:N or auto.
        compute_type: CTranslate2's (float32, int8, bfloat16, float16).
        intra_threads: threads per batch (0: CTranslate2's default). inter_threads: batches decoded at once.
    """

    name = "ctranslate2"
    runner = "Translator"  # the CTranslate2 class that runs the copy

    def __init__(
        self,
        checkpoint: CheckpointFiles,
        model_dir: Path,
        device: str = "cpu",
        compute_type: str = "float32",
        intra_threads: int = 0,
        inter_threads: int = 1,
    ) -> None:
        self.checkpoint = checkpoint
        self.model_dir = model_dir
        self.options = ct2_model_options(device, compute_type, intra_threads, inter_threads)
        kind, index = self.options["device"], self.options["device_index"]
        self.device = kind if kind == "cpu" else f"cuda:{index}"
        self.opened()

    @property
    def batch_groups(self) -> int:
        """How many groups a server's batcher forms (:class:`~dotformer.api.batcher.Batcher`, "Groups"): 2 on a CPU,
        where a call's time grows about in proportion to its sentences, 1 on a GPU."""
        return 2 if self.device == "cpu" else 1

    def opened(self) -> None:
        """Open the copy's model and read its vocabularies (each runner's own)."""

    def open(self, seed: int | None = None) -> Any:
        """A CTranslate2 :attr:`runner` of the copy; with ``seed``, a fresh one on one thread after
        ``ctranslate2.set_random_seed`` (CTranslate2 seeds a thread's generator once, on first use)."""
        import ctranslate2

        if seed is None:
            return getattr(ctranslate2, self.runner)(str(self.model_dir), **self.options)
        ctranslate2.set_random_seed(seed % (MAX_SEED + 1))
        return getattr(ctranslate2, self.runner)(str(self.model_dir), **{**self.options, "inter_threads": 1})

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self.model_dir)!r}, {self.options['compute_type']}, {self.device})"


class CT2Translate(CT2Copy):
    """An encoder-decoder's CTranslate2 copy, decoding as :class:`~dotformer.engines.torch.TorchEngine` does
    (arguments: :class:`CT2Copy`)."""

    def opened(self) -> None:
        """The ``Translator``, the vocabularies and the copy's positional rows."""
        self.translator = self.open()
        self.src_vocab, self.tgt_vocab = read_vocabularies(self.model_dir)
        self.tgt_ids = {token: i for i, token in enumerate(self.tgt_vocab)}
        self.positions = exported_positions(self.checkpoint.config)  # the copy's positional rows

    # -- decoding ------------------------------------------------------------------------------------------------

    def decode(
        self,
        encoded: EncodedTexts,
        config: DecodeConfig,
        batch_size: int,
        progress: bool | None,
        max_tokens: int | None,
        prefixes: Sequence[Sequence[int]] | None = None,
        scores: bool = True,
    ) -> list[list[Translation]]:
        """Decode encoded sources as :func:`~dotformer.decoding.translate.decode_encoded` does, with the arguments of
        :meth:`~dotformer.decoding.engine.TranslationEngine.decode` (see the module docstring for the mapping, the
        scores and where outputs may differ); CTranslate2 takes one batch limit, the one that binds
        (:meth:`batching`).

        Raises:
            EngineOptionError: an option only the torch engine runs, or an output longer than the copy's positions.
            ConfigError, ShapeError: as ``decode_encoded`` (bad prefixes, replace_unk with BPE, a bad layer).
        """
        check_batch_limits(batch_size, max_tokens)
        check_alignment_layer(self.checkpoint, config.alignment_layer)  # with or without alignments, as torch's
        check_engine_options(config, self.checkpoint)
        control_token_ids(config, self.checkpoint.tgt_tokenizer)  # an unknown end or suppressed token, named as torch's
        if prefixes is not None:
            check_prefixes(prefixes, encoded, config)
        if config.replace_unk:
            check_replace_unk(self.checkpoint)
        results: list[list[Translation]] = [[] for _ in encoded.ids]
        todo = []
        for i, text in enumerate(encoded.texts):
            if is_empty_source(text) and prefixes and prefixes[i]:
                raise EngineOptionError(
                    f"input {i + 1} is empty and has a prefix: CTranslate2 decodes no empty source (the torch engine "
                    f"does)"
                )
            if is_empty_source(text):
                results[i] = [empty_translation()._replace(alignment=[] if config.alignments else None)]
            else:
                todo.append(i)
        by_length = {n: self.output_limit(config, n) for n in {len(encoded.ids[i]) for i in todo}}
        limits = {i: by_length[len(encoded.ids[i])] for i in todo}
        shown = show_progress(progress, len(encoded.ids))
        chunk = PROGRESS_CHUNK * batch_size if shown else max(1, len(todo))
        with progress_bar(len(encoded.ids), shown) as bar:
            bar.update(len(encoded.ids) - len(todo))
            for start in range(0, len(todo), chunk):
                part = todo[start : start + chunk]
                sums = self.prefix_sums(encoded, part, prefixes, batch_size)
                found = self.search(encoded, part, limits, config, batch_size, max_tokens, prefixes, sums)
                kept = self.ranked(found, config, sums)
                exact = self.exact_scores(encoded, kept, batch_size) if scores else {}
                for i in part:
                    results[i] = self.translations(encoded, i, kept[i], exact.get(i), config)
                bar.update(len(part))
        return results

    def output_limit(self, config: DecodeConfig, source_length: int) -> tuple[int, int]:
        """``(max, min)`` output length of a source of ``source_length`` tokens (EOS included), as dotformer's
        search limits it: at most the model's ``max_len`` positions
        (:func:`dotformer.decoding.incremental.output_positions`), which the copy holds; the minimum at most the
        maximum (the maximum wins, as in dotformer's search; CTranslate2 refuses a larger minimum)."""
        most = min(config.max_output_length(source_length), self.checkpoint.config.max_len)
        return most, min(config.min_output_length(source_length), most)

    def search(
        self,
        encoded: EncodedTexts,
        indices: Sequence[int],
        limits: dict[int, tuple[int, int]],
        config: DecodeConfig,
        batch_size: int,
        max_tokens: int | None,
        prefixes: Sequence[Sequence[int]] | None,
        sums: dict[int, float],
    ) -> dict[int, list[Found]]:
        """CTranslate2's hypotheses of the sources ``indices``. Greedy, sampling and beam search that stops once K
        hypotheses have finished: decoded together to their longest length limit (one call per minimum length),
        then the few whose output reached its own limit again with that limit; a beam search's few sources whose
        returned hypotheses may lack one of dotformer's best again with every hypothesis (:meth:`beam_uncut`).
        Beam search's exact rule: :meth:`beam_rounds`."""
        if config.strategy == "beam" and config.beam_stop != "finished":  # the exact rule
            return self.beam_rounds(encoded, indices, limits, config, batch_size, max_tokens, prefixes, sums)
        found: dict[int, list[Found]] = {}
        groups: dict[int, list[int]] = {}
        for i in indices:
            groups.setdefault(limits[i][1], []).append(i)
        for least, group in groups.items():
            most = max(limits[i][0] for i in group)
            found.update(self.run(encoded, group, most, least, config, batch_size, max_tokens, prefixes))
        again: dict[tuple[int, int], list[int]] = {}
        for i in indices:
            most, least = limits[i]
            if any(len(hyp.tokens) >= most for hyp in found[i]):
                again.setdefault((most, least), []).append(i)
        for (most, least), group in again.items():
            found.update(self.run(encoded, group, most, least, config, batch_size, max_tokens, prefixes))
        if config.strategy == "beam":
            uncut = self.beam_uncut(encoded, indices, found, limits, config, batch_size, max_tokens, prefixes, sums)
            found.update(uncut)
        return found

    def beam_uncut(
        self,
        encoded: EncodedTexts,
        indices: Sequence[int],
        found: dict[int, list[Found]],
        limits: dict[int, tuple[int, int]],
        config: DecodeConfig,
        batch_size: int,
        max_tokens: int | None,
        prefixes: Sequence[Sequence[int]] | None,
        sums: dict[int, float],
    ) -> dict[int, list[Found]]:
        """Every finished hypothesis of the sources whose K returned ones may lack one of dotformer's ``n_best``
        (module docstring, "Beam search"): each such source is searched again up to the step where its search
        stopped (the longest hypothesis returned), every hypothesis kept (:meth:`run` with ``every``). Returns those
        sources' hypotheses only."""
        unsure: dict[tuple[int, int], list[int]] = {}
        for i in indices:
            if not cut_is_safe(found[i], config, sums.get(i, 0.0)):
                steps = max(len(hyp.tokens) for hyp in found[i])
                unsure.setdefault((steps, limits[i][1]), []).append(i)
        redone: dict[int, list[Found]] = {}
        for (steps, least), group in unsure.items():
            searched = self.run(encoded, group, steps, least, config, batch_size, max_tokens, prefixes, every=True)
            for i in group:  # short of its limit, the candidates registered at the round's last step are not finished
                at_limit = steps >= limits[i][0]
                redone[i] = [hyp for hyp in searched[i] if at_limit or ended(hyp.tokens, end_pieces(config))]
        return redone

    def beam_rounds(
        self,
        encoded: EncodedTexts,
        indices: Sequence[int],
        limits: dict[int, tuple[int, int]],
        config: DecodeConfig,
        batch_size: int,
        max_tokens: int | None,
        prefixes: Sequence[Sequence[int]] | None,
        sums: dict[int, float],
    ) -> dict[int, list[Found]]:
        """Beam search that stops where dotformer's does (module docstring, "Beam search"): each source is searched
        for M steps (a round: ``max_decoding_length`` M, every finished hypothesis kept, the K beams alive at step M
        returned as they are), and its search is over once :meth:`settled` holds at step M, or M is its own limit;
        otherwise it is searched again for twice as many steps. M starts at :func:`first_round`. Returns per
        source its finished hypotheses (and, at its own limit, the alive ones cut there, as dotformer's search
        finalises them)."""
        found: dict[int, list[Found]] = {}
        steps = {i: first_round(len(encoded.ids[i]), limits[i][0]) for i in indices}
        while steps:
            groups: dict[tuple[int, int], list[int]] = {}
            for i, m in steps.items():
                groups.setdefault((m, limits[i][1]), []).append(i)
            steps = {}
            for (m, least), group in groups.items():
                searched = self.run(encoded, group, m, least, config, batch_size, max_tokens, prefixes, every=True)
                for i in group:
                    most = limits[i][0]
                    if m >= most:
                        found[i] = searched[i]
                    elif self.settled(searched[i], m, most, config, sums.get(i, 0.0)):
                        found[i] = [hyp for hyp in searched[i] if ended(hyp.tokens, end_pieces(config))]
                    else:
                        steps[i] = min(2 * m, most)
        return found

    @staticmethod
    def settled(hyps: Sequence[Found], steps: int, most: int, config: DecodeConfig, prefix_sum: float) -> bool:
        """:func:`beam_settled` for one round's hypotheses of a source whose prefix sums ``prefix_sum``."""
        alpha, beta, ends = config.length_penalty, search_alpha(config.length_penalty), end_pieces(config)
        summed = [
            (
                hyp.score * len(hyp.tokens) ** beta + prefix_sum,
                len(hyp.tokens),
                ended(hyp.tokens, ends),
            )
            for hyp in hyps
        ]
        return beam_settled(summed, steps, most, config.beam_size, alpha)

    def run(
        self,
        encoded: EncodedTexts,
        indices: Sequence[int],
        most: int,
        least: int,
        config: DecodeConfig,
        batch_size: int,
        max_tokens: int | None,
        prefixes: Sequence[Sequence[int]] | None,
        every: bool = False,
    ) -> dict[int, list[Found]]:
        """One ``translate_batch`` call over the sources ``indices`` with the length limits ``most`` and ``least``
        (``every``: a beam search that returns every hypothesis, :meth:`search_options`)."""
        sources = [self.source_pieces(encoded.ids[i]) for i in indices]
        target_prefix = None
        if prefixes is not None and any(prefixes[i] for i in indices):
            target_prefix = [[self.tgt_vocab[t] for t in prefixes[i]] or None for i in indices]
        translator, options = self.translator, self.search_options(config, most, every)
        if config.strategy == "sample":
            translator = self.open(config.seed)
        results = translator.translate_batch(
            sources,
            target_prefix,
            **self.batching(batch_size, max_tokens, max(len(encoded.ids[i]) for i in indices)),
            max_input_length=0,
            max_decoding_length=most,
            min_decoding_length=least,
            return_end_token=True,
            return_scores=True,
            **self.controls(config),
            return_attention=config.alignments or config.replace_unk,
            **options,
        )
        found: dict[int, list[Found]] = {}
        for i, result in zip(indices, results, strict=True):
            hypotheses, scores = result.hypotheses, result.scores  # new lists and floats at each read: read once
            attention = result.attention or [None] * len(hypotheses)
            found[i] = [
                Found(tokens, float(score), weights)
                for tokens, score, weights in zip(hypotheses, scores, attention, strict=True)
            ]
        return found

    def controls(self, config: DecodeConfig) -> dict[str, Any]:
        """The ``translate_batch`` options of the config's controls (:mod:`dotformer.decoding.controls`): the
        repetition penalty, the no-repeat n-gram size, the suppressed sequences beside PAD and BOS, the end tokens
        beside ``</s>``. Without those, ``end_token`` is left to the copy's own (``</s>``): given as a list,
        CTranslate2 decodes more slowly (a G2P model's 2,000 words, beam 4, int8: about 1.1x the CPU time)."""
        ends = end_pieces(config)
        return dict(
            suppress_sequences=SUPPRESSED + [list(sequence) for sequence in config.suppress],
            repetition_penalty=config.repetition_penalty,
            no_repeat_ngram_size=config.no_repeat_ngram_size,
            **(dict(end_token=ends) if ends != [EOS] else {}),
        )

    def search_options(self, config: DecodeConfig, steps: int, every: bool = False) -> dict[str, Any]:
        """The ``translate_batch`` options of ``config``'s strategy, for a search of at most ``steps`` steps.

        Beam search (its length penalty: :func:`search_alpha`) stops once K hypotheses have finished (``patience``
        1) and returns the K best by CTranslate2's score; with ``every`` it never stops early: every finished
        hypothesis (at most K a step) is returned, and the K best candidates of the last step."""
        if config.strategy == "beam":
            k, most, beta = config.beam_size, steps + 1, search_alpha(config.length_penalty)
            if every:
                return dict(beam_size=k, num_hypotheses=k * most, length_penalty=beta, patience=most)
            return dict(beam_size=k, num_hypotheses=k, length_penalty=beta, patience=1)
        if config.strategy == "greedy":
            return dict(beam_size=1, num_hypotheses=1, length_penalty=0.0)
        return dict(
            beam_size=1, num_hypotheses=config.n_best, length_penalty=0.0, sampling_topk=config.top_k,
            sampling_topp=config.top_p, sampling_temperature=config.temperature,
        )  # fmt: skip

    @staticmethod
    def batching(batch_size: int, max_tokens: int | None, longest: int) -> dict[str, Any]:
        """``max_batch_size`` and ``batch_type`` of a call whose longest source has ``longest`` tokens (EOS
        included). CTranslate2 takes one limit, so it is given the one that binds: ``batch_size`` sentences where
        no batch of that many can exceed ``max_tokens`` padded tokens (``batch_size · longest ≤ max_tokens``, or no
        ``max_tokens``), else ``max_tokens`` source tokens. Given the token limit for short sources, CTranslate2
        would build batches of hundreds of sentences (of 8 letters, 1,000 under 8,192 tokens), whatever
        ``batch_size`` asks."""
        if max_tokens is None or batch_size * longest <= max_tokens:
            return dict(max_batch_size=batch_size, batch_type="examples")
        return dict(max_batch_size=max_tokens, batch_type="tokens")

    def source_pieces(self, ids: Sequence[int]) -> list[str]:
        """A source's pieces without its final EOS (the copy's ``add_source_eos`` appends it)."""

        body = ids[:-1] if ids and ids[-1] == EOS_ID else ids
        return [self.src_vocab[t] for t in body]

    # -- from CTranslate2's hypotheses to dotformer's --------------------------------------------------------------

    def prefix_sums(
        self,
        encoded: EncodedTexts,
        indices: Sequence[int],
        prefixes: Sequence[Sequence[int]] | None,
        batch_size: int,
    ) -> dict[int, float]:
        """Per source with a prefix, its prefix's summed log-probability (CTranslate2's search does not count a
        forced prefix: it is scored on the copy)."""
        with_prefix = [i for i in indices if prefixes is not None and prefixes[i]]
        if not with_prefix:
            return {}
        assert prefixes is not None
        rows = self.log_probs([encoded.ids[i] for i in with_prefix], [prefixes[i] for i in with_prefix], batch_size)
        return {i: sum(row[: len(prefixes[i])]) for i, row in zip(with_prefix, rows, strict=True)}

    def ranked(
        self, found: dict[int, list[Found]], config: DecodeConfig, sums: dict[int, float]
    ) -> dict[int, list[Ranked]]:
        """Per source, the hypotheses to return (``n_best``; 1 for greedy), ranked as dotformer ranks them: by the
        search's summed log-probability (a prefix's, ``sums``, added) over dotformer's length penalty."""
        alpha, wanted = config.length_penalty, config.n_best if config.strategy != "greedy" else 1
        beta = search_alpha(alpha) if config.strategy == "beam" else 0.0
        ends = end_pieces(config)
        kept = {}
        for i, hyps in found.items():
            scores = ranking_scores(hyps, alpha, beta, sums.get(i, 0.0))
            best = sorted(range(len(hyps)), key=scores.__getitem__, reverse=True)[:wanted]  # stable on ties
            kept[i] = [self.as_ranked(hyps[k], scores[k], ends) for k in best]
        return kept

    def as_ranked(self, hyp: Found, score: float, ends: Sequence[str]) -> Ranked:
        """A kept hypothesis in dotformer's ids (its end token apart), scored ``score``."""
        finished = ended(hyp.tokens, ends)
        end = self.tgt_ids[hyp.tokens[-1]] if finished and hyp.tokens[-1] != EOS else None
        ids = [self.tgt_ids[t] for t in (hyp.tokens[:-1] if finished else hyp.tokens)]
        alignment = None if hyp.attention is None else attention_alignment(hyp.attention[: len(ids)])
        return Ranked(ids, finished, score, alignment, end)

    def exact_scores(
        self, encoded: EncodedTexts, kept: dict[int, list[Ranked]], batch_size: int
    ) -> dict[int, list[list[float]]]:
        """Per source, each kept hypothesis's log-probabilities from the copy's own generator (one scoring pass):
        one per token, and one for the EOS (or the end token) when the hypothesis finished."""
        rows = [(i, hyp) for i, hyps in kept.items() for hyp in hyps]
        for i, hyp in rows:
            if len(hyp.ids) >= self.positions:  # scoring reads one position more than the copy has
                raise EngineOptionError(
                    f"input {i + 1}: its output fills the model's {self.positions} positions, and CTranslate2 "
                    f"cannot score it (the torch engine can); its text is given without scores (text output)"
                )
        outputs = [hyp.ids if hyp.end is None else [*hyp.ids, hyp.end] for _, hyp in rows]  # an end token is scored
        scored = self.log_probs([encoded.ids[i] for i, _ in rows], outputs, batch_size)
        exact: dict[int, list[list[float]]] = {}
        for (i, hyp), log_probs in zip(rows, scored, strict=True):
            exact.setdefault(i, []).append(log_probs if hyp.finished and hyp.end is None else log_probs[:-1])
        return exact

    def translations(
        self,
        encoded: EncodedTexts,
        i: int,
        kept: list[Ranked],
        exact: list[list[float]] | None,
        config: DecodeConfig,
    ) -> list[Translation]:
        """Source ``i``'s kept hypotheses as :class:`Translation` s: detokenised, <unk> replaced when asked, scored
        exactly when ``exact`` holds their log-probabilities (else with the search's score, no log-probabilities)."""
        out = []
        for k, hyp in enumerate(kept):
            log_probs = exact[k] if exact is not None else []
            score = sum(log_probs) / gnmt_penalty(len(log_probs), config.length_penalty) if exact else hyp.score
            text = self.checkpoint.tgt_tokenizer.decode(hyp.ids)
            if config.replace_unk and UNK_ID in hyp.ids and hyp.alignment is not None:
                text = unknowns_replaced(self.checkpoint, encoded.texts[i], hyp.ids, hyp.alignment)
            alignment = hyp.alignment if config.alignments else None
            out.append(Translation(text, hyp.ids, float(score), log_probs, hyp.finished, alignment))
        return out

    def log_probs(
        self, sources: Sequence[Sequence[int]], outputs: Sequence[Sequence[int]], batch_size: int
    ) -> list[list[float]]:
        """Per (source, output) pair (ids; the source's EOS optional, none on the output), the log-probability of
        each output token and of a final EOS, from the copy's own generator (``score_batch``): dotformer's."""
        results = self.translator.score_batch(
            [self.source_pieces(source) for source in sources],
            [[self.tgt_vocab[t] for t in ids] for ids in outputs],
            max_batch_size=batch_size,
            max_input_length=0,
        )
        return [[float(p) for p in result.log_probs] for result in results]

    # -- perplexity ----------------------------------------------------------------------------------------------

    def reference_nll(self, pairs: Sequence[Pair], batch_size: int) -> NLLResult:
        """Summed NLL of each pair's target given its source, teacher-forced with ``score_batch`` (EOS included,
        no smoothing): what :meth:`~dotformer.engines.torch.TorchEngine.reference_nll` computes.

        Raises:
            DataError: no pairs.
        """

        if not pairs:
            raise DataError("no pairs to score")
        sources = self.checkpoint.src_tokenizer.encode_batch([pair.source for pair in pairs])
        targets = self.checkpoint.tgt_tokenizer.encode_batch([pair.target for pair in pairs])
        results = self.translator.score_batch(
            [[self.src_vocab[t] for t in ids] for ids in sources],
            [[self.tgt_vocab[t] for t in ids] for ids in targets],
            max_batch_size=batch_size,
            max_input_length=0,
        )
        total = -sum(float(sum(result.log_probs)) for result in results)
        return NLLResult(total, sum(len(result.log_probs) for result in results))


def progress_bar(total: int, shown: bool) -> Any:
    """A tqdm bar on stderr over ``total`` inputs, or (not ``shown``) a stand-in that counts nothing, without
    importing tqdm (a tenth of a one-word command's start)."""
    if not shown:
        return contextlib.nullcontext(SimpleNamespace(update=lambda n: None))
    from tqdm import tqdm

    return tqdm(total=total, unit="sent", file=sys.stderr, desc="translate")


def attention_alignment(attention: Sequence[Sequence[float]]) -> list[tuple[int, int]]:
    """dotformer's hard alignment from CTranslate2's attention: per output token j, the source piece it attends to
    most (the first on ties), ``(source index, j)``; the source's EOS, which CTranslate2 leaves out, is index 0 only
    for a source that holds nothing else (:mod:`dotformer.decoding.alignment`)."""
    pairs = []
    for j, weights in enumerate(attention):
        best = max(range(len(weights)), key=weights.__getitem__) if weights else 0
        pairs.append((best, j))
    return pairs


def check_engine_options(config: DecodeConfig, checkpoint: CheckpointFiles) -> None:
    """Raise :class:`EngineOptionError` when ``config`` holds an option only the torch engine runs.

    Raises:
        EngineOptionError: naming the first such option and what CTranslate2 lacks.
    """
    torch_only = torch_only_fields(config, checkpoint.config)
    if torch_only:
        field = torch_only[0]
        raise EngineOptionError(f"{field} runs on the torch engine only ({torch_only_reason(field)})")
