"""Damaged datasets: a memmap: dataset names the file and the problem; a cache entry is rebuilt.

Also a cache on a read-only filesystem (served without writing), and the writer's
edge cases (0 rows with a scalar key)."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from tensordict import TensorDict

from mixreplay import DatasetError, load_dataset
from mixreplay.datasets.memmap import load_memmap, write_memmap_dataset
from tests.datasets.conftest import d4rl_arrays, write_d4rl

V1 = Path(__file__).resolve().parents[1] / "fixtures" / "v1" / "dataset"


def _rewrite_metadata(path: Path, edit) -> None:
    meta = json.loads((path / "metadata.json").read_text())
    edit(meta)
    (path / "metadata.json").write_text(json.dumps(meta))


def _episodes(path: Path, values) -> None:
    (path / "episodes.bin").write_bytes(torch.tensor(values, dtype=torch.int64).numpy().tobytes())


def _set_dtype(meta):
    meta["schema"][0]["dtype"] = "float33"


# damage -> (what it does to a dataset directory, the message load_memmap raises)
DAMAGE = {
    "non-UTF-8 metadata": (
        lambda p: (p / "metadata.json").write_bytes(b"\xff\xfe{}"),
        r"metadata.json is not valid UTF-8 JSON \(UnicodeDecodeError",
    ),
    "metadata that is not an object": (
        lambda p: (p / "metadata.json").write_text("[1, 2, 3]"),
        r"metadata.json holds a JSON list, not an object",
    ),
    "missing metadata": (
        lambda p: (p / "metadata.json").unlink(),
        r"metadata.json is missing: .* is not a complete dataset",
    ),
    "missing episodes.bin": (
        lambda p: (p / "episodes.bin").unlink(),
        r"episodes.bin is missing",
    ),
    "truncated episodes.bin": (
        lambda p: os.truncate(p / "episodes.bin", 4),
        r"episodes.bin holds 4 bytes, expected 24 \(int64\[3\]\); the file is truncated",
    ),
    "missing rows.bin": (lambda p: (p / "rows.bin").unlink(), r"rows.bin is missing"),
    "truncated rows.bin": (
        lambda p: os.truncate(p / "rows.bin", 8),
        r"rows.bin holds 8 bytes, expected \d+ \(int64\[20, \d+\]\); the file is truncated",
    ),
    "corrupted dtype": (
        lambda p: _rewrite_metadata(p, _set_dtype),
        r"metadata.json was edited or corrupted \(checksum",
    ),
    "negative episode starts": (
        lambda p: _episodes(p, [0, -4, 9]),
        r"episodes.bin is corrupt: its CRC-32 is",
    ),
    "unsorted episode starts": (
        lambda p: _episodes(p, [0, 9, 4]),
        r"episodes.bin is corrupt: its CRC-32 is",
    ),
}


@pytest.fixture
def dataset(tmp_path):
    """A dataset directory of 20 rows in 3 episodes."""
    from tests.conftest import ted_rows

    return write_memmap_dataset(tmp_path / "ds", ted_rows(20), episode_starts=[0, 4, 9])


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_damaged_memmap_dataset_names_the_file_and_the_problem(dataset, damage):
    do, match = DAMAGE[damage]
    do(dataset)
    with pytest.raises(DatasetError, match=match) as info:
        load_dataset(f"memmap:{dataset}")
    assert str(dataset) in str(info.value)


# Format 1 (before checksums) is read through a migration: what a checksum or a CRC catches
# in format 2 is caught there by validating what was read.
V1_DAMAGE = {
    "corrupted dtype": (
        lambda p: _rewrite_metadata(p, _set_dtype),
        r"metadata.json: the schema is invalid",
    ),
    "negative episode starts": (
        lambda p: _episodes(p, [0, -4, 9]),
        r"episodes.bin must increase strictly, got -4 after 0 \(position 1\); the dataset is corrupt",
    ),
    "unsorted episode starts": (
        lambda p: _episodes(p, [0, 20, 9]),
        r"episodes.bin must increase strictly, got 9 after 20 \(position 2\)",
    ),
    "starts past the end": (
        lambda p: _episodes(p, [0, 10, 31]),
        r"episodes.bin must stay below the 30 rows, got 31",
    ),
    "truncated rows.bin": (
        lambda p: os.truncate(p / "rows.bin", 100),
        r"rows.bin holds 100 bytes, expected 1200",
    ),
}


@pytest.mark.parametrize("damage", sorted(V1_DAMAGE))
def test_a_damaged_format_1_dataset_is_refused(tmp_path, damage):
    path = shutil.copytree(V1, tmp_path / "v1")
    assert len(load_memmap(path)) == 30  # sound before the damage
    do, match = V1_DAMAGE[damage]
    do(path)
    with pytest.raises(DatasetError, match=match):
        load_memmap(path)


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_damaged_cache_entry_is_converted_again(tmp_path, caplog, damage):
    write_d4rl(tmp_path / "x.hdf5", d4rl_arrays())
    first = load_dataset(f"d4rl:{tmp_path / 'x.hdf5'}")
    expected = first[:].clone()
    DAMAGE[damage][0](first.path)
    caplog.set_level(logging.INFO, logger="mixreplay")
    again = load_dataset(f"d4rl:{tmp_path / 'x.hdf5'}")
    assert "is damaged" in caplog.text and "converting it again" in caplog.text
    assert sum(r.getMessage().startswith("converting d4rl:") for r in caplog.records) == 1
    assert again.path == first.path and (again[:] == expected).all()
    assert again.episode_starts.tolist() == first.episode_starts.tolist()


def test_a_cache_path_holding_foreign_files_is_not_removed(tmp_path):
    write_d4rl(tmp_path / "x.hdf5", d4rl_arrays())
    first = load_dataset(f"d4rl:{tmp_path / 'x.hdf5'}")
    (first.path / "metadata.json").unlink()
    (first.path / "notes.txt").write_text("mine")
    with pytest.raises(DatasetError, match=r"holds files that are not a mixreplay cache entry"):
        load_dataset(f"d4rl:{tmp_path / 'x.hdf5'}")
    assert (first.path / "notes.txt").read_text() == "mine"


def test_zero_rows_with_a_scalar_key_is_a_dataset_error(tmp_path):
    empty = TensorDict({"x": torch.zeros(0), "y": torch.zeros(0, 3)}, [0])
    with pytest.raises(DatasetError, match=r"no rows to write to .*out: the data was empty"):
        write_memmap_dataset(tmp_path / "out", empty)
    with pytest.raises(DatasetError, match=r"no rows to write"):
        write_memmap_dataset(tmp_path / "out", [empty, empty])
    assert not (tmp_path / "out").exists()
    # empty chunks among others are skipped
    rows = TensorDict({"x": torch.arange(3.0), "y": torch.zeros(3, 3)}, [3])
    ds = load_memmap(write_memmap_dataset(tmp_path / "out", [empty, rows, empty]))
    assert ds[:]["x"].tolist() == [0.0, 1.0, 2.0]


# -- a cache on a read-only filesystem -------------------------------------------------------------

_CHILD = """
import os, sys
from mixreplay import load_dataset
root = os.environ["MIXREPLAY_DATA_DIR"]
try:
    open(os.path.join(root, "probe"), "w")
