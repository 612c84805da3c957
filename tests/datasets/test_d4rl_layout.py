"""HDF5 files that are not in D4RL's layout: one ``DatasetError`` naming the file and what is wrong.

Local files, downloaded files (deleted, so that a retry downloads again) and the command
line (one line on stderr, exit status 2, no traceback) are all covered by real h5py files.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest

from mixreplay import DatasetError, load_dataset
from mixreplay.datasets.d4rl import d4rl_dataset_dir
from mixreplay.datasets.d4rl_urls import D4RL_PATHS
from tests.datasets.conftest import d4rl_arrays, write_d4rl


def _replace(key: str, make):
    """Rewrite ``key`` of a sound D4RL file with what ``make(f, n)`` builds (n = 20 rows)."""

    def edit(f: h5py.File) -> None:
        del f[key]
        make(f, 20)

    return edit


# what is wrong -> (how to break a sound file, the message naming the key and the problem)
BAD = {
    "observations a group": (
        _replace("observations", lambda f, n: f.create_group("observations")),
        r"'observations' is an HDF5 group, not an array",
    ),
    "observations a scalar": (
        _replace("observations", lambda f, n: f.create_dataset("observations", data=3.0)),
        r"'observations' is a scalar, not an array with one entry per row",
    ),
    "actions a scalar": (
        _replace("actions", lambda f, n: f.create_dataset("actions", data=1)),
        r"'actions' is a scalar, not an array with one entry per row",
    ),
    "terminals a group": (
        _replace("terminals", lambda f, n: f.create_group("terminals/x")),
        r"'terminals' is an HDF5 group, not an array",
    ),
    "terminals two columns": (
        _replace("terminals", lambda f, n: f.create_dataset("terminals", data=np.zeros((n, 2)))),
        r"'terminals' has shape \[20, 2\]; expected \[20\] or \[20, 1\]",
    ),
    "rewards per row a matrix": (
        _replace("rewards", lambda f, n: f.create_dataset("rewards", data=np.zeros((n, 2, 2)))),
        r"'rewards' has shape \[20, 2, 2\]; expected \[20\] or \[20, 1\]",
    ),
    "observations of strings": (
        _replace(
            "observations",
            lambda f, n: f.create_dataset("observations", data=np.array([b"obs"] * n)),
        ),
        r"'observations' holds \|S3 values, not numbers or booleans",
    ),
    "actions of a compound type": (
        _replace(
            "actions",
            lambda f, n: f.create_dataset(
                "actions", data=np.zeros(n, dtype=[("a", "f4"), ("b", "i4")])
            ),
        ),
        r"'actions' holds .* values, not numbers or booleans",
    ),
    "next_observations of another shape": (
        _replace(
            "next_observations",
            lambda f, n: f.create_dataset("next_observations", data=np.zeros((n, 4))),
        ),
        r"'next_observations' has shape \[20, 4\]; expected that of observations, \[20, 3\]",
    ),
    "a named datatype": (
        _replace("actions", lambda f, n: f.__setitem__("actions", np.dtype("f4"))),
        r"'actions' is a Datatype, not an array",
    ),
    "a dangling soft link": (
        _replace("actions", lambda f, n: f.__setitem__("actions", h5py.SoftLink("/nowhere"))),
        r"'actions' is a link to nothing",
    ),
    "an external link to a missing file": (
        _replace(
            "rewards",
            lambda f, n: f.__setitem__("rewards", h5py.ExternalLink("gone.h5", "/rewards")),
        ),
        r"'rewards' cannot be read \(",
    ),
    "zero rows": (
        lambda f: (
            [
                f.__delitem__(k) or f.create_dataset(k, data=np.zeros((0, 3)))
                for k in ("observations", "actions", "next_observations")
            ]
            + [
                f.__delitem__(k) or f.create_dataset(k, data=np.zeros(0))
                for k in ("rewards", "terminals", "timeouts")
            ]
            + [f.__delitem__("infos")]
        ),
        r"holds no rows",
    ),
}


def _bad_file(path: Path, damage: str) -> Path:
    write_d4rl(path, d4rl_arrays())
    with h5py.File(path, "a") as f:
        BAD[damage][0](f)
    return path


@pytest.mark.parametrize("damage", sorted(BAD))
def test_a_local_file_not_in_the_d4rl_layout(tmp_path, damage):
    path = _bad_file(tmp_path / "bad.hdf5", damage)
    with pytest.raises(DatasetError, match=BAD[damage][1]) as info:
        load_dataset(f"d4rl:{path}")
    assert str(path) in str(info.value)
    assert not list(Path(os.environ["MIXREPLAY_DATA_DIR"]).rglob("*.bin"))  # nothing half-written


def test_infos_that_are_not_a_group_are_refused_only_when_kept(tmp_path):
    write_d4rl(tmp_path / "x.hdf5", d4rl_arrays())
    with h5py.File(tmp_path / "x.hdf5", "a") as f:
        del f["infos"]
        f["infos"] = np.zeros(20)
    assert len(load_dataset(f"d4rl:{tmp_path / 'x.hdf5'}")) == 20
    with pytest.raises(DatasetError, match=r"x.hdf5 is not in the D4RL layout: 'infos' is an"):
        load_dataset(f"d4rl:{tmp_path / 'x.hdf5'}", keep_infos=True)


NAME = "hopper-medium-v2"
PATH = D4RL_PATHS[NAME]
FILE = "hopper_medium-v2.hdf5"


@pytest.mark.parametrize("damage", ["observations a group", "observations a scalar"])
def test_a_downloaded_file_not_in_the_d4rl_layout_is_deleted(d4rl_server, tmp_path, damage):
    body = _bad_file(tmp_path / "served.hdf5", damage).read_bytes()
    d4rl_server.serve(PATH, body)
    with pytest.raises(
        DatasetError,
        match=r"the file downloaded from .*hopper_medium-v2.hdf5 was rejected \(the file is not "
        rf"in the D4RL layout: {BAD[damage][1]}.*\); it was deleted",
    ):
        load_dataset(f"d4rl:{NAME}")
    left = sorted(p.name for p in d4rl_dataset_dir().iterdir())
    assert left == [f".{FILE}.lock"]  # no .part to fail the same way on every retry
    write_d4rl(tmp_path / "good.hdf5", d4rl_arrays())
    d4rl_server.serve(PATH, (tmp_path / "good.hdf5").read_bytes())
    assert len(load_dataset(f"d4rl:{NAME}")) == 20
    assert d4rl_server.requests[-1]["range"] is None  # downloaded anew, not resumed


def test_the_command_line_prints_one_line(tmp_path):
    path = _bad_file(tmp_path / "bad.hdf5", "observations a group")
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run(
        [sys.executable, "-m", "mixreplay", "inspect", f"d4rl:{path}"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(root)},
        timeout=300,
        check=False,
    )
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr
    assert out.stderr.startswith(f"mixreplay: error: {path} is not in the D4RL layout: ")
    assert "'observations' is an HDF5 group, not an array" in out.stderr


def test_a_file_whose_data_is_damaged_names_the_file(tmp_path):
    """The header reads; the bytes of an array do not (a disk error, a bad copy)."""
    path = tmp_path / "x.hdf5"
    write_d4rl(path, d4rl_arrays())
    with h5py.File(path, "a") as f:  # chunked + compressed copy of actions: its bytes decode
        data = f["actions"][:]
        del f["actions"]
        f.create_dataset("actions", data=data, chunks=(5, 2), compression="gzip")
        ds = f["actions"]
        offset, nbytes = ds.id.get_chunk_info(1).byte_offset, ds.id.get_chunk_info(1).size
    with open(path, "r+b") as fh:
        fh.seek(offset)
        fh.write(b"\xff" * nbytes)
    with pytest.raises(DatasetError, match=rf"{path} cannot be read \(.*'actions'"):
        load_dataset(f"d4rl:{path}")
