"""``dotformer prepare``: read, split, tokenize and encode a corpus once, into memory-mapped token arrays that any
number of ``train`` runs and every rank of a run map (fairseq-preprocess and OpenNMT's build_vocab, in one step).

    dotformer prepare --data train.de,train.en --valid valid.de,valid.en --test test.de,test.en --out data/wmt
    dotformer train --data data/wmt --config configs/wmt-base.toml --out runs/wmt
    dotformer prepare --task lm --data corpus.txt --out data/corpus
    dotformer prepare --task classify --data reviews.tsv --out data/reviews   # or --task mlm, --task tag
    dotformer prepare --data cmudict                      # into the cache that train reads (prints where)

The data flags are ``dotformer train``'s (its ``data`` and reader groups); the directory gets the tokenizers (learned
on a sample of at most ``--sample-lines`` training examples), every split's token arrays, the held-out text and a
JSON report (``prepared.json``: inputs with their hashes, counts, what was dropped, the sample, the time it took).
``train --data DIR`` then trains on it as it is: its data settings are fixed (but for what is decided at batching
time: the block size of a language model or an encoder, a masked language model's unit and masking). Without
``--out`` the data goes to the cache of prepared data, where ``train`` on the same files and settings finds it.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from dotformer.cli.train import DATA_FLAGS, data_section

EPILOG = """\
examples:
  dotformer prepare --data train.tsv --valid valid.tsv --test test.tsv --task g2p --out data/mine
  dotformer prepare --data train.de,train.en --valid valid.de,valid.en --vocab-size 37000 --out data/wmt
  dotformer prepare --task lm --data corpus.txt --out data/corpus
  dotformer prepare --task mlm --data bible --tokenizer bpe --vocab-size 4000 --out data/kjv-mlm
  dotformer prepare --task classify --data labelled.tsv --out data/labelled
  dotformer train --data data/wmt --config mine.toml --out runs/wmt --max-minutes 60
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of ``dotformer prepare``: where the data comes from (train's data flags) and where it goes."""
    from dotformer.config import DEFAULT_SEED

    parser.usage = "%(prog)s --data DATASET [--task TASK] [--out DIR] [...]"
    parser.epilog = EPILOG
    parser.add_argument(
        "--data",
        metavar="DATASET",
        help="cmudict, bible, copy, reverse, a TSV/CSV file of pairs, SRC,TGT parallel files, hf:NAME, a text "
        "file with --task lm or mlm, labelled texts with --task classify or tag (required unless the config file "
        "sets [data] dataset)",
    )
    parser.add_argument("--config", metavar="FILE.toml", help="a config file: its [data] table is read")
    parser.add_argument(
        "--out", metavar="DIR", help="a new (or empty) directory for the prepared data (default: the cache of prepared "
        "data, $DOTFORMER_CACHE or ~/.cache/dotformer, where train finds it)",
    )  # fmt: skip
    parser.add_argument(
        "--seed", type=int, default=DEFAULT_SEED, metavar="N", help=f"seed of a random split (default {DEFAULT_SEED})"
    )
    parser.add_argument(
        "--sample-lines", type=int, default=None, metavar="N",
        help="learn the tokenizers on a seeded sample of at most N training examples (default 1,000,000)",
    )  # fmt: skip
    group = parser.add_argument_group("data")
    for flag, _, field, kwargs in DATA_FLAGS:
        group.add_argument(flag, dest=f"opt_{field}", default=None, **kwargs)


def run(args: argparse.Namespace) -> int:
    """Prepare the data of the flags (and the config file's [data]); print what preparing said and the directory."""
    from dotformer.runs.config_files import ConfigSections, merge
    from dotformer.runs.run import prepare_data
    from dotformer.runs.tasks import read_task_config_file

    data = data_section(args)
    if args.data is not None:
        data["dataset"] = args.data
    file_sections = read_task_config_file(args.config) if args.config else ConfigSections()
    section = merge(ConfigSections(data=file_sections.data), ConfigSections(data=data, source="command line"))
    options: dict[str, Any] = {} if args.sample_lines is None else {"sample_lines": args.sample_lines}
    prepared = prepare_data(section.data, args.seed, args.out, **options)
    for line in prepared.lines:
        print(f"data: {line}", file=sys.stderr)
    for line in prepared.warnings:
        print(f"dotformer prepare: warning: {line}", file=sys.stderr)
    print(prepared.directory)
    return 0
