"""The example scripts run, and do what they claim, on tiny problems."""

import importlib.util
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]


def load(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "examples" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_balanced_replay_shifts_batches_towards_online_rows():
    out = load("balanced_replay").run(steps=60, batch_size=64, n_offline=1000, n_online=125, seed=0)
    assert abs(out["first_batch_online_share"] - out["uniform_online_share"]) < 0.15
    assert out["final_online_share"] > 2 * out["uniform_online_share"]
