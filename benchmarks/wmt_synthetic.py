"""Synthetic parallel text shaped like WMT14 English-German, for measuring the data path at the paper's scale.

Each language has its own vocabulary of :data:`WORDS` words built from syllables (so BPE finds pieces inside words,
as in real text), drawn with Zipf frequencies (exponent :data:`ZIPF`: a few words are very frequent, most are rare);
a sentence has 5 to 60 words (a skewed length distribution of mean about 27 words, as news text), and its translation
has the same words' counterparts in a shuffled order with a length changed by a word or two. With a 32k shared BPE a
sentence is about 31 tokens, as WMT14 En-De's 4.5M pairs are (about 140M tokens a side).

Writes ``DIR/train.src``, ``train.tgt`` (SIZE pairs) and ``valid.*``, ``test.*`` (3,000 pairs each, as a newstest),
or ``DIR/train.tsv`` etc. with ``--tsv``, or with ``--wmt14-names`` the names ``configs/wmt-base.toml`` reads from
``data/wmt14/``: ``train.en``, ``train.de``, ``newstest2013.en``/``.de`` (valid), ``newstest2014.en``/``.de``
(test). Deterministic for a seed.

    python benchmarks/wmt_synthetic.py --pairs 100000 --out benchmarks/out/wmt/0.1M
    python benchmarks/wmt_synthetic.py --pairs 1000000 --wmt14-names --out data/wmt14   # configs/wmt-base.toml's files
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

WORDS = 60_000  # words of each language
ZIPF = 1.1  # word frequencies ~ 1 / rank^ZIPF
MIN_WORDS, MAX_WORDS = 5, 60  # words of a sentence
HELD_OUT = 3_000  # pairs of the valid and of the test files
WMT14_NAMES = {"train": "train", "valid": "newstest2013", "test": "newstest2014"}  # configs/wmt-base.toml's files
CHUNK = 50_000  # sentences made and written at a time
SYLLABLES = {
    "src": [c + v for c in "bcdfghklmnprstvwz" for v in ("a", "e", "i", "o", "u", "ou", "ea", "ai")],
    "tgt": [c + v for c in ("b", "d", "f", "g", "h", "k", "l", "m", "n", "r", "s", "t", "w", "sch", "ch", "z")
            for v in ("a", "e", "i", "o", "u", "ei", "ie", "au", "ä", "ü")],
}  # fmt: skip


def vocabulary(side: str, rng: np.random.Generator) -> np.ndarray:
    """:data:`WORDS` distinct words of 1-4 syllables; frequent words (low ranks) are shorter, as in real text."""
    syllables = SYLLABLES[side]
    words: list[str] = []
    seen: set[str] = set()
    while len(words) < WORDS:
        rank = len(words)
        count = 1 + min(3, int(rng.exponential(0.4 + rank / 8000)))
        word = "".join(syllables[i] for i in rng.integers(len(syllables), size=count))
        if word not in seen:
            seen.add(word)
            words.append(word)
    return np.array(words, dtype=object)


def sentence_lengths(count: int, rng: np.random.Generator) -> np.ndarray:
    """Words per sentence: a gamma distribution of mean about 27 words, cut to [5, 60]."""
    return np.clip(np.rint(rng.gamma(3.0, 9.0, size=count)), MIN_WORDS, MAX_WORDS).astype(np.int64)


def sentences(count: int, rng: np.random.Generator, source: np.ndarray, target: np.ndarray, cdf: np.ndarray):
    """``count`` (source, target) sentence pairs as two lists of strings; ``cdf`` is the words' Zipf distribution,
    cumulated. The target is the source's words in the other language, in a shuffled order for half the pairs, with
    up to two words more or fewer."""
    lengths = sentence_lengths(count, rng)
    ids = np.searchsorted(cdf, rng.random(int(lengths.sum())))  # Zipf-distributed word numbers
    ends = np.cumsum(lengths)
    sentence_of = np.repeat(np.arange(count), lengths)
    shuffled = rng.random(count) < 0.5
    keys = np.where(shuffled[sentence_of], rng.random(len(ids)), np.arange(len(ids)) / len(ids))
    reordered = ids[np.lexsort((keys, sentence_of))]  # each sentence's words, shuffled when drawn so
    changes = rng.integers(-2, 3, size=count)
    extra = np.searchsorted(cdf, rng.random(int(np.maximum(changes, 0).sum())))
    sources, targets, used = [], [], 0
    for start, end, change in zip(ends - lengths, ends, changes.tolist(), strict=True):
        sources.append(" ".join(source[ids[start:end]]))
        words = reordered[start:end]
        if change > 0:
            words = np.concatenate([words, extra[used : used + change]])
            used += change
        elif change < 0 and len(words) + change >= MIN_WORDS:
            words = words[:change]
        targets.append(" ".join(target[words]))
    return sources, targets


def zipf_cdf() -> np.ndarray:
    """The cumulated Zipf distribution of the :data:`WORDS` words (rank r has weight 1 / r^ZIPF)."""
    weights = 1.0 / np.arange(1, WORDS + 1) ** ZIPF
    return np.cumsum(weights / weights.sum())


def write_corpus(
    directory: Path, pairs: int, seed: int = 0, tsv: bool = False, held_out: int = HELD_OUT, wmt14_names: bool = False
) -> dict[str, Path | str]:
    """Write the train, valid and test files of ``pairs`` training pairs (and ``held_out`` pairs each of valid and
    test) into ``directory``; the specs to read them (``--data``, ``--valid``, ``--test`` of ``dotformer train``).
    ``wmt14_names``: the files are named as WMT14 En-De's (:data:`WMT14_NAMES`, sides ``.en`` and ``.de``)."""
    rng = np.random.default_rng(seed)
    source, target, cdf = vocabulary("src", rng), vocabulary("tgt", rng), zipf_cdf()
    directory.mkdir(parents=True, exist_ok=True)
    specs: dict[str, Path | str] = {}
    for name, count in (("train", pairs), ("valid", held_out), ("test", held_out)):
        if tsv:
            paths = [directory / f"{name}.tsv"]
            specs[name] = str(paths[0])
        elif wmt14_names:
            paths = [directory / f"{WMT14_NAMES[name]}.{side}" for side in ("en", "de")]
            specs[name] = f"{paths[0]},{paths[1]}"
        else:
            paths = [directory / f"{name}.src", directory / f"{name}.tgt"]
            specs[name] = f"{paths[0]},{paths[1]}"
        handles = [path.open("w", encoding="utf-8") for path in paths]
        try:
            for start in range(0, count, CHUNK):
                src, tgt = sentences(min(CHUNK, count - start), rng, source, target, cdf)
                if tsv:
                    handles[0].write("".join(f"{s}\t{t}\n" for s, t in zip(src, tgt, strict=True)))
                else:
                    handles[0].write("".join(f"{s}\n" for s in src))
                    handles[1].write("".join(f"{t}\n" for t in tgt))
        finally:
            for handle in handles:
                handle.close()
    return specs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, required=True, help="training pairs (WMT14 En-De: 4,500,000)")
    parser.add_argument("--out", type=Path, required=True, help="the directory to write")
    parser.add_argument("--seed", type=int, default=0, help="the corpus's seed")
    parser.add_argument("--held-out", type=int, default=HELD_OUT, help="pairs of the valid and of the test files")
    names = parser.add_mutually_exclusive_group()
    names.add_argument("--tsv", action="store_true", help="one TSV file per split instead of .src/.tgt files")
    names.add_argument(
        "--wmt14-names", action="store_true", help="train.en/.de, newstest2013.en/.de, newstest2014.en/.de"
    )
    args = parser.parse_args(argv)
    if args.pairs < 1 or args.held_out < 0:
        parser.error("--pairs must be positive and --held-out not negative")
    specs = write_corpus(args.out, args.pairs, args.seed, args.tsv, args.held_out, args.wmt14_names)
    for name, spec in specs.items():
        print(f"{name}: {spec}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
