"""The C heap of a process that decodes on CTranslate2: glibc's malloc kept from handing memory back to the kernel
between the steps of a search.

CTranslate2 allocates and frees its buffers on the C heap at every decoding step. glibc's ``free`` gives the top
of the heap back to the kernel once enough of it is free, and the next step asks for it again, so each step's pages
are zeroed by the kernel and faulted in anew: system time that a search of many short steps pays over and over.
:func:`keep_heap_top` keeps :data:`TOP_PAD` bytes at the top of the heap (``M_TOP_PAD``) and fixes the size from
which a block gets its own mapping at :data:`MMAP_THRESHOLD` (``M_MMAP_THRESHOLD``: glibc's own ceiling for the
threshold it otherwise adjusts as blocks are freed; setting either option stops that adjustment, which with the
default 128 KiB would map and unmap every larger buffer).

Measured on the whole ``dotformer translate`` command (a G2P checkpoint of ``bash scripts/g2p.sh``, its first
2,000 test words, beam 4, int8, one thread; ``/usr/bin/time``, medians of six runs): system time 0.27 s without,
0.09 s with, where a hand-written CTranslate2 script spends 0.13 s; against that script the command went from
0.89-0.90x to 0.93-0.96x (docs/benchmarks.md, "The C heap"). The cost is memory: up to :data:`TOP_PAD` more stays
with the process.

The command line applies it where CTranslate2 decodes (:func:`dotformer.cli.decode_flags.load_translator`); a
program of its own calls it once, if it wants the same. It changes the whole process's allocator, so the library
never applies it by itself.
"""

from __future__ import annotations

import ctypes
import sys

M_TOP_PAD = -2  # mallopt's parameter numbers, from glibc's malloc.h
M_MMAP_THRESHOLD = -3
TOP_PAD = 64 << 20  # bytes kept at the top of the heap when it shrinks, and added when it grows
MMAP_THRESHOLD = 32 << 20  # blocks this large or larger get their own mapping (glibc's dynamic ceiling on 64-bit)


def keep_heap_top(top_pad: int = TOP_PAD, mmap_threshold: int = MMAP_THRESHOLD) -> bool:
    """Set glibc's ``M_MMAP_THRESHOLD`` to ``mmap_threshold`` and ``M_TOP_PAD`` to ``top_pad`` (bytes) for this
    process (module docstring). Returns whether both were set: False where the C library is not glibc (macOS,
    Windows, musl without ``mallopt``), and nothing changes there.
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:  # not glibc
        return False
    mallopt = getattr(libc, "mallopt", None)
    if mallopt is None:
        return False
    return bool(mallopt(M_MMAP_THRESHOLD, mmap_threshold)) and bool(mallopt(M_TOP_PAD, top_pad))
