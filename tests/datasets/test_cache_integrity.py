"""A cache entry whose bytes changed is never served: what is checked on open, once, and on demand.

Every open compares the mapped files' size, mtime, ctime and inode with the verification
record the cache keeps beside the entry; a file whose record is missing or differs is read
in full once and its CRC-32 checked (then recorded). ``verify_cache`` and ``mixreplay cache
verify`` read every file of every entry in full, whatever the record says.
"""

from __future__ import annotations

import json
import logging
import os
import time

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mixreplay import DatasetError, load_dataset
from mixreplay.datasets import cache
from tests.datasets.conftest import d4rl_arrays, dataset_cli, write_d4rl


@pytest.fixture
def d4rl_id(tmp_path):
    write_d4rl(tmp_path / "x.hdf5", d4rl_arrays())
    return f"d4rl:{tmp_path / 'x.hdf5'}"


@pytest.fixture
def settled(monkeypatch):
    """Records are written as soon as a file is seen (a real cache waits until its files are
    a few seconds old, so that a write in the same clock tick cannot go unseen)."""
    from mixreplay.datasets import integrity

    monkeypatch.setattr(integrity, "RACY_NS", 0)


def _flip(path, offset: int = 0, *, keep_mtime: bool = False) -> None:
    """Change one byte of ``path`` in place: same size, (optionally) the same mtime.

    Restoring the mtime leaves the ctime as the only trace of the write, so the write
    is made once the clock is past the ctime the record holds: a write in the same
    clock tick as the recording, with its mtime set back, is the one change an open
    cannot see (``cache verify`` can).
    """
    st = path.stat()
    if keep_mtime:
        while time.time_ns() < st.st_ctime_ns + 50_000_000:
            time.sleep(0.01)
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0x5A]))
    if keep_mtime:
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert path.stat().st_size == st.st_size


def _age(path) -> None:
    """Set ``path``'s mtime to a day ago, as a file written yesterday has."""
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns - 86400 * 10**9))


def _converted(caplog) -> int:
    return sum(r.getMessage().startswith("converting d4rl:") for r in caplog.records)


@pytest.mark.parametrize("keep_mtime", [False, True], ids=["mtime-changed", "mtime-restored"])
@pytest.mark.parametrize("offset", [0, 200], ids=["first-row", "later-row"])
def test_a_rows_file_changed_in_place_is_converted_again(d4rl_id, caplog, keep_mtime, offset):
    first = load_dataset(d4rl_id)
    expected = first[:].clone()
    _flip(first.path / "rows.bin", offset, keep_mtime=keep_mtime)
    caplog.set_level(logging.INFO, logger="mixreplay")
    again = load_dataset(d4rl_id)
    assert (again[:] == expected).all()  # never the changed rows
    assert _converted(caplog) == 1
    warning = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warning) == 1 and "rows.bin is corrupt: its CRC-32 is" in warning[0].getMessage()
    assert "converting it again" in warning[0].getMessage()


def test_a_verified_entry_opens_without_reading_its_rows(d4rl_id, caplog, settled):
    caplog.set_level(logging.DEBUG, logger="mixreplay.datasets")
    first = load_dataset(d4rl_id)  # converted: recorded with the CRC-32s computed as written
    record = json.loads(cache.record_path(first.path).read_text())
    assert set(record["files"]) == {"rows.bin"}
    caplog.clear()
    load_dataset(d4rl_id)
    assert "checking the CRC-32 of" not in caplog.text
    _age(first.path / "rows.bin")  # touched: read once, recorded again
    load_dataset(d4rl_id)
    assert "checking the CRC-32 of" in caplog.text
    caplog.clear()
    ds = load_dataset(d4rl_id)
    assert "checking the CRC-32 of" not in caplog.text and len(ds) == 20
    assert _converted(caplog) == 0


