"""The cache on a hostile filesystem: links, files in the way, entries it did not write.

The cache writes, replaces and deletes only inside its own directory, never through a
symbolic link; everything else it meets is a ``DatasetError`` naming the path and the fix.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
from pathlib import Path

import pytest
import torch

from mixreplay import DatasetError, load_dataset
from mixreplay.datasets import cache, get_entry
from mixreplay.datasets.memmap import load_memmap, write_memmap_dataset
from tests.conftest import ted_rows
from tests.datasets.conftest import d4rl_arrays, write_d4rl


@pytest.fixture
def source(tmp_path):
    """``(dataset ID, its cache entry path)`` of a 20-row D4RL file."""
    write_d4rl(tmp_path / "x.hdf5", d4rl_arrays())
    src = get_entry("d4rl").source(str(tmp_path / "x.hdf5"))
    return f"d4rl:{tmp_path / 'x.hdf5'}", cache.cache_path(src)


def _snapshot(root: Path) -> dict[str, tuple[str, int]]:
    """Every file under ``root``: its SHA-256 and mtime, and every directory's mtime."""
    out = {}
    for p in sorted([root, *root.rglob("*")]):
        st = os.stat(p, follow_symlinks=False)
        digest = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
        out[str(p.relative_to(root))] = (digest, st.st_mtime_ns)
    return out


def _link(entry: Path, target: Path) -> None:
    entry.parent.mkdir(parents=True, exist_ok=True)
    entry.symlink_to(target, target_is_directory=True)


# -- an entry that is a link ---------------------------------------------------------------------


def test_a_link_to_the_users_own_dataset_is_never_written_through(source, tmp_path):
    dataset_id, entry = source
    mine = write_memmap_dataset(tmp_path / "mine", ted_rows(7))
    before = _snapshot(mine)
    _link(entry, mine)
    for refresh in (False, True):
        with pytest.raises(
            DatasetError,
            match=rf"the cache entry {entry} is a symbolic link \(to {mine}\) and would have to "
            r"be converted again \((its source changed|refresh=True)\); the cache never writes, "
            r"replaces or deletes anything through a link: remove the link",
        ):
            load_dataset(dataset_id, refresh=refresh)
    assert _snapshot(mine) == before and len(load_memmap(mine)) == 7
    assert entry.is_symlink()  # the link is left too: it is the user's
    entry.unlink()
    assert len(load_dataset(dataset_id)) == 20 and _snapshot(mine) == before


def test_a_link_to_a_damaged_directory_is_a_clear_error(source, tmp_path):
    dataset_id, entry = source
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "metadata.json").write_bytes(b"\xff not json")
    (broken / "rows.bin").write_bytes(b"\0" * 64)
    before = _snapshot(broken)
    _link(entry, broken)
    with pytest.raises(
        DatasetError,
        match=r"is a symbolic link \(to .*broken\) and would have to be converted again "
        r"\(damaged: .*metadata.json is not valid UTF-8 JSON",
    ):
        load_dataset(dataset_id)
    assert _snapshot(broken) == before


def test_a_dangling_link_is_a_clear_error(source, tmp_path):
    dataset_id, entry = source
    _link(entry, tmp_path / "nowhere")
    with pytest.raises(DatasetError, match=r"is a symbolic link .*\(it points to nothing\)"):
        load_dataset(dataset_id)
    assert not (tmp_path / "nowhere").exists()


def test_a_link_to_a_current_entry_is_served_without_writing_through_it(source, tmp_path, caplog):
    dataset_id, entry = source
    first = load_dataset(dataset_id)
    expected = first[:].clone()
    moved = tmp_path / "other-disk" / entry.name
    moved.parent.mkdir()
    shutil.move(entry, moved)
    _link(entry, moved)
    (moved.parent / f".{moved.name}.old").mkdir()  # what a swap a killed writer left looks like
    os.utime(moved, ns=(10**18, 10**18))
    before = _snapshot(moved.parent)
    caplog.set_level(logging.INFO, logger="mixreplay")
    ds = load_dataset(dataset_id)
    assert (ds[:] == expected).all() and "converting" not in caplog.text
    assert _snapshot(moved.parent) == before  # no "last used" time, no recovery through the link
    assert cache.record_path(entry).parent == entry.parent  # any record stays in the cache


