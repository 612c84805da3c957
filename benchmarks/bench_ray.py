"""Scaling out: RayReplayBuffer on a local Ray cluster, against the peers, in one run.

    python benchmarks/bench_ray.py           # about 2 minutes on 2 cores
    python benchmarks/bench_ray.py --quick   # shorter runs, noisier figures
    python benchmarks/bench_ray.py --only writes --no-torchrl   # section 1 only

Measures, with Hopper-shaped rows (observation f32[11], action f32[3], next observation
f32[11], reward f32[1], done/terminated bool[1] at the root and under "next"):

1. aggregate write throughput of 2 collector processes (Ray actors), one row per
   call and 1000-row chunks, through mixreplay's handle (blocking ``extend``/``add``)
   and its writer (batched, non-blocking), against a plain Ray actor holding the
   same buffer (TensorDicts pickled per call, what one writes by hand) and
   TorchRL's ``RayReplayBuffer`` (torchrl 0.14, when it loads);
2. latency of one 256-row batch and of a bare round trip;
3. the share of a learner's time spent waiting for batches when each batch
   costs 10 ms of work, with and without prefetching, alone and with collectors
   writing meanwhile;
4. what exactly-once writes add per message, in this process (no Ray, so no
   scheduling noise): the actor's ``extend_packed`` of one writer message (877 rows)
   with a chunk id against the same call without one, and the writer's copy of the
   message it keeps until acknowledged, both as ratios to the message's own cost.

The cluster is ``ray.init(num_cpus=2)`` in a temporary directory, with Ray's token
authentication on: an ephemeral token is passed through the environment (unless
you configured one), so nothing is written to the home directory.
"""

from __future__ import annotations

import argparse
import os
import secrets
import statistics
import sys
import tempfile
import time
import warnings

if not ({"RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"} & set(os.environ)):
    # Authentication stays on with a token that lives only in this process tree's
    # environment (Ray would otherwise generate one into ~/.ray/auth_token).
    os.environ.setdefault("RAY_AUTH_MODE", "token")
    os.environ["RAY_AUTH_TOKEN"] = secrets.token_hex(32)

import torch  # noqa: E402
from results import command_line, row, write_results  # noqa: E402
from tensordict import TensorDict  # noqa: E402

from mixreplay import OfflineToOnlineReplayBuffer  # noqa: E402
from mixreplay.datasets.memmap import write_memmap_dataset  # noqa: E402

OFFLINE_ROWS = 100_000
ONLINE_CAPACITY = 1_000_000
CHUNK = 1000
BATCH = 256


def hopper_rows(n: int, seed: int = 0) -> TensorDict:
    g = torch.Generator().manual_seed(seed)
    flags = torch.rand(n, 1, generator=g) < 0.01
    return TensorDict(
        {
            "observation": torch.randn(n, 11, generator=g),
            "action": torch.rand(n, 3, generator=g) * 2 - 1,
            "done": flags.clone(),
            "terminated": flags.clone(),
            "next": {
                "observation": torch.randn(n, 11, generator=g),
                "reward": torch.randn(n, 1, generator=g),
                "done": flags.clone(),
                "terminated": flags.clone(),
            },
        },
        batch_size=[n],
    )


def make_buffer(path: str) -> OfflineToOnlineReplayBuffer:
    return OfflineToOnlineReplayBuffer(
        f"memmap:{path}", online_capacity=ONLINE_CAPACITY, batch_size=BATCH, generator=0
    )


# -- the actors (defined in __main__, so Ray ships them by value) -------------------------------


