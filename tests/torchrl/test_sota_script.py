"""TorchRL's own offline-to-online training script, run on mixreplay with three imports changed.

The torchrl wheel installs ``sota-implementations/offline_to_online/train.py`` beside
the package. Each test copies it, swaps exactly its three import lines for mixreplay's,
and runs it in a subprocess for 2,000 frames of Pendulum-v1 against a local dataset
(random-policy rollouts of TorchRL's ``GymEnv("Pendulum-v1")``, saved with
``td.memmap(dir)`` and registered as ``"local"``), on float32 data and on float64 data
(which the script's own ``offline.append_transform(DoubleToFloat())`` casts).

One thing besides the imports, exactly as the script is run on TorchRL itself: the
trainer is built with ``enable_logging=False``. With logging on, the script stops on
TorchRL too: TorchRL's reward logger reads ``("next", "reward_sum")``, which the
script's environment never produces.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest
import torch

from tests.torchrl.conftest import pendulum_rows

pytestmark = pytest.mark.torchrl

SWAPS = {
    "from torchrl.data import OfflineToOnlineReplayBuffer\n": (
        "from mixreplay import OfflineToOnlineReplayBuffer\n"
    ),
    "from torchrl.data.datasets.utils import load_dataset\n": "from mixreplay import load_dataset\n",
    "from torchrl.trainers.algorithms.offline_to_online import OfflineToOnlineTrainer\n": (
        "from mixreplay.torchrl import OfflineToOnlineTrainer\n"
    ),
}

FLAGS = (
    "--env Pendulum-v1 --total-frames 2000 --frames-per-batch 500 --utd 4 --batch-size 128 "
    "--num-cells 64 64 --online-capacity 10000"
).split()

# Runs the swapped script in its own process: registers the local dataset (the registry
# lives in the process), builds the trainer with enable_logging=False, and reports what
# the run left behind as one JSON line.
DRIVER = r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])
import torch
from tensordict import TensorDict
from mixreplay import OfflineDataset, register_dataset


def local(path, batch_size=None):
    return OfflineDataset.from_tensordict(TensorDict.load_memmap(path), batch_size=batch_size)


register_dataset("local", local)
import train  # TorchRL's script, its three import lines swapped

built = []


class Trainer(train.OfflineToOnlineTrainer):
    def __init__(self, **kwargs):
        super().__init__(**kwargs, enable_logging=False)
        built.append(self)


train.OfflineToOnlineTrainer = Trainer
sys.argv = ["train.py", *sys.argv[2:]]
start = time.perf_counter()
train.main()
seconds = time.perf_counter() - start
trainer = built[0]
rb = trainer.replay_buffer
final_fraction = rb.offline_fraction
rb.set_step(0)  # back to the start of the anneal: a 50/50 batch
batch, info = rb.sample(return_info=True)
n_off = int((info["source"] == 0).sum())
offline_rows = TensorDict.load_memmap(sys.argv[sys.argv.index("--dataset") + 1][len("local:"):])
expected = offline_rows[info["index"][:n_off]]
print(json.dumps({
    "seconds": seconds,
    "buffer": type(rb).__module__ + "." + type(rb).__name__,
    "offline": type(rb.offline_buffer).__name__,
    "offline_transforms": [type(t).__name__ for t in rb.offline_buffer.transform],
    "collected_frames": trainer.collected_frames,
    "online_rows": len(rb.online_buffer),
    "final_fraction": final_fraction,
    "sources": info["source"].bincount().tolist(),
    "dtypes": sorted({str(v.dtype) for v in batch.values(True, True) if v.is_floating_point()}),
    "offline_rows_match": bool(
        torch.equal(batch["observation"][:n_off], expected["observation"].float())
        and torch.equal(batch["next", "reward"][:n_off], expected["next", "reward"].float())
    ),
}))
"""


def installed_script() -> pathlib.Path:
    import torchrl

    path = (
        pathlib.Path(torchrl.__file__).parent.parent
        / "sota-implementations"
        / "offline_to_online"
        / "train.py"
    )
    assert path.is_file(), f"torchrl's wheel installs {path}"
    return path


@pytest.fixture(scope="module")
def datasets(tmp_path_factory):
    """The same 4,000 Pendulum transitions, memory-mapped as float32 and as float64."""
    rows = pendulum_rows(4000)
    out = {}
    for dtype, data in [(torch.float32, rows), (torch.float64, f64(rows))]:
        out[dtype] = tmp_path_factory.mktemp(f"local-{dtype}".replace("torch.", ""))
        data.memmap(str(out[dtype]))
    return out


def f64(td):
    return td.apply(lambda t: t.double() if t.is_floating_point() else t)


def swapped_script(folder: pathlib.Path) -> pathlib.Path:
    """The installed script with its three TorchRL imports replaced, and nothing else."""
    text = installed_script().read_text()
    for old, new in SWAPS.items():
        assert text.count(old) == 1, f"the script no longer has {old.strip()!r}"
        text = text.replace(old, new)
    before = installed_script().read_text().splitlines()
    after = text.splitlines()
    changed = [(a, b) for a, b in zip(before, after) if a != b]
    assert len(before) == len(after) and len(changed) == 3
    assert "offline.append_transform(DoubleToFloat())" in text
    script = folder / "train.py"
    script.write_text(text)
    return script


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
def test_torchrl_sota_script_runs_on_mixreplay(dtype, datasets, tmp_path):
    script = swapped_script(tmp_path)
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    proc = subprocess.run(
        [
            sys.executable,
            str(driver),
            str(script.parent),
            *FLAGS,
            "--dataset",
            f"local:{datasets[dtype]}",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    print(f"{dtype}: the script trained for {report['seconds']:.1f} s")  # shown with -s
    assert report["buffer"] == "mixreplay.mixing.offline_to_online.OfflineToOnlineReplayBuffer"
    assert report["offline"] == "OfflineDataset"
    assert report["offline_transforms"] == ["DoubleToFloat"]  # the script's own append_transform
    assert report["collected_frames"] == 2000 and report["online_rows"] == 2000
    assert report["final_fraction"] == 0.0  # annealed to 0 over --total-frames // 2
    assert report["sources"] == [64, 64]
    assert report["dtypes"] == ["torch.float32"]
    assert report["offline_rows_match"]  # offline rows are the dataset's, cast by DoubleToFloat
