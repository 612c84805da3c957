"""Mixed sampling and extend: mixreplay against torchrl 0.14.1 and the raw packed floor.

Builds the same Hopper-shaped data in both libraries (offline 1,000,000 rows,
online 100,000 rows; observation f32[11], action f32[3], next observation
f32[11], reward f32[1], done/terminated bool[1] at the root and under
``next``), then times each operation alternately in one process, best of
several rounds, and prints the ratios.

    python benchmarks/bench_sampling.py [--rounds 7] [--offline 1000000] [--extras]
                                        [--threads 1] [--clock wall|thread]

``--extras`` adds the issue-3 operations (3-way mixture, prioritized sample +
update, slices) against the uniform two-source sample.
"""

from __future__ import annotations

import argparse
import gc
import resource
import time
import warnings

import torch
from results import command_line, row, write_results
from tensordict import TensorDict

OBS, ACT = 11, 3


def hopper_rows(n: int, seed: int = 0) -> TensorDict:
    g = torch.Generator().manual_seed(seed)
    flags = lambda: torch.rand(n, 1, generator=g) < 0.01  # noqa: E731
    return TensorDict(
        {
            "observation": torch.randn(n, OBS, generator=g),
            "action": torch.rand(n, ACT, generator=g) * 2 - 1,
            "done": flags(),
            "terminated": flags(),
            "next": {
                "observation": torch.randn(n, OBS, generator=g),
                "reward": torch.randn(n, 1, generator=g),
                "done": flags(),
                "terminated": flags(),
            },
        },
        batch_size=[n],
    )


# what best_of reads: wall time (perf_counter) or this thread's CPU time (thread_time), which
# leaves out the time the process waits for a core on a busy machine (--clock thread)
CLOCK = time.perf_counter


