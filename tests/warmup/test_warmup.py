"""forgetting.warmup: it reads every compiled module, explains itself, and a background warm-up
dies with the process that started it. That after it the first fit, forget and prediction on a
machine compile nothing: benchmarks/tests/test_warmup_lab.py (its workload is the lab's)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest


def test_kernel_stats_covers_every_compiled_module():
    """Every module of the library that defines a compiled kernel is one the warm-up's
    statistics read (content.kernels.MODULES), the forest's included; content._intrinsics
    holds inlined helpers, compiled into the kernels that call them."""
    from pathlib import Path

    import forgetting
    from forgetting.warmup import KERNEL_MODULES

    root = Path(forgetting.__file__).parent
    defining = set()
    for path in root.rglob("*.py"):
        text = path.read_text()
        if "@jit\n" in text or "@_jit\n" in text or "numba.njit(" in text:
            defining.add("forgetting." + ".".join(path.relative_to(root).with_suffix("").parts))
    assert defining - set(KERNEL_MODULES) == {"forgetting.content._intrinsics"}
    assert len([m for m in KERNEL_MODULES if m.startswith("forgetting.forest.")]) == 8


def test_the_warmup_command_explains_itself(capsys):
    import pytest

    from forgetting.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(["warmup", "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "forgetting warmup" in out and "NUMBA_CACHE_DIR" in out and len(out) > 300
    listed = subprocess.run(
        [sys.executable, "-m", "forgetting", "--help"], capture_output=True, text=True, timeout=60
    )
    assert "warmup" in listed.stdout


STARTER = r"""
import sys, time
from forgetting.warmup import warm_up
child = warm_up(wait=False, quiet=True)
print(child.pid, flush=True)
time.sleep(120)
"""


def _running(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie waiting to be reaped is not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_background_warm_up_stops_when_the_process_that_started_it_is_killed(tmp_path):
    """`forgetting serve` starts the warm-up in the background and terminates it when it
    stops; SIGKILLed, it cannot, and the orphan used to compile on for ~20 s. With an empty
    kernel cache (so the warm-up has that much to do) its parent is killed after a second:
    the warm-up must be gone within a few seconds."""
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "numba")}
    starter = subprocess.Popen(
        [sys.executable, "-c", STARTER], env=env, stdout=subprocess.PIPE, text=True
    )
    child = int(starter.stdout.readline())
    time.sleep(1.0)
    assert _running(child), "the warm-up finished before the test could kill its parent"
    starter.kill()
    starter.wait(timeout=10)
    deadline = time.monotonic() + 5
    while _running(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _running(child), "the warm-up outlived the process that started it"
