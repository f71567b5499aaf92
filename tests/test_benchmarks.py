"""The benchmark scripts: their batches, peers and FLOP counts are right, and each script runs end to end at tiny sizes
(the GPU script on CPU, as it does on a machine without a GPU)."""

from __future__ import annotations

import importlib
import json
import statistics
from pathlib import Path

import numpy as np
import pytest
import torch
from tolerance import logits_tolerance

from dotformer import ModelConfig, Transformer
from dotformer.data.tokenize.tokenizers import BOS_ID, EOS_ID, PAD_ID

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture
def bench(monkeypatch):
    """Import a benchmark module by name (the scripts import each other as top-level modules).

    Runs the test on one torch thread: tiny models gain nothing from two, and on a busy machine (or with pytest-xdist)
    two threads per process make every small op wait for a descheduled sibling thread.
    """
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield importlib.import_module
    torch.set_num_threads(threads)


def tiny_config(**overrides) -> ModelConfig:
    return ModelConfig.preset("tiny", **{"src_vocab_size": 60, "tgt_vocab_size": 70, **overrides})


def test_make_batch_is_a_right_padded_translation_batch(bench):
    peers = bench("peers")
    b = peers.make_batch(6, 9, 7, 60, 70, seed=3)
    assert b.src.shape == (6, 9) and b.tgt_in.shape == (6, 7) and b.tgt_out.shape == (6, 7)
    src_len = (b.src != PAD_ID).sum(1)
    tgt_len = (b.tgt_out != PAD_ID).sum(1)
    assert int(src_len[0]) == 9 and int(tgt_len[0]) == 7  # the first sentence sets the shapes
    assert int(src_len.min()) >= 6 and int(tgt_len.min()) >= 5  # lengths in [0.6 L, L]
    for i in range(6):
        n, m = int(src_len[i]), int(tgt_len[i])
        assert (b.src[i, :n] != PAD_ID).all() and (b.src[i, n:] == PAD_ID).all()
        assert b.src[i, n - 1] == EOS_ID and (b.src[i, : n - 1] >= 4).all()
        assert b.tgt_out[i, m - 1] == EOS_ID and (b.tgt_out[i, m:] == PAD_ID).all()
        assert b.tgt_in[i, 0] == BOS_ID and (b.tgt_in[i, m:] == PAD_ID).all()
        assert torch.equal(b.tgt_in[i, 1:m], b.tgt_out[i, : m - 1])  # teacher forcing: shifted by one
    assert b.num_tgt_tokens == int(tgt_len.sum()) and b.num_src_tokens == int(src_len.sum())
    assert torch.equal(peers.make_batch(6, 9, 7, 60, 70, seed=3).src, b.src)  # deterministic
    assert int((peers.make_batch(4, 5, 5, 60, 70, min_fraction=1.0).src == PAD_ID).sum()) == 0


def test_forward_flops_match_torch_flop_counter(bench):
    from torch.utils.flop_counter import FlopCounterMode

    peers = bench("peers")
    config = tiny_config()
    model = Transformer(config).eval()
    b = peers.make_batch(3, 7, 5, 60, 70)
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        model(b.src, b.tgt_in)
    # the counter sees every matmul of the projections, FFN and generator; on CPU it does not count the fused
    # attention kernel, which attention_flops counts by hand
    matmuls = peers.forward_flops(config, 3, 7, 5) - peers.attention_flops(config, 3, 7, 5)
    assert counter.get_total_flops() == matmuls
    # one term by hand: the generator is 2·B·T·D·V
    assert counter.get_flop_counts()["Transformer.generator"][torch.ops.aten.mm] == 2 * 3 * 5 * 64 * 70


@pytest.mark.numerical
def test_torch_peer_computes_the_paper_model(bench):
    """With dotformer's weights, TorchSeq2Seq's logits equal dotformer's at every real target position."""
    from dotformer.export.torch_nn import to_torch_transformer

    peers = bench("peers")
    config = tiny_config()
    torch.manual_seed(0)
    ours = Transformer(config).eval()
    theirs = peers.TorchSeq2Seq(config).eval()
    theirs.transformer = to_torch_transformer(ours)
    with torch.no_grad():
        theirs.src_embed.weight.copy_(ours.src_embed.token.weight)
        theirs.tgt_embed.weight.copy_(ours.tgt_embed.token.weight)  # the generator is tied to it
        b = peers.make_batch(4, 8, 6, 60, 70, seed=1)
        real = b.tgt_out != PAD_ID
        expected = ours(b.src, b.tgt_in)
        tolerance = logits_tolerance(config, expected, b.src.size(1))  # torch's order of the same sums
        torch.testing.assert_close(theirs(b.src, b.tgt_in)[real], expected[real], atol=tolerance, rtol=0)


