"""Keep the host memory of freed NumPy arrays for the next training step.

A training step allocates the same large temporaries every time (EAGLE-3's head: the draft
logits, probabilities and their gradients, [B, T, N] float32 each of seven TTT steps, about
150 MB). glibc's malloc hands such blocks back to the operating system when they are freed (by
munmap, or by trimming the top of the heap), so the next step asks for them again and the kernel
maps and zeroes every 4 KiB page anew: 38,000 page faults and 0.1-0.2 s of system time per
EAGLE-3 step on the shipped tiny target, a quarter of the step (benchmarks/head_train_step.py).

`keep_freed_memory()` tells glibc to keep what it frees: blocks up to 32 MiB (its largest
setting) come from the heap, and the heap is never trimmed. The process then holds its peak
host memory until it exits, which is what a training loop wants. It changes nothing but speed;
on a C library other than glibc (macOS, Windows, musl) it does nothing and says so.
"""

from __future__ import annotations

import ctypes
import ctypes.util

_M_TRIM_THRESHOLD = -1  # glibc's mallopt parameters (malloc.h)
_M_MMAP_THRESHOLD = -3
_LARGEST_HEAP_BLOCK = 32 * 2**20  # glibc's DEFAULT_MMAP_THRESHOLD_MAX on 64-bit machines
_NEVER_TRIM = 2**31 - 1


def keep_freed_memory() -> bool:
    """Make glibc keep freed blocks (up to 32 MiB) for reuse instead of returning them to the
    operating system. Returns whether it took effect (False where the C library is not glibc).
    Process-wide and permanent: call it at the start of a training run or a benchmark."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # no glibc: nothing to tune
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    kept = mallopt(_M_MMAP_THRESHOLD, _LARGEST_HEAP_BLOCK) == 1
    return mallopt(_M_TRIM_THRESHOLD, _NEVER_TRIM) == 1 and kept