def test_an_entry_without_a_record_is_read_once(d4rl_id, caplog, settled):
    """An entry written by an older mixreplay, or whose record was lost."""
    first = load_dataset(d4rl_id)
    cache.record_path(first.path).unlink()
    caplog.set_level(logging.DEBUG, logger="mixreplay.datasets")
    load_dataset(d4rl_id)
    assert caplog.text.count("checking the CRC-32 of") == 1
    caplog.clear()
    load_dataset(d4rl_id)
    assert "checking the CRC-32 of" not in caplog.text


def test_a_change_after_the_record_is_seen_on_the_next_open(d4rl_id, caplog, settled):
    first = load_dataset(d4rl_id)
    expected = first[:].clone()
    rows = first.path / "rows.bin"
    _age(rows)
    load_dataset(d4rl_id)  # recorded
    _flip(rows, 64, keep_mtime=True)  # size and mtime kept: the ctime moved
    caplog.set_level(logging.INFO, logger="mixreplay")
    again = load_dataset(d4rl_id)
    assert (again[:] == expected).all() and _converted(caplog) == 1
    assert "rows.bin is corrupt" in caplog.text


def test_a_damaged_record_only_costs_a_check(d4rl_id, caplog, settled):
    first = load_dataset(d4rl_id)
    _age(first.path / "rows.bin")
    load_dataset(d4rl_id)
    cache.record_path(first.path).write_bytes(b"\xff{ not json")
    caplog.set_level(logging.DEBUG, logger="mixreplay.datasets")
    ds = load_dataset(d4rl_id)
    assert len(ds) == 20 and "checking the CRC-32 of" in caplog.text and _converted(caplog) == 0
    assert json.loads(cache.record_path(first.path).read_text())["files"]


def test_a_dedup_entry_checks_both_mapped_files(tmp_path, caplog, settled):
    write_d4rl(tmp_path / "x.hdf5", d4rl_arrays())
    first = load_dataset(f"d4rl:{tmp_path / 'x.hdf5'}", dedup_next=True)
    expected = first[:].clone()
    for name in ("rows.bin", "next_rows.bin"):
        _age(first.path / name)
    load_dataset(f"d4rl:{tmp_path / 'x.hdf5'}", dedup_next=True)
    record = json.loads(cache.record_path(first.path).read_text())
    assert set(record["files"]) == {"rows.bin", "next_rows.bin"}
    _flip(first.path / "next_rows.bin", 4, keep_mtime=True)
    caplog.set_level(logging.INFO, logger="mixreplay")
    again = load_dataset(f"d4rl:{tmp_path / 'x.hdf5'}", dedup_next=True)
    assert torch.equal(again[:]["next", "observation"], expected["next", "observation"])
    assert "next_rows.bin is corrupt" in caplog.text and _converted(caplog) == 1


# -- on demand: verify_cache, mixreplay cache verify ---------------------------------------------


def test_verify_reads_every_file_whatever_the_record_says(d4rl_id, settled):
    first = load_dataset(d4rl_id)
    expected = first[:].clone()
    rows = first.path / "rows.bin"
    _age(rows)
    load_dataset(d4rl_id)  # recorded
    record = cache.record_path(first.path)
    _flip(rows, 8, keep_mtime=True)
    # what bit rot on the disk looks like: the bytes changed, size and times did not
    forged = json.loads(record.read_text())
    st = rows.stat()
    forged["files"]["rows.bin"]["stat"] = [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]
    record.write_text(json.dumps(forged))
    (entry,) = cache.verify_cache()
    assert entry.path == first.path and "rows.bin is corrupt: its CRC-32 is" in entry.damaged
    assert not record.exists()  # a damaged entry keeps no record: the next open reads it
    again = load_dataset(d4rl_id)  # converted again
    assert (again[:] == expected).all()
    (entry,) = cache.verify_cache()
    assert entry.damaged is None and record.exists()