def test_a_linked_file_inside_an_entry_is_replaced_not_followed(source, tmp_path):
    dataset_id, entry = source
    first = load_dataset(dataset_id)
    expected = first[:].clone()
    mine = tmp_path / "mine.bin"
    mine.write_bytes((entry / "rows.bin").read_bytes())
    (entry / "rows.bin").unlink()
    (entry / "rows.bin").symlink_to(mine)
    before = mine.read_bytes()
    again = load_dataset(dataset_id)
    assert (again[:] == expected).all() and not (entry / "rows.bin").is_symlink()
    assert mine.read_bytes() == before


# -- the lock file -------------------------------------------------------------------------------


def test_a_lock_file_that_is_a_link_is_refused_and_nothing_is_created(source, tmp_path):
    dataset_id, entry = source
    entry.parent.mkdir(parents=True)
    lock = entry.parent / f".{entry.name}.lock"
    lock.symlink_to(tmp_path / "created-through-the-link")
    with pytest.raises(DatasetError, match=r"lock file .*\.lock is a symbolic link; .*remove it"):
        load_dataset(dataset_id)
    assert not (tmp_path / "created-through-the-link").exists()


def test_a_lock_file_that_is_a_directory_is_refused(source):
    dataset_id, entry = source
    (entry.parent / f".{entry.name}.lock").mkdir(parents=True)
    with pytest.raises(DatasetError, match=r"lock file .*\.lock is a directory; remove it"):
        load_dataset(dataset_id)


# -- files in the way ----------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["root", "prefix"])
def test_a_file_where_the_cache_directory_should_be(tmp_path, where, monkeypatch):
    write_d4rl(tmp_path / "x.hdf5", d4rl_arrays())
    root = tmp_path / "cache-root"
    blocker = root if where == "root" else root / "datasets" / "d4rl"
    blocker.parent.mkdir(parents=True, exist_ok=True)
    blocker.write_text("not a directory")
    monkeypatch.setenv("MIXREPLAY_DATA_DIR", str(root))
    with pytest.raises(
        DatasetError,
        match=rf"cannot convert into the dataset cache at .*: {blocker} is a file, not a "
        r"directory; remove it, or set MIXREPLAY_DATA_DIR",
    ):
        load_dataset(f"d4rl:{tmp_path / 'x.hdf5'}")
    assert blocker.read_text() == "not a directory"


def test_a_file_at_the_entry_path_is_not_replaced(source):
    dataset_id, entry = source
    entry.parent.mkdir(parents=True)
    entry.write_text("mine")
    with pytest.raises(DatasetError, match=r"exists and is not a mixreplay dataset; refusing"):
        load_dataset(dataset_id)
    assert entry.read_text() == "mine"


def test_a_damaged_dedup_entry_is_converted_again(tmp_path, caplog):
    """Its next_slots.bin and next_rows.bin are an entry's files too."""
    write_d4rl(tmp_path / "x.hdf5", d4rl_arrays())
    first = load_dataset(f"d4rl:{tmp_path / 'x.hdf5'}", dedup_next=True)
    expected = first[:].clone()
    (first.path / "metadata.json").write_bytes(b"\xff not json")
    caplog.set_level(logging.INFO, logger="mixreplay")
    again = load_dataset(f"d4rl:{tmp_path / 'x.hdf5'}", dedup_next=True)
    assert torch.equal(again[:]["next", "observation"], expected["next", "observation"])
    assert "removing the damaged cache entry" in caplog.text


def test_a_left_over_record_temp_file_is_harmless(source):
    dataset_id, entry = source
    load_dataset(dataset_id)
    stray = cache.record_path(entry).with_name(cache.record_path(entry).name + ".tmp-999999")
    stray.write_text("{")
    assert len(load_dataset(dataset_id)) == 20
    assert [e.path for e in cache.list_cache()] == [entry]


def test_a_record_that_is_a_link_is_replaced_not_followed(source, tmp_path, monkeypatch):
    from mixreplay.datasets import integrity

    monkeypatch.setattr(integrity, "RACY_NS", 0)
    dataset_id, entry = source
    first = load_dataset(dataset_id)
    mine = tmp_path / "mine.json"
    mine.write_text("my settings")
    cache.record_path(entry).unlink()
    cache.record_path(entry).symlink_to(mine)
    os.utime(first.path / "rows.bin", ns=(10**18, 10**9))  # not settled by the record: checked
    assert len(load_dataset(dataset_id)) == 20
    assert mine.read_text() == "my settings" and not cache.record_path(entry).is_symlink()