except OSError as err:
    print("read-only:", err.strerror)
else:
    print("WRITABLE")
try:
    ds = load_dataset(sys.argv[1])
except Exception as err:
    print(f"{type(err).__name__}: {err}")
else:
    print("rows", len(ds))
"""


def _read_only(how: str, root: Path, argv: list[str]) -> list[str]:
    """Run ``python -c _CHILD argv`` with ``root`` read-only; return its output lines."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    python = [sys.executable, "-c", _CHILD, *argv]
    if how == "read-only mount":
        if os.geteuid() != 0 and shutil.which("unshare") is None:
            pytest.skip("needs unshare(1) for a private read-only mount")
        script = f'mount --bind "{root}" "{root}" && mount -o remount,bind,ro "{root}" && exec "$@"'
        cmd = ["unshare", "-m"] if os.geteuid() == 0 else ["unshare", "-rm"]
        cmd += ["sh", "-c", script, "sh", *python]
    else:  # permissions: only an unprivileged user is bound by them
        if os.geteuid() == 0:
            pytest.skip("root ignores file permissions; the read-only mount covers root")
        for d in [root, *root.rglob("*")]:
            if d.is_dir():
                d.chmod(0o555)
        cmd = python
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300, check=False)
    if out.returncode and "mount" in out.stderr:
        pytest.skip(f"cannot make a private read-only mount here: {out.stderr.strip()}")
    assert out.returncode == 0, out.stderr
    return out.stdout.splitlines()


@pytest.mark.parametrize(
    "how",
    [
        pytest.param("read-only mount", marks=pytest.mark.heavy),  # a subprocess, unshare -m
        "permissions",
    ],
)
def test_a_cache_hit_on_a_read_only_filesystem_writes_nothing(tmp_path, how):
    write_d4rl(tmp_path / "x.hdf5", d4rl_arrays())
    root = Path(os.environ["MIXREPLAY_DATA_DIR"])
    ds = load_dataset(f"d4rl:{tmp_path / 'x.hdf5'}")
    for lock in root.rglob(".*.lock"):  # a lock file must not be needed to read
        lock.unlink()
    before = sorted((p, p.stat().st_mtime_ns) for p in root.rglob("*"))
    try:
        lines = _read_only(how, root, [f"d4rl:{tmp_path / 'x.hdf5'}"])
    finally:
        for d in [root, *root.rglob("*")]:
            if d.is_dir():
                d.chmod(0o755)
    assert lines[0].startswith("read-only:")  # the test itself can fail: the root was read-only
    assert lines[1] == f"rows {len(ds)}"
    assert sorted((p, p.stat().st_mtime_ns) for p in root.rglob("*")) == before


@pytest.mark.heavy  # a subprocess in a private mount namespace (a read-only mount)
def test_a_stale_entry_on_a_read_only_filesystem_says_what_to_do(tmp_path):
    path = tmp_path / "x.hdf5"
    write_d4rl(path, d4rl_arrays())
    root = Path(os.environ["MIXREPLAY_DATA_DIR"])
    load_dataset(f"d4rl:{path}")
    write_d4rl(path, d4rl_arrays(seed=1))  # the source changed: the entry is stale
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    lines = _read_only("read-only mount", root, [f"d4rl:{path}"])
    assert lines[1].startswith("DatasetError: cannot convert into the dataset cache at ")
    assert "(the cache is read-only); set MIXREPLAY_DATA_DIR or pass cache_dir=" in lines[1]
