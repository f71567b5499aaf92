"""The C heap of a CTranslate2 decoding process (:mod:`dotformer.engines.heap`): where glibc runs the process, a
16 MiB buffer stays on the heap and its top is kept after it is freed; elsewhere nothing changes."""

from __future__ import annotations

import ctypes
import subprocess
import sys
import textwrap

import pytest

from dotformer.engines.heap import MMAP_THRESHOLD, TOP_PAD, keep_heap_top

PROBE = textwrap.dedent(
    """
    import ctypes, sys
    from dotformer.engines.heap import keep_heap_top

    class Info(ctypes.Structure):  # glibc's struct mallinfo2
        _fields_ = [(name, ctypes.c_size_t) for name in
                    ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                     "keepcost")]

    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype, libc.malloc.restype, libc.free.argtypes = Info, ctypes.c_void_p, [ctypes.c_void_p]
    applied = keep_heap_top() if sys.argv[1] == "on" else False
    before = libc.mallinfo2().hblkhd
    block = libc.malloc(16 << 20)
    mapped = libc.mallinfo2().hblkhd - before
    libc.free(block)
    print(applied, mapped, libc.mallinfo2().keepcost)
    """
)


def glibc_with_mallinfo2() -> bool:
    """Whether this process runs on glibc 2.33 or later (``mallinfo2``, which the probe reads)."""
    try:
        return sys.platform.startswith("linux") and hasattr(ctypes.CDLL("libc.so.6"), "mallinfo2")
    except OSError:
        return False


def probe(mode: str) -> tuple[bool, int, int]:
    """``(applied, bytes mapped apart for a 16 MiB block, bytes free at the heap's top once it is freed)`` in a new
    process, with :func:`keep_heap_top` applied first (``mode`` "on") or not ("off")."""
    done = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, check=True)
    applied, mapped, kept = done.stdout.split()
    return applied == "True", int(mapped), int(kept)


@pytest.mark.skipif(not glibc_with_mallinfo2(), reason="needs glibc 2.33+ (mallinfo2) to observe the heap")
def test_a_decoding_buffer_stays_on_the_heap_and_its_top_is_kept() -> None:
    """By default glibc maps a 16 MiB block apart and unmaps it on free (so the next step faults its pages in
    again); with :func:`keep_heap_top` the block is carved from the heap, and once it is freed at least
    :data:`TOP_PAD` bytes stay at the heap's top for the next one."""
    applied, mapped, _ = probe("off")
    assert not applied and mapped >= 16 << 20
    applied, mapped, kept = probe("on")
    assert applied and mapped == 0 and kept >= TOP_PAD
    assert MMAP_THRESHOLD > 16 << 20  # the probe's block is below the threshold the module sets


def test_nothing_changes_where_the_c_library_is_not_glibc(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "platform", "darwin")  # macOS: no glibc, so no mallopt to call
    assert keep_heap_top() is False