@pytest.mark.numerical
def test_peers_train_on_the_same_batch(bench):
    pytest.importorskip("transformers")
    peers, training = bench("peers"), bench("training")
    config = tiny_config(dropout=0.0)
    b = peers.make_batch(2, 6, 5, 60, 70)
    losses, counts = {}, {}
    for name in training.MODELS:
        model = peers.build_model(name, config)
        counts[name] = sum(p.numel() for p in model.parameters())
        expected = (int((b.tgt_in != peers.PAD).sum()), 70) if name == "dotformer" else (2, 5, 70)  # packed
        assert peers.peer_logits(name, model, b).shape == expected
        assert peers.gold_tokens(name, b).shape == expected[:-1]
        step = training.make_step(name, model, b, autocast=None)
        losses[name] = [step() for _ in range(3)]
        assert losses[name][-1] < losses[name][0]  # it learns: the step really updates the weights
    # the same sizes: the same number of parameters, except Marian's frozen positional tables (2 · max_len · D)
    assert counts["dotformer"] == counts["torch"] == counts["marian"] - 2 * config.max_len * config.d_model
    assert counts["dotformer_padded"] == counts["dotformer"]
    # packed and padded dotformer compute the same loss from the same weights (no dropout here)
    assert losses["dotformer"][0] == pytest.approx(losses["dotformer_padded"][0], rel=1e-5)


def test_training_benchmark_runs(bench, tmp_path):
    pytest.importorskip("transformers")
    training = bench("training")
    payload = training.main(["--quick", "--repeats", "1", "--threads", "1", "--out", str(tmp_path / "t.json")])
    rows = json.loads((tmp_path / "t.json").read_text())["rows"]
    expected = ["dotformer", "torch", "marian", "dotformer_padded"]
    assert [r["model"] for r in rows] == expected == [r["model"] for r in payload["rows"]]
    for row in rows:
        assert row["tgt_tokens_per_s"] > 0 and row["tflops"] > 0 and row["dotformer_over_this"] > 0
    assert rows[0]["dotformer_over_this"] == 1.0


def test_decoding_benchmark_runs_and_outputs_agree(bench, tmp_path):
    pytest.importorskip("transformers")
    pytest.importorskip("ctranslate2")
    decoding = bench("decoding")
    payload = decoding.main(["--quick", "--threads", "1", "--out", str(tmp_path / "d.json")])
    rows = payload["rows"]
    systems = {(r["search"], r["system"]) for r in rows}
    assert ("greedy", "hf_generate") in systems and ("beam4", "ct2_int8") in systems
    for row in rows:
        assert row["tokens_per_s"] > 0
        if row["search"] == "greedy" and row["system"] in ("hf_generate", "ct2_float32"):
            assert row["agree_with_dotformer"] == 1.0  # the same model gives the same greedy outputs


def test_decoding_floor_decodes_what_dotformer_decodes(bench, tmp_path):
    pytest.importorskip("transformers")
    floor = bench("decoding_floor")
    payload = floor.main(["--quick", "--out", str(tmp_path / "f.json")])
    rows = {r["system"]: r for r in payload["rows"]}
    assert set(rows) == {"dotformer", "hf_generate", "floor_eager"}
    assert rows["floor_eager"]["note"] == "tokens equal dotformer's: True"  # the floor does the same arithmetic
    assert rows["hf_generate"]["speed_vs_hf"] == 1.0


def test_gpu_script_runs_on_cpu(bench, tmp_path, capsys):
    gpu = bench("gpu")
    out = tmp_path / "gpu.json"
    assert gpu.main(["--device", "cpu", "--time-limit", "120", "--out", str(out)]) == 0
    payload = json.loads(out.read_text())
    sections = {r["section"] for r in payload["rows"]}
    assert {"training", "decoding greedy", "decoding beam4", "long inputs"} <= sections
    assert not any("FAILED" in str(r.get("note")) for r in payload["rows"])
    assert capsys.readouterr().out.rstrip().splitlines()[-1].startswith("| long inputs")  # the table comes last