def test_a_directory_where_rows_bin_should_be_is_damage(source, caplog):
    dataset_id, entry = source
    first = load_dataset(dataset_id)
    expected = first[:].clone()
    (entry / "rows.bin").unlink()
    (entry / "rows.bin").mkdir()
    (entry / "rows.bin" / "x").write_text("?")
    caplog.set_level(logging.WARNING, logger="mixreplay")
    assert (load_dataset(dataset_id)[:] == expected).all()
    assert "rows.bin is not a regular file" in caplog.text


def test_a_truncated_local_hdf5_file_is_a_clear_error(tmp_path):
    write_d4rl(tmp_path / "x.hdf5", d4rl_arrays())
    os.truncate(tmp_path / "x.hdf5", (tmp_path / "x.hdf5").stat().st_size // 2)
    with pytest.raises(DatasetError, match=r"x.hdf5 is not a readable HDF5 file: .*truncated"):
        load_dataset(f"d4rl:{tmp_path / 'x.hdf5'}")


# -- interrupted and concurrent within one process -----------------------------------------------


def test_a_conversion_interrupted_by_ctrl_c_leaves_nothing_behind(source):
    dataset_id, entry = source

    def progress(n):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        load_dataset(dataset_id, progress=progress)
    assert sorted(p.name for p in entry.parent.iterdir()) == [f".{entry.name}.lock"]
    assert len(load_dataset(dataset_id)) == 20


def test_threads_loading_one_new_dataset_convert_it_once(source, caplog):
    import threading

    dataset_id, entry = source
    caplog.set_level(logging.INFO, logger="mixreplay")
    got, errors = [], []

    def load():
        try:
            got.append(load_dataset(dataset_id)[:]["observation"].clone())
        except Exception as err:  # noqa: BLE001 - reported below
            errors.append(err)

    threads = [threading.Thread(target=load) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and len(got) == 4 and all(torch.equal(g, got[0]) for g in got)
    assert sum(r.getMessage().startswith("converting d4rl:") for r in caplog.records) == 1


_FULL_CACHE = """
import os, sys
from pathlib import Path
from mixreplay import load_dataset
os.environ["MIXREPLAY_DATA_DIR"] = sys.argv[2]
try:
    load_dataset(sys.argv[1])
except Exception as err:
    print(f"{type(err).__name__}: {err}")
print(sorted(p.name for p in Path(sys.argv[2]).rglob("*")))
"""


def test_a_cache_on_a_full_disk_is_a_clear_error_and_leaves_nothing_half_written(tmp_path):
    import subprocess
    import sys

    import numpy as np

    if shutil.which("unshare") is None:
        pytest.skip("needs unshare(1) for a private small tmpfs")
    a = d4rl_arrays()
    for name in ("observations", "actions", "rewards", "terminals", "timeouts"):
        setattr(a, name, np.concatenate([getattr(a, name)] * 2000))  # 40,000 rows, ~3 MB
    a.next_observations = np.concatenate([a.next_observations] * 2000)
    a.qpos = np.concatenate([a.qpos] * 2000)
    write_d4rl(tmp_path / "x.hdf5", a)
    disk = tmp_path / "small"
    disk.mkdir()
    script = f'mount -t tmpfs -o size=1m tmpfs "{disk}" && exec "$@"'
    cmd = ["unshare", "-m"] if os.geteuid() == 0 else ["unshare", "-rm"]
    cmd += ["sh", "-c", script, "sh", sys.executable, "-c", _FULL_CACHE]
    cmd += [f"d4rl:{tmp_path / 'x.hdf5'}", str(disk)]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300, check=False)
    if out.returncode and "mount" in out.stderr:
        pytest.skip(f"cannot mount a private tmpfs here: {out.stderr.strip()}")
    assert out.returncode == 0, out.stderr
    error, listing = out.stdout.splitlines()
    assert re.fullmatch(
        r"DatasetError: cannot write the dataset .*/datasets/d4rl/x-[0-9a-f]{16}: No space left "
        r"on device; nothing was written there: free space, or write it elsewhere \(the cache: "
        r"set MIXREPLAY_DATA_DIR or pass cache_dir=\)",
        error,
    ), error
    assert "rows.bin" not in listing and ".tmp-" not in listing  # no temp directory left
