"""Latency of ``dotformer serve`` under load: p50/p95 of a request while N clients send requests at once, with and
without a crowd of clients that trickle their requests.

Starts ``dotformer serve --port 0`` in its own process (the server as users run it, not sharing this process's
interpreter with the clients), then, for each number of concurrent clients, has every client send ``--requests``
requests one after another (each ``--texts`` texts, beam ``--beam``) and times each from the connection to the last
byte of the answer. Counts errors and connection resets.

The last round runs ``--trickle-clients`` clients again beside ``--trickling`` connections that each send one byte
every ``--trickle-pause`` seconds (half still in their headers, half in their bodies), reconnecting when the server
drops them at its limits. Reading a request costs the server no decoding, so they must not slow the others: the
round's p95 over the p95 of the same clients without them is the ``p95_ratio`` (target at most 1.5, with 0 resets
and 0 errors).

Without ``--checkpoint``, a random ``small`` model over a symbol vocabulary is written to a temporary directory (its
outputs are arbitrary; with a random model each output runs to the maximum length, a heavy request).

Run: ``python benchmarks/serve_load.py --mode trickle --clients 1,4,16 --requests 25 --trickling 200 --threads 1
--out benchmarks/results/serve_load.json``; prints a table and writes the JSON (default ``out/serve_load.json``).
``--quick`` checks that it runs (tiny model, few requests, 20 trickling connections).

``--mode sentences`` (the default) measures batching: 1, 4, 16 and 64 clients at once, each sending single sentences
(``--sentences FILE``, one a line; default random symbol strings) one request after another, on ``--engine``; per
round the throughput (sentences/s), p50/p95/p99 latency, the mean sentences per engine call (the server's
/metrics), whether every answer equals the offline translation of the same sentence, beside the offline run (the
same sentences in one ``translate`` call in this process, on the same engine). Each client keeps its connection
open from one request to the next. Target at 16 clients: throughput >=
0.8x offline, p95 <= 3x one request's latency alone, no error, equal outputs. The offline run is timed before
the first round and after each (the shared machine's speed drifts): a round compares with the mean of the two beside
it. ``engine_busy`` is the share of the round's time the engine spent decoding (the server's /metrics): below 1,
the server loses time around the engine (waits, hand-offs, HTTP); near 1, in the engine calls themselves.
``bound_ms`` is what Little's law allows: N clients that each send again as soon as they are answered wait
N / throughput on average, so at the offline rate a request's mean latency is N / offline_per_s; ``p95_vs_bound`` is
the round's p95 over it (no server reaches below 1 without decoding faster than the offline run). The p95 target asks
for a throughput of 16 / (3 x one request's latency alone) at 16 clients (``p95_target_needs_per_s``).
The offline call gives what the replies carry: each output's exact score (``dotformer translate --output-format
json``), or with ``--no-scores``, where the clients send ``"scores": false`` (each reply's score is the search's, the
texts the same), the texts alone (``--output-format text``). The server and the offline call are warmed before the
first timing. ``--batch-groups N`` passes the server's flag (default: its own).

``--mode calls`` times the engine alone, in this process: the sentences decoded in calls of each ``--clients``
number of sentences, as the server builds them (with and without the scoring pass), against one call of them all as
``dotformer translate`` makes it, in CPU time (robust to other work on a shared machine): what a server's batches of
that size can reach at best.

    python benchmarks/serve_load.py --mode calls --checkpoint runs/g2p --sentences words.txt --engine ctranslate2 \
        --clients 1,4,8,16,64 --threads 1

    python benchmarks/serve_load.py --checkpoint runs/g2p --sentences words.txt --engine ctranslate2 --threads 1
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import select
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from common import command_line, default_output_dir, format_table, machine_info, write_json

TIMEOUT_S = 120.0
SYMBOLS = [f"s{i}" for i in range(40)]


def random_checkpoint(directory: Path, preset: str) -> Path:
    """A random model of ``preset`` with a symbol vocabulary of :data:`SYMBOLS`, saved under ``directory``."""
    import torch

    from dotformer import ModelConfig, Transformer
    from dotformer.checkpoint import save_checkpoint
    from dotformer.data.tokenize.tokenizer_files import train_tokenizer

    tokenizer = train_tokenizer("symbol", [" ".join(SYMBOLS)])
    torch.manual_seed(0)
    size = tokenizer.vocab_size
    config = ModelConfig.preset(preset, src_vocab_size=size, tgt_vocab_size=size)
    path = directory / "model"
    save_checkpoint(path, Transformer(config).eval(), tokenizer, tokenizer, {"task": "synthetic"})
    return path


def start_server(
    checkpoint: Path, threads: int | None, extra: list[str] | None = None
) -> tuple[subprocess.Popen[str], str]:
    """``dotformer serve --port 0`` (and ``extra`` flags) in a new process; returns it and its URL (read from its
    first line)."""
    command = [sys.executable, "-m", "dotformer", "serve", "--checkpoint", str(checkpoint), "--port", "0"]
    command += ["--device", "cpu"] + (["--threads", str(threads)] if threads else []) + (extra or [])
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.append(process.stdout.readline()), daemon=True)  # type: ignore[union-attr]
    reader.start()
    reader.join(TIMEOUT_S)
    if not lines or not lines[0].startswith("dotformer serve: POST "):
        process.kill()
        raise SystemExit(f"the server did not start: {lines} {process.stderr.read() if process.stderr else ''}")
    return process, lines[0].split()[3]


def one_request(url: str, payload: bytes, answers: list[Any] | None = None) -> tuple[float, str]:
    """Send one request; (seconds, outcome) with outcome "ok", "reset", "http NNN" or the error's name (``answers``
    gets the reply's translations)."""
    start = time.perf_counter()
    request = urllib.request.Request(url, data=payload, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
            body = response.read()
            outcome = "ok"
        if answers is not None:
            answers.append([t["text"] for t in json.loads(body)["translations"]])
    except urllib.error.HTTPError as error:
        outcome = f"http {error.code}"
    except (ConnectionResetError, urllib.error.URLError) as error:
        reason = getattr(error, "reason", error)
        outcome = "reset" if isinstance(reason, ConnectionResetError) else type(reason).__name__
    return time.perf_counter() - start, outcome


class Client:
    """One client's connection, kept open from one request to the next (as HTTP clients such as ``requests.Session``
    and ``openai`` keep it), so that a round measures the server rather than the clients' connection set-up."""

    def __init__(self, url: str) -> None:
        address, self.path = url.split("//", 1)[1].split("/", 1)
        host, port = address.rsplit(":", 1)
        self.connection = http.client.HTTPConnection(host, int(port), timeout=TIMEOUT_S)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_: object) -> None:
        self.connection.close()

    def send(self, payload: bytes, answers: list[Any]) -> tuple[float, str]:
        """POST ``payload``; (seconds, outcome) as :func:`one_request` (``answers`` gets the translations)."""
        start = time.perf_counter()
        try:
            self.connection.request("POST", "/" + self.path, payload, {"Content-Type": "application/json"})
            response = self.connection.getresponse()
            body = response.read()
        except (ConnectionError, http.client.HTTPException) as error:
            self.connection.close()  # opened again by the next request
            return time.perf_counter() - start, "reset" if isinstance(error, ConnectionResetError) else type(
                error
            ).__name__
        seconds = time.perf_counter() - start
        if response.status != 200:
            return seconds, f"http {response.status}"
        answers.append([t["text"] for t in json.loads(body)["translations"]])
        return seconds, "ok"


