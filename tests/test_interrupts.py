"""A real `attngen build` in a subprocess, stopped by a signal: nothing survives it, nothing is left half-written.

The build runs in a session of its own, so every process it starts (workers, multiprocessing's resource
tracker) carries its session id even after it is orphaned; /proc tells which are still alive.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from attngen.atomic import TEMP_PREFIX

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="finds the build's processes in /proc")

REPO = Path(__file__).resolve().parent.parent
SPECS = {
    "a": "head_dim: 128\ndtype: bf16\nmask: causal\n",
    "b": "head_dim: 64\ndtype: fp16\n",
    "c": "head_dim: 256\ndtype: bf16\n",
}
#: Seconds within which the build and every process it started must be gone.
STOP_WITHIN = 15.0


def _session_members(sid: int) -> list[int]:
    """Live processes (zombies excluded) whose session id is `sid`."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        state, session = fields[0], int(fields[3])
        if session == sid and state != "Z":
            members.append(int(stat.parent.name))
    return members


def _start_build(tmp_path: Path) -> tuple[subprocess.Popen[str], Path, Path]:
    files = []
    for name, text in SPECS.items():
        path = tmp_path / f"{name}.yaml"
        path.write_text(f"name: {name}\n{text}")
        files.append(str(path))
    cache, out = tmp_path / "cache", tmp_path / "out"
    env = {**os.environ, "ATTNGEN_CACHE_DIR": str(cache), "COLUMNS": "200"}
    command = [sys.executable, "-m", "attngen", "build", *files, "--arch", "sm80,sm90", "--out", str(out), "-j", "2"]
    proc = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    return proc, cache, out


def _wait_until_compiling(proc: subprocess.Popen[str], cache: Path) -> None:
    """Until two workers run and one has taken a cache lock (it is compiling), plus a moment."""
    deadline = time.monotonic() + 120
    while not ((cache / "locks").is_dir() and len(_session_members(proc.pid)) >= 3):
        assert proc.poll() is None, f"the build ended early: {proc.communicate()}"
        assert time.monotonic() < deadline, "the build never started compiling"
        time.sleep(0.05)
    time.sleep(0.5)


def _wait_until_gone(sid: int) -> list[int]:
    deadline = time.monotonic() + STOP_WITHIN
    while (alive := _session_members(sid)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return alive


def _assert_whole(cache: Path, out: Path) -> int:
    """Every cache entry is complete and sound, no temporary is left anywhere; returns the entry count."""
    for root in (cache, out):
        leftovers = [p for p in root.rglob(f"{TEMP_PREFIX}*")] if root.exists() else []
        assert not leftovers, f"temporaries left behind: {leftovers}"
    entries = [p for p in cache.glob("[0-9a-f][0-9a-f]/*") if p.is_dir()]
    for entry in entries:
        meta = json.loads((entry / "meta.json").read_text())
        cubin = (entry / f"{meta['kernel_name']}.cubin").read_bytes()
        assert hashlib.sha256(cubin).hexdigest() == meta["cubin_sha256"], entry
        assert (entry / f"{meta['kernel_name']}.cu").is_file(), entry
    for variant in (p for p in out.glob("*/*") if p.is_dir()) if out.exists() else ():
        assert (variant / "manifest.json").is_file() and (variant / "kernel.cu").is_file(), variant
    return len(entries)


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGHUP", "SIGINT"])
def test_stop_signal_ends_the_whole_build(tmp_path: Path, sig: str) -> None:
    signum = getattr(signal, sig)
    proc, cache, out = _start_build(tmp_path)
    try:
        _wait_until_compiling(proc, cache)
        if signum == signal.SIGINT:
            os.killpg(proc.pid, signum)  # Ctrl-C: the terminal signals the whole foreground group
        else:
            os.kill(proc.pid, signum)  # what `timeout` and CI runners send: the parent only
        _, stderr = proc.communicate(timeout=STOP_WITHIN)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 128 + signum, stderr
    assert "Traceback" not in stderr
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert errors == [f"error: interrupted by {sig}; stopped"], stderr
    assert _wait_until_gone(proc.pid) == [], "processes of the build survived it"
    _assert_whole(cache, out)


def test_workers_exit_when_the_build_is_killed(tmp_path: Path) -> None:
    proc, cache, out = _start_build(tmp_path)
    try:
        _wait_until_compiling(proc, cache)
        os.kill(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=STOP_WITHIN)
        entries_at_death = _assert_whole(cache, out)
        survivors = _wait_until_gone(proc.pid)
    finally:
        for pid in _session_members(proc.pid):
            os.kill(pid, signal.SIGKILL)
    assert survivors == [], "workers outlived the killed build"
    assert _assert_whole(cache, out) == entries_at_death, "workers stored kernels after the build was killed"
