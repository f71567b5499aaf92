"""Latency of ``dotformer serve`` under load: p50/p95 of a request while N clients send requests at once.

Starts ``dotformer serve --port 0`` in its own process (the server as users run it, not sharing this process's
interpreter with the clients), then, for each number of concurrent clients, has every client send ``--requests``
requests one after another (each ``--texts`` texts, beam ``--beam``) and times each from the connection to the last
byte of the answer. With ``--slow-client``, one more client trickles a request one byte every 2 s during each round
(the server must drop it and keep answering the others). Counts errors and connection resets.

Without ``--checkpoint``, a random ``small`` model over a symbol vocabulary is written to a temporary directory (its
outputs are arbitrary; with a random model each output runs to the maximum length, a heavy request).

Run: ``python benchmarks/serve_load.py --clients 1,4,16 --requests 25 --threads 1``; prints a table and writes
``out/serve_load.json``. ``--quick`` checks that it runs (tiny model, few requests).
"""

from __future__ import annotations

import argparse
import json
import os
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
    from dotformer.data.tokenizer_files import train_tokenizer

    tokenizer = train_tokenizer("symbol", [" ".join(SYMBOLS)])
    torch.manual_seed(0)
    size = tokenizer.vocab_size
    config = ModelConfig.preset(preset, src_vocab_size=size, tgt_vocab_size=size)
    path = directory / "model"
    save_checkpoint(path, Transformer(config).eval(), tokenizer, tokenizer, {"task": "synthetic"})
    return path


def start_server(checkpoint: Path, threads: int | None, workers: int) -> tuple[subprocess.Popen[str], str]:
    """``dotformer serve --port 0`` in a new process; returns it and its URL (read from its first line)."""
    command = [sys.executable, "-m", "dotformer", "serve", "--checkpoint", str(checkpoint), "--port", "0"]
    command += ["--device", "cpu", "--workers", str(workers)] + (["--threads", str(threads)] if threads else [])
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.append(process.stdout.readline()), daemon=True)  # type: ignore[union-attr]
    reader.start()
    reader.join(TIMEOUT_S)
    if not lines or not lines[0].startswith("dotformer serve: POST "):
        process.kill()
        raise SystemExit(f"the server did not start: {lines} {process.stderr.read() if process.stderr else ''}")
    return process, lines[0].split()[3]