IN_HEADERS = b"POST /api/translate HTTP/1.1\r\nHost: 127.0.0.1"  # then a digit more of the host now and then
IN_BODY = b'POST /api/translate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100000\r\n\r\n{"texts": ["s1"]}'


def trickle(url: str, count: int, pause_s: float, opened: threading.Event, stop: threading.Event) -> dict[str, int]:
    """``count`` connections that each send one byte every ``pause_s`` seconds until ``stop`` is set (half stop in
    their headers, half in their bodies); one the server drops (closed, or answered: a 408) is opened again.
    ``opened`` is set once all ``count`` are open.

    Returns:
        {"opened": connections opened, "dropped": connections the server closed or answered}.
    """
    host, port = url.split("//", 1)[1].split("/", 1)[0].rsplit(":", 1)
    counts = {"opened": 0, "dropped": 0}

    def open_one(number: int) -> socket.socket:
        sock = socket.create_connection((host, int(port)), timeout=TIMEOUT_S)
        sock.sendall(IN_BODY if number % 2 else IN_HEADERS)
        sock.setblocking(False)
        counts["opened"] += 1
        return sock

    sockets = [open_one(i) for i in range(count)]
    opened.set()
    try:
        while not stop.is_set():
            for number, sock in enumerate(sockets):  # one byte per connection, spread over the pause
                if stop.wait(pause_s / count):
                    break
                readable, _, _ = select.select([sock], [], [], 0)
                try:
                    if readable:  # the server answered (a 408) or closed: it let go of this client
                        raise ConnectionResetError
                    sock.send(b" " if number % 2 else b"1")
                except OSError:
                    sock.close()
                    counts["dropped"] += 1
                    sockets[number] = open_one(number)
    finally:
        for sock in sockets:
            sock.close()
    return counts


