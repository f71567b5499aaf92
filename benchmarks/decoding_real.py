"""Decoding the real jobs: trained checkpoints (G2P, a small Bible model) decoding their test inputs, dotformer's two
engines against a hand-written CTranslate2 script and HF.

The models are trained checkpoints (``--checkpoint``, repeatable; without one, the G2P default is trained briefly
first: ``dotformer train --config g2p --max-steps N --threads 1``; ``--bible-steps N`` also trains the Bible default,
the ``small`` preset, for N steps). The same weights are exported with ``dotformer export --to ct2`` and ``--to
marian``, so every system computes the same function. The inputs are the checkpoint run's own test split
(``data/test.tsv``: inputs never seen in training), or ``--words-file``.

Systems (each decodes the same inputs, greedy and beam 4, on 1 and on 2 threads):

* ``dotformer`` / ``dotformer_int8``: the torch engine, :func:`dotformer.decoding.translate.translate`, float32 and
  with int8 linear layers (:func:`dotformer.decoding.quantization.quantize_int8`, what ``--dtype int8`` decodes
  with), batches of ``--batch-size`` inputs (``--batch-sizes`` adds the torch engine and CTranslate2 at other sizes:
  the batch-size lever);
* ``dotformer_ct2`` / ``dotformer_ct2_int8``: the CTranslate2 engine, ``dotformer.load(..., engine="ctranslate2")
  .translate(...)`` (its copy converted and cached beforehand), float32 and int8;
* ``dotformer_bf16`` / ``ct2_bfloat16`` (``--bf16``): both in bfloat16, for CPUs that compute it natively (where
  CTranslate2 offers no bfloat16 on the CPU, dotformer bfloat16 is compared with CTranslate2 float32);
* ``ct2_float32`` / ``ct2_int8``: a hand-written script's ``ctranslate2.Translator.translate_batch`` on the exported
  model (``compute_type`` float32 / int8, ``intra_threads`` = the threads, ``max_batch_size`` = the batch size), the
  sources without their ``</s>``: the export's ``add_source_eos`` appends it, as dotformer does;
* ``hf_generate``: HF ``MarianMTModel.generate`` on the exported Marian copy, length-sorted batches (in-process only).

Two views of the job:

* in-process: from the list of inputs to the list of outputs (tokenising included), model loaded beforehand;
* whole command: ``dotformer translate --input FILE`` with its defaults (``--engine auto``: CTranslate2 where it is
  installed; start-up, loading and writing included; ``dotformer`` and ``dotformer_int8``) and with ``--engine torch``
  (``dotformer_torch``, ``dotformer_torch_int8``), against a script that loads CTranslate2 and decodes the same inputs
  (given as tokens, so it pays no tokeniser). Every command reads compiled bytecode, as an installed package does
  (its untimed first run compiles it: :func:`compiled_env`).

Figures: inputs/s from wall time and from CPU time (``time.process_time`` in-process, the children's
``getrusage`` for commands). Runs are interleaved in rotating order (A B C, B C A, ...), medians over ``--rounds``;
``cpu_ratio`` / ``wall_ratio`` = dotformer's inputs/s over the peer of the same precision (ct2 float32 for float32,
ct2 int8 for int8, HF for ``hf_generate``), where > 1 means dotformer is faster; ``cpu_ratio_rounds`` = the median
over rounds of each round's CPU-time ratio, which a drift of the machine's speed between rounds does not move. On a
loaded machine read the CPU-time ratio of one thread: other processes inflate wall time. ``--systems`` runs only
the systems named (e.g. ``dotformer_int8,ct2_int8``: more rounds of one comparison in the same time). ``agree`` =
fraction of inputs whose output equals the torch engine's float32 output, when it runs (the hand-written script
ranks beams by CTranslate2's own length normalisation with 0.6, HF by its own; dotformer's CTranslate2 engine ranks
them as the torch engine does, GNMT α = 0.6).

Run: ``python benchmarks/decoding_real.py --checkpoint runs/g2p --checkpoint runs/bible`` (``--quick`` for a 1-2
minute check).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from common import command_line, default_output_dir, format_table, machine_info, write_json

Outputs = list[str]  # one pronunciation per word

CT2_SCRIPT = """
import sys, ctranslate2
model, compute_type, beam, batch, src, out, threads = sys.argv[1:8]
translator = ctranslate2.Translator(model, device="cpu", compute_type=compute_type, intra_threads=int(threads))
batch_tokens = [line.split() for line in open(src, encoding="utf-8")]
results = translator.translate_batch(batch_tokens, beam_size=int(beam), max_batch_size=int(batch),
    max_decoding_length=max(map(len, batch_tokens)) + 51, min_decoding_length=0, max_input_length=0,
    length_penalty=0.6 if int(beam) > 1 else 1.0, suppress_sequences=[["<pad>"], ["<s>"]])