def one_request(url: str, payload: bytes) -> tuple[float, str]:
    """Send one request; (seconds, outcome) with outcome "ok", "reset", "http NNN" or the error's name."""
    start = time.perf_counter()
    request = urllib.request.Request(url, data=payload, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
            response.read()
            outcome = "ok"
    except urllib.error.HTTPError as error:
        outcome = f"http {error.code}"
    except (ConnectionResetError, urllib.error.URLError) as error:
        reason = getattr(error, "reason", error)
        outcome = "reset" if isinstance(reason, ConnectionResetError) else type(reason).__name__
    return time.perf_counter() - start, outcome


def trickle(url: str, stop: threading.Event, pause_s: float = 2.0) -> str:
    """A client that sends a request one byte every ``pause_s`` until dropped or stopped; how it ended."""
    host, port = url.split("//", 1)[1].split("/", 1)[0].rsplit(":", 1)
    data = b'POST /api/translate HTTP/1.1\r\nContent-Length: 100\r\n\r\n{"texts": ["s1"]}' + b" " * 100
    with socket.create_connection((host, int(port)), timeout=TIMEOUT_S) as sock:
        for byte in data:
            if stop.is_set():
                return "still sending when the round ended"
            try:
                sock.sendall(bytes([byte]))
                sock.settimeout(pause_s)
                if sock.recv(1024) is not None:
                    return "dropped by the server"
            except TimeoutError:
                continue
            except OSError:
                return "dropped by the server"
    return "sent everything"


def percentile(values: list[float], q: float) -> float:
    """The ``q``-quantile (0..1) of ``values`` (linear interpolation)."""
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def round_of(url: str, clients: int, requests: int, payload: bytes, slow: bool) -> dict[str, Any]:
    """``clients`` clients at once, ``requests`` each; the latency table's row."""
    stop = threading.Event()
    slow_result: list[str] = []
    slow_thread = None
    if slow:
        slow_thread = threading.Thread(target=lambda: slow_result.append(trickle(url, stop)), daemon=True)
        slow_thread.start()
    start = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        runs = list(pool.map(lambda _: [one_request(url, payload) for _ in range(requests)], range(clients)))
    wall = time.perf_counter() - start
    stop.set()
    if slow_thread is not None:
        slow_thread.join(TIMEOUT_S)
    results = [result for run in runs for result in run]
    latencies = [seconds * 1000 for seconds, outcome in results if outcome == "ok"]
    outcomes = [outcome for _, outcome in results]
    return {
        "clients": clients,
        "requests": len(results),
        "ok": outcomes.count("ok"),
        "resets": outcomes.count("reset"),
        "other_errors": len(outcomes) - outcomes.count("ok") - outcomes.count("reset"),
        "p50_ms": statistics.median(latencies) if latencies else None,
        "p95_ms": percentile(latencies, 0.95) if latencies else None,
        "max_ms": max(latencies) if latencies else None,
        "requests_per_s": len(latencies) / wall,
        "slow_client": slow_result[0] if slow_result else None,
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Parse the command line, run the rounds, print the table and write the JSON (its path: ``--out``)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--checkpoint", default=None, help="checkpoint or run directory (default: a random model)")
    parser.add_argument("--preset", default="small", help="preset of the random model (small)")
    parser.add_argument("--clients", default="1,4,16", help="comma-separated numbers of concurrent clients")
    parser.add_argument("--requests", type=int, default=25, help="requests per client per round (25)")
    parser.add_argument("--texts", type=int, default=1, help="texts per request (1)")
    parser.add_argument("--text", default=None, help="the text sent (default: 8 symbols of the random model)")
    parser.add_argument("--beam", type=int, default=4, help="beam of each request (4)")
    parser.add_argument("--workers", type=int, default=16, help="the server's --workers (16)")
    parser.add_argument("--threads", type=int, default=None, help="the server's --threads (torch's CPU threads)")
    parser.add_argument("--slow-client", action="store_true", help="one more client trickles a request each round")
    parser.add_argument("--quick", action="store_true", help="tiny model, 1 and 4 clients x 3 requests")
    parser.add_argument("--out", default=str(default_output_dir() / "serve_load.json"))
    args = parser.parse_args(argv)
    clients = [1, 4] if args.quick else [int(n) for n in args.clients.split(",")]
    requests = 3 if args.quick else args.requests
    text = args.text or " ".join(SYMBOLS[:8])
    payload = json.dumps({"texts": [text] * args.texts, "beam": args.beam}).encode()
    with tempfile.TemporaryDirectory() as temporary:
        checkpoint = (
            Path(args.checkpoint)
            if args.checkpoint
            else random_checkpoint(Path(temporary), "tiny" if args.quick else args.preset)
        )
        process, url = start_server(checkpoint, args.threads, args.workers)
        try:
            rows = [round_of(url, n, requests, payload, args.slow_client) for n in clients]
        finally:
            process.terminate()
            process.wait(TIMEOUT_S)
    columns = ["clients", "requests", "ok", "resets", "other_errors", "p50_ms", "p95_ms", "max_ms", "requests_per_s"]
    if args.slow_client:
        columns.append("slow_client")
    print(format_table(rows, columns))
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
            "workers": args.workers,
            "server_threads": args.threads,
            "slow_client": args.slow_client,
            "server_process_cpu_count": os.cpu_count(),
        },
        "rows": rows,
    }
    print(f"wrote {write_json(args.out, payload_out)}")
    return payload_out


if __name__ == "__main__":
    main()