def test_gpu_script_skips_what_does_not_fit(bench, tmp_path):
    gpu = bench("gpu")
    out = tmp_path / "gpu.json"
    assert gpu.main(["--device", "cpu", "--time-limit", "1", "--out", str(out)]) == 0
    notes = [r["note"] for r in json.loads(out.read_text())["rows"]]
    assert notes and all(n.startswith("skipped") for n in notes)


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory, cli):
    """A copy-task run of a few steps: a run directory with data/, tokenizers and run.json, as the real jobs write."""
    run = tmp_path_factory.mktemp("real") / "copy"
    train = ["train", "--config", "copy", "--out", str(run), "--no-progress", "--threads", "1"]
    done = cli(*train, "--max-steps", "4", "--synthetic-examples", "400")
    assert done.returncode == 0, done.stderr[-3000:]
    return run


def test_training_real_steps_on_a_runs_own_batches(bench, tmp_path, tiny_run):
    pytest.importorskip("transformers")
    training_real = bench("training_real")
    payload = training_real.main(
        ["--quick", "--g2p-run", str(tiny_run), "--threads", "1", "--out", str(tmp_path / "t.json")]
    )
    rows = payload["rows"]
    assert {(r["batches"], r["model"]) for r in rows} == {
        (b, m) for b in ("g2p", "g2p_unpadded") for m in ("dotformer", "dotformer_padded", "torch", "marian")
    }
    assert all(r["tgt_tokens_per_s"] > 0 and r["of_ceiling"] > 0 for r in rows)


def test_decoding_real_agrees_with_ctranslate2_on_a_trained_checkpoint(bench, tmp_path, tiny_run):
    pytest.importorskip("transformers")
    pytest.importorskip("ctranslate2")
    decoding_real = bench("decoding_real")
    # Sources of one length: CTranslate2's length limit is per batch, dotformer's per sentence (an untrained model's
    # outputs run to the limit), so the two limits agree only when every source has the batch's longest length.
    from dotformer.runs.run_data import open_run_data

    test = [line.split("\t")[0] for line in (tiny_run / "data" / "test.tsv").read_text().splitlines()]
    train = [pair.source for pair in open_run_data(tiny_run).training_pairs()]  # type: ignore[union-attr]
    five = [source for source in [*test, *train] if len(source.split()) == 5][:20]
    assert len(five) >= 5
    (tmp_path / "words.txt").write_text("".join(w + "\n" for w in five), encoding="utf-8")
    argv = ["--checkpoint", str(tiny_run), "--words-file", str(tmp_path / "words.txt"), "--quick", "--no-command"]
    argv += ["--out", str(tmp_path / "d.json")]
    rows = {r["system"]: r for r in decoding_real.main(argv)["rows"]}
    assert rows["ct2_float32"]["agree"] == 1.0  # the same model, the same source (the export appends </s>)
    assert rows["dotformer_ct2"]["agree"] == 1.0  # dotformer's CTranslate2 engine decodes as its torch engine
    assert rows["dotformer"]["cpu_ratio"] > 0 and rows["dotformer_ct2"]["peer"] == "ct2_float32"
    ours, theirs = rows["dotformer_ct2"]["cpu_s"], rows["ct2_float32"]["cpu_s"]  # one timing per round
    assert rows["dotformer_ct2"]["cpu_ratio_rounds"] == statistics.median(
        b / a for a, b in zip(ours, theirs, strict=True)
    )
    argv += ["--systems", "dotformer_ct2,ct2_float32"]
    assert {r["system"] for r in decoding_real.main(argv)["rows"]} == {"dotformer_ct2", "ct2_float32"}


def test_startup_times_the_commands_and_lists_their_imports(bench, tmp_path):
    pytest.importorskip("ctranslate2")
    startup = bench("startup")
    argv = ["--repeats", "1", "--commands", "translate", "--top", "3", "--out", str(tmp_path / "s.json")]
    payload = startup.main(argv)
    commands = [row["command"] for row in payload["rows"]]
    assert commands[0] == "dotformer --help" and "dotformer translate --help" in commands
    assert all(row["median_s"] > 0 for row in payload["rows"])
    imports = payload["imports"]
    assert imports["dotformer --help"]["torch"] is False  # what the start-up test asserts, seen by -X importtime
    assert imports["translate one word (cached CTranslate2)"]["torch"] is False
    assert len(imports["dotformer --help"]["slowest"]) == 3


def _scale_row(command: str, run: str, size: float = 4.5, **figures) -> dict:
    """A row of data_scale's results: a train row has ``ranks``, a prepare row has not."""
    return {"command": command, "run": run, "size": size, "pairs": int(size * 1e6), **figures}


