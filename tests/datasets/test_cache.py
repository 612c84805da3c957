"""The conversion cache: where it lives, what keys it, and when it converts again."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("h5py")

from mixreplay.datasets import cache
from mixreplay.datasets.d4rl import D4RLSource
from mixreplay.datasets.transforms import RowPolicy
from tests.datasets.conftest import d4rl_arrays, write_d4rl


def test_data_root_from_env(monkeypatch, tmp_path):
    monkeypatch.setenv("MIXREPLAY_DATA_DIR", str(tmp_path / "root"))
    assert cache.data_root() == tmp_path / "root"
    monkeypatch.delenv("MIXREPLAY_DATA_DIR")
    assert cache.data_root() == Path("~/.cache/mixreplay").expanduser()


def test_cache_path_names_the_source_and_hashes_the_options(tmp_path):
    write_d4rl(tmp_path / "hopper_medium-v2.hdf5", d4rl_arrays())
    a = D4RLSource(str(tmp_path / "hopper_medium-v2.hdf5"))
    b = D4RLSource(str(tmp_path / "hopper_medium-v2.hdf5"), policy=RowPolicy(dtype=None))
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