def percentile(values: list[float], q: float) -> float:
    """The ``q``-quantile (0..1) of ``values`` (linear interpolation)."""
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def round_of(url: str, clients: int, requests: int, payload: bytes, trickling: int, pause_s: float) -> dict[str, Any]:
    """``clients`` clients at once, ``requests`` each, beside ``trickling`` trickling connections; the table's row."""
    opened, stop = threading.Event(), threading.Event()
    trickled: list[dict[str, int]] = []
    trickler = None
    if trickling:
        trickler = threading.Thread(target=lambda: trickled.append(trickle(url, trickling, pause_s, opened, stop)))
        trickler.start()
        opened.wait(TIMEOUT_S)  # every trickling connection open before the clients start
        time.sleep(pause_s)  # and each past its first pause
    start = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        runs = list(pool.map(lambda _: [one_request(url, payload) for _ in range(requests)], range(clients)))
    wall = time.perf_counter() - start
    stop.set()
    if trickler is not None:
        trickler.join(TIMEOUT_S)
    results = [result for run in runs for result in run]
    latencies = [seconds * 1000 for seconds, outcome in results if outcome == "ok"]
    outcomes = [outcome for _, outcome in results]
    return {
        "clients": clients,
        "trickling": trickling,
        "requests": len(results),
        "ok": outcomes.count("ok"),
        "resets": outcomes.count("reset"),
        "other_errors": len(outcomes) - outcomes.count("ok") - outcomes.count("reset"),
        "p50_ms": statistics.median(latencies) if latencies else None,
        "p95_ms": percentile(latencies, 0.95) if latencies else None,
        "max_ms": max(latencies) if latencies else None,
        "requests_per_s": len(latencies) / wall,
        "trickling_opened": trickled[0]["opened"] if trickled else None,
        "trickling_dropped": trickled[0]["dropped"] if trickled else None,
    }


def batch_figures(url: str) -> tuple[float, float, float]:
    """(engine calls, sentences in them, seconds the engine spent on them) so far, from the server's GET /metrics."""
    root = url.rsplit("/api/", 1)[0]
    with urllib.request.urlopen(root + "/metrics", timeout=TIMEOUT_S) as response:
        text = response.read().decode("utf-8")
    names = ("dotformer_batch_sentences_count", "dotformer_batch_sentences_sum", "dotformer_engine_seconds_total")
    figures = dict(line.rsplit(" ", 1) for line in text.splitlines() if line.startswith(names))
    return tuple(float(figures.get(name, 0)) for name in names)  # type: ignore[return-value]


