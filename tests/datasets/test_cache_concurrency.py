"""Several real processes and one cache entry: no torn entry, no crash, the right rows for all.

Children are real Python processes started together (each imports mixreplay, says it is
ready, then waits for one "go" file), so their conversions overlap as much as they can.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from mixreplay import load_dataset
from mixreplay.datasets import cache
from tests.datasets.conftest import D4RLArrays, write_d4rl

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow  # each child process imports torch

_CHILD = """
import logging, os, sys, time
from pathlib import Path
sync = Path(sys.argv[1])
converted = []
class Count(logging.Handler):
    def emit(self, record):
        if record.getMessage().startswith("converting "):
            converted.append(1)
logging.getLogger("mixreplay").addHandler(Count())
logging.getLogger("mixreplay").setLevel(logging.INFO)
from mixreplay import load_dataset
(sync / f"ready-{sys.argv[3]}").touch()
while not (sync / "go").exists():
    time.sleep(0.005)
ds = load_dataset(sys.argv[2], refresh=sys.argv[4] == "refresh")
obs = ds[:]["observation"].double()
print(len(ds), float(obs.sum()), float((obs * obs).sum()), len(converted))
"""


def _big_d4rl(path: Path, n: int = 100_000) -> np.ndarray:
    g = np.random.default_rng(0)
    obs = g.normal(size=(n, 11)).astype(np.float32)
    ends = np.arange(n) % 1000 == 999
    write_d4rl(
        path,
        D4RLArrays(
            observations=obs,
            actions=g.normal(size=(n, 3)).astype(np.float32),
            rewards=g.normal(size=n),
            terminals=np.zeros(n, dtype=bool),
            timeouts=ends,
            next_observations=np.roll(obs, -1, axis=0),
            qpos=np.zeros((n, 1)),
        ),
    )
    return obs.astype(np.float64)


def _start_together(sync: Path, argvs: list[list[str]]) -> list[subprocess.Popen]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _CHILD, str(sync), *argv],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for argv in argvs
    ]
    deadline = time.monotonic() + 300
    while len(list(sync.glob("ready-*"))) < len(procs):
        if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
            for p in procs:
                p.kill()
            pytest.fail("a child did not start: " + "; ".join(p.communicate()[1] for p in procs))
        time.sleep(0.01)
    (sync / "go").touch()
    return procs


def _results(procs: list[subprocess.Popen]) -> list[tuple[int, float, float, int]]:
    out = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=600)
        assert p.returncode == 0, stderr
        n, s, s2, converted = stdout.split()
        out.append((int(n), float(s), float(s2), int(converted)))
    return out


def _leftovers(root: Path) -> list[str]:
    return sorted(p.name for p in root.rglob(".*tmp-*")) + sorted(
        p.name for p in root.rglob("*.old")
    )


@pytest.mark.parametrize("refresh", [False, True], ids=["load", "one-refreshes"])
def test_processes_converting_one_dataset_at_once_share_one_sound_entry(tmp_path, refresh):
    obs = _big_d4rl(tmp_path / "big.hdf5")
    dataset_id = f"d4rl:{tmp_path / 'big.hdf5'}"
    sync = tmp_path / "sync"
    sync.mkdir()
    argvs = [[dataset_id, str(i), "refresh" if refresh and i == 0 else "load"] for i in range(3)]
    results = _results(_start_together(sync, argvs))
    expected = (len(obs), float(obs.sum()), float((obs * obs).sum()))
    for n, s, s2, _ in results:
        assert (n, s, s2) == pytest.approx(expected, rel=1e-12)
    conversions = sum(r[3] for r in results)
    if refresh:
        assert 1 <= conversions <= 2  # the refreshing process converts; at most one more first
    else:
        assert conversions == 1  # the others waited for the lock and opened its entry
    root = Path(os.environ["MIXREPLAY_DATA_DIR"])
    (entry,) = cache.list_cache()
    assert entry.rows == len(obs) and entry.damaged is None
    assert _leftovers(root) == []
    (verified,) = cache.verify_cache()
    assert verified.damaged is None


_KILLED = """
import sys, time
from pathlib import Path
from mixreplay import load_dataset
marker = Path(sys.argv[2])
def progress(n):
    marker.touch()
    time.sleep(3600)  # SIGKILLed here, half way through the conversion
load_dataset(sys.argv[1], progress=progress)
"""


def test_a_conversion_killed_half_way_leaves_nothing_that_blocks_the_next(tmp_path):
    obs = _big_d4rl(tmp_path / "big.hdf5")
    dataset_id = f"d4rl:{tmp_path / 'big.hdf5'}"
    marker = tmp_path / "half-way"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    child = subprocess.Popen(
        [sys.executable, "-c", _KILLED, dataset_id, str(marker)],
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    deadline = time.monotonic() + 300
    while not marker.exists():
        if time.monotonic() > deadline or child.poll() is not None:
            child.kill()
            pytest.fail(f"the child never started converting: {child.communicate()[1]}")
        time.sleep(0.01)
    root = Path(os.environ["MIXREPLAY_DATA_DIR"])
    assert [p for p in root.rglob(".*tmp-*") if p.is_dir()]  # a half-written entry exists
    os.kill(child.pid, signal.SIGKILL)
    child.communicate()
    ds = load_dataset(dataset_id)  # the dead writer's lock is gone, its temp directory too
    assert len(ds) == len(obs) and float(ds[:]["observation"].double().sum()) == pytest.approx(
        float(obs.sum()), rel=1e-12
    )
    assert _leftovers(root) == []
    assert [e.rows for e in cache.list_cache()] == [len(obs)]