def _define_actors(ray):
    @ray.remote(num_cpus=0)
    class PlainBufferActor:
        """The peer one writes by hand: a buffer in an actor, TensorDicts as arguments."""

        def __init__(self, path):
            torch.set_num_threads(1)
            self.rb = make_buffer(path)

        def extend(self, td):
            self.rb.extend(td)

        def add(self, row):
            self.rb.add(row)

        def sample(self, n):
            return self.rb.sample(n)

        def noop(self):
            return None

        def __len__(self):
            return len(self.rb)

    @ray.remote(num_cpus=0)
    class Collector:
        def __init__(self, seed: int):
            torch.set_num_threads(1)
            self.chunk = hopper_rows(CHUNK, seed)
            self.rows = [self.chunk[i].clone() for i in range(CHUNK)]

        def ready(self):
            return True

        def run(
            self, target, mode: str, seconds: float, start_at: float, rate: float | None = None
        ):
            while time.time() < start_at:
                time.sleep(0.001)
            t0 = time.time()
            end = t0 + seconds
            n = 0
            rows, chunk = self.rows, self.chunk
            if mode == "handle.add":  # mixreplay, one blocking call per row
                while time.time() < end:
                    target.add(rows[n % CHUNK])
                    n += 1
            elif mode == "writer.add":  # mixreplay writer, one row at a time
                w = target.writer()
                while time.time() < end:
                    for i in range(100):
                        w.add(rows[i])
                    n += 100
                    if rate is not None:  # pace like an environment
                        time.sleep(max(0.0, t0 + n / rate - time.time()))
                w.flush()
            elif mode == "handle.extend":  # mixreplay, one blocking call per chunk
                while time.time() < end:
                    target.extend(chunk)
                    n += CHUNK
            elif mode == "writer.extend":  # mixreplay writer, chunks, a few in flight
                w = target.writer()
                while time.time() < end:
                    w.extend(chunk)
                    n += CHUNK
                w.flush()
            elif mode == "plain.add":
                while time.time() < end:
                    ray.get(target.add.remote(rows[n % CHUNK]))
                    n += 1
            elif mode == "plain.extend":
                while time.time() < end:
                    ray.get(target.extend.remote(chunk))
                    n += CHUNK
            elif mode == "torchrl.add":
                while time.time() < end:
                    target.add(rows[n % CHUNK])
                    n += 1
            elif mode == "torchrl.extend":
                while time.time() < end:
                    target.extend(chunk)
                    n += CHUNK
            else:
                raise ValueError(mode)
            return n, t0, time.time()

    return PlainBufferActor, Collector


# -- measurements -------------------------------------------------------------------------------


def throughput(ray, collectors, target, mode: str, seconds: float) -> float:
    start_at = time.time() + 0.5
    results = ray.get([c.run.remote(target, mode, seconds, start_at) for c in collectors])
    rows = sum(r[0] for r in results)
    return rows / (max(r[2] for r in results) - min(r[1] for r in results))


def latency(fn, repeats: int) -> tuple[float, float]:
    for _ in range(5):
        fn()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    times.sort()
    return statistics.median(times), times[int(0.9 * (len(times) - 1))]


def make_work(seconds: float):
    """A CPU-bound training step: small single-thread matmuls until ``seconds`` have passed."""
    a = torch.randn(64, 64)

    def work(batch):
        end = time.perf_counter() + seconds
        x = batch["observation"].sum()
        while time.perf_counter() < end:
            a @ a
        return x

    return work


def wait_share(rb, work, steps: int, prefetch: int) -> tuple[float, float]:
    for _ in range(3):
        work(rb.sample(BATCH, prefetch=prefetch))
    waited = 0.0
    t0 = time.perf_counter()
    for _ in range(steps):
        t = time.perf_counter()
        batch = rb.sample(BATCH, prefetch=prefetch)
        waited += time.perf_counter() - t
        work(batch)
    total = time.perf_counter() - t0
    return waited / total, total / steps


def chunk_overhead(offline_rows: int, messages: int) -> dict:
    """Per-message cost of exactly-once writes, measured in this process, alternating."""
    from mixreplay.distributed.chunks import ChunkIds
    from mixreplay.distributed.host import BufferHost
    from mixreplay.distributed.wire import Packer, inline_rows

    with tempfile.TemporaryDirectory(prefix="mixreplay-bench-") as tmp:
        path = write_memmap_dataset(os.path.join(tmp, "offline"), hopper_rows(offline_rows))
        host = BufferHost(make_buffer, (path,), restarted=False)
        packer, ids = Packer(), ChunkIds()
        words = packer.pack(hopper_rows(1000))
        n = inline_rows(packer.layout.row_bytes)  # a writer's regular message: ~96 KiB
        message = words[:n]
        plain, chunked, copy = [], [], []
        for _ in range(messages):
            t = time.perf_counter()
            host.extend_packed(packer.key, message, None, False)
            t1 = time.perf_counter()
            (start,) = ids.take([len(message)])
            host.extend_packed(packer.key, message, None, False, ids.chunk_id(start))
            ids.done([start])
            t2 = time.perf_counter()
            message.copy()  # what the writer keeps until the actor acknowledges
            t3 = time.perf_counter()
            plain.append(t1 - t)
            chunked.append(t2 - t1)
            copy.append(t3 - t2)
    med = statistics.median
    return {"rows": n, "plain": med(plain), "chunked": med(chunked), "copy": med(copy)}