def sentence_round(
    url: str, clients: int, requests: int, sentences: list[str], beam: int, scores: bool = True
) -> dict[str, Any]:
    """``clients`` clients at once, each sending ``requests`` single-sentence requests one after another (client c
    sends sentences c, c + clients, ...; ``scores``: the requests' field); the row, with each sentence's answer under
    ``"answers"``."""
    calls_before, sent_before, busy_before = batch_figures(url)
    work = [[sentences[(c + clients * i) % len(sentences)] for i in range(requests)] for c in range(clients)]

    def client(texts: list[str]) -> list[tuple[float, str, str, list[Any]]]:
        done = []
        with Client(url) as connection:
            for text in texts:
                answers: list[Any] = []
                body = {"texts": [text], "beam": beam} | ({} if scores else {"scores": False})
                seconds, outcome = connection.send(json.dumps(body).encode(), answers)
                done.append((seconds, outcome, text, answers))
        return done

    start = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        runs = list(pool.map(client, work))
    wall = time.perf_counter() - start
    calls_after, sent_after, busy_after = batch_figures(url)
    results = [result for run in runs for result in run]
    latencies = [seconds * 1000 for seconds, outcome, _, _ in results if outcome == "ok"]
    calls = calls_after - calls_before
    return {
        "clients": clients,
        "requests": len(results),
        "ok": len(latencies),
        "errors": len(results) - len(latencies),
        "sentences_per_s": len(latencies) / wall,
        "p50_ms": percentile(latencies, 0.5) if latencies else None,
        "p95_ms": percentile(latencies, 0.95) if latencies else None,
        "p99_ms": percentile(latencies, 0.99) if latencies else None,
        "mean_batch": (sent_after - sent_before) / calls if calls else None,
        "engine_busy": (busy_after - busy_before) / wall,
        "answers": {text: answers[0][0] for _, outcome, text, answers in results if outcome == "ok"},
    }


def same_threads(threads: int | None) -> dict[str, int]:
    """The threads of the server's ``--threads`` for a model loaded in this process: torch's set here (else torch
    decodes on every core while the server has ``threads``), CTranslate2's as the returned ``load`` options."""
    if not threads:
        return {}
    import torch

    torch.set_num_threads(threads)
    return {"intra_threads": threads}


class Offline:
    """``sentences`` translated in this process on ``engine`` in one call (dotformer translate's path), timed as
    often as asked: the rounds interleave with it, so that each round compares with the offline rate of the same
    minutes (on a shared machine the rate drifts). On the server's threads: ``threads`` is CTranslate2's
    ``intra_threads`` and torch's ``set_num_threads``, as ``dotformer serve --threads`` sets them. ``scores``: the
    offline call gives what the clients' replies carry, each output's exact score (``--output-format json``, the
    scoring pass included), else the texts alone (``--output-format text``)."""

    def __init__(
        self, checkpoint: Path, engine: str, threads: int | None, sentences: list[str], beam: int, scores: bool
    ) -> None:
        import dotformer

        options = same_threads(threads)
        self.model = dotformer.load(checkpoint, device="cpu", engine=engine, **options)
        self.sentences, self.beam, self.scores = sentences, beam, scores
        self.model.translate(sentences[:8], beam=beam)  # warm: the copy converted, the caches allocated
        self.outputs: dict[str, str] = {}

    def rate(self) -> float:
        """Sentences per second of one timed run."""
        start = time.perf_counter()
        if self.scores:
            results = self.model.translate(self.sentences, beam=self.beam, details=True)
            outputs = [result.hypotheses[0].text for result in results]
        else:
            outputs = self.model.translate(self.sentences, beam=self.beam)
        wall = time.perf_counter() - start
        self.outputs = dict(zip(self.sentences, outputs, strict=True))
        return len(self.sentences) / wall


