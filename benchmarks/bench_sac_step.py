"""What users pay: the share of a SAC update step spent in the replay buffer, mixreplay vs TorchRL.

One step of an online SAC learner fed by an offline-to-online buffer (Hopper
shapes: observation 11, action 3; offline rows and an online ring, 50/50
mixed): one ``extend(1)`` of the new transition, one ``sample(256)``, then the
demo's learner (``mixreplay.demo.sac.SAC``, on CPU: 2x256 MLPs, twin critics with
LayerNorm) takes one critic step and one actor + temperature step on that batch.

Buffers, each feeding its own learner (same seed, same rows):

- ``mixreplay``: ``mixreplay.OfflineToOnlineReplayBuffer``, uniform;
- ``mixreplay prioritized``: the same with a prioritized online side, and an
  ``update_priority`` per step with ``|TD error|`` of the batch (the extra
  critic forward that computes it is counted as the learner's);
- ``TorchRL``: ``torchrl.data.OfflineToOnlineReplayBuffer`` (TorchRL 0.14 has
  it; uniform only: its ``PrioritizedSampler`` needs a C++ extension that does
  not load on every torch build, so a prioritized TorchRL row is shown only
  where it runs).

The buffer's time is ``extend`` + ``sample`` (+ ``update_priority``); the step's
is that plus the learner's. Steps of the buffers are interleaved in rounds, so
the machine's load hits them alike; the share reported is taken over all steps,
with the range of the per-round shares.

    python benchmarks/bench_sac_step.py [--steps 200] [--rounds 5] [--offline 1000000]
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repo's benchmarks package
from results import command_line, row, write_results  # noqa: E402

from benchmarks.bench_sampling import ACT, OBS, hopper_rows  # noqa: E402


def buffers(args) -> dict:
    import mixreplay
    from mixreplay.samplers import PrioritizedSampler

    off_rows, on_rows = hopper_rows(args.offline, seed=1), hopper_rows(args.online, seed=2)
    out: dict = {}

    offline = mixreplay.ReplayBuffer(storage=mixreplay.LazyTensorStorage(args.offline))
    offline.extend(off_rows)
    for name, kwargs in (
        ("mixreplay", {}),
        ("mixreplay prioritized", {"online_sampler": PrioritizedSampler(alpha=0.6, beta=0.4)}),
    ):
        rb = mixreplay.OfflineToOnlineReplayBuffer(
            offline,
            online_capacity=args.capacity,
            offline_fraction=0.5,
            generator=0,
            **kwargs,
        )
        rb.extend(on_rows)
        out[name] = rb

    from torchrl.data import LazyTensorStorage, ReplayBuffer

    try:
        from torchrl.data import OfflineToOnlineReplayBuffer as TorchRLO2O
    except ImportError:  # TorchRL before 0.14
        TorchRLO2O = None
    t_offline = ReplayBuffer(storage=LazyTensorStorage(args.offline))
    t_offline.extend(off_rows)
    if TorchRLO2O is not None:
        t_rb = TorchRLO2O(t_offline, online_capacity=args.capacity, offline_fraction=0.5)
        t_rb.extend(on_rows)
        out["TorchRL"] = t_rb
    return out


def agent(args):
    from mixreplay.demo.config import SACConfig
    from mixreplay.demo.sac import SAC

    inf = np.full(OBS, np.inf, dtype=np.float32)
    return SAC(
        -inf,
        inf,
        -np.ones(ACT, dtype=np.float32),
        np.ones(ACT, dtype=np.float32),
        config=SACConfig(hidden=args.hidden, batch_size=args.batch),
        seed=0,
    )


def td_error(sac, batch) -> torch.Tensor:
    """``|TD error|`` of every row, averaged over the critics (no gradient)."""
    with torch.no_grad():
        target = sac.critic_target_values(batch)
        obs = sac.obs_scaler(batch["observation"])
        q = sac.critic(sac._q_input(obs, sac._to_unit(batch["action"]))).mean(0)
        return (q - target).abs().reshape(-1)


def step(rb, sac, row, batch_size: int, prioritized: bool) -> tuple[float, float]:
    """One step; its buffer time and learner time, seconds."""
    t0 = time.perf_counter()
    rb.extend(row)
    if prioritized:
        batch, info = rb.sample(batch_size, return_info=True)
    else:
        batch = rb.sample(batch_size)
    t1 = time.perf_counter()
    sac.update_critic(batch)
    sac.update_actor_and_alpha(batch)
    priority = td_error(sac, batch) if prioritized else None
    t2 = time.perf_counter()
    if prioritized:
        rb.update_priority(info, priority)
    t3 = time.perf_counter()
    return (t1 - t0) + (t3 - t2), t2 - t1


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(
        allow_abbrev=False,
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--steps", type=int, default=200, help="steps per buffer per round")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--warmup", type=int, default=20, help="untimed steps per buffer first")
    p.add_argument("--offline", type=int, default=1_000_000)
    p.add_argument("--online", type=int, default=100_000, help="online rows held at the start")
    p.add_argument("--capacity", type=int, default=1_000_000, help="online ring capacity")
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--hidden", type=int, default=256)
    args = p.parse_args(argv)
    warnings.filterwarnings("ignore")
    torch.manual_seed(0)
    bufs = buffers(args)
    agents = {name: agent(args) for name in bufs}
    rows = hopper_rows(args.rounds * args.steps + args.warmup, seed=3)
    print(
        f"torch {torch.__version__}, threads {torch.get_num_threads()}, offline {args.offline:,} "
        f"rows, online {args.online:,} rows (ring of {args.capacity:,}), batch {args.batch}, "
        f"hidden {args.hidden}, {args.rounds} rounds x {args.steps} steps per buffer"
    )
    for name, rb in bufs.items():
        for i in range(args.warmup):
            step(rb, agents[name], rows[i : i + 1], args.batch, "prioritized" in name)
    totals = {name: [0.0, 0.0] for name in bufs}
    shares: dict[str, list[float]] = {name: [] for name in bufs}
    k = args.warmup
    for _ in range(args.rounds):
        for name, rb in bufs.items():
            buf = learn = 0.0
            for i in range(args.steps):
                row = rows[k + i : k + i + 1]
                b, lt = step(rb, agents[name], row, args.batch, "prioritized" in name)
                buf += b
                learn += lt
            totals[name][0] += buf
            totals[name][1] += learn
            shares[name].append(buf / (buf + learn))
        k += args.steps
    n = args.rounds * args.steps
    print(f"{'buffer':<24}{'buffer µs':>10}{'learner µs':>11}{'step µs':>9}{'share':>8}  rounds")
    out = {}
    for name, (buf, learn) in totals.items():
        share = buf / (buf + learn)
        lo, hi = min(shares[name]), max(shares[name])
        print(
            f"{name:<24}{buf / n * 1e6:10.0f}{learn / n * 1e6:11.0f}{(buf + learn) / n * 1e6:9.0f}"
            f"{share:8.1%}  {lo:.1%}-{hi:.1%}"
        )
        out[name] = {
            "buffer_us": buf / n * 1e6,
            "learner_us": learn / n * 1e6,
            "share": share,
            "range": (lo, hi),
        }
    if "TorchRL" not in bufs:
        print("torchrl.data.OfflineToOnlineReplayBuffer is missing from this TorchRL")
    save(args, out)
    return out


def save(args, out: dict) -> None:
    """benchmarks/results/bench_sac_step.json: each buffer's time per step and share of the
    step against TorchRL's, from the same rounds."""
    trl = out.get("TorchRL")
    peer, peer_of = ("torchrl", lambda k: trl[k]) if trl else (None, lambda k: None)
    rows = []
    label = "buffer work per SAC step: extend(1) + sample(256)"
    r = out["mixreplay"]
    rows.append(row(label, "us", r["buffer_us"], peer=peer, peer_value=peer_of("buffer_us")))
    rows.append(
        row(f"{label}: share of the step", "%", 100 * r["share"], peer=peer,
            peer_value=None if trl is None else 100 * trl["share"])
    )  # fmt: skip
    # TorchRL's prioritized sampler does not load on every torch build: the prioritized
    # buffer's peer is mixreplay's uniform one, from the same rounds
    p = out["mixreplay prioritized"]
    prio = "prioritized online side: extend(1) + sample(256) + update_priority(256)"
    rows.append(
        row(prio, "us", p["buffer_us"], peer="mixreplay uniform", peer_value=r["buffer_us"])
    )
    rows.append(row(f"{prio}: share of the step", "%", 100 * p["share"],
                    peer="mixreplay uniform", peer_value=100 * r["share"]))  # fmt: skip
    rows.append(
        row("the learner's time per step (the same learner)", "us",
            out["mixreplay"]["learner_us"], peer=peer, peer_value=peer_of("learner_us"))
    )  # fmt: skip
    write_results(
        "bench_sac_step",
        command_line(),
        rows,
        settings={
            "steps_per_round": args.steps,
            "rounds": args.rounds,
            "warmup_steps": args.warmup,
            "offline_rows": args.offline,
            "online_rows": args.online,
            "online_capacity": args.capacity,
            "batch_size": args.batch,
            "hidden": args.hidden,
            "torch_threads": torch.get_num_threads(),
        },
        notes=(
            "One online SAC step (the demo's learner, 2x256 MLPs, CPU) fed by a 50/50 "
            "offline-to-online buffer of Hopper-shaped rows: the buffer's work is extend(1) + "
            "sample(256) (+ update_priority with |TD error| for the prioritized buffer, whose "
            "peer is mixreplay's uniform buffer: TorchRL's prioritized sampler needs a C++ "
            "extension that does not load on this torch build). Each buffer feeds its own "
            "learner; steps interleaved in rounds. The share depends on the learner's speed, "
            "hence on the machine's load; the buffer times are the steadier figure."
        ),
    )


if __name__ == "__main__":
    main()
