"""examples/torchrl_sac.py: TorchRL's Collector and SACLoss on a mixreplay buffer, end to end."""

from __future__ import annotations

import importlib.util
import math
import os
import pathlib
import re
import subprocess
import sys

import pytest
import torch

pytestmark = pytest.mark.torchrl

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def example():
    spec = importlib.util.spec_from_file_location(
        "torchrl_sac", ROOT / "examples" / "torchrl_sac.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(autouse=True)
def one_thread():
    """As the example's main() does: small networks run faster on one thread."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_a_collector_batch_needs_the_one_line(example):
    """What the example's select() is for: a raw collector batch carries keys the dataset lacks."""
    from torchrl.collectors import Collector
    from torchrl.envs import GymEnv

    from mixreplay import OfflineToOnlineReplayBuffer, SchemaMismatchError, load_dataset
    from mixreplay.demo.data import DEFAULT_DATASET_ID, ensure_expert_dataset

    ensure_expert_dataset()
    offline = load_dataset(f"minari:{DEFAULT_DATASET_ID}")
    rb = OfflineToOnlineReplayBuffer(offline, online_capacity=100, batch_size=8, generator=0)
    env = GymEnv("MountainCarContinuous-v0")
    actor, _ = example.make_agent(env, hidden=8)
    collector = Collector(env, actor, frames_per_batch=20, total_frames=20)
    data = next(iter(collector))
    collector.shutdown()
    assert ("collector", "traj_ids") in data.keys(True)
    with pytest.raises(SchemaMismatchError, match=r"\('collector', 'traj_ids'\)"):
        rb.extend(data.reshape(-1))
    assert len(rb.online_buffer) == 0  # the refused batch left nothing behind
    rb.extend(data.reshape(-1).select(*offline.schema))
    assert len(rb.online_buffer) == 20
    assert rb.sample().batch_size == (8,)


@pytest.mark.heavy  # the script in its own process (imports TorchRL, trains 200 updates)
def test_the_example_trains_sac_on_mixed_batches():
    """The script as a user runs it, in its own process, for 400 frames and 200 updates."""
    env = dict(os.environ)  # the temp data roots of conftest travel with it
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    args = ["--frames", "400", "--frames-per-batch", "100", "--updates-per-frame", "0.5"]
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "torchrl_sac.py"), *args, "--batch-size", "32"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "collected 400 frames with TorchRL's Collector; 400 rows in the online buffer" in out
    assert "200 SACLoss updates on mixed batches of 16 offline + 16 online rows" in out
    losses = re.search(r"loss_actor (\S+), loss_qvalue (\S+), loss_alpha (\S+)\n", out)
    assert losses and all(math.isfinite(float(v)) for v in losses.groups())
    assert re.search(
        r"deterministic policy: return -?\d+\.\d in \d+ steps, the car (did not )?reach", out
    )
    # the dataset was written where conftest points Minari, not into the home directory
    assert (pathlib.Path(env["MINARI_DATASETS_PATH"]) / "mixreplay").is_dir()