def print_overhead(o: dict) -> None:
    print(
        f"\nExactly-once writes, per {o['rows']}-row message, in-process medians: actor "
        f"extend_packed {o['plain'] * 1e6:.0f} us without a chunk id, {o['chunked'] * 1e6:.0f} us "
        f"with one ({o['chunked'] / o['plain']:.3f}x); the writer's kept copy "
        f"{o['copy'] * 1e6:.0f} us ({o['copy'] / o['plain']:.3f}x the actor's write)"
    )


def fmt_rate(x: float | None) -> str:
    return "n/a" if x is None else f"{x:,.0f}"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="shorter runs")
    parser.add_argument("--seconds", type=float, default=None, help="seconds per throughput run")
    parser.add_argument("--no-torchrl", action="store_true", help="skip TorchRL's RayReplayBuffer")
    parser.add_argument(
        "--only",
        choices=("writes", "latency", "learner", "overhead"),
        default=None,
        help="run one section (default: all three)",
    )
    args = parser.parse_args(argv)
    sections = {"writes", "latency", "learner", "overhead"} if args.only is None else {args.only}
    if sections == {"overhead"}:
        overhead = chunk_overhead(OFFLINE_ROWS, 2000 if args.quick else 6000)
        print_overhead(overhead)
        save(args, {}, {}, {}, overhead, 0.0, 0, 0.0)
        return
    seconds = args.seconds or (1.0 if args.quick else 3.0)
    steps = 60 if args.quick else 200

    import ray

    from mixreplay.distributed import RayReplayBuffer

    torch.set_num_threads(1)
    tmp = tempfile.TemporaryDirectory(prefix="mixreplay-bench-ray-")
    path = write_memmap_dataset(
        os.path.join(tmp.name, "offline"), hopper_rows(OFFLINE_ROWS, seed=1)
    )
    ray_tmp = tempfile.TemporaryDirectory(prefix="mixreplay-ray-")  # short: Ray's socket paths
    t = time.perf_counter()
    ray.init(
        num_cpus=2,
        _temp_dir=ray_tmp.name,
        include_dashboard=False,
        logging_level="ERROR",
        log_to_driver=False,
    )
    init_s = time.perf_counter() - t
    try:
        PlainBufferActor, Collector = _define_actors(ray)
        rb = RayReplayBuffer(
            OfflineToOnlineReplayBuffer,
            f"memmap:{path}",
            online_capacity=ONLINE_CAPACITY,
            batch_size=BATCH,
            generator=0,
            ray_options={"num_cpus": 0},
        )
        plain = PlainBufferActor.remote(str(path))
        collectors = [Collector.remote(seed) for seed in range(2)]
        ray.get([c.ready.remote() for c in collectors] + [plain.noop.remote()])
        torchrl_rb = torchrl_client = None
        if not args.no_torchrl:
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    from functools import partial

                    from torchrl.data import LazyTensorStorage
                    from torchrl.data import RayReplayBuffer as TorchRLRayReplayBuffer

                    torchrl_rb = TorchRLRayReplayBuffer(
                        storage=partial(LazyTensorStorage, ONLINE_CAPACITY),
                        batch_size=BATCH,
                        remote_config={"num_cpus": 0},
                    )
                    torchrl_client = torchrl_rb.client()
                    torchrl_client.extend(hopper_rows(CHUNK))
            except Exception as err:  # noqa: BLE001 - a peer that does not load is reported, not fatal
                print(
                    f"(TorchRL RayReplayBuffer unavailable: {type(err).__name__}: {err})",
                    file=sys.stderr,
                )
                torchrl_rb = torchrl_client = None

        # 1. writes
        writes: dict = {}
        for label, target, one, many in (
            ("mixreplay handle: rb.add / rb.extend (blocking)", rb, "handle.add", "handle.extend"),
            (
                "mixreplay writer: w.add / w.extend (batched, in flight)",
                rb,
                "writer.add",
                "writer.extend",
            ),
            ("plain Ray actor, TensorDict args (blocking)", plain, "plain.add", "plain.extend"),
            (
                "torchrl 0.14 RayReplayBuffer (blocking)",
                torchrl_client,
                "torchrl.add",
                "torchrl.extend",
            ),
        ):
            if "writes" not in sections:
                break
            if target is None:
                writes[label] = (None, None)
                continue
            writes[label] = (
                throughput(ray, collectors, target, one, seconds),
                throughput(ray, collectors, target, many, seconds),
            )

        # 2. latency
        reps = 100 if args.quick else 300
        lat = (
            {}
            if "latency" not in sections
            else {
                "bare actor round trip (plain actor noop)": latency(
                    lambda: ray.get(plain.noop.remote()), reps
                ),
                "mixreplay len(rb)": latency(lambda: len(rb), reps),
                "mixreplay rb.sample(256)": latency(lambda: rb.sample(BATCH, prefetch=0), reps),
                "plain actor sample(256), TensorDict returned": latency(
                    lambda: ray.get(plain.sample.remote(BATCH)), reps
                ),
            }
        )
        if torchrl_client is not None and "latency" in sections:
            lat["torchrl RayReplayBuffer sample(256)"] = latency(
                lambda: torchrl_client.sample(BATCH), reps
            )

        # 3. learner wait share
        work = make_work(0.010)
        learner = {}
        for p in (0, 1, 2, 4) if "learner" in sections else ():
            learner[("alone", p)] = wait_share(rb, work, steps, p)
        pace = 2000.0  # rows/s per collector: a few fast simulators each
        for p in (0, 2, 8) if "learner" in sections else ():
            start_at = time.time() + 0.3
            busy = [
                c.run.remote(rb, "writer.add", steps * 0.02 + 1.0, start_at, pace)
                for c in collectors
            ]
            while time.time() < start_at:
                time.sleep(0.01)
            learner[(f"2 collectors at {pace:,.0f} rows/s each", p)] = wait_share(
                rb, work, steps, p
            )
            ray.get(busy)
    finally:
        if torchrl_rb is not None:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                torchrl_rb.close()
        ray.shutdown()
        tmp.cleanup()
        ray_tmp.cleanup()

    # -- report ---------------------------------------------------------------------------------
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"\nRay {ray.__version__}, torch {torch.__version__}, {os.cpu_count()} cores "
        f"(load average {load:.1f} at the end); RAY_AUTH_MODE={os.environ.get('RAY_AUTH_MODE')}; "
        f"ray.init(num_cpus=2) took {init_s:.1f} s; {seconds:.0f} s per throughput run\n"
    )
    if writes:
        print_writes(writes)
    if lat:
        print("\nLatency, median / p90 (ms)")
        for label, (med, p90) in lat.items():
            print(f"| {label:<48} | {med * 1e3:6.2f} / {p90 * 1e3:6.2f} |")
    overhead = None
    if "overhead" in sections:
        overhead = chunk_overhead(OFFLINE_ROWS, 2000 if args.quick else 6000)
        print_overhead(overhead)
    if learner:
        print(
            "\nLearner: 10 ms of work per 256-row batch; share of its time spent waiting for batches"
        )
        print(f"| {'setting':<36} | {'prefetch':>8} | {'waiting':>8} | {'ms per step':>11} |")
        for (setting, p), (share, step) in learner.items():
            print(f"| {setting:<36} | {p:>8} | {share * 100:7.1f}% | {step * 1e3:11.1f} |")
    save(args, writes, lat, learner, overhead, seconds, steps, init_s)