def sentence_load(args: argparse.Namespace, checkpoint: Path, clients: list[int], requests: int) -> dict[str, Any]:
    """The rounds of single sentences on one engine, each between two offline runs of the same sentences."""
    if args.sentences:
        sentences = [line.strip() for line in Path(args.sentences).read_text(encoding="utf-8").splitlines()]
        sentences = [s for s in sentences if s]
    else:
        sentences = [" ".join(SYMBOLS[(i * 7 + k) % len(SYMBOLS)] for k in range(3 + i % 9)) for i in range(200)]
    scores = not args.no_scores
    alone = Offline(checkpoint, args.engine, args.threads, sentences, args.beam, scores)
    extra = ["--engine", args.engine, "--batch-wait-ms", str(args.batch_wait_ms)]
    extra += ["--batch-groups", str(args.batch_groups)] if args.batch_groups else []
    process, url = start_server(checkpoint, args.threads, extra)
    sentence_round(url, 1, 8, sentences, args.beam, scores)  # warm: the server's copy loaded, its caches allocated
    alone.rate()  # warm: every sentence's length seen once (untimed)
    rates = [alone.rate()]
    rows = []
    try:
        for n in clients:
            rows.append(sentence_round(url, n, requests, sentences, args.beam, scores))
            rates.append(alone.rate())
    finally:
        process.terminate()
        process.wait(TIMEOUT_S)
    single = next((row for row in rows if row["clients"] == 1), None)
    for row, before, after in zip(rows, rates, rates[1:], strict=False):
        answers = row.pop("answers")
        row["equal_outputs"] = all(alone.outputs[text] == answer for text, answer in answers.items())
        row["offline_per_s"] = (before + after) / 2
        row["throughput_vs_offline"] = row["sentences_per_s"] / row["offline_per_s"]
        row["p95_vs_one_client_p50"] = row["p95_ms"] / single["p50_ms"] if single and row["p95_ms"] else None
        row["bound_ms"] = 1000 * row["clients"] / row["offline_per_s"]  # Little's law at the offline rate
        row["p95_vs_bound"] = row["p95_ms"] / row["bound_ms"] if row["p95_ms"] else None
    engine = alone.model.engine
    print(f"offline, one call on {engine}, timed between the rounds: {', '.join(f'{r:.1f}' for r in rates)} "
          f"sentences/s")  # fmt: skip
    columns = ["clients", "requests", "ok", "errors", "sentences_per_s", "offline_per_s", "throughput_vs_offline"]
    columns += ["p50_ms", "p95_ms", "p99_ms", "p95_vs_one_client_p50", "bound_ms", "p95_vs_bound", "mean_batch"]
    columns += ["engine_busy", "equal_outputs"]
    print(format_table(rows, columns))
    sixteen = next((row for row in rows if row["clients"] == 16), None)
    met = sixteen is not None and sixteen["throughput_vs_offline"] >= 0.8 and sixteen["errors"] == 0
    met = met and sixteen["p95_vs_one_client_p50"] is not None and sixteen["p95_vs_one_client_p50"] <= 3
    met = met and all(row["equal_outputs"] for row in rows)
    needed = None  # the throughput the p95 target asks for at 16 clients, by Little's law
    if single is not None:
        needed = 16 / (3 * single["p50_ms"] / 1000)
        offline = sixteen["offline_per_s"] if sixteen else statistics.mean(rates)
        print(f"p95 <= 3x one request alone ({3 * single['p50_ms']:.1f} ms) at 16 clients needs >= {needed:.0f} "
              f"sentences/s ({needed / offline:.2f}x offline); at the offline rate its mean latency is "
              f"{16000 / offline:.1f} ms")  # fmt: skip
    return {
        "engine": engine,
        "offline_sentences_per_s": rates,
        "sentences": len(sentences),
        "batch_wait_ms": args.batch_wait_ms,
        "batch_groups": args.batch_groups or "the server's default",
        "scores": scores,
        "rows": rows,
        "p95_target_needs_per_s": needed,
        "target": "at 16 clients: throughput >= 0.8x offline, p95 <= 3x one request alone, no error, equal outputs",
        "met": met,
    }