def test_cache_verify_command(d4rl_id, capsys):
    first = load_dataset(d4rl_id)
    second = load_dataset(d4rl_id, dtype="float64")
    assert dataset_cli(["cache", "verify"]) == 0
    out = capsys.readouterr().out
    assert out.count("ok ") == 2 and "2 entries verified, none damaged" in out
    _flip(second.path / "rows.bin", 0, keep_mtime=True)
    assert dataset_cli(["cache", "verify"]) == 1
    out = capsys.readouterr().out
    assert f"DAMAGED  {second.source_id}" in out and "rows.bin is corrupt" in out
    assert "2 entries verified, 1 damaged" in out
    assert "mixreplay cache clean" in out and "the next load converts it again" in out
    assert dataset_cli(["cache", "verify", first.path.name]) == 0
    assert "1 entries verified, none damaged" in capsys.readouterr().out
    with pytest.raises(DatasetError, match=r"no cache entry in .* matches 'minari:nothing-v0'"):
        dataset_cli(["cache", "verify", "minari:nothing-v0"])


def test_cache_verify_of_an_empty_cache(capsys):
    assert dataset_cli(["cache", "verify"]) == 0
    assert "is empty" in capsys.readouterr().out


# -- the checks themselves -----------------------------------------------------------------------


def test_crc_file_names_what_it_cannot_check(tmp_path):
    from mixreplay.datasets.integrity import crc_file

    path = tmp_path / "rows.bin"
    path.write_bytes(b"\1" * 16)
    with pytest.raises(DatasetError, match=r"rows.bin: the metadata holds no CRC-32 for it"):
        crc_file(path, {"nbytes": 16})  # a format 1 dataset: sizes only
    with pytest.raises(DatasetError, match=r"rows.bin holds 16 bytes, expected 24; the file is"):
        crc_file(path, {"nbytes": 24, "crc32": 0})
    crc_file(path, {"nbytes": 16, "crc32": __import__("zlib").crc32(b"\1" * 16)})


def test_verify_entry_names_a_file_that_vanished(d4rl_id):
    from mixreplay.datasets.integrity import verify_entry
    from mixreplay.datasets.memmap import read_metadata

    ds = load_dataset(d4rl_id)
    meta = read_metadata(ds.path)
    (ds.path / "episodes.bin").unlink()
    with pytest.raises(DatasetError, match=r"cannot read .*episodes.bin: No such file"):
        verify_entry(ds.path, ds.path, meta)


def test_a_cache_root_the_filesystem_refuses_is_one_line(tmp_path, monkeypatch, d4rl_id):
    monkeypatch.setenv("MIXREPLAY_DATA_DIR", str(tmp_path / ("x" * 300)))
    with pytest.raises(
        DatasetError, match=r"cannot read the dataset cache at .*: File name too long"
    ):
        load_dataset(d4rl_id)


def test_clean_removes_the_record_with_the_entry(d4rl_id):
    first = load_dataset(d4rl_id)
    assert cache.record_path(first.path).exists()
    cache.clean_cache()
    assert not first.path.exists() and not cache.record_path(first.path).exists()


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(position=st.floats(0, 1, exclude_max=True), mask=st.integers(1, 255), keep=st.booleans())
def test_no_single_byte_change_of_a_mapped_file_is_ever_served(d4rl_id, position, mask, keep):
    first = load_dataset(d4rl_id)
    expected = first[:].clone()
    rows = first.path / "rows.bin"
    offset = int(position * rows.stat().st_size)
    st_ = rows.stat()
    if keep:
        while time.time_ns() < st_.st_ctime_ns + 50_000_000:
            time.sleep(0.01)
    with open(rows, "r+b") as f:
        f.seek(offset)
        b = f.read(1)[0]
        f.seek(offset)
        f.write(bytes([b ^ mask]))
    if keep:
        os.utime(rows, ns=(st_.st_atime_ns, st_.st_mtime_ns))
    assert (load_dataset(d4rl_id)[:] == expected).all()