TORCHRL_WRITES = "torchrl 0.14 RayReplayBuffer (blocking)"
PLAIN_WRITES = "plain Ray actor, TensorDict args (blocking)"


def save(args, writes, lat, learner, overhead, seconds, steps, init_s) -> None:
    """benchmarks/results/bench_ray.json: writes against TorchRL's RayReplayBuffer and a plain
    actor, sampling latency against TorchRL's, the learner's wait against no prefetch."""
    rows = []
    trl = writes.get(TORCHRL_WRITES, (None, None))
    for label, (one, many) in writes.items():
        name = label.split(" (")[0]
        if label == TORCHRL_WRITES:
            continue
        for unit_label, mine, theirs in (
            ("1 row per call", one, trl[0]),
            ("1000-row chunks", many, trl[1]),
        ):
            peer = "torchrl RayReplayBuffer" if theirs is not None else None
            rows.append(
                row(
                    f"writes, {unit_label}: {name}",
                    "rows/s",
                    mine,
                    peer=peer,
                    peer_value=theirs,
                    better="higher",
                )
            )
    if writes.get(PLAIN_WRITES):
        plain = writes[PLAIN_WRITES]
        for label in (
            "mixreplay handle: rb.add / rb.extend (blocking)",
            "mixreplay writer: w.add / w.extend (batched, in flight)",
        ):
            if label in writes:
                rows.append(
                    row(
                        f"writes, 1000-row chunks: {label.split(' (')[0]}",
                        "rows/s",
                        writes[label][1],
                        peer="plain Ray actor",
                        peer_value=plain[1],
                        better="higher",
                    )
                )
    trl_lat = lat.get("torchrl RayReplayBuffer sample(256)")
    for label, (med, _) in lat.items():
        if label.startswith("torchrl"):
            continue
        peer = "torchrl RayReplayBuffer sample(256)" if trl_lat and "sample" in label else None
        rows.append(
            row(
                f"latency, median: {label}",
                "ms",
                med * 1e3,
                peer=peer,
                peer_value=trl_lat[0] * 1e3 if peer else None,
            )
        )
    for (setting, p), (share, _) in learner.items():
        if p == 0:
            continue
        rows.append(
            row(
                f"learner's time waiting, {setting}, prefetch {p}",
                "%",
                100 * share,
                peer="prefetch 0",
                peer_value=100 * learner[(setting, 0)][0],
            )
        )
    if overhead is not None:
        rows.append(
            row(
                f"actor's write of one {overhead['rows']}-row message with a chunk id",
                "us",
                overhead["chunked"] * 1e6,
                peer="without a chunk id",
                peer_value=overhead["plain"] * 1e6,
            )
        )
        rows.append(
            row(
                "the writer's kept copy of that message",
                "us",
                overhead["copy"] * 1e6,
                peer="the actor's write without a chunk id",
                peer_value=overhead["plain"] * 1e6,
            )
        )
    import ray

    write_results(
        "bench_ray" + ("" if args.only is None else f"_{args.only}"),
        command_line(),
        rows,
        settings={"seconds_per_throughput_run": seconds, "learner_steps": steps,
                  "collectors": 2, "ray": ray.__version__, "ray_init_s": round(init_s, 2),
                  "auth_mode": os.environ.get("RAY_AUTH_MODE"), "torch_threads": 1},
        notes=(
            "A local Ray cluster (ray.init(num_cpus=2)) on the same machine as everything else: "
            "2 collector actors writing Hopper-shaped rows (112 bytes packed) into one "
            "buffer actor; the peers (TorchRL's RayReplayBuffer, a plain actor holding the "
            "same buffer) in the same process tree with the same rows. Latency: medians of "
            "single calls. The learner does 10 ms of work per 256-row batch. Oversubscribed "
            "cores make these figures vary by about a third between runs."
        ),
    )  # fmt: skip


def print_writes(writes: dict) -> None:
    print("Aggregate writes, 2 collector processes, Hopper-shaped rows (112 bytes packed), rows/s")
    base = writes["plain Ray actor, TensorDict args (blocking)"]
    print(
        f"| {'method':<58} | {'1 row per call':>15} | {'1000-row chunks':>16} | {'vs plain actor':>15} |"
    )
    print(f"|{'-' * 60}|{'-' * 17}:|{'-' * 18}:|{'-' * 17}:|")
    for label, (one, many) in writes.items():
        ratio = "n/a" if many is None or not base[1] else f"{many / base[1]:.1f}x"
        print(f"| {label:<58} | {fmt_rate(one):>15} | {fmt_rate(many):>16} | {ratio:>15} |")


if __name__ == "__main__":
    main()