def test_data_scale_checks_read_the_targets_rows(bench):
    """Each target reads its own row: the worst bytes a token, the 4.5M-pair peaks and their ratio, the second run's
    time to step 1, the slowest preparation; a size other than 4.5M leaves the absolute targets unmeasured."""
    data_scale = bench("data_scale")
    gib = 2**30
    rows = [
        _scale_row("prepare", "learn BPE + encode", tokens_per_s=1_200_000),
        _scale_row("prepare", "encode (BPE given)", tokens_per_s=900_000),
        _scale_row("train", "base", ranks=1, peak=1 * gib, first_step_s=3.0),
        _scale_row("train", "first", ranks=1, peak=3 * gib, first_step_s=60.0, bytes_per_token=7.0),
        _scale_row("train", "second", ranks=1, peak=2 * gib, first_step_s=10.0, bytes_per_token=3.0),
        _scale_row("torchrun x2", "first", ranks=2, peak=4.5 * gib, first_step_s=70.0, bytes_per_token=9.0),
        _scale_row("torchrun x2", "second", ranks=2, peak=4 * gib, first_step_s=16.0, bytes_per_token=5.0),
    ]
    checks = {
        check["target"].split(":")[0].split(" <=")[0].split(" >=")[0]: check for check in data_scale.target_checks(rows)
    }
    figures = [(check["figure"], check["met"]) for check in checks.values()]
    assert figures == [
        ("9.00 B", "NO"),  # torchrun's first run is the worst
        ("3.00 GiB", "yes"),  # the 1-process peak is the first run's
        ("1.50x", "NO"),  # 4.5 GiB over 3 GiB
        ("16.00 s", "NO"),  # the slower of the two second runs
        ("900,000.00 tok/s", "NO"),  # the slower preparation
    ]
    smaller = [{**row, "size": 0.1} for row in rows]
    assert [check["met"] for check in data_scale.target_checks(smaller)] == ["NO", "-", "-", "-", "NO"]


