"""host_memory.keep_freed_memory: a loop that allocates the same large arrays every step stops
faulting their pages in anew (glibc only; each run is its own interpreter, since the setting is
process-wide)."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

# 20 arrays of 8 MiB alive at once, as a training step's caches are, freed, and made again.
STEPS = """
import resource, sys
import numpy as np
if sys.argv[1] == "keep":
    from minieagle.host_memory import keep_freed_memory
    assert keep_freed_memory()
def step():
    arrays = [np.ones((1024, 2048), dtype=np.float32) for _ in range(20)]
    return sum(float(a[0, 0]) for a in arrays)
step(); step()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(5):
    step()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _page_faults(mode: str) -> int:
    done = subprocess.run(
        [sys.executable, "-c", STEPS, mode], capture_output=True, text=True, check=True
    )
    return int(done.stdout)


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="a setting of glibc's malloc")
def test_kept_memory_is_reused_without_page_faults():
    pages_per_step = 20 * 8 * 2**20 // 4096
    assert _page_faults("plain") >= pages_per_step  # the control: glibc returns the memory
    assert _page_faults("keep") < pages_per_step // 100
