"""``mixreplay inspect`` and ``mixreplay convert``, through ``mixreplay.cli.main``."""

from __future__ import annotations

import re

import numpy as np
import pytest

pytest.importorskip("gymnasium")
pytest.importorskip("minari")
pytest.importorskip("h5py")

from mixreplay import load_dataset
from mixreplay.cli import main
from tests.datasets.conftest import MOUNTAINCAR, PENDULUM, d4rl_arrays, write_d4rl


def test_inspect_minari(minari_root, capsys):
    assert main(["inspect", f"minari:{MOUNTAINCAR}"]) == 0
    out = capsys.readouterr().out
    eps = minari_root[MOUNTAINCAR].episodes
    rows = sum(len(ep.rewards) for ep in eps)
    assert f"rows          {rows:,}" in out and "episodes      3" in out
    assert re.search(r"size on disk  [\d.]+ KB \([\d,]+ bytes; 32 bytes per row\)", out)
    assert re.search(r"'observation'\s+\[2\]\s+float32", out)
    assert re.search(r"\('next', 'terminated'\)\s+\[1\]\s+bool", out)
    returns = np.array([np.float32(ep.rewards).astype(np.float64).sum() for ep in eps])
    expected = f"mean {returns.mean():.4g}  std {returns.std(ddof=1):.4g}  min {returns.min():.4g}  max {returns.max():.4g}"
    assert f"per episode over 3 episodes: {expected}" in out
    assert "episode ends  2 terminated, 1 truncated" in out


def test_inspect_with_options(minari_root, capsys):
    assert (
        main(
            [
                "inspect",
                f"minari:{PENDULUM}",
                "--dtype",
                "keep",
                "--keys",
                "observation",
                "next.reward",
                "--rename",
                "next.reward=reward",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert re.search(r"'reward'\s+\[1\]\s+float64", out)
    assert "returns       n/a (no ('next', 'reward') key)" in out


def test_inspect_memmap_and_d4rl(tmp_path, capsys):
    write_d4rl(tmp_path / "x.hdf5", d4rl_arrays(with_next=False))
    assert main(["inspect", f"d4rl:{tmp_path / 'x.hdf5'}", "--keep-infos"]) == 0
    out = capsys.readouterr().out
    assert "rows          17" in out and "('info', 'qpos')" in out


def test_convert_then_open_as_memmap(minari_root, tmp_path, capsys):
    dest = tmp_path / "pendulum"
    assert main(["convert", f"minari:{PENDULUM}", str(dest)]) == 0
    assert f"wrote 36 rows in 3 episodes to {dest}" in capsys.readouterr().out
    ds = load_dataset(f"memmap:{dest}")
    cached = load_dataset(f"minari:{PENDULUM}")
    assert (
        ds.schema == cached.schema and ds.episode_starts.tolist() == cached.episode_starts.tolist()
    )
    assert (ds[:] == cached[:]).all()
    # any ID converts, memmap: included
    assert main(["convert", f"memmap:{dest}", str(tmp_path / "copy")]) == 0
    copy = load_dataset(f"memmap:{tmp_path / 'copy'}")
    assert (copy[:] == ds[:]).all() and copy.episode_starts.tolist() == ds.episode_starts.tolist()


def test_convert_d4rl_with_options(tmp_path, capsys):
    write_d4rl(tmp_path / "x.hdf5", d4rl_arrays())
    assert (
        main(
            ["convert", f"d4rl:{tmp_path / 'x.hdf5'}", str(tmp_path / "out"), "--dtype", "float64"]
        )
        == 0
    )
    ds = load_dataset(f"memmap:{tmp_path / 'out'}")
    assert str(ds.schema["observation"].dtype) == "torch.float64"


def test_convert_refuses_to_overwrite(minari_root, tmp_path, capsys):
    (tmp_path / "out").mkdir()
    assert main(["convert", f"minari:{PENDULUM}", str(tmp_path / "out")]) == 1
    assert "out exists; pass --overwrite to replace it" in capsys.readouterr().err
    assert main(["convert", f"minari:{PENDULUM}", str(tmp_path / "out"), "--overwrite"]) == 0


@pytest.mark.parametrize(
    "argv, match",
    [
        (
            ["inspect", "minari:test/absent-v0"],
            r"mixreplay: error: Minari dataset 'test/absent-v0' not found",
        ),
        (["inspect", "d4rl:nope-v2"], r"mixreplay: error: D4RL dataset 'nope-v2' not found"),
        (
            ["convert", "minari:test/absent-v0", "out"],
            r"mixreplay: error: Minari dataset 'test/absent-v0' not found",
        ),
        (
            ["inspect", "memmap:/nonexistent/dir"],
            r"mixreplay: error: no dataset directory at /nonexistent/dir",
        ),
        (
            ["inspect", f"minari:{PENDULUM}", "--keys", "obs"],
            r"mixreplay: error: key 'obs' not found",
        ),
        (
            ["inspect", "memmap:somewhere", "--dtype", "keep"],
            r"error: --dtype apply to minari: and d4rl: IDs only, not to memmap: IDs",
        ),
        (
            ["convert", "d4rl:x-v2", "out", "--download"],
            r"error: --download applies to minari: IDs only",
        ),
    ],
)
def test_errors_are_reported_not_raised(minari_root, argv, match, capsys):
    assert main(argv) == 1
    assert re.search(match, capsys.readouterr().err)


def test_bad_rename_syntax(capsys):
    with pytest.raises(SystemExit):
        main(["inspect", "minari:x-v0", "--rename", "nonsense"])
    assert "--rename takes OLD=NEW" in capsys.readouterr().err