@pytest.mark.slow
def test_data_scale_runs_the_real_commands(bench, tmp_path, capsys):
    """At 2,000 pairs, one rank, no peer: prepare twice, then the base and two train runs; every command is printed
    and kept, the second run maps what the first prepared, and the table and the JSON hold every row."""
    data_scale = bench("data_scale")
    out = tmp_path / "scale.json"
    argv = ["--sizes", "0.002", "--ranks", "1", "--no-peer", "--vocab-size", "500", "--out", str(tmp_path / "w")]
    assert data_scale.main([*argv, "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["results"]
    assert [(row["command"], row["run"]) for row in rows] == [
        ("prepare", "learn BPE + encode"),
        ("prepare", "encode (BPE given)"),
        ("train", "base"),
        ("train", "first"),
        ("train", "second"),
    ]
    printed = capsys.readouterr()
    for row in rows:
        assert f"$ {row['shell']}" in printed.err and row["peak"] > 0 and row["wall_s"] > 0
    assert all(row["first_step_s"] > 0 for row in rows[2:])
    assert rows[0]["tokens"] == rows[1]["tokens"] == rows[3]["tokens"] == rows[4]["tokens"] > 2000
    first, second = (row["shell"].split(" --out ")[0] for row in rows[3:])
    assert first.startswith("DOTFORMER_CACHE=") and first == second  # the same command on the same cache
    assert rows[3]["prepared_s"] == rows[4]["prepared_s"]  # the second run mapped the data the first prepared
    assert printed.out.count("| 2,000 ") == 5


# --- benchmarks/classic.py: the classic tool of each job ------------------------------------------------------------


def kneser_ney_reference(train: list[int], order: int, V: int, history: list[int], word: int, classic) -> float:
    """P(word | history) by the formula of classic.KneserNey's docstring, with Counters (no codes, no arrays)."""
    from collections import Counter

    raw = {k: Counter(tuple(train[i : i + k]) for i in range(len(train) - k + 1)) for k in range(1, order + 1)}
    counts = {order: raw[order]}
    for k in range(1, order):  # continuation counts: distinct tokens before the k-gram
        counts[k] = Counter(gram[1:] for gram in raw[k + 1])
    p = 1.0 / V
    for k in range(1, order + 1):
        table = counts[k]
        D = classic.discounts(np.array(list(table.values())))
        h = tuple(history[len(history) - k + 1 :]) if k > 1 else ()
        if k > 1 and len(history) < k - 1:
            break
        following = {g[-1]: c for g, c in table.items() if g[:-1] == h}
        total = sum(following.values())
        if total == 0:
            continue
        gamma = sum(D[min(c, 3) - 1] for c in following.values())
        c = following.get(word, 0)
        p = (max(c - (D[min(c, 3) - 1] if c else 0.0), 0.0) + gamma * p) / total
    return p


@pytest.mark.numerical
def test_kneser_ney_is_the_formula_and_sums_to_one(bench):
    import itertools
    import math

    classic = bench("classic")
    rng = np.random.default_rng(0)
    train = rng.integers(0, 5, size=400)
    train[::7] = 2  # some n-grams frequent, others seen once or twice
    V = 6  # token 5 never seen: only the uniform share
    model = classic.KneserNey(train, 4, V)
    for order in (1, 2, 4):
        for history in itertools.product(range(V), repeat=3):
            stream = np.array([[*history, w] for w in range(V)])
            probs = [math.exp(model.log_probs(row, order)[-1]) for row in stream]
            assert sum(probs) == pytest.approx(1.0, abs=1e-12)
            if history[0] < 2:  # a sample of the histories against the Counter formula
                expected = [kneser_ney_reference(list(train), order, V, list(history), w, classic) for w in range(V)]
                assert probs == pytest.approx(expected, rel=1e-12)
    # the first token is not scored; the others are, with the history before them
    assert model.log_probs(np.array([1, 2, 3]), 2).shape == (2,)


def test_kneser_ney_discounts_are_chen_and_goodmans(bench):
    classic = bench("classic")
    counts = np.array([1] * 10 + [2] * 4 + [3] * 2 + [4] * 1 + [9])  # n1..n4 = 10, 4, 2, 1
    Y = 10 / (10 + 2 * 4)
    expected = [1 - 2 * Y * 4 / 10, 2 - 3 * Y * 2 / 4, 3 - 4 * Y * 1 / 2]
    assert classic.discounts(counts) == pytest.approx(expected, rel=1e-12)
    assert list(classic.discounts(np.array([1, 1, 2]))) == [0.75] * 3  # no n3, n4: the single discount


def test_word_for_word_learns_the_dictionary(bench):
    classic = bench("classic")
    texts = [("la casa", "the house"), ("la casa verde", "the green house"), ("el libro", "the book"),
             ("un libro", "a book"), ("un libro verde", "a green book"), ("la mesa", "the table")]  # fmt: skip
    pairs = [classic.Pair(*text) for text in texts]
    model = classic.WordForWord(pairs, iterations=10)
    assert model.dictionary["casa"] == "house" and model.dictionary["libro"] == "book"
    assert model.dictionary["verde"] == "green" and model.dictionary["un"] == "a"
    assert model.translate("La casa, Pedro.") == "The house, Pedro."  # a capital kept, an unknown word copied


def classic_run(classic, tmp_path, jobs: list[str]) -> list[dict]:
    """Run ``jobs`` of benchmarks/classic.py end to end on small files of their kind (through dotformer's split
    code), made so that a working tool is right on every held-out example (G2P, genre, word for word); its rows, as
    written to the JSON file."""
    import argparse
    import random

    rng = random.Random(0)
    phones = {"a": "AH", "b": "B", "d": "D", "e": "IY", "k": "K", "m": "M", "o": "OW", "t": "T"}
    words = sorted({"".join(rng.choice("abdekmot") for _ in range(rng.randint(3, 6))) for _ in range(400)})
    (tmp_path / "g2p.tsv").write_text("".join(f"{w}\t{' '.join(phones[c] for c in w)}\n" for w in words))
    topics = {"law": "statute commandment ordinance judgment", "song": "sing praise harp psalm"}
    verses = [f"{' '.join(rng.choices(topics[g].split(), k=5))} and the {rng.choice(['man', 'day'])}\t{g}"
              for g in topics for _ in range(150)]  # fmt: skip
    (tmp_path / "genre.tsv").write_text("\n".join(rng.sample(verses, len(verses))) + "\n")
    (tmp_path / "lm.txt").write_text("\n".join(f"and the {w} said unto {w}" for w in words) + "\n")
    spanish = {"casa": "house", "libro": "book", "verde": "green", "grande": "big", "la": "the", "una": "a",
               "mesa": "table", "roja": "red"}  # fmt: skip
    pairs = [rng.sample(list(spanish), 6) for _ in range(200)]  # six words: BLEU's 4-grams are there to count
    (tmp_path / "bible.tsv").write_text("".join(f"{' '.join(p)}\t{' '.join(spanish[w] for w in p)}\n" for p in pairs))
    sections = {
        "g2p": {"dataset": str(tmp_path / "g2p.tsv"), "task": "g2p"},
        "genre": {"dataset": str(tmp_path / "genre.tsv"), "task": "classify", "vocab_size": 300},
        "lm": {"dataset": str(tmp_path / "lm.txt"), "task": "lm", "block_size": 16},
        "bible": {"dataset": str(tmp_path / "bible.tsv"), "vocab_size": 300},
    }
    args = argparse.Namespace(limit=None, test_limit=None, orders=[2, 3, 4], iterations=5, out=tmp_path / "c.json")
    payload = classic.run(args, jobs, sections)
    rows = json.loads(args.out.read_text())["rows"]
    assert [row["job"] for row in rows] == [row["job"] for row in payload["rows"]]
    assert [row["job"] for row in rows] == [job for job in jobs for _ in range(4 if job == "bible" else 1)]
    for row in rows:
        assert row["cpu_s"] >= 0 and row["wall_s"] >= 0
    return rows


def test_classic_jobs_run_on_tiny_files(bench, tmp_path, capsys):
    pytest.importorskip("sklearn", reason="the genre job needs scikit-learn (the eval extra)")
    pytest.importorskip("sacrebleu", reason="the bible job's BLEU needs sacrebleu (the eval extra)")
    classic = bench("classic")
    rows = classic_run(classic, tmp_path, ["genre", "lm", "bible"])
    by_system = {row["system"].split(",")[0]: row for row in rows}
    assert by_system["TF-IDF + logistic regression"]["accuracy"] == 100.0
    (lm,) = [row for row in rows if row["job"] == "lm"]
    assert lm["valid_bits_per_char"] == min(lm["valid_bits_by_order"].values())  # the order chosen on valid
    assert lm["valid_bits_by_order"][str(lm["order"])] == lm["valid_bits_per_char"]
    assert 0 < lm["bits_per_char"] < 2  # a repetitive text: far below the uniform log2(V) bits
    assert by_system["IBM Model 1 word for word"]["bleu"] == pytest.approx(100.0)
    assert by_system["copy the source"]["bleu"] < 10
    assert "| job" in capsys.readouterr().out


def test_classic_g2p_job_runs_phonetisaurus(bench, tmp_path):
    pytest.importorskip("phonetisaurus", reason="Phonetisaurus is not installed (the classic extra; Linux x86-64)")
    pytest.importorskip("rapidfuzz", reason="WER and PER need rapidfuzz (the eval extra)")
    (row,) = classic_run(bench("classic"), tmp_path, ["g2p"])
    assert row["wer"] == 0.0 and row["per"] == 0.0 and row["missing"] == 0  # one phone per letter


TINY_LM = """[data]
task = "lm"
tokenizer = "char"
block_size = 32
valid_fraction = 0.1
test_fraction = 0.1

[model]
arch = "decoder-only"
d_model = 32
num_heads = 4
d_ff = 64
num_decoder_layers = 1
dropout = 0.0
norm_first = true

[train]
max_tokens = 256
lr_schedule = "constant"
lr_peak = 1e-3
warmup_steps = 1
seed = 1
"""


def test_modern_ablation_runs_each_variant_at_the_2017_blocks_parameter_count(bench, tmp_path):
    """Two steps a variant through the real train and evaluate commands: the pre-norm row of a pre-norm config is
    not run again, every run's parameters are within 2% of the 2017 block's, and the fields reach the runs; a
    second invocation reads the first's 2017 run and refuses one of another budget."""
    ablation = bench("modern_ablation")
    text = tmp_path / "text.txt"
    text.write_text("".join(f"in the beginning {i} was the word and the word was {i * 7}\n" for i in range(300)))
    (tmp_path / "tiny.toml").write_text(TINY_LM)
    argv = ["--config", str(tmp_path / "tiny.toml"), "--data", str(text), "--steps", "2", "--threads", "1"]
    argv += ["--variants", "pre-norm,modern", "--work-dir", str(tmp_path / "w"), "--out", str(tmp_path / "a.json")]
    payload = ablation.main(argv)
    rows = {row["variant"]: row for row in json.loads((tmp_path / "a.json").read_text())["rows"]}
    assert list(rows) == ["2017", "pre-norm", "modern"] == [row["variant"] for row in payload["rows"]]
    assert rows["pre-norm"]["skipped"] and "own" in rows["pre-norm"]["what"]
    base, modern = rows["2017"], rows["modern"]
    assert modern["fields"] == dict(norm="rmsnorm", ffn_gated=True, activation="silu", positional="rotary",
                                    bias=False, num_kv_heads=2)  # fmt: skip
    assert modern["d_ff"] != base["d_ff"] and abs(modern["parameters"] / base["parameters"] - 1) < 0.02
    run = json.loads((tmp_path / "w" / "lm" / "modern" / "run.json").read_text())["model"]
    assert run["norm"] == "rmsnorm" and run["num_kv_heads"] == 2 and run["d_ff"] == modern["d_ff"]
    for row in (base, modern):
        assert row["steps"] == 2 and row["tokens_per_s"] > 0 and row["test_bits_per_char"] > 0
        assert row["commands"][0].startswith("dotformer train --config") and "--max-steps 2" in row["commands"][0]

    # a second invocation beside the first reads its 2017 run (--baseline) and trains only its own variants
    argv2 = [
        *argv[: argv.index("--variants")],
        "--variants",
        "no-bias",
        "--baseline",
        str(tmp_path / "w" / "lm" / "2017"),
    ]
    second = ablation.main([*argv2, "--work-dir", str(tmp_path / "w2"), "--out", str(tmp_path / "b.json")])
    again, no_bias = second["rows"]
    assert not (tmp_path / "w2" / "lm" / "2017").exists() and "train_s_wall" not in again
    assert {k: again[k] for k in ("parameters", "steps", "test_bits_per_char")} == {
        k: base[k] for k in ("parameters", "steps", "test_bits_per_char")
    }
    trained = ModelConfig.from_dict(json.loads((tmp_path / "w" / "lm" / "2017" / "run.json").read_text())["model"])
    assert no_bias["fields"] == {"bias": False}  # d_ff matched to the first run's parameter count
    assert no_bias["d_ff"] == ablation.matched_d_ff(trained.replace(bias=False), base["parameters"])
    steps3 = [*argv2[: argv2.index("--steps")], "--steps", "3", *argv2[argv2.index("--steps") + 2 :]]
    with pytest.raises(SystemExit, match="trained 2 steps, this comparison 3"):
        ablation.main([*steps3, "--work-dir", str(tmp_path / "w3"), "--out", str(tmp_path / "c.json")])


def test_modern_ablation_matches_d_ff_to_the_parameter_count(bench):
    ablation = bench("modern_ablation")
    from dotformer.model import expected_num_parameters

    base = ModelConfig(0, 71, d_model=128, num_heads=4, d_ff=512, num_encoder_layers=0, num_decoder_layers=4,
                       arch="decoder-only", norm_first=True)  # fmt: skip
    target = expected_num_parameters(base)
    llama = base.replace(**ablation.LLAMA, num_kv_heads=2)
    assert ablation.matched_d_ff(llama, target) == 384  # configs/lm-bible-modern.toml's
    assert ablation.matched_d_ff(base.replace(norm="rmsnorm"), target) == 512  # a few norm weights: d_ff stays
    assert abs(expected_num_parameters(llama.replace(d_ff=384)) / target - 1) < 0.01
    assert ablation.toml_value(["a", 1, True, 0.5]) == '["a", 1, true, 0.5]'


@pytest.mark.parametrize(
    ("base_name", "vocab", "schedule", "within"),
    [
        ("lm-bible", (0, 71), {}, 0.02),  # the KJV's 71 characters
        ("bible", (8000, 8000), dict(lr_schedule="constant", warmup_steps=100, lr_cooldown=0.2), 0.001),
    ],
)
def test_the_shipped_modern_config_is_its_base_with_llamas_block_at_its_parameter_count(
    bench, base_name: str, vocab: tuple[int, int], schedule: dict[str, object], within: float
):
    """configs/lm-bible-modern.toml and bible-modern.toml are the ablation's "modern" row of lm-bible.toml and
    bible.toml: the base's data and recipe (bible-modern's learning-rate schedule apart), the Llama block's fields,
    d_ff matched to the base's parameter count on the job's vocabulary."""
    ablation = bench("modern_ablation")
    from dotformer.model import expected_num_parameters
    from dotformer.runs.config_files import read_config_file

    def config(name: str) -> ModelConfig:
        model = dict(read_config_file(name).model)
        return ModelConfig.preset(model.pop("preset"), src_vocab_size=vocab[0], tgt_vocab_size=vocab[1], **model)

    old, new = read_config_file(base_name), read_config_file(f"{base_name}-modern")
    assert new.data == old.data and new.train == {**old.train, **schedule}
    base = config(base_name)
    target = expected_num_parameters(base)
    [modern] = [variant for variant in ablation.VARIANTS if variant.name == "modern"]
    fields = ablation.changes(ablation.variant_fields(modern, base), base)
    d_ff = ablation.matched_d_ff(base.replace(**fields), target)
    assert config(f"{base_name}-modern") == base.replace(**fields, d_ff=d_ff)
    assert abs(expected_num_parameters(config(f"{base_name}-modern")) / target - 1) < within


def test_generate_speed_runs_and_the_engines_agree(bench, tmp_path):
    """A 2-layer model of Llama's shape: dotformer holds HF's weights and generates HF's greedy tokens; the rows the
    machine cannot measure say why."""
    pytest.importorskip("transformers")
    speed = bench("generate_speed")
    argv = ["--tiny", "--threads", "1", "--prompts", "2", "--prompt-len", "5", "--new-tokens", "6"]
    payload = speed.main([*argv, "--out", str(tmp_path / "g.json")])
    rows = {row["system"]: row for row in json.loads((tmp_path / "g.json").read_text())["rows"]}
    assert [row["system"] for row in payload["rows"]] == ["dotformer", "hf_generate", "dotformer_ct2", "llama_cpp"]
    assert rows["dotformer"]["tokens_per_s"] > 0 and rows["hf_generate"]["tokens_per_s"] > 0
    assert rows["hf_generate"]["agree"] == 1.0  # the same weights, the same greedy tokens
    for system in ("dotformer_ct2", "llama_cpp"):
        assert "tokens_per_s" in rows[system] or rows[system]["note"].startswith("skipped: ")


@pytest.mark.numerical
def test_generate_speed_holds_hf_llamas_weights(bench):
    pytest.importorskip("transformers")
    speed = bench("generate_speed")
    from transformers import LlamaForCausalLM

    torch.manual_seed(0)
    hf = LlamaForCausalLM(speed.llama_config(speed.TINY)).eval()
    model = speed.dotformer_of(hf)
    assert model.num_parameters() == sum(p.numel() for p in hf.parameters())  # tied: the embedding counted once
    tokens = torch.tensor([[5, 6, 7, 8, 9, 10]])
    with torch.no_grad():
        theirs = hf(input_ids=tokens).logits
        ours = model(tgt=tokens)
    torch.testing.assert_close(ours, theirs, rtol=0, atol=logits_tolerance(model.config, theirs))


def test_the_shipped_modern_encoder_is_mlm_bible_with_the_modern_block_at_its_parameter_count(bench):
    """configs/mlm-bible-modern.toml is mlm-bible.toml with the modern block (pre-norm RMSNorm, GeGLU, rotary
    positions, no biases): its data and recipe, d_ff matched to the parameter count on the 4,000-token vocabulary;
    classify-bible-modern.toml is classify-bible.toml whose [model] is that encoder's, so --init-from accepts it."""
    ablation = bench("modern_ablation")
    from dotformer.model import expected_num_parameters
    from dotformer.runs.config_files import read_config_file

    def config(name: str) -> ModelConfig:
        model = dict(read_config_file(name).model)
        model.pop("pooling", None)
        return ModelConfig.preset(model.pop("preset"), src_vocab_size=4000, tgt_vocab_size=4000, max_len=96, **model)

    old, new = read_config_file("mlm-bible"), read_config_file("mlm-bible-modern")
    assert new.data == old.data and new.train == old.train
    base = config("mlm-bible")
    fields = dict(norm="rmsnorm", ffn_gated=True, activation="gelu", positional="rotary", bias=False)
    target = expected_num_parameters(base)
    assert config("mlm-bible-modern") == base.replace(
        **fields, d_ff=ablation.matched_d_ff(base.replace(**fields), target)
    )
    assert abs(expected_num_parameters(config("mlm-bible-modern")) / target - 1) < 0.01
    fine, tuned = read_config_file("classify-bible"), read_config_file("classify-bible-modern")
    assert tuned.data == fine.data and tuned.train == fine.train
    assert config("classify-bible-modern") == config("mlm-bible-modern")
    assert dict(tuned.model)["pooling"] == dict(fine.model)["pooling"]