with open(out, "w", encoding="utf-8") as f:
    f.writelines(" ".join(r.hypotheses[0]) + "\\n" for r in results)
"""


def dotformer_cli() -> list[str]:
    """The ``dotformer`` command of this Python (the tree on PYTHONPATH)."""
    return [sys.executable, "-m", "dotformer"]


def run_quiet(args: list[str], env: dict[str, str] | None = None) -> None:
    """Run a command (in ``env``, else this process's environment); raise with its stderr if it fails."""
    done = subprocess.run(args, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed:\n{done.stderr[-2000:]}")


def train_g2p(out: Path, steps: int) -> Path:
    """Train the G2P default for ``steps`` steps on one thread; return the run directory."""
    print(f"training the G2P default for {steps} steps into {out} ...", flush=True)
    run_quiet(
        [*dotformer_cli(), "train", "--config", "g2p", "--out", str(out), "--max-steps", str(steps)]
        + ["--threads", "1", "--no-progress"]
    )
    return out


def test_words(checkpoint: Path, words_file: str | None, limit: int) -> list[str]:
    """The first ``limit`` words of ``words_file`` (one per line, or the first column of a TSV), else of the
    checkpoint run's ``data/test.tsv``."""
    if words_file is None:
        run = checkpoint if (checkpoint / "data").is_dir() else checkpoint.parent
        path = run / "data" / "test.tsv"
        if not path.is_file():
            raise SystemExit(f"no test split at {path}: pass --words-file")
    else:
        path = Path(words_file)
    words = [line.split("\t")[0].strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return words[:limit]


@dataclasses.dataclass
class Job:
    """Everything the systems share: the checkpoint, its exports, the words and their source tokens."""

    checkpoint: Path
    ct2_dir: Path
    marian_dir: Path
    words: list[str]
    src_tokens: list[list[str]]  # per word, its source pieces without the final </s> (the export appends it)
    workdir: Path


def prepare(args: argparse.Namespace, checkpoint: Path, workdir: Path) -> Job:
    """Export the checkpoint (to Marian only for HF's ``generate``: a modern-block model has no Marian copy), read
    its test inputs and tokenise them as dotformer does."""
    from dotformer.checkpoint import load_checkpoint
    from dotformer.decoding.inputs import encode_sources

    workdir.mkdir(parents=True, exist_ok=True)
    ct2_dir, marian_dir = workdir / "ct2", workdir / "marian"
    run_quiet([*dotformer_cli(), "export", "--to", "ct2", str(checkpoint), str(ct2_dir)])
    if not args.no_hf:
        run_quiet([*dotformer_cli(), "export", "--to", "marian", str(checkpoint), str(marian_dir)])
    words = test_words(checkpoint, args.words_file, args.words)
    loaded = load_checkpoint(checkpoint)
    encoded = encode_sources(loaded, words)
    pieces = [[loaded.src_tokenizer.id_to_token(i) for i in ids[:-1]] for ids in encoded.ids]  # EOS left out
    return Job(checkpoint, ct2_dir, marian_dir, words, pieces, workdir)


def train_bible(out: Path, steps: int) -> Path:
    """Train the Bible default (the ``small`` preset) for ``steps`` steps on one thread; return the run directory."""
    print(f"training the Bible default for {steps} steps into {out} ...", flush=True)
    run_quiet(
        [*dotformer_cli(), "train", "--config", "bible", "--out", str(out), "--max-steps", str(steps)]
        + ["--threads", "1", "--no-progress"]
    )
    return out


def dotformer_ct2_system(job: Job, beam: int, batch_size: int, dtype: str, threads: int) -> Callable[[], Outputs]:
    """The CTranslate2 engine: ``dotformer.load(..., engine="ctranslate2").translate`` in ``dtype`` (its copy is
    converted, or found in the cache, here, before the timed runs)."""
    import dotformer

    model = dotformer.load(job.checkpoint, device="cpu", dtype=dtype, engine="ctranslate2", intra_threads=threads)
    search: dict[str, Any] = {"strategy": "greedy"} if beam == 1 else {"strategy": "beam", "beam": beam}

    def run() -> Outputs:
        return list(model.translate(job.words, batch_size=batch_size, progress=False, **search))

    return run


def dotformer_system(job: Job, beam: int, batch_size: int, dtype: str = "float32") -> Callable[[], Outputs]:
    """The torch engine: :func:`translate` of the checkpoint in ``dtype``: "float32", "bfloat16" (weights and
    activations), or "int8" (int8 linear layers)."""
    from dotformer.api.translator import load_checkpoint_for_decoding
    from dotformer.decoding import DecodeConfig
    from dotformer.decoding.translate import translate

    loaded = load_checkpoint_for_decoding(job.checkpoint, device="cpu", dtype=dtype)  # what --dtype decodes with
    config = DecodeConfig(strategy="greedy") if beam == 1 else DecodeConfig(strategy="beam", beam_size=beam)

    def run() -> Outputs:
        return [t[0].text for t in translate(loaded, job.words, config, batch_size=batch_size, progress=False)]

    return run


def ct2_system(job: Job, beam: int, batch_size: int, compute_type: str, threads: int = 1) -> Callable[[], Outputs]:
    """CTranslate2's ``translate_batch`` on the export, on ``threads`` threads (what a hand-written script does)."""
    import ctranslate2

    from dotformer.checkpoint import load_checkpoint

    tgt = load_checkpoint(job.checkpoint).tgt_tokenizer
    index = {tgt.id_to_token(i): i for i in range(tgt.vocab_size)}
    translator = ctranslate2.Translator(
        str(job.ct2_dir), device="cpu", compute_type=compute_type, intra_threads=threads, inter_threads=1
    )
    longest = max(map(len, job.src_tokens)) + 1  # </s> included, as dotformer counts the input length

    def run() -> Outputs:
        results = translator.translate_batch(
            job.src_tokens,
            beam_size=beam,
            max_batch_size=batch_size,
            max_decoding_length=longest + 50,  # dotformer's limit: input length + 50 (paper §6.1)
            min_decoding_length=0,
            max_input_length=0,
            length_penalty=0.6 if beam > 1 else 1.0,
            suppress_sequences=[["<pad>"], ["<s>"]],
        )
        return [tgt.decode([index[p] for p in r.hypotheses[0]]) for r in results]

    return run


def hf_system(job: Job, beam: int, batch_size: int) -> Callable[[], Outputs]:
    """HF ``generate`` on the Marian export, length-sorted batches of ``batch_size`` words."""
    from transformers import MarianMTModel

    from dotformer.checkpoint import load_checkpoint
    from dotformer.decoding.inputs import encode_sources
    from dotformer.decoding.order import length_sorted_batches
    from dotformer.decoding.translate import pad_batch

    loaded = load_checkpoint(job.checkpoint)
    marian = MarianMTModel.from_pretrained(str(job.marian_dir)).eval()
    pad, bos, eos = 0, 1, 2

    def run() -> Outputs:
        encoded = encode_sources(loaded, job.words)
        outputs = [""] * len(job.words)
        for batch in length_sorted_batches([len(ids) for ids in encoded.ids], batch_size):
            src = pad_batch([encoded.ids[i] for i in batch], "cpu")  # (B, S)
            with torch.inference_mode():
                out = marian.generate(
                    input_ids=src,
                    attention_mask=src != pad,
                    max_new_tokens=src.size(1) + 50,
                    num_beams=beam,
                    do_sample=False,
                    **({"length_penalty": 0.6, "early_stopping": False} if beam > 1 else {}),
                    suppress_tokens=[pad, bos],
                    pad_token_id=pad,
                    eos_token_id=eos,
                    decoder_start_token_id=bos,
                )
            for i, row in zip(batch, out.tolist(), strict=True):
                ids = [t for t in row[1:] if t not in (pad, eos)]
                outputs[i] = loaded.tgt_tokenizer.decode(ids)
        return outputs

    return run


def compiled_env(workdir: Path) -> dict[str, str]:
    """The commands' environment: Python's bytecode kept under ``workdir`` (``PYTHONPYCACHEPREFIX``), so that each
    command's untimed first run compiles it and the timed runs read it, as an installed package's is compiled at
    install; ``PYTHONDONTWRITEBYTECODE`` is left out (with it, a source tree is compiled again on every start)."""
    env = {name: value for name, value in os.environ.items() if name != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(workdir / "pycache")
    return env


def command_systems(job: Job, beam: int, batch_size: int, threads: int = 1) -> dict[str, Callable[[], Outputs]]:
    """Whole commands: ``dotformer translate --input`` with its default engine and with ``--engine torch`` (float32,
    int8), and a CTranslate2 script (float32, int8), on ``threads`` threads, each with its bytecode compiled
    (:func:`compiled_env`)."""
    words_file, tokens_file = job.workdir / "words.txt", job.workdir / "tokens.txt"
    words_file.write_text("".join(w + "\n" for w in job.words), encoding="utf-8")
    tokens_file.write_text("".join(" ".join(t) + "\n" for t in job.src_tokens), encoding="utf-8")
    script = job.workdir / "ct2_decode.py"
    script.write_text(CT2_SCRIPT, encoding="utf-8")
    strategy = ["--strategy", "greedy"] if beam == 1 else ["--strategy", "beam", "--beam", str(beam)]
    env = compiled_env(job.workdir)

    def read(path: Path) -> Outputs:
        return path.read_text(encoding="utf-8").splitlines()

    def ours(dtype: str, engine: str = "auto") -> Callable[[], Outputs]:
        out = job.workdir / f"out_dotformer_{engine}_{dtype}.txt"
        args = [*dotformer_cli(), "translate", "--checkpoint", str(job.checkpoint), "--device", "cpu", "--threads"]
        args += [str(threads), "--dtype", dtype, "--batch-size", str(batch_size), *strategy]
        args += ["--engine", engine] if engine != "auto" else []  # auto: the command's defaults
        args += ["--input", str(words_file), "--output", str(out)]
        return lambda: (run_quiet(args, env), read(out))[1]

    def theirs(compute_type: str) -> Callable[[], Outputs]:
        out = job.workdir / f"out_ct2_{compute_type}.txt"
        args = [sys.executable, str(script), str(job.ct2_dir), compute_type, str(beam), str(batch_size)]
        args += [str(tokens_file), str(out), str(threads)]
        return lambda: (run_quiet(args, env), read(out))[1]

    return {
        "dotformer": ours("float32"),
        "dotformer_int8": ours("int8"),
        "dotformer_torch": ours("float32", "torch"),
        "dotformer_torch_int8": ours("int8", "torch"),
        "ct2_float32": theirs("float32"),
        "ct2_int8": theirs("int8"),
    }


def ctranslate2_compute_types() -> set[str]:
    """The compute types CTranslate2 offers on this CPU (bfloat16 only on some builds and CPUs)."""
    import ctranslate2

    return set(ctranslate2.get_supported_compute_types("cpu"))


def children_cpu_s() -> float:
    """CPU seconds used so far by finished child processes (user + system)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def interleaved(
    systems: dict[str, Callable[[], Outputs]], rounds: int, children: bool
) -> tuple[dict[str, list[float]], dict[str, list[float]], dict[str, Outputs]]:
    """Run every system once untimed (its outputs kept), then ``rounds`` rounds in rotating order.

    Returns:
        Per system: wall seconds and CPU seconds of each timed run (this process's, or the children's for
        commands), and its outputs.
    """
    outputs = {name: run() for name, run in systems.items()}
    names = list(systems)
    wall: dict[str, list[float]] = {n: [] for n in names}
    cpu: dict[str, list[float]] = {n: [] for n in names}
    clock = children_cpu_s if children else time.process_time
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            start, start_cpu = time.perf_counter(), clock()
            systems[name]()
            wall[name].append(time.perf_counter() - start)
            cpu[name].append(clock() - start_cpu)
    return wall, cpu, outputs


PEER = {
    "dotformer": "ct2_float32", "dotformer_int8": "ct2_int8", "dotformer_bf16": "ct2_bfloat16",
    "dotformer_ct2": "ct2_float32", "dotformer_ct2_int8": "ct2_int8", "dotformer_torch": "ct2_float32",
    "dotformer_torch_int8": "ct2_int8",
}  # fmt: skip
REFERENCE = {"in-process": "dotformer", "command": "dotformer_torch"}  # the torch engine's float32 outputs


def rows_of(
    mode: str, search: str, words: int, wall: dict[str, list[float]], cpu: dict[str, list[float]], outputs: dict
) -> list[dict[str, Any]]:
    """One row per system: inputs/s by wall and CPU time, agreement with the torch engine's float32 outputs, ratios
    to the peer."""
    rows = []
    reference = outputs.get(REFERENCE[mode])  # absent where --systems leaves the torch engine out
    for name in wall:
        row = {
            "mode": mode,
            "search": search,
            "system": name,
            "words_per_s": words / statistics.median(wall[name]),
            "cpu_words_per_s": words / statistics.median(cpu[name]),
            "agree": None
            if reference is None
            else sum(a == b for a, b in zip(outputs[name], reference, strict=True)) / words,
            "wall_s": wall[name],
            "cpu_s": cpu[name],
        }
        rows.append(row)
    by_name = {r["system"]: r for r in rows}
    for row in rows:
        ours, at, size = row["system"].partition("@")
        peer = by_name.get(PEER.get(ours, "") + at + size)  # the peer at the same batch size
        if ours == "dotformer_bf16" and peer is None:
            peer = by_name.get("ct2_float32" + at + size)  # CTranslate2 without bfloat16 on this CPU
        if ours.startswith("dotformer") and peer is not None:
            row["peer"] = peer["system"]
            row["cpu_ratio"] = row["cpu_words_per_s"] / peer["cpu_words_per_s"]
            row["wall_ratio"] = row["words_per_s"] / peer["words_per_s"]
            row["cpu_ratio_rounds"] = statistics.median(
                theirs / mine for mine, theirs in zip(row["cpu_s"], peer["cpu_s"], strict=True)
            )  # each round's ratio: the two ran in the same round, so a drift of the machine's speed cancels
        if row["system"] == "hf_generate":
            row["peer"] = "dotformer"
            row["cpu_ratio"] = by_name["dotformer"]["cpu_words_per_s"] / row["cpu_words_per_s"]
            row["wall_ratio"] = by_name["dotformer"]["words_per_s"] / row["words_per_s"]
    return rows


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Parse the command line, run the benchmark, print the table and write ``out/decoding_real.json``."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--checkpoint", action="append", default=[], help="a trained checkpoint or run (repeatable)")
    parser.add_argument("--train-steps", type=int, default=1500, help="steps of the G2P default when training")
    parser.add_argument("--bible-steps", type=int, default=0, help="also train the Bible default for N steps")
    parser.add_argument("--words-file", default=None, help="inputs, one per line (default: each run's test split)")
    parser.add_argument("--words", type=int, default=2000, help="how many inputs to decode")
    parser.add_argument("--batch-size", type=int, default=64, help="inputs per batch, every system")
    parser.add_argument("--batch-sizes", default="", help="extra in-process batch sizes (dotformer and ct2): 256,1024")
    parser.add_argument("--searches", default="greedy,beam4", help="comma-separated: greedy, beam4")
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds (each runs every system once)")
    parser.add_argument("--threads", default="1,2", help="comma-separated thread counts, every system (1,2)")
    parser.add_argument("--bf16", action="store_true", help="add dotformer bfloat16 and CTranslate2 bfloat16")
    parser.add_argument("--no-hf", action="store_true", help="skip HF generate")
    parser.add_argument("--no-command", action="store_true", help="skip the whole-command runs")
    parser.add_argument("--no-in-process", action="store_true", help="skip the in-process runs")
    parser.add_argument(
        "--systems", default="", help="comma-separated systems to run (default all), e.g. dotformer_int8,ct2_int8"
    )
    parser.add_argument("--quick", action="store_true", help="300 inputs, 2 rounds, greedy only, 1 thread, no HF")
    parser.add_argument("--out", default=str(default_output_dir() / "decoding_real.json"))
    args = parser.parse_args(argv)
    if args.quick:
        args.words, args.rounds, args.searches, args.no_hf, args.threads = min(args.words, 300), 2, "greedy", True, "1"
    thread_counts = [int(t) for t in args.threads.split(",") if t]
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="dotformer_decoding_real_") as tmp:
        checkpoints = [Path(c) for c in args.checkpoint] or [train_g2p(Path(tmp) / "g2p", args.train_steps)]
        if args.bible_steps:
            checkpoints.append(train_bible(Path(tmp) / "bible", args.bible_steps))
        for n, checkpoint in enumerate(checkpoints):
            job = prepare(args, checkpoint, Path(tmp) / f"job{n}")
            for threads in thread_counts:
                for row in job_rows(args, job, threads):
                    rows.append({"checkpoint": str(checkpoint), "threads": threads, **row})
    columns = ["mode", "search", "system", "words_per_s", "cpu_words_per_s", "peer"]
    columns += ["cpu_ratio", "cpu_ratio_rounds", "wall_ratio"]
    print(format_table(rows, ["checkpoint", "threads", *columns, "agree"]))
    print(f"{args.words} inputs at most, batch size {args.batch_size}; ratio > 1: dotformer faster")
    payload = {
        "benchmark": "decoding_real",
        "command": command_line(),
        "machine": machine_info("cpu"),
        "checkpoints": [str(c) for c in args.checkpoint] or [f"G2P default trained {args.train_steps} steps"],
        "words": args.words,
        "batch_size": args.batch_size,
        "rows": rows,
    }
    write_json(args.out, payload)
    print(f"wrote {args.out}")
    return payload


def chosen(systems: dict[str, Callable[[], Outputs]], names: str) -> dict[str, Callable[[], Outputs]]:
    """The systems named in ``names`` (comma-separated; empty: all of them); a name matches in both views."""
    wanted = {name for name in names.split(",") if name}
    return {name: run for name, run in systems.items() if not wanted or name in wanted}


def job_rows(args: argparse.Namespace, job: Job, threads: int) -> list[dict[str, Any]]:
    """The rows of one checkpoint on ``threads`` threads: every search, in-process then whole command."""
    os.environ["OMP_NUM_THREADS"] = str(threads)  # the commands' threads
    torch.set_num_threads(threads)
    rows: list[dict[str, Any]] = []
    extra = [int(b) for b in args.batch_sizes.split(",") if b]
    for search in args.searches.split(","):
        beam = 1 if search == "greedy" else int(search.removeprefix("beam"))
        systems = {
            "dotformer": dotformer_system(job, beam, args.batch_size, "float32"),
            "dotformer_int8": dotformer_system(job, beam, args.batch_size, "int8"),
            "dotformer_ct2": dotformer_ct2_system(job, beam, args.batch_size, "float32", threads),
            "dotformer_ct2_int8": dotformer_ct2_system(job, beam, args.batch_size, "int8", threads),
            "ct2_float32": ct2_system(job, beam, args.batch_size, "float32", threads),
            "ct2_int8": ct2_system(job, beam, args.batch_size, "int8", threads),
        }
        if args.bf16:  # where the CPU computes bf16 natively (AVX512-BF16, AMX)
            systems["dotformer_bf16"] = dotformer_system(job, beam, args.batch_size, "bfloat16")
            if "bfloat16" in ctranslate2_compute_types():
                systems["ct2_bfloat16"] = ct2_system(job, beam, args.batch_size, "bfloat16", threads)
        for size in extra:
            systems[f"dotformer@{size}"] = dotformer_system(job, beam, size, "float32")
            systems[f"dotformer_int8@{size}"] = dotformer_system(job, beam, size, "int8")
            systems[f"ct2_float32@{size}"] = ct2_system(job, beam, size, "float32", threads)
            systems[f"ct2_int8@{size}"] = ct2_system(job, beam, size, "int8", threads)
        if not args.no_hf:
            systems["hf_generate"] = hf_system(job, beam, args.batch_size)
        wanted = {} if args.no_in_process else chosen(systems, args.systems)
        if wanted:
            rows += rows_of("in-process", search, len(job.words), *interleaved(wanted, args.rounds, children=False))
        commands = {} if args.no_command else chosen(command_systems(job, beam, args.batch_size, threads), args.systems)
        if commands:
            rows += rows_of("command", search, len(job.words), *interleaved(commands, args.rounds, children=True))
    return rows


if __name__ == "__main__":
    main()
