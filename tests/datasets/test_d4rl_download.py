"""``d4rl:<name>`` downloads a missing file from D4RL's URL: a real HTTP server on 127.0.0.1.

The server (``d4rl_server`` in conftest) stands in for D4RL's: ``MIXREPLAY_D4RL_BASE_URL``
points at it and it serves an h5py-written D4RL file at the path D4RL publishes
``hopper-medium-v2`` under. It honours ``Range``/``If-Range`` and can cut connections,
corrupt bytes or announce a digest.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re

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


# -- a resume must continue the same file ------------------------------------------------------------


def _interrupted(d4rl_server, body, **how):
    """A first load that fails with part of ``body`` kept (every attempt is cut)."""
    step = len(body) // 5
    d4rl_server.serve(PATH, body, cut_after=step, cuts=3, **how)
    with pytest.raises(DatasetError, match="run again to resume"):
        load_dataset(f"d4rl:{NAME}")
    assert (d4rl_dataset_dir() / f".{FILE}.part").stat().st_size == 3 * step


def _other_file(tmp_path, *, rows_scale: int) -> tuple[bytes, np.ndarray]:
    a = d4rl_arrays(seed=11)
    for name in ("observations", "actions", "rewards", "terminals", "timeouts"):
        setattr(a, name, np.concatenate([getattr(a, name)] * rows_scale))
    a.next_observations = np.concatenate([a.next_observations] * rows_scale)
    a.qpos = np.concatenate([a.qpos] * rows_scale)
    write_d4rl(tmp_path / "other.hdf5", a)
    return (tmp_path / "other.hdf5").read_bytes(), a.actions


def test_a_resume_against_a_file_of_another_size_starts_over(
    d4rl_server, d4rl_file, tmp_path, caplog
):
    """No ETag, no Last-Modified: the total size of Content-Range tells the versions apart."""
    body, _ = d4rl_file
    _interrupted(d4rl_server, body, validators="none")
    new, actions = _other_file(tmp_path, rows_scale=600)
    assert len(new) != len(body)
    d4rl_server.serve(PATH, new, validators="none")
    caplog.set_level(logging.INFO, logger="mixreplay")
    ds = load_dataset(f"d4rl:{NAME}")
    assert (d4rl_dataset_dir() / FILE).read_bytes() == new  # never half of each
    assert torch.equal(ds[:]["action"], torch.as_tensor(actions))
    resumed, whole = d4rl_server.requests[-2:]
    assert resumed["range"] is not None and resumed["if_range"] is None
    assert whole["range"] is None
    assert (
        f"changed on the server since the partial download: it was {len(body):,} bytes, it is "
        f"{len(new):,} bytes now: starting over from byte 0" in caplog.text
    )


def test_a_file_that_changes_size_between_a_cut_and_the_resume_in_one_call_is_not_spliced(
    d4rl_server, tmp_path, caplog
):
    """No ETag, no Last-Modified, and the retry within the same download() call: the total
    size of the first answer tells the versions apart (it was saved to disk for the next call,
    but the resume within the call compared against a state that never held it)."""
    old, new = bytes(range(256)) * 40, b"N" * 6000
    d4rl_server.serve("f.bin", old, cut_after=1024, cuts=1, validators="none", then=new)
    dest = tmp_path / "f.bin"
    caplog.set_level(logging.INFO, logger="mixreplay")
    download_module.download(d4rl_server.base_url + "f.bin", dest)
    assert dest.read_bytes() == new  # never old[:1024] + new[1024:]
    first, resumed, whole = d4rl_server.requests[-3:]
    assert first["range"] is None and resumed["range"] == "bytes=1024-"
    assert whole["range"] is None
    assert f"it was {len(old):,} bytes, it is {len(new):,} bytes now" in caplog.text


@pytest.mark.parametrize("validators", ["etag", "last-modified"])
def test_a_server_that_ignores_if_range_cannot_splice(
    d4rl_server, d4rl_file, tmp_path, caplog, validators
):
    """Same size, another validator, and a server that serves the range anyway."""
    body, _ = d4rl_file
    _interrupted(d4rl_server, body, validators=validators, honour_if_range=False)
    new, actions = _other_file(tmp_path, rows_scale=400)
    assert len(new) == len(body) and new != body
    d4rl_server.serve(
        PATH, new, validators=validators, honour_if_range=False, mtime=1.8e9, etag='"v2"'
    )
    caplog.set_level(logging.INFO, logger="mixreplay")
    ds = load_dataset(f"d4rl:{NAME}")
    assert (d4rl_dataset_dir() / FILE).read_bytes() == new
    assert torch.equal(ds[:]["action"], torch.as_tensor(actions))
    assert d4rl_server.requests[-2]["if_range"] is not None  # it was asked, and ignored it
    assert "its validator was" in caplog.text and "starting over from byte 0" in caplog.text


def test_a_last_modified_validator_is_sent_as_if_range(d4rl_server, d4rl_file, tmp_path):
    body, _ = d4rl_file
    _interrupted(d4rl_server, body, validators="last-modified")
    assert d4rl_server.requests[-1]["if_range"].endswith(" GMT")  # the Last-Modified date
    new, _ = _other_file(tmp_path, rows_scale=400)
    d4rl_server.serve(PATH, new, validators="last-modified", mtime=1.8e9)
    load_dataset(f"d4rl:{NAME}")
    assert (d4rl_dataset_dir() / FILE).read_bytes() == new
    assert d4rl_server.requests[-1]["range"] is not None  # one request: If-Range did it


def test_a_partial_file_as_long_as_a_new_shorter_file_is_not_taken_for_it(d4rl_server, tmp_path):
    """The new file is exactly as long as what was kept: the server answers 416."""
    old, new = bytes(range(256)) * 40, b"N" * 3000
    d4rl_server.serve("f.bin", old, cut_after=1000, cuts=3, validators="none")
    dest = tmp_path / "f.bin"
    url = d4rl_server.base_url + "f.bin"
    with pytest.raises(DatasetError, match="run again to resume"):
        download_module.download(url, dest)
    assert (tmp_path / ".f.bin.part").stat().st_size == 3000
    d4rl_server.serve("f.bin", new, validators="none")
    download_module.download(url, dest)
    assert dest.read_bytes() == new


# -- slow, stalled, huge and hostile downloads ------------------------------------------------------


def _url(server, path="f.bin"):
    return server.base_url + path


def test_a_connection_that_drips_a_byte_at_a_time_is_a_stall(d4rl_server, tmp_path):
    """Each byte arrives well within the socket timeout; the attempt still fails, and says why."""
    body = bytes(range(256)) * 4
    d4rl_server.serve("f.bin", body, drip=0.01)
    with pytest.raises(
        DatasetError,
        match=r"failed after 1 attempts \(stalled: \d+ bytes in the last [\d.]+ s, fewer than "
        r"1,024 per 0.3 s \(timeout=0.3\)\); \d+ of 1,024 bytes are kept in .*\.f\.bin\.part",
    ):
        download_module.download(_url(d4rl_server), tmp_path / "f.bin", timeout=0.3, retries=1)
    assert not (tmp_path / "f.bin").exists()
    d4rl_server.serve("f.bin", body)
    download_module.download(_url(d4rl_server), tmp_path / "f.bin", timeout=0.3, retries=1)
    assert (tmp_path / "f.bin").read_bytes() == body  # the next call resumed the dripped bytes
    assert d4rl_server.requests[-1]["range"] not in (None, "bytes=0-")


def test_a_server_that_sends_nothing_times_out_with_a_clear_error(d4rl_server, tmp_path):
    d4rl_server.serve("f.bin", b"x" * 100, drip=60.0)  # headers, then silence
    with pytest.raises(
        DatasetError, match=r"failed after 1 attempts \(no data for 0.2 s \(timeout\)\); 0 of 100"
    ):
        download_module.download(_url(d4rl_server), tmp_path / "f.bin", timeout=0.2, retries=1)


def test_a_large_download_is_streamed_not_held_in_memory(d4rl_server, tmp_path):
    import tracemalloc

    body = np.random.default_rng(0).integers(0, 256, 48 << 20, dtype=np.uint8).tobytes()
    d4rl_server.serve("big.bin", body)
    tracemalloc.start()
    try:
        download_module.download(
            _url(d4rl_server, "big.bin"),
            tmp_path / "big.bin",
            sha256=hashlib.sha256(body).hexdigest(),
        )
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert (tmp_path / "big.bin").stat().st_size == len(body)
    assert peak < 8 << 20, f"peak {peak:,} bytes of Python memory for a {len(body):,}-byte file"


def test_a_file_larger_than_the_free_space_is_refused_before_it_is_written(d4rl_server, tmp_path):
    d4rl_server.serve("f.bin", b"x" * 100, announce=10**18)
    with pytest.raises(
        DatasetError,
        match=r"cannot download .*f.bin: it needs 1,000,000,000,000,000,000 more bytes and "
        r".* has [\d,]+ free; free some space",
    ):
        download_module.download(_url(d4rl_server), tmp_path / "f.bin")
    assert not (tmp_path / ".f.bin.part").exists() or (tmp_path / ".f.bin.part").stat().st_size == 0


_FULL_DISK = """
import sys
from mixreplay.datasets.download import download
try:
    download(sys.argv[1], sys.argv[2] + "/f.bin")