def best_of(fn, rounds: int, number: int) -> float:
    """Best mean time per call in microseconds over ``rounds`` rounds of ``number`` calls."""
    clock = CLOCK
    for _ in range(min(number, 50)):
        fn()
    best = float("inf")
    for _ in range(rounds):
        gc.disable()
        t = clock()
        for _ in range(number):
            fn()
        best = min(best, (clock() - t) / number)
        gc.enable()
    return best * 1e6


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(
        allow_abbrev=False,
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--offline", type=int, default=1_000_000)
    p.add_argument("--online", type=int, default=100_000)
    p.add_argument("--extras", action="store_true", help="also time mixtures, priorities, slices")
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads for both libraries (default 1: on a shared machine a second "
        "thread waits for a busy core and distorts the comparison)",
    )
    p.add_argument(
        "--clock",
        choices=("wall", "thread"),
        default="wall",
        help="wall time (default) or this thread's CPU time, which leaves out the waits of a "
        "busy machine",
    )
    args = p.parse_args(argv)
    global CLOCK
    CLOCK = time.perf_counter if args.clock == "wall" else time.thread_time
    torch.set_num_threads(args.threads)

    import mixreplay

    warnings.filterwarnings("ignore")
    torch.manual_seed(0)
    offline_td = hopper_rows(args.offline, seed=1)
    online_td = hopper_rows(args.online, seed=2)
    one_row = hopper_rows(1, seed=3)
    thousand = hopper_rows(1000, seed=4)

    # --- mixreplay
    m_off = mixreplay.ReplayBuffer(storage=mixreplay.LazyTensorStorage(args.offline))
    m_off.extend(offline_td)
    m_rb = mixreplay.OfflineToOnlineReplayBuffer(
        m_off, online_capacity=args.online, offline_fraction=0.5, batch_size=256, generator=0
    )
    m_rb.extend(online_td)
    m_ext = mixreplay.ReplayBuffer(storage=mixreplay.LazyTensorStorage(args.online))
    m_ext.extend(online_td)
    rss_after_mixreplay = peak_rss_mb()

    # --- torchrl
    from torchrl.data import LazyTensorStorage as TLazy
    from torchrl.data import OfflineToOnlineReplayBuffer as TO2O
    from torchrl.data import ReplayBuffer as TRB

    t_off = TRB(storage=TLazy(args.offline))
    t_off.extend(offline_td)
    t_rb = TO2O(t_off, online_capacity=args.online, offline_fraction=0.5, batch_size=256)
    t_rb.extend(online_td)
    t_ext = TRB(storage=TLazy(args.online))
    t_ext.extend(online_td)

    # --- raw floor: a packed index_select of the same rows, per source, into one output
    off_rows = m_off.storage.rows
    on_rows = m_rb.online_buffer.storage.rows
    W = off_rows.shape[1]
    g = torch.Generator().manual_seed(0)

    def raw(B):
        k = round(0.5 * B)
        out = torch.empty(B, W, dtype=torch.int64)
        torch.index_select(
            off_rows, 0, torch.randint(off_rows.shape[0], (k,), generator=g), out=out[:k]
        )
        torch.index_select(
            on_rows, 0, torch.randint(on_rows.shape[0], (B - k,), generator=g), out=out[k:]
        )
        return out

    # the same draws and gathers into kept buffers, then each leaf copied out of the packed
    # rows into its own memory: the torch work of a batch whose leaves own their memory
    kept = {}
    for B in (256, 1024):
        k, out = round(0.5 * B), torch.empty(B, W, dtype=torch.int64)
        index = (torch.empty(k, dtype=torch.int64), torch.empty(B - k, dtype=torch.int64))
        kept[B] = (index, (out[:k], out[k:]), list(m_off.storage.layout.split(out)))

    def owned(B):
        (a, b), (part_a, part_b), views = kept[B]
        a.random_(0, off_rows.shape[0], generator=g)
        b.random_(0, on_rows.shape[0], generator=g)
        torch.index_select(off_rows, 0, a, out=part_a)
        torch.index_select(on_rows, 0, b, out=part_b)
        return torch._foreach_clone(views)

    rows = []

    def compare(name, mix_fn, trl_fn, raw_fn=None, number=2000):
        m = best_of(mix_fn, args.rounds, number)
        t = best_of(trl_fn, args.rounds, max(200, number // 4))
        r = best_of(raw_fn, args.rounds, number) if raw_fn else None
        rows.append((name, m, t, r))

    compare(
        "mixed sample(256)", lambda: m_rb.sample(256), lambda: t_rb.sample(256), lambda: raw(256)
    )
    owned_us = {256: best_of(lambda: owned(256), args.rounds, 2000)}
    compare(
        "mixed sample(1024)",
        lambda: m_rb.sample(1024),
        lambda: t_rb.sample(1024),
        lambda: raw(1024),
    )
    owned_us[1024] = best_of(lambda: owned(1024), args.rounds, 2000)
    compare("extend(1 row)", lambda: m_ext.extend(one_row), lambda: t_ext.extend(one_row))

    def m_step():  # a training step's buffer cost: one environment step in, one batch out
        m_rb.extend(one_row)
        m_rb.sample(256)

    def t_step():
        t_rb.extend(one_row)
        t_rb.sample(256)

    compare("step: extend(1)+sample(256)", m_step, t_step)
    compare(
        "extend(1000 rows)",
        lambda: m_ext.extend(thousand),
        lambda: t_ext.extend(thousand),
        number=500,
    )

    print(
        f"torch {torch.__version__}, threads {torch.get_num_threads()}, clock {args.clock}, "
        f"offline {args.offline:,} rows, "
        f"online {args.online:,} rows, row {m_off.storage.row_bytes} bytes packed"
    )
    print(
        f"{'operation':<22}{'mixreplay µs':>14}{'torchrl µs':>12}{'speed-up':>10}{'raw floor µs':>14}{'vs floor':>10}"
    )
    result = {}
    for name, m, t, r in rows:
        floor = f"{r:14.1f}{m / r:9.2f}x" if r else f"{'':14}{'':10}"
        print(f"{name:<22}{m:14.1f}{t:12.1f}{t / m:9.1f}x{floor}")
        result[name] = {"mixreplay_us": m, "torchrl_us": t, "speedup": t / m, "floor_us": r}
    for B, floor in owned_us.items():  # timed right after the table's row
        m = result[f"mixed sample({B})"]["mixreplay_us"]
        print(
            f"mixed sample({B}): the same torch work with each leaf copied out (leaves owning "
            f"their memory) {floor:.1f} µs; mixreplay {m / floor:.2f}x it"
        )
        result[f"mixed sample({B})"]["owned_floor_us"] = floor
    storage = m_rb.online_buffer.storage
    print(
        f"online storage: {storage.max_size:,} rows × {storage.row_bytes} bytes = "
        f"{storage.nbytes / 2**20:.1f} MiB allocated (data {storage.layout.data_bytes} bytes/row)"
    )
    print(
        f"peak RSS: {rss_after_mixreplay:.0f} MB after building mixreplay's buffers, "
        f"{peak_rss_mb():.0f} MB after torchrl's too"
    )
    if args.extras:
        result["extras"] = extras(m_off, online_td, args.rounds, rows[0][1])
    save(args, result, m_off.storage.row_bytes)
    return result


def save(args, result: dict, row_bytes: int) -> None:
    """benchmarks/results/bench_sampling.json: each operation against TorchRL, the mixed
    samples against their floors, the extras against the uniform mixed sample(256)."""
    out = []
    for name, r in result.items():
        if name == "extras":
            continue
        out.append(row(name, "us", r["mixreplay_us"], peer="torchrl", peer_value=r["torchrl_us"]))
    for name, r in result.items():
        if name != "extras" and r["floor_us"]:
            out.append(
                row(name, "us", r["mixreplay_us"],
                    peer="raw floor: 2 randint + 2 packed index_select", peer_value=r["floor_us"])
            )  # fmt: skip
        if name != "extras" and r.get("owned_floor_us"):
            out.append(
                row(name, "us", r["mixreplay_us"],
                    peer="bare torch: the same draws, gathers and leaf copies",
                    peer_value=r["owned_floor_us"])
            )  # fmt: skip
    uniform = result["mixed sample(256)"]["mixreplay_us"]
    for name, us in result.get("extras", {}).items():
        out.append(row(name, "us", us, peer="uniform mixed sample(256)", peer_value=uniform))
    write_results(
        "bench_sampling",
        command_line(),
        out,
        settings={
            "rounds": args.rounds,
            "offline_rows": args.offline,
            "online_rows": args.online,
            "offline_fraction": 0.5,
            "torch_threads": args.threads,
            "clock": args.clock,
            "row_bytes_packed": row_bytes,
            "extras": args.extras,
        },
        notes=(
            "Hopper-shaped rows (observation f32[11], action f32[3], reward f32[1], done and "
            "terminated bool[1] at the root and under next) in both libraries, built from the "
            "same data in one process; each operation timed alternately, best of the rounds' "
            "mean time per call. The raw floor is two randint and one packed index_select per "
            "source into one output, with no TensorDict; bare torch with owned leaves adds the "
            "copy of each leaf into its own memory (what a batch owning its leaves costs at "
            "least). Absolute times on a shared machine drift with its load: compare ratios."
        ),
    )


def extras(m_off, online_td, rounds: int, uniform_us: float) -> dict:
    """Issue-3 operations, each against the uniform two-source sample(256)."""
    import mixreplay
    from mixreplay.samplers import PrioritizedSampler, SliceSampler

    n_on = online_td.batch_size[0]
    out = {}
    mix3 = mixreplay.MixtureReplayBuffer(
        {
            "offline": m_off,
            "online": mixreplay.LazyTensorStorage(n_on),
            "demo": mixreplay.LazyTensorStorage(n_on),
        },
        {"offline": 0.5, "online": 0.3, "demo": 0.2},
        generator=0,
    )
    mix3.extend(online_td, source="online")
    mix3.extend(online_td, source="demo")
    out["3-way mixture sample(256)"] = best_of(lambda: mix3.sample(256), rounds, 2000)

    prio = mixreplay.OfflineToOnlineReplayBuffer(
        m_off, online_capacity=n_on, online_sampler=PrioritizedSampler(0.6, 0.4), generator=0
    )
    prio.extend(online_td)
    prio_only = best_of(lambda: prio.sample(256, return_info=True), rounds, 1000)
    out["prioritized sample(256)"] = prio_only
    batch_info = prio.sample(256, return_info=True)
    pr = torch.rand(256)

    def sample_update():
        _, info = prio.sample(256, return_info=True)
        prio.update_priority(info, pr)

    out["prioritized sample+update(256)"] = best_of(sample_update, rounds, 1000)
    del batch_info

    online_sl = mixreplay.LazyTensorStorage(n_on)
    sl = mixreplay.OfflineToOnlineReplayBuffer(
        mixreplay.ReplayBuffer(storage=m_off.storage, sampler=SliceSampler(8)),
        online_storage=online_sl,
        online_sampler=SliceSampler(8),
        generator=0,
    )
    sl.extend(online_td)
    out["slices sample(256, slice_len=8)"] = best_of(lambda: sl.sample(256), rounds, 1000)

    # A source with its own transform leaves the single packed gather: its rows are
    # gathered, transformed, then aligned into the batch (issue 10.1).
    def identity(td):
        return td

    tr = mixreplay.OfflineToOnlineReplayBuffer(
        mixreplay.ReplayBuffer(storage=m_off.storage, transform=identity),
        online_capacity=n_on,
        generator=0,
    )
    tr.extend(online_td)
    out["offline with a transform (identity)"] = best_of(lambda: tr.sample(256), rounds, 1000)
    try:  # the sota script's case: float64 offline data cast by TorchRL's DoubleToFloat()
        from torchrl.envs.transforms import DoubleToFloat

        off64 = m_off.storage.to_tensordict().apply(
            lambda t: t.double() if t.is_floating_point() else t
        )
        ds64 = mixreplay.OfflineDataset.from_tensordict(off64)
        ds64.append_transform(DoubleToFloat())
        d2f = mixreplay.OfflineToOnlineReplayBuffer(ds64, online_capacity=n_on, generator=0)
        d2f.extend(online_td)
        out["float64 offline + DoubleToFloat()"] = best_of(
            lambda d2f=d2f: d2f.sample(256), rounds, 500
        )
    except ImportError:
        pass
    print(f"{'operation':<34}{'µs':>10}{'vs uniform 2-source':>22}")
    for name, us in out.items():
        print(f"{name:<34}{us:10.1f}{us / uniform_us:21.2f}x")
    return out


if __name__ == "__main__":
    main()
