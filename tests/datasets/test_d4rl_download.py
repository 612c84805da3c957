"""``d4rl:<name>`` downloads a missing file from D4RL's URL: a real HTTP server on 127.0.0.1.

The server (``d4rl_server`` in conftest) stands in for D4RL's: ``MIXREPLAY_D4RL_BASE_URL``
points at it and it serves an h5py-written D4RL file at the path D4RL publishes
``hopper-medium-v2`` under. It honours ``Range``/``If-Range`` and can cut connections,
corrupt bytes or announce a digest.
"""

from __future__ import annotations

import hashlib
import logging

import numpy as np
import pytest
import torch

from mixreplay import DatasetError, DatasetNotFoundError, load_dataset
from mixreplay.datasets import download as download_module
from mixreplay.datasets.d4rl import d4rl_dataset_dir
from mixreplay.datasets.d4rl_urls import D4RL_PATHS
from tests.datasets.conftest import d4rl_arrays, dataset_cli, write_d4rl

NAME = "hopper-medium-v2"
PATH = D4RL_PATHS[NAME]  # gym_mujoco_v2/hopper_medium-v2.hdf5
FILE = "hopper_medium-v2.hdf5"


@pytest.fixture
def d4rl_file(tmp_path):
    """The bytes of a D4RL-layout HDF5 file (about 180 KB), and its arrays."""
    a = d4rl_arrays()
    reps = 400  # 8,000 rows: big enough that a cut connection leaves a real partial file
    for name in (
        "observations",
        "actions",
        "rewards",
        "terminals",
        "timeouts",
        "next_observations",
        "qpos",
    ):
        setattr(a, name, np.concatenate([getattr(a, name)] * reps))
    write_d4rl(tmp_path / "served.hdf5", a)
    return (tmp_path / "served.hdf5").read_bytes(), a


class Progress:
    def __init__(self):
        self.total, self.bytes = None, 0

    def set_total(self, n):
        self.total = n

    def __call__(self, n):
        self.bytes += n


def _rows_match(ds, a):
    assert len(ds) == a.observations.shape[0]
    assert torch.equal(ds[:]["observation"], torch.as_tensor(a.observations))


def test_a_missing_dataset_is_downloaded_where_d4rl_keeps_it(d4rl_server, d4rl_file):
    body, a = d4rl_file
    d4rl_server.serve(PATH, body)
    progress = Progress()
    ds = load_dataset(f"d4rl:{NAME}", download_progress=progress)
    _rows_match(ds, a)
    assert (d4rl_dataset_dir() / FILE).read_bytes() == body
    assert progress.total == len(body) == progress.bytes
    assert [r["range"] for r in d4rl_server.requests] == [None]
    leftovers = {p.name for p in d4rl_dataset_dir().iterdir()} - {FILE, f".{FILE}.lock"}
    assert leftovers == set()  # no partial file, no state file
    load_dataset(f"d4rl:{NAME}")  # local now: no second request
    assert len(d4rl_server.requests) == 1


def test_download_false_forbids_it(d4rl_server, d4rl_file):
    d4rl_server.serve(PATH, d4rl_file[0])
    with pytest.raises(DatasetNotFoundError, match=r"not found in .*Pass download=True"):
        load_dataset(f"d4rl:{NAME}", download=False)
    assert d4rl_server.requests == []


