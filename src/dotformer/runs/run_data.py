"""A run's reference to its prepared data: the run directory points at the prepared, memory-mapped data every task
trains on (:mod:`dotformer.data.prepared`) and keeps only what is small, never the corpus.

``RUN/data/`` holds::

    data.json                   the prepared directory, its fingerprint, the seed of its split, whether its
                                tokenizers were given (fine-tuning), and its report (a classifier's labels too)
    tokenizer_src.json          the tokenizers (also in every checkpoint)
    tokenizer_tgt.json
    valid.tsv, test.tsv         the held-out pairs, or labelled texts, as text (what ``evaluate --split`` scores)
    valid.txt, test.txt         or the held-out lines of a text (a language model's, a masked language model's)

A resumed run maps the directory again. When it is gone (a cleared cache, another machine), the data is prepared
again into the cache from the same inputs, and the fingerprint must come out the same: an input that changed since
the run started is named, and the run is not resumed on other data.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from dotformer.data.prepared.cache import prepared_for
from dotformer.data.prepared.fingerprint import changed_inputs
from dotformer.data.prepared.kinds import KINDS, Prepared, open_prepared
from dotformer.data.prepared.layout import REPORT_FILE
from dotformer.data.read.textio import read_json
from dotformer.data.tokenize.tokenizer_files import TokenizerPair, load_tokenizer
from dotformer.errors import CheckpointError

REFERENCE_FILE = "data.json"
TOKENIZER_FILES = ("tokenizer_src.json", "tokenizer_tgt.json")


def save_reference(prepared: Prepared, data_dir: Path, given_tokenizers: bool) -> None:
    """Write ``RUN/data``: the reference to ``prepared`` (of any kind), its tokenizers and its held-out text
    (rank 0)."""
    from dotformer.runs.records import write_json_atomic

    data_dir.mkdir(parents=True, exist_ok=True)
    for name in TOKENIZER_FILES:
        shutil.copyfile(prepared.directory / name, data_dir / name)
    for split in ("valid", "test"):
        source = prepared.text_file(split)
        shutil.copyfile(source, data_dir / source.name)
    reference = {
        "prepared": str(prepared.directory.resolve()),
        "fingerprint": prepared.fingerprint,
        "seed": prepared.seed,
        "given_tokenizers": given_tokenizers,
        "report": prepared.report,
    }
    write_json_atomic(data_dir / REFERENCE_FILE, reference)


def open_run_data(run_dir: str | Path, data_config: Any = None) -> Prepared:
    """The prepared data of the run in ``run_dir``: its directory mapped, or (given the run's ``data_config``) the
    data prepared again into the cache from the same inputs when the directory is gone.

    Raises:
        CheckpointError: no reference (a run of an earlier dotformer, whose data/ holds the corpus itself), a
            directory gone and no ``data_config``, or an input that changed since the run started (named).
    """

    run_dir = Path(run_dir)
    data_dir = run_dir / "data"
    path = data_dir / REFERENCE_FILE
    if not path.is_file():
        raise CheckpointError(
            f"{run_dir}: no {path.name} in its data/ (a run of an earlier dotformer, whose data/ holds its corpus): "
            f"resume it with that version, or start a new run from its checkpoint with --init-from"
        )
    reference = read_json(path, "no such file")
    directory = Path(reference["prepared"])
    if (directory / REPORT_FILE).is_file():
        prepared = open_prepared(directory)
        if prepared.fingerprint == reference["fingerprint"]:
            return prepared
    if data_config is None:
        raise CheckpointError(f"{run_dir}: its prepared data {directory} is gone")
    tokenizers: Any = None
    if reference.get("given_tokenizers"):
        src, tgt = (load_tokenizer(data_dir / name) for name in TOKENIZER_FILES)
        shared = reference["report"]["tokenizers"]["shared"]
        tokenizers = KINDS[reference["report"]["kind"]].given_tokenizers(TokenizerPair(src, src if shared else tgt))
    changed = changed_inputs(reference["report"].get("inputs", []))
    if changed:
        raise CheckpointError(
            f"cannot resume {run_dir}: its prepared data {directory} is gone and cannot be made again the same "
            f"({'; '.join(changed)}); start a new run with --out"
        )
    prepared = prepared_for(data_config, reference["seed"] or 0, tokenizers=tokenizers)
    if prepared.fingerprint != reference["fingerprint"]:
        before = {entry["path"]: entry.get("blake2b") for entry in reference["report"].get("inputs", [])}
        rewritten = [
            entry["path"]
            for entry in prepared.report.get("inputs", [])
            if entry["path"] in before and before[entry["path"]] != entry.get("blake2b")
        ]
        if rewritten:
            raise CheckpointError(
                f"cannot resume {run_dir}: its prepared data {directory} is gone and {', '.join(rewritten)} changed "
                f"since the run started (other content, though the same size and modification time): restore it, "
                f"or start a new run with --out"
            )
        raise CheckpointError(
            f"cannot resume {run_dir}: its data prepared again has fingerprint {prepared.fingerprint}, the run's is "
            f"{reference['fingerprint']} (another dotformer or tokenizers version?); start a new run with --out"
        )
    return prepared
