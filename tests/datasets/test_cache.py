"""The conversion cache: where it lives, what keys it, and when it converts again."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest

from mixreplay import DatasetError, load_dataset
from mixreplay.datasets import cache, get_entry
from tests.datasets.conftest import d4rl_arrays, dataset_cli, write_d4rl


def D4RLSource(path, **options):
    """The ``d4rl:`` source of ``path``, built as the registry builds it."""
    return get_entry("d4rl").source(path, **options)


def test_data_root_from_env(monkeypatch, tmp_path):
    monkeypatch.setenv("MIXREPLAY_DATA_DIR", str(tmp_path / "root"))
    assert cache.data_root() == tmp_path / "root"
    monkeypatch.delenv("MIXREPLAY_DATA_DIR")
    assert cache.data_root() == Path("~/.cache/mixreplay").expanduser()


def test_cache_path_names_the_source_and_hashes_the_options(tmp_path):
    write_d4rl(tmp_path / "hopper_medium-v2.hdf5", d4rl_arrays())
    a = D4RLSource(str(tmp_path / "hopper_medium-v2.hdf5"))
    b = D4RLSource(str(tmp_path / "hopper_medium-v2.hdf5"), dtype=None)
    c = D4RLSource(str(tmp_path / "hopper_medium-v2.hdf5"), keep_infos=True)
    paths = {cache.cache_path(s) for s in (a, b, c)}
    assert len(paths) == 3
    for p in paths:
        assert p.parent == cache.data_root() / "datasets" / "d4rl"
        assert p.name.startswith("hopper_medium-v2-")
    assert cache.cache_path(a, tmp_path / "other").is_relative_to(tmp_path / "other")


def test_fingerprint_follows_size_mtime_and_options(tmp_path):
    write_d4rl(tmp_path / "x.hdf5", d4rl_arrays())
    s = D4RLSource(str(tmp_path / "x.hdf5"))
    fp = s.fingerprint()
    assert fp == D4RLSource(str(tmp_path / "x.hdf5")).fingerprint()
    assert fp != D4RLSource(str(tmp_path / "x.hdf5"), keep_infos=True).fingerprint()
    with open(tmp_path / "x.hdf5", "ab") as f:
        f.write(b"\0")
    assert s.fingerprint() != fp


def test_convert_writes_a_memmap_dataset(tmp_path):
    from mixreplay import load_dataset

    write_d4rl(tmp_path / "x.hdf5", d4rl_arrays())
    src = D4RLSource(str(tmp_path / "x.hdf5"))
    totals, chunks = [], []

    class Progress:
        def __call__(self, n):
            chunks.append(n)

        def set_total(self, n):
            totals.append(n)

    out = cache.convert(src, tmp_path / "out", progress=Progress())
    ds = load_dataset(f"memmap:{out}")
    assert len(ds) == 20 and totals == [20] and sum(chunks) == 20
    assert ds.metadata["source_id"] == f"d4rl:{(tmp_path / 'x.hdf5').resolve()}"
    assert (
        ds.metadata["info"]["loader"] == "d4rl"
        and ds.metadata["info"]["options"]["dtype"] == "float32"
    )
    with pytest.raises(FileExistsError, match="pass overwrite=True"):
        cache.convert(src, tmp_path / "out")


def test_conversion_logs_its_progress(tmp_path, caplog):
    import logging

    caplog.set_level(logging.INFO, logger="mixreplay")
    write_d4rl(tmp_path / "x.hdf5", d4rl_arrays())
    cache.convert(D4RLSource(str(tmp_path / "x.hdf5")), tmp_path / "out")
    assert "20 of 20 rows converted" in caplog.text
    assert "converted d4rl:" in caplog.text and "20 rows in 5 episodes" in caplog.text


# -- mixreplay cache list | clean ------------------------------------------------------------------


def _two_variants_and_a_stranger(tmp_path):
    """Two variants of one D4RL file, a folder named like an entry that is none, and a file."""
    write_d4rl(tmp_path / "x.hdf5", d4rl_arrays())
    a = load_dataset(f"d4rl:{tmp_path / 'x.hdf5'}")
    b = load_dataset(f"d4rl:{tmp_path / 'x.hdf5'}", dtype="float64", keep_infos=True)
    stranger = cache.data_root() / "datasets" / "d4rl" / "notes-0123456789abcdef"
    stranger.mkdir()
    (stranger / "todo.txt").write_text("keep me")
    plain = cache.data_root() / "datasets" / "readme.txt"
    plain.write_text("keep me too")
    return a, b, stranger, plain


def test_cache_list_shows_each_entry(tmp_path, capsys):
    a, b, stranger, _ = _two_variants_and_a_stranger(tmp_path)
    entries = cache.list_cache()
    assert [e.path for e in entries] == sorted([a.path, b.path])
    by_path = {e.path: e for e in entries}
    assert by_path[a.path].variant == "float32" and by_path[b.path].variant == "float64, keep_infos"
    assert by_path[a.path].rows == 20 and by_path[a.path].source_id == a.source_id
    assert by_path[a.path].size == sum(f.stat().st_size for f in a.path.iterdir())
    assert dataset_cli(["cache", "list"]) == 0
    out = capsys.readouterr().out
    assert f"dataset cache at {cache.data_root()}:" in out
    assert re.search(
        rf"{re.escape(a.source_id)}\s+float32\s+20\s+[\d.]+ KB\s+just now\s+{a.path.name}", out
    )
    assert "float64, keep_infos" in out and "2 entries" in out and "notes-" not in out


def test_cache_list_of_an_empty_cache(capsys):
    assert dataset_cli(["cache", "list"]) == 0
    assert "is empty" in capsys.readouterr().out


def test_last_used_follows_cache_hits(tmp_path):
    write_d4rl(tmp_path / "x.hdf5", d4rl_arrays())
    ds = load_dataset(f"d4rl:{tmp_path / 'x.hdf5'}")
    os.utime(ds.path, (1e9, 1e9))  # long ago
    assert cache.list_cache()[0].last_used == 1e9
    load_dataset(f"d4rl:{tmp_path / 'x.hdf5'}")
    assert cache.list_cache()[0].last_used > 1e9  # the hit moved it from long ago


def test_cache_clean_by_id_age_and_all(tmp_path, capsys):
    a, b, stranger, plain = _two_variants_and_a_stranger(tmp_path)
    with pytest.raises(
        DatasetError, match=r"say which cache entries to remove: --all, one or more IDs"
    ):
        dataset_cli(["cache", "clean"])
    with pytest.raises(DatasetError, match=r"no cache entry in .* matches 'minari:nothing-v0'"):
        dataset_cli(["cache", "clean", "minari:nothing-v0"])
    assert dataset_cli(["cache", "clean", "--all", "--dry-run"]) == 0
    assert "would remove 2 entries" in capsys.readouterr().out and a.path.exists()
    # older than 30 days: b was last used long ago, a just now
    os.utime(b.path, (time.time() - 40 * 86400,) * 2)
    assert dataset_cli(["cache", "clean", "--older-than", "30"]) == 0
    assert "removed 1 entries" in capsys.readouterr().out
    assert a.path.exists() and not b.path.exists()
    assert not (b.path.parent / f".{b.path.name}.lock").exists()
    # by the ID as the user wrote it
    assert dataset_cli(["cache", "clean", f"d4rl:{tmp_path / 'x.hdf5'}"]) == 0
    assert not a.path.exists()
    assert (stranger / "todo.txt").read_text() == "keep me" and plain.read_text() == "keep me too"
    load_dataset(f"d4rl:{tmp_path / 'x.hdf5'}")  # converted again
    assert dataset_cli(["cache", "clean", "--all"]) == 0
    assert cache.list_cache() == [] and stranger.exists() and plain.exists()


def test_cache_clean_takes_a_damaged_entry_but_nothing_else(tmp_path):
    a, _, stranger, _ = _two_variants_and_a_stranger(tmp_path)
    (a.path / "metadata.json").write_bytes(b"\xff not json")
    (a.path / "rows.bin").unlink()
    damaged = [e for e in cache.list_cache() if e.damaged]
    assert [e.path for e in damaged] == [a.path] and "not valid UTF-8 JSON" in damaged[0].damaged
    removed = cache.clean_cache(select=lambda e: e.damaged is not None)
    assert [e.path for e in removed] == [a.path] and not a.path.exists() and stranger.exists()