except Exception as err:
    print(f"{type(err).__name__}: {err}")
"""


@pytest.mark.heavy  # a subprocess in a private mount namespace (a small tmpfs)
def test_a_full_disk_fails_at_once_and_keeps_what_was_written(d4rl_server, tmp_path):
    import os
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    if shutil.which("unshare") is None:
        pytest.skip("needs unshare(1) for a private small tmpfs")
    d4rl_server.serve("f.bin", b"y" * (3 << 20), length=False)  # no size to check beforehand
    disk = tmp_path / "small"
    disk.mkdir()
    script = f'mount -t tmpfs -o size=1m tmpfs "{disk}" && exec "$@"'
    cmd = ["unshare", "-m"] if os.geteuid() == 0 else ["unshare", "-rm"]
    cmd += [
        "sh",
        "-c",
        script,
        "sh",
        sys.executable,
        "-c",
        _FULL_DISK,
        _url(d4rl_server),
        str(disk),
    ]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120, check=False)
    if out.returncode and "mount" in out.stderr:
        pytest.skip(f"cannot mount a private tmpfs here: {out.stderr.strip()}")
    assert out.returncode == 0, out.stderr
    assert re.fullmatch(
        r"DatasetError: cannot download .*f.bin: writing .*\.f\.bin\.part failed \(No space left "
        r"on device\); [\d,]+ bytes are kept there: free space .* and run again to resume\n",
        out.stdout,
    ), out.stdout
    assert len(d4rl_server.requests) == 1  # not retried: a full disk stays full


def test_a_partial_file_that_is_a_link_is_never_written_through(d4rl_server, tmp_path):
    body = bytes(range(256)) * 10
    d4rl_server.serve("f.bin", body)
    mine = tmp_path / "mine.txt"
    mine.write_bytes(b"my notes")
    (tmp_path / ".f.bin.part").symlink_to(mine)
    url = _url(d4rl_server)
    (tmp_path / ".f.bin.part.json").write_text(json.dumps({"url": url, "size": len(body)}))
    download_module.download(url, tmp_path / "f.bin")
    assert (tmp_path / "f.bin").read_bytes() == body and mine.read_bytes() == b"my notes"


def test_a_directory_at_the_destination_is_a_clear_error(d4rl_server, tmp_path):
    d4rl_server.serve("f.bin", b"z" * 100)
    (tmp_path / "f.bin").mkdir()
    with pytest.raises(
        DatasetError, match=r"cannot move the file downloaded from .* to .*f.bin: Is a directory"
    ):
        download_module.download(_url(d4rl_server), tmp_path / "f.bin")
    assert (tmp_path / ".f.bin.part").read_bytes() == b"z" * 100


def test_a_check_that_raises_anything_rejects_and_deletes_the_file(d4rl_server, tmp_path):
    d4rl_server.serve("f.bin", b"z" * 100)

    def check(path):
        raise KeyError("observations")

    with pytest.raises(
        DatasetError, match=r"was rejected \(KeyError: 'observations'\); it was deleted"
    ):
        download_module.download(_url(d4rl_server), tmp_path / "f.bin", check=check)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".f.bin.lock"]


def test_a_close_delimited_body_cut_short_is_caught_by_the_content_check(d4rl_server, d4rl_file):
    """Without Content-Length a cut looks like the end; the D4RL check rejects the stub."""
    body, a = d4rl_file
    d4rl_server.serve(PATH, body, length=False, cut_after=len(body) // 2, cuts=1)
    with pytest.raises(DatasetError, match=r"was rejected \(not a readable HDF5 file"):
        load_dataset(f"d4rl:{NAME}")
    _rows_match(load_dataset(f"d4rl:{NAME}"), a)


def test_a_weak_etag_is_compared_but_never_sent_as_if_range(d4rl_server, d4rl_file, tmp_path):
    body, a = d4rl_file
    _interrupted(d4rl_server, body, etag='W/"weak-1"')
    assert d4rl_server.requests[-1]["if_range"] is None  # RFC 9110: strong validators only
    new, actions = _other_file(tmp_path, rows_scale=400)
    d4rl_server.serve(PATH, new, etag='W/"weak-2"')
    ds = load_dataset(f"d4rl:{NAME}")
    assert (d4rl_dataset_dir() / FILE).read_bytes() == new
    assert torch.equal(ds[:]["action"], torch.as_tensor(actions))


def test_a_download_lock_that_is_a_link_is_refused(d4rl_server, tmp_path):
    d4rl_server.serve("f.bin", b"z" * 100)
    (tmp_path / ".f.bin.lock").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(
        DatasetError, match=r"cannot take the download lock .*it is a symbolic link"
    ):
        download_module.download(_url(d4rl_server), tmp_path / "f.bin")
    assert not (tmp_path / "elsewhere").exists()