def call_sizes(args: argparse.Namespace, checkpoint: Path, sizes: list[int]) -> dict[str, Any]:
    """The engine alone, in this process: the sentences decoded in calls of each of ``sizes`` sentences as the server
    makes them (details, with and without the scoring pass), beside one call of them all as ``dotformer translate``
    makes it; each the best of ``--repeats`` runs in CPU time (the process's, robust to other work on a shared
    machine), as sentences per CPU second and as a share of the one call's."""
    from dataclasses import replace

    import dotformer
    from dotformer.api.endpoint import parse_request

    sentences = [line.strip() for line in Path(args.sentences).read_text(encoding="utf-8").splitlines()]
    sentences = [s for s in sentences if s]
    model = dotformer.load(checkpoint, device="cpu", engine=args.engine, **same_threads(args.threads))
    model.translate(sentences[:8], beam=args.beam)  # warm
    _, request = parse_request({"texts": ["-"], "beam": args.beam})

    def in_calls(size: int, scores: bool) -> Any:
        wanted = replace(request, scores=scores)
        return lambda: [model.translate(sentences[i : i + size], wanted) for i in range(0, len(sentences), size)]

    cases = {("all", "text"): lambda: model.translate(sentences, beam=args.beam)}
    for size in sizes:
        cases |= {(size, "scores"): in_calls(size, True), (size, "no scores"): in_calls(size, False)}
    best: dict[Any, float] = {}
    for _ in range(args.repeats):  # interleaved: a slower minute slows every case alike
        for case, run in cases.items():
            start = time.process_time()
            run()
            best[case] = max(best.get(case, 0.0), len(sentences) / (time.process_time() - start))
    whole = best[("all", "text")]
    rows = [{"sentences_a_call": size, "reply": kind, "sentences_per_cpu_s": rate, "vs_one_call": rate / whole}
            for (size, kind), rate in best.items()]  # fmt: skip
    print(format_table(rows, ["sentences_a_call", "reply", "sentences_per_cpu_s", "vs_one_call"]))
    return {"engine": model.engine, "sentences": len(sentences), "repeats": args.repeats, "rows": rows}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Parse the command line, run the rounds, print the table and write the JSON (its path: ``--out``)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--checkpoint", default=None, help="checkpoint or run directory (default: a random model)")
    parser.add_argument("--preset", default="small", help="preset of the random model (small)")
    parser.add_argument("--clients", default="1,4,16,64", help="comma-separated numbers of concurrent clients")
    parser.add_argument("--requests", type=int, default=25, help="requests per client per round (25)")
    parser.add_argument("--texts", type=int, default=1, help="texts per request (1)")
    parser.add_argument("--text", default=None, help="the text sent (default: 8 symbols of the random model)")
    parser.add_argument("--beam", type=int, default=4, help="beam of each request (4)")
    parser.add_argument("--threads", type=int, default=None, help="the server's --threads (torch's CPU threads)")
    parser.add_argument("--trickling", type=int, default=200, help="trickling connections of the last round (200)")
    parser.add_argument("--trickle-clients", type=int, default=16, help="clients of the trickling round (16)")
    parser.add_argument("--trickle-pause", type=float, default=3.0, help="seconds between a connection's bytes (3)")
    parser.add_argument("--quick", action="store_true", help="tiny model, 1 and 4 clients x 3 requests, 20 trickling")
    parser.add_argument("--mode", choices=("sentences", "trickle", "calls"), default="sentences",
                        help="sentences: clients sending single sentences, beside the offline run (default); "
                        "trickle: fixed requests beside trickling connections; calls: the engine alone, in calls "
                        "of --clients sentences against one call of all (CPU time)")  # fmt: skip
    parser.add_argument("--repeats", type=int, default=5, help="mode calls: runs of each case, the best kept (5)")
    parser.add_argument("--sentences", default=None, help="file of sentences, one a line (default: random symbols)")
    parser.add_argument("--engine", default="auto", help="the server's and the offline run's --engine (auto)")
    parser.add_argument("--batch-wait-ms", type=float, default=5.0, help="the server's --batch-wait-ms (5)")
    parser.add_argument("--batch-groups", type=int, default=None,
                        help="the server's --batch-groups (default: the server's own, 2 on a CPU)")  # fmt: skip
    parser.add_argument("--no-scores", action="store_true",
                        help='mode sentences: the clients send "scores": false (they read only the texts)')  # fmt: skip
    parser.add_argument("--out", default=str(default_output_dir() / "serve_load.json"))
    args = parser.parse_args(argv)
    clients = [1, 4] if args.quick else [int(n) for n in args.clients.split(",")]
    requests = 3 if args.quick else args.requests
    if args.mode == "calls":
        if not args.checkpoint or not args.sentences:
            parser.error("--mode calls needs --checkpoint and --sentences")
        result = call_sizes(args, Path(args.checkpoint), clients)
        payload_out = {"benchmark": "serve_load", "mode": "calls", "command": command_line()}
        payload_out |= {"machine": machine_info("cpu"), "beam": args.beam, "threads": args.threads, **result}
        print(f"wrote {write_json(args.out, payload_out)}")
        return payload_out
    if args.mode == "sentences":
        with tempfile.TemporaryDirectory() as temporary:
            checkpoint = (
                Path(args.checkpoint)
                if args.checkpoint
                else random_checkpoint(Path(temporary), "tiny" if args.quick else args.preset)
            )
            result = sentence_load(args, checkpoint, clients, requests)
        payload_out = {
            "benchmark": "serve_load",
            "mode": "sentences",
            "command": command_line(),
            "machine": machine_info("cpu"),
            "settings": {
                "checkpoint": args.checkpoint or "random model",
                "requests_per_client": requests,
                "beam": args.beam,
                "server_threads": args.threads,
            },  # fmt: skip
            **result,
        }
        print(f"{'met' if result['met'] else 'NOT met'}: {result['target']}")
        print(f"wrote {write_json(args.out, payload_out)}")
        return payload_out
    trickling, trickle_clients = (20, 4) if args.quick else (args.trickling, args.trickle_clients)
    pause_s = 0.5 if args.quick else args.trickle_pause
    if trickling and trickle_clients not in clients:
        clients.append(trickle_clients)  # the same load without the trickling connections, to compare with
    text = args.text or " ".join(SYMBOLS[:8])
    payload = json.dumps({"texts": [text] * args.texts, "beam": args.beam}).encode()
    with tempfile.TemporaryDirectory() as temporary:
        checkpoint = (
            Path(args.checkpoint)
            if args.checkpoint
            else random_checkpoint(Path(temporary), "tiny" if args.quick else args.preset)
        )
        process, url = start_server(checkpoint, args.threads)
        try:
            rows = [round_of(url, n, requests, payload, 0, pause_s) for n in clients]
            if trickling:
                rows.append(round_of(url, trickle_clients, requests, payload, trickling, pause_s))
        finally:
            process.terminate()
            process.wait(TIMEOUT_S)
    columns = ["clients", "trickling", "requests", "ok", "resets", "other_errors", "p50_ms", "p95_ms", "max_ms"]
    columns += ["requests_per_s", "trickling_opened", "trickling_dropped"]
    print(format_table(rows, columns))
    comparison = None
    if trickling:
        alone = next(row for row in rows if row["clients"] == trickle_clients and not row["trickling"])
        beside = rows[-1]
        ratio = beside["p95_ms"] / alone["p95_ms"] if beside["p95_ms"] and alone["p95_ms"] else None
        met = ratio is not None and ratio <= 1.5 and beside["resets"] == 0 and beside["other_errors"] == 0
        comparison = {"p95_ratio": ratio, "target": "p95_ratio <= 1.5, 0 resets, 0 errors", "met": met}
        shown = "-" if ratio is None else f"{ratio:.2f}"
        print(f"p95 with {trickling} trickling connections / without: {shown} ({'met' if met else 'NOT met'}: "
              f"{comparison['target']})")  # fmt: skip
    payload_out = {
        "benchmark": "serve_load",
        "command": command_line(),
        "machine": machine_info("cpu"),
        "settings": {
            "checkpoint": args.checkpoint or f"random {args.preset if not args.quick else 'tiny'} model",
            "requests_per_client": requests,
            "texts_per_request": args.texts,
            "text": text,
            "beam": args.beam,
            "server_threads": args.threads,
            "trickling": trickling,
            "trickle_clients": trickle_clients,
            "trickle_pause_s": pause_s,
            "server_process_cpu_count": os.cpu_count(),
        },
        "rows": rows,
        "trickling": comparison,
    }
    print(f"wrote {write_json(args.out, payload_out)}")
    return payload_out


if __name__ == "__main__":
    main()
