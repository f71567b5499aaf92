"""Corpora: every source of (source, target) text pairs behind one function, :func:`load_pairs`.

A *spec* names the source:

==========================  ==============================================================  =========================
spec                        what it reads                                                     module
==========================  ==============================================================  =========================
``"cmudict"``               CMUdict, English word -> ARPAbet phones (task ``g2p``)            :mod:`.cmudict`
``"bible"``                 Spanish -> English verse pairs from SWORD modules                 :mod:`.bible`
``"copy"``, ``"reverse"``   random symbol sequences and their copy or reversal               :mod:`.synthetic`
``"hf:NAME_OR_PATH"``       a Hugging Face ``datasets`` dataset (optional extra)              :mod:`.hf`
``"pairs.tsv"``             a TSV or CSV file of pairs, one per line                          :mod:`.tsv`
``"train.es,train.en"``     two line-aligned parallel files                                   :mod:`.parallel`
==========================  ==============================================================  =========================

Every reader returns a :class:`Corpus` whose ``report`` says how many pairs were read, how many were dropped and why
(``report["dropped"]``: reason -> count); nothing is dropped or truncated silently. :func:`open_pairs` gives the same
pairs as a :class:`PairReader`, read in passes without holding a file's corpus in memory (what preparing data at
scale reads, :mod:`dotformer.data.prepared.skeleton`).
"""

from __future__ import annotations

from pathlib import Path

from dotformer.data.read.bible import load_bible
from dotformer.data.read.cmudict import load_cmudict
from dotformer.data.read.hf_datasets import HFReader
from dotformer.data.read.parallel import ParallelReader
from dotformer.data.read.synthetic import load_synthetic
from dotformer.data.read.tsv import TsvReader
from dotformer.data.read.types import NAMED_SPECS, Corpus, CorpusOptions, CorpusReader, PairReader, apply_limit
from dotformer.errors import DataError, MissingDataError


def load_pairs(spec: str, options: CorpusOptions | None = None) -> Corpus:
    """Read the corpus named by ``spec`` into memory (see the module docstring for the specs) and apply
    ``options.limit``.

    Raises:
        MissingDataError: a file, package or SWORD module is missing (the message says how to get it).
        DataError: a malformed file (FILE:LINE in the message), or a corpus with no pairs left.
        ConfigError: options that the source cannot use.
    """
    options = options or CorpusOptions()
    corpus = open_pairs(spec, options).corpus()
    corpus = apply_limit(corpus, options.limit)
    if not corpus.pairs:
        raise DataError(f"{spec}: no pairs left to train on (report: {corpus.report})")
    return corpus


def open_pairs(spec: str, options: CorpusOptions | None = None) -> PairReader:
    """The :class:`PairReader` of ``spec``: files (TSV/CSV, parallel files, ``hf:``) are streamed pass by pass, the
    named corpora (CMUdict, the Bible, copy/reverse) are built in memory and read through
    :class:`~dotformer.data.read.types.CorpusReader`. ``options.limit`` is not applied here (the caller counts what it
    cuts).

    Raises:
        MissingDataError, DataError, ConfigError: as :func:`load_pairs` (a file's rows are checked as a pass reads
            them).
    """
    options = options or CorpusOptions()
    if spec == "cmudict":
        return CorpusReader(load_cmudict(options))
    if spec == "bible":
        return CorpusReader(load_bible(options))
    if spec in ("copy", "reverse"):
        return CorpusReader(load_synthetic(spec, options))
    if spec.startswith("hf:"):
        return HFReader(spec[3:], options)
    if Path(spec).is_file():
        return TsvReader(spec, options)
    if "," in spec:
        source_path, _, target_path = spec.partition(",")
        if "," in target_path or not source_path.strip() or not target_path.strip():
            raise DataError(f"{spec}: parallel files are given as exactly two paths, 'SOURCE,TARGET'")
        return ParallelReader(source_path, target_path, options)
    kinds = (
        f"a corpus is one of {', '.join(NAMED_SPECS)}, 'hf:NAME_OR_PATH', a TSV/CSV file, or 'SOURCE_FILE,TARGET_FILE'"
    )
    if Path(spec).is_dir():
        raise DataError(f"{spec} is a directory, not a corpus file; {kinds}")
    if Path(spec).exists():  # /dev/null, a pipe: a corpus file is read more than once
        raise DataError(f"{spec} is not a regular file (a device, a pipe or a socket); {kinds}")
    raise MissingDataError(f"{spec}: no such file, and not a corpus name; {kinds}")
