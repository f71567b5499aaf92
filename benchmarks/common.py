"""Small helpers shared by the benchmark scripts: timing, peak memory, machine facts, JSON and table output.

Run the benchmarks as scripts (``python benchmarks/<name>.py``); this directory is then on ``sys.path`` and a script
imports these helpers with ``from common import ...``.

Memory is measured two ways, and every result says which one (``MemoryResult.method``):

* CUDA: ``torch.cuda.max_memory_allocated`` minus the memory allocated before the call: exact for tensors that
  PyTorch's caching allocator hands out.
* CPU: PyTorch's CPU allocator does not report a peak and ``tracemalloc`` does not see it, so a thread samples the
  process's resident set size (RSS, from ``/proc/self/statm``) about every millisecond while the call runs and reports
  the highest sample minus the RSS before the call. It is an estimate: it misses peaks shorter than the sampling
  interval, counts memory the allocator keeps for reuse, and shares the process with Python. Benchmarks should print
  an analytic count of the bytes they expect next to it.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import torch

GIB = 1024**3
MIB = 1024**2


class Timing(NamedTuple):
    """Wall-clock time of repeated calls, in milliseconds."""

    median_ms: float  # median over the timed repeats
    min_ms: float  # fastest repeat
    repeats: int  # number of timed calls (after the warm-up calls)


class MemoryResult(NamedTuple):
    """Peak memory of one call above what was in use before it."""

    peak_bytes: int  # highest use during the call minus the use before it (bytes)
    method: str  # how it was measured: "cuda.max_memory_allocated" or "rss-sampled"


def synchronize(device: torch.device | str) -> None:
    """Wait for queued kernels on ``device`` (no-op on CPU) so that timings cover the work itself."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def time_ms(fn: Callable[[], Any], device: torch.device | str = "cpu", repeats: int = 5, warmup: int = 1) -> Timing:
    """Time ``fn()``: ``warmup`` untimed calls, then ``repeats`` timed ones (synchronised on CUDA).

    Returns:
        :class:`Timing` in milliseconds.
    """
    for _ in range(warmup):
        fn()
    synchronize(device)
    samples = []
    for _ in range(max(1, repeats)):
        start = time.perf_counter()
        fn()
        synchronize(device)
        samples.append((time.perf_counter() - start) * 1000.0)
    return Timing(statistics.median(samples), min(samples), len(samples))


def time_budgeted(fn: Callable[[], Any], device: torch.device | str = "cpu", budget_s: float = 2.0) -> Timing:
    """Like :func:`time_ms`, choosing the number of repeats (1 to 20) so the timed calls take about ``budget_s``."""
    start = time.perf_counter()
    fn()  # warm-up, also tells how long one call takes
    synchronize(device)
    once = time.perf_counter() - start
    repeats = int(min(20, max(1, budget_s / max(once, 1e-6))))
    return time_ms(fn, device, repeats=repeats, warmup=0)


def current_rss_bytes() -> int:
    """Resident set size of this process now, in bytes (Linux ``/proc/self/statm``; 0 where unavailable)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def available_memory_bytes(device: torch.device | str = "cpu") -> int:
    """Memory that a new allocation could use: free GPU memory on CUDA, ``MemAvailable`` of ``/proc/meminfo`` on CPU."""
    if torch.device(device).type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        return int(free)
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


class _RssSampler:
    """Background thread that records the highest RSS seen until stopped."""

    def __init__(self, interval_s: float = 0.001) -> None:
        self.interval_s = interval_s
        self.peak = current_rss_bytes()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, current_rss_bytes())
            time.sleep(self.interval_s)

    def __enter__(self) -> _RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, current_rss_bytes())


def measure_peak_memory(fn: Callable[[], Any], device: torch.device | str = "cpu") -> MemoryResult:
    """Run ``fn()`` once and return the peak memory it used above the memory in use before it.

    The result of ``fn`` is dropped before returning. See the module docstring for what each method sees.
    """
    device = torch.device(device)
    if device.type == "cuda":
        synchronize(device)
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        result = fn()
        synchronize(device)
        peak = torch.cuda.max_memory_allocated(device) - before
        del result
        return MemoryResult(int(peak), "cuda.max_memory_allocated")
    before = current_rss_bytes()
    with _RssSampler() as sampler:
        result = fn()
    del result
    return MemoryResult(max(0, sampler.peak - before), "rss-sampled")


def git_commit(repo: Path | None = None) -> str:
    """The short commit hash of the repository (with ``-dirty`` if files changed), or ``"unknown"``."""
    cwd = repo or Path(__file__).resolve().parent
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=cwd, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], cwd=cwd, capture_output=True, text=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return commit + ("-dirty" if dirty else "")


def cpu_model() -> str:
    """The CPU's model name from ``/proc/cpuinfo``, else ``platform.processor()``."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine_info(device: torch.device | str = "cpu") -> dict[str, Any]:
    """Facts about where a benchmark ran: CPU, cores, torch threads, memory, load (other processes competing for
    the CPU make timings slower), GPU, versions, date, commit."""
    device = torch.device(device)
    info: dict[str, Any] = {
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": git_commit(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "platform": platform.platform(),
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "memory_available_gib": round(available_memory_bytes("cpu") / GIB, 1),
        "load_average_1m": round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None,
        "device": str(device),
    }
    if device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
        info["gpu_memory_gib"] = round(torch.cuda.get_device_properties(device).total_memory / GIB, 1)
    return info


def command_line() -> str:
    """The command that started this process, quoted so it can be pasted into a shell."""
    return shlex.join([Path(sys.executable).name, *sys.argv])


def format_bytes(n: float | None) -> str:
    """Bytes as a short human string (``"12.0 MiB"``, ``"3.50 GiB"``); ``"-"`` for None."""
    if n is None:
        return "-"
    if abs(n) >= GIB:
        return f"{n / GIB:.2f} GiB"
    if abs(n) >= MIB:
        return f"{n / MIB:.1f} MiB"
    return f"{n / 1024:.1f} KiB"


def format_table(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> str:
    """A plain-text table (GitHub Markdown syntax) of ``rows`` with the given columns; floats get 2 decimals."""

    def cell(value: Any) -> str:
        if value is None:
            return "-"
        if isinstance(value, float):
            return f"{value:.2f}"
        return str(value)

    cells = [[cell(row.get(c)) for c in columns] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) if cells else len(c) for i, c in enumerate(columns)]
    lines = ["| " + " | ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)) + " |"]
    lines.append("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    lines += ["| " + " | ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)) + " |" for r in cells]
    return "\n".join(lines)


def write_json(path: str | Path, payload: dict[str, Any]) -> Path:
    """Write ``payload`` as indented JSON to ``path`` (parent directories created); return the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=2, sort_keys=False) + "\n")
    return path


def default_output_dir() -> Path:
    """``benchmarks/out`` next to this file (git-ignored)."""
    return Path(__file__).resolve().parent / "out"
