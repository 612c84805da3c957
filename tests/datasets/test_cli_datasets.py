"""``mixreplay inspect``, ``convert`` and ``cache``: output, and the errors a user's mistake raises.

The commands run as ``mixreplay`` runs them (:func:`dataset_cli`: their parsers, then
``args.func``); they raise mixreplay's errors with one-line messages, which the
``mixreplay`` command prints.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from mixreplay import DatasetError, DatasetNotFoundError, load_dataset
from tests.datasets.conftest import MOUNTAINCAR, PENDULUM, d4rl_arrays, dataset_cli, write_d4rl

main = dataset_cli


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
    with pytest.raises(
        FileExistsError,
        match=r"out exists \(an empty directory\); pass --overwrite to write into it$",
    ):
        main(["convert", f"minari:{PENDULUM}", str(tmp_path / "out")])
    assert main(["convert", f"minari:{PENDULUM}", str(tmp_path / "out"), "--overwrite"]) == 0
    with pytest.raises(
        FileExistsError, match=r"out holds a mixreplay dataset; pass --overwrite to replace it$"
    ):
        main(["convert", f"minari:{PENDULUM}", str(tmp_path / "out")])
    assert main(["convert", f"minari:{PENDULUM}", str(tmp_path / "out"), "--overwrite"]) == 0


@pytest.mark.parametrize("kind", ["dir", "file"])
@pytest.mark.parametrize("overwrite", [[], ["--overwrite"]])
def test_convert_advises_overwrite_only_where_it_would_work(minari_root, tmp_path, kind, overwrite):
    """Without --overwrite, a DEST that --overwrite would refuse gets the refusal's advice at
    once, not "pass --overwrite" followed by "--overwrite replaces only a dataset"."""
    dest = tmp_path / "precious"
    if kind == "dir":
        dest.mkdir()
        (dest / "notes.txt").write_text("mine")
    else:
        dest.write_text("mine")
    with pytest.raises(
        DatasetError, match=r"precious exists and is not a mixreplay dataset: --overwrite replaces"
    ):
        main(["convert", f"minari:{PENDULUM}", str(dest), *overwrite])


@pytest.mark.parametrize("kind", ["dir", "file"])
def test_overwrite_never_replaces_what_is_not_a_dataset(minari_root, tmp_path, kind):
    dest = tmp_path / "precious"
    if kind == "dir":
        dest.mkdir()
        (dest / "thesis.tex").write_text("years of work")
    else:
        dest.write_text("years of work")
    with pytest.raises(
        DatasetError,
        match=r"precious exists and is not a mixreplay dataset: --overwrite replaces only a "
        r"dataset that mixreplay wrote, never other files; choose another DEST or remove it first",
    ):
        main(["convert", f"minari:{PENDULUM}", str(dest), "--overwrite"])
    text = (dest / "thesis.tex" if kind == "dir" else dest).read_text()
    assert text == "years of work"


@pytest.mark.parametrize(
    "argv, error, match",
    [
        (
            ["inspect", "minari:test/absent-v0"],
            DatasetNotFoundError,
            r"^Minari dataset 'test/absent-v0' not found",
        ),
        (
            ["inspect", "d4rl:nope-v2"],
            DatasetNotFoundError,
            r"^D4RL dataset 'nope-v2' not found",
        ),
        (
            ["inspect", "d4rl:hopper-medium-v2", "--no-download"],
            DatasetNotFoundError,
            # the command line's flag, not the loader's keyword download=True
            r"^D4RL dataset 'hopper-medium-v2' not found .*Pass --download \(the default\) to",
        ),
        (
            ["convert", "minari:test/absent-v0", "out"],
            DatasetNotFoundError,
            r"^Minari dataset 'test/absent-v0' not found.* or pass --download to fetch it with "
            r"Minari$",
        ),
        (
            ["inspect", "minari:test/absent-v0"],
            DatasetNotFoundError,
            r"^Minari dataset 'test/absent-v0' not found.* or pass --download to fetch it with "
            r"Minari$",
        ),
        (
            ["inspect", "memmap:/nonexistent/dir"],
            DatasetNotFoundError,
            r"^no dataset directory at /nonexistent/dir$",
        ),
        (
            ["inspect", f"minari:{PENDULUM}", "--keys", "obs"],
            DatasetError,
            r"^key 'obs' not found",
        ),
        (
            ["inspect", "memmap:somewhere", "--dtype", "keep"],
            DatasetError,
            r"^--dtype does not apply to memmap: IDs \(their loader, "
            r"mixreplay.datasets.memmap:load_memmap, takes no 'dtype' option\)$",
        ),
        (
            ["inspect", "memmap:somewhere", "--no-download"],
            DatasetError,
            r"^--no-download does not apply to memmap: IDs",
        ),
        (
            ["inspect", "minar:test/pendulum-v0"],
            DatasetError,
            r"^Unknown dataset source 'minar' \(did you mean 'minari:'\?\)",
        ),
        (
            ["inspect", "test/pendulum-v0"],
            DatasetError,
            r"must be prefixed .*\(did you mean 'minari:test/pendulum-v0'\?\)",
        ),
    ],
)
def test_user_errors_are_raised_as_one_line(minari_root, argv, error, match):
    with pytest.raises(error, match=match) as info:
        main(argv)
    assert "\n" not in str(info.value)


def test_missing_extra_is_a_missing_dependency_error(monkeypatch, tmp_path):
    import sys

    from mixreplay import MissingDependencyError

    write_d4rl(tmp_path / "x.hdf5", d4rl_arrays())
    monkeypatch.setitem(sys.modules, "h5py", None)
    with pytest.raises(MissingDependencyError, match=r'pip install "mixreplay\[d4rl\]"$'):
        main(["inspect", f"d4rl:{tmp_path / 'x.hdf5'}"])


def test_bad_rename_syntax(capsys):
    with pytest.raises(SystemExit):
        main(["inspect", "minari:x-v0", "--rename", "nonsense"])
    assert "--rename takes OLD=NEW" in capsys.readouterr().err


# -- a prefix of one's own is inspected and converted like a built-in ------------------------------


def test_a_registered_source_is_inspected_and_converted(registry, tmp_path, capsys):
    from tests.datasets.conftest import Ramp

    registry.register_dataset("ramp", Ramp)
    assert main(["inspect", "ramp:12", "--dtype", "float64"]) == 0
    out = capsys.readouterr().out
    assert "rows          12" in out and "episodes      3" in out
    assert re.search(r"'observation'\s+\[1\]\s+float64", out)
    assert "per episode over 3 episodes: mean 22  std 16  min 6  max 38" in out
    assert main(["convert", "ramp:12", str(tmp_path / "out"), "--keys", "observation", "next"]) == 0
    ds = load_dataset(f"memmap:{tmp_path / 'out'}")
    assert set(ds.schema.keys()) == {
        ("observation",),
        ("next", "observation"),
        ("next", "reward"),
        ("next", "done"),
    }
    assert ds.episode_starts.tolist() == [0, 4, 8]


def test_a_registered_factory_is_inspected_and_converted(registry, tmp_path, capsys):
    import torch
    from tensordict import TensorDict

    from mixreplay import LazyTensorStorage, ReplayBuffer

    def rollouts(rest, batch_size=None):
        n = int(rest)
        rb = ReplayBuffer(storage=LazyTensorStorage(n), batch_size=batch_size)
        done = (torch.arange(n) % 5 == 4).unsqueeze(-1)
        rb.extend(
            TensorDict(
                {"obs": torch.zeros(n, 2), "next": {"reward": torch.ones(n, 1), "done": done}}, [n]
            )
        )
        return rb

    registry.register_dataset("rollouts", rollouts)
    assert main(["inspect", "rollouts:10"]) == 0
    out = capsys.readouterr().out
    assert "rows          10" in out and "episodes      2" in out
    assert "per episode over 2 episodes: mean 5  std 0  min 5  max 5" in out
    assert main(["convert", "rollouts:10", str(tmp_path / "out")]) == 0
    ds = load_dataset(f"memmap:{tmp_path / 'out'}")
    assert len(ds) == 10 and ds.episode_starts.tolist() == [0, 5]
    with pytest.raises(DatasetError, match=r"^--keys does not apply to rollouts: IDs"):
        main(["inspect", "rollouts:10", "--keys", "obs"])