def test_a_cut_connection_is_resumed(d4rl_server, d4rl_file, caplog):
    body, a = d4rl_file
    served = d4rl_server.serve(PATH, body, cut_after=len(body) // 3, cuts=1)
    caplog.set_level(logging.INFO, logger="mixreplay")
    ds = load_dataset(f"d4rl:{NAME}")
    _rows_match(ds, a)
    assert (d4rl_dataset_dir() / FILE).read_bytes() == body
    first, second = d4rl_server.requests
    assert first["range"] is None
    assert second["range"] == f"bytes={len(body) // 3}-" and second["if_range"] == served.etag
    assert f"the connection closed after {len(body) // 3:,} of {len(body):,} bytes" in caplog.text
    assert f"resuming the download of {d4rl_server.base_url}{PATH} at byte" in caplog.text


def test_a_short_download_is_kept_and_resumed_by_the_next_call(d4rl_server, d4rl_file):
    body, a = d4rl_file
    step = len(body) // 5
    d4rl_server.serve(PATH, body, cut_after=step, cuts=3)  # every attempt of one call is cut
    part = d4rl_dataset_dir() / f".{FILE}.part"
    with pytest.raises(
        DatasetError,
        match=rf"download of .*{FILE} failed after 3 attempts \(the connection closed after "
        rf"{3 * step:,} of {len(body):,} bytes\); {3 * step:,} of {len(body):,} bytes are kept in "
        rf".*\.part: run again to resume",
    ):
        load_dataset(f"d4rl:{NAME}")
    assert part.stat().st_size == 3 * step and not (d4rl_dataset_dir() / FILE).exists()
    ds = load_dataset(f"d4rl:{NAME}")  # the server behaves now
    _rows_match(ds, a)
    assert d4rl_server.requests[-1]["range"] == f"bytes={3 * step}-"
    assert (d4rl_dataset_dir() / FILE).read_bytes() == body and not part.exists()


def test_a_file_changed_on_the_server_restarts_from_zero(d4rl_server, d4rl_file, tmp_path):
    body, _ = d4rl_file
    d4rl_server.serve(PATH, body, cut_after=len(body) // 5, cuts=3)
    with pytest.raises(DatasetError, match="run again to resume"):
        load_dataset(f"d4rl:{NAME}")
    b = d4rl_arrays(seed=7)
    write_d4rl(tmp_path / "new.hdf5", b)
    new = (tmp_path / "new.hdf5").read_bytes()
    d4rl_server.serve(PATH, new)  # another ETag: If-Range makes the server send it whole
    ds = load_dataset(f"d4rl:{NAME}")
    assert (d4rl_dataset_dir() / FILE).read_bytes() == new
    assert torch.equal(ds[:]["action"], torch.as_tensor(b.actions))


def test_a_corrupted_download_is_caught_by_the_servers_digest(d4rl_server, d4rl_file):
    body, a = d4rl_file
    served = d4rl_server.serve(PATH, body, corrupt=True, digest=True)
    with pytest.raises(
        DatasetError,
        match=r"the file downloaded from .* is corrupt: its SHA-256 is [0-9a-f]{64}, the "
        rf"server's Repr-Digest header says {hashlib.sha256(body).hexdigest()}; it was deleted",
    ):
        load_dataset(f"d4rl:{NAME}")
    assert list(d4rl_dataset_dir().iterdir()) == [d4rl_dataset_dir() / f".{FILE}.lock"]
    served.corrupt = False
    _rows_match(load_dataset(f"d4rl:{NAME}"), a)


def test_the_sha256_option(d4rl_server, d4rl_file):
    body, a = d4rl_file
    d4rl_server.serve(PATH, body)
    with pytest.raises(
        DatasetError, match=r"is corrupt: its SHA-256 is .*, the sha256 given says 0+1"
    ):
        load_dataset(f"d4rl:{NAME}", sha256="0" * 63 + "1")
    _rows_match(load_dataset(f"d4rl:{NAME}", sha256=hashlib.sha256(body).hexdigest()), a)


def test_a_file_that_is_not_d4rl_is_rejected_and_deleted(d4rl_server):
    d4rl_server.serve(PATH, b"<html>maintenance</html>" * 100)
    with pytest.raises(
        DatasetError,
        match=r"the file downloaded from .* was rejected \(not a readable HDF5 file: .*\); it "
        r"was deleted",
    ):
        load_dataset(f"d4rl:{NAME}")
    assert not (d4rl_dataset_dir() / FILE).exists()
    assert not (d4rl_dataset_dir() / f".{FILE}.part").exists()


def test_http_errors_and_no_server(d4rl_server, monkeypatch):
    with pytest.raises(DatasetError, match=r"cannot download .*hopper_medium-v2.hdf5: HTTP 404"):
        load_dataset(f"d4rl:{NAME}")
    monkeypatch.setattr(download_module, "RETRY_DELAY_S", 0.0)
    d4rl_server.close()
    with pytest.raises(
        DatasetError, match=r"download of .* failed after 3 attempts \(URLError: .*refused"
    ):
        load_dataset(f"d4rl:{NAME}")


def test_force_downloads_again(d4rl_server, d4rl_file):
    body, a = d4rl_file
    (d4rl_dataset_dir()).mkdir(parents=True, exist_ok=True)
    write_d4rl(d4rl_dataset_dir() / FILE, d4rl_arrays(seed=3))  # an old local copy
    d4rl_server.serve(PATH, body)
    assert len(load_dataset(f"d4rl:{NAME}")) == 20 and d4rl_server.requests == []
    _rows_match(load_dataset(f"d4rl:{NAME}", download="force"), a)
    assert len(d4rl_server.requests) == 1


def test_the_command_line_downloads_with_a_progress_bar(d4rl_server, d4rl_file, capsys):
    body, _ = d4rl_file
    d4rl_server.serve(PATH, body)
    assert dataset_cli(["inspect", f"d4rl:{NAME}"]) == 0
    captured = capsys.readouterr()
    assert f"rows          {d4rl_file[1].observations.shape[0]:,}" in captured.out
    assert f"downloading d4rl:{NAME}" in captured.err  # tqdm's bar, on stderr


def test_a_path_is_never_downloaded(d4rl_server, d4rl_file, tmp_path):
    d4rl_server.serve(PATH, d4rl_file[0])
    with pytest.raises(DatasetNotFoundError, match=r"no D4RL file at .*hopper-medium-v2.hdf5"):
        load_dataset(f"d4rl:{tmp_path / 'hopper-medium-v2.hdf5'}")
    assert d4rl_server.requests == []
