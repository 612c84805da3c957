"""Cost curves: how sampling time and memory grow with batch, ring, row and dataset size.

Draws ``docs/perf.png`` (four panels) and prints one table per curve, mixreplay against
torchrl 0.14.1 measured in the same process:

1. ``batch``: mixed ``sample(B)`` time, B = 64 … 8192, ``OfflineToOnlineReplayBuffer`` over a
   1,000,000-row offline dataset and a 100,000-row online ring, Hopper-shaped rows
   (observation f32[11], action f32[3], next observation f32[11], reward f32[1],
   done/terminated bool[1] at the root and under ``next``: 108 bytes of data);
2. ``capacity``: mixed ``sample(256)`` time against ring capacity C = 10k … 10M rows (the
   offline dataset holds C rows too, so both halves of the batch come from C rows);
   Pendulum-shaped rows, small so 10M rows fit in memory (observation f32[3], action f32[1],
   next observation f32[3], reward f32[1], done/terminated bool[1] at the root and under
   ``next``: 36 bytes of data);
3. ``rowsize``: mixed ``sample(256)`` time against row size, 100 B … 100 KB of data per row
   (observation and next observation f32[d] of growing d, plus action f32[1], reward f32[1]
   and four bool[1] flags); each source holds 64 MiB of rows (at least 1,024 rows), so
   every point samples from about the same amount of memory;
4. ``memory``: memory of a process that opens a memmap dataset (``write_memmap_dataset``,
   ``load_memmap``, Hopper-shaped rows, 112 bytes packed) and draws 1,000 ``sample(256)``,
   against the dataset's size; each size in a fresh process, the file just written (in the
   page cache). Plotted, as growth from before the open: anonymous memory (private: what the
   process really costs; ``Anonymous`` of ``/proc/self/smaps_rollup``), the dataset file's
   pages mapped into the process (``Rss`` of its mapping in ``/proc/self/smaps``: page
   cache, shared and clean, which the kernel takes back whenever it needs the memory), and
   total RSS (``VmRSS``: both, plus any other file page the process touched).

Each timing point: both libraries are built, then every point of a curve and both libraries
are timed in the same ``--rounds`` rounds (the order flips every round) of about ``--seconds``
per point and library; every call is timed on its own, and a round keeps its median call.
A call's time is the CPU time of the calling thread (``--clock cpu``, the default with one
torch thread): on an idle machine the same as the elapsed time of this single-threaded work,
on a shared one without the time the scheduler hands to other processes (which a median
alone cannot remove from calls of several milliseconds). ``--clock wall`` times elapsed time.
The curve is the best round; the band runs from the best round to the median one; the tables
give best, median and worst. The speed-up is the median over rounds of TorchRL's time ÷
mixreplay's in the same round (the two are timed back to back), with its range.
Torch runs with ``--threads`` intra-op threads: 1 by default, the steadiest figures on a
shared machine and the fairest to TorchRL, whose per-key ``x[idx]`` gathers slow down most
when threads contend for cores.

    python benchmarks/bench_curves.py                      # all four curves (~6 min), docs/perf.png
    python benchmarks/bench_curves.py --curve batch        # one curve; the others are redrawn
                                                           # from docs/perf.json (the last run)
    python benchmarks/bench_curves.py --replot             # redraw docs/perf.png from docs/perf.json
    python benchmarks/bench_curves.py --quick --out /tmp/perf.png   # tiny sizes: a smoke test

The measured numbers are saved next to the figure (``--out`` with the suffix ``.json``).
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ["MPLBACKEND"] = "Agg"  # draw to files only, never a window

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

CURVES = ("batch", "capacity", "rowsize", "memory")
MiB = 2**20


# -- sizes -------------------------------------------------------------------------------------


def sizes(quick: bool) -> dict[str, Any]:
    if quick:
        return {
            "batch": {"offline": 5_000, "online": 1_000, "batches": [64, 256, 1024]},
            "capacity": {"capacities": [1_000, 10_000]},
            "rowsize": {"row_bytes": [100, 1_000, 10_000], "source_mb": 1.0},
            "memory": {"dataset_mb": [1.0, 4.0], "samples": 20},
        }
    return {
        "batch": {
            "offline": 1_000_000,
            "online": 100_000,
            "batches": [64, 128, 256, 512, 1024, 2048, 4096, 8192],
        },
        "capacity": {
            "capacities": [10_000, 30_000, 100_000, 300_000, 1_000_000, 3_000_000, 10_000_000]
        },
        "rowsize": {
            "row_bytes": [100, 300, 1_000, 3_000, 10_000, 30_000, 100_000],
            "source_mb": 64.0,
        },
        "memory": {"dataset_mb": [64.0, 256.0, 1024.0, 4096.0], "samples": 1000},
    }


# -- rows --------------------------------------------------------------------------------------


def obs_rows(n: int, d: int, seed: int) -> Any:
    """``n`` TED rows with observation and next observation f32[d], action f32[1], reward f32[1]."""
    import torch
    from tensordict import TensorDict

    g = torch.Generator().manual_seed(seed)
    flags = torch.rand(n, 1, generator=g) < 0.01
    return TensorDict(
        {
            "observation": torch.randn(n, d, generator=g),
            "action": torch.rand(n, 1, generator=g) * 2 - 1,
            "done": flags.clone(),
            "terminated": flags.clone(),
            "next": {
                "observation": torch.randn(n, d, generator=g),
                "reward": torch.randn(n, 1, generator=g),
                "done": flags.clone(),
                "terminated": flags.clone(),
            },
        },
        batch_size=[n],
    )


def obs_dim_for(row_bytes: int) -> int:
    """The observation size d that gives ``row_bytes`` of data: 2 × 4d + 4 + 4 + 4 × 1."""
    return max(1, round((row_bytes - 12) / 8))


def data_bytes(d: int) -> int:
    return 8 * d + 12


# -- machine -----------------------------------------------------------------------------------


def mem_available() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


def memory_now() -> dict[str, int]:
    """Resident memory of this process, in bytes, split by kind (Linux)."""
    out: dict[str, int] = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "RssAnon", "RssFile"):
                out[key] = int(value.split()[0]) * 1024
    with open("/proc/self/smaps_rollup") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("Anonymous", "Private_Clean", "Private_Dirty", "Shared_Clean", "Pss"):
                out[key] = int(value.split()[0]) * 1024
    return out


def mapped_rss(path: str) -> int:
    """Resident bytes of this process's mappings of the file ``path`` (Linux smaps)."""
    total, inside = 0, False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()
            if head and "-" in head[0] and len(head) >= 5 and not head[0].endswith(":"):
                inside = len(head) >= 6 and head[5] == path
            elif inside and head and head[0] == "Rss:":
                total += int(head[1]) * 1024
    return total


def machine() -> dict[str, Any]:
    import tensordict
    import torch

    try:
        import torchrl

        trl = torchrl.__version__
    except Exception as err:  # noqa: BLE001 - reported, the curves say so
        trl = f"unavailable ({type(err).__name__})"
    import mixreplay

    return {
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "tensordict": tensordict.__version__,
        "torchrl": trl,
        "mixreplay": mixreplay.__version__,
        "threads": torch.get_num_threads(),
        "cpus": os.cpu_count(),
        "load": round(os.getloadavg()[0], 2),
    }


# -- timing ------------------------------------------------------------------------------------


def calibrate(fn: Callable[[], Any], seconds: float) -> int:
    """Calls per round so that one round lasts about ``seconds`` (warms ``fn`` up too)."""
    fn()
    n, dt = 1, 0.0
    while True:
        t = time.perf_counter()
        for _ in range(n):
            fn()
        dt = time.perf_counter() - t
        if dt >= seconds / 10 or n >= 1 << 16:
            break
        n *= 2
    return max(3, round(n * seconds / max(dt, 1e-9)))


CLOCKS = {"cpu": time.thread_time, "wall": time.perf_counter}


def clock_overhead(clock: Callable[[], float]) -> float:
    """Seconds that timing an empty interval with ``clock`` reads (subtracted from each call)."""
    gaps = []
    for _ in range(2000):
        t = clock()
        gaps.append(clock() - t)
    return statistics.median(gaps)


def alternate(
    fns: dict[Any, Callable[[], Any]], rounds: int, seconds: float, clock: str
) -> dict[Any, list]:
    """The median µs per call of each function in each round.

    Every call is timed on its own and a round keeps its median call: on a machine shared with
    other work, a call the scheduler interrupted is an outlier the median ignores (a mean
    would not). With ``clock="cpu"`` a call's time is the CPU time of this thread
    (``time.thread_time``): the wall time of this single-threaded work on an idle machine,
    without the time the scheduler gave to other processes. The order of the functions flips
    every round, so all of them see the same drift of the machine's load.
    """
    read = CLOCKS[clock]
    numbers = {name: calibrate(fn, seconds) for name, fn in fns.items()}
    times: dict[Any, list[float]] = {name: [] for name in fns}
    names = list(fns)
    overhead = clock_overhead(read)
    gc.collect()  # once per curve: a full collection costs ~0.5 s with torch loaded
    for r in range(rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            fn, calls = fns[name], [0.0] * numbers[name]
            gc.disable()
            for i in range(len(calls)):
                t = read()
                fn()
                calls[i] = read() - t
            gc.enable()
            times[name].append((statistics.median(calls) - overhead) * 1e6)
    return times


def spread(values: list[float]) -> list[float]:
    """[best, median, worst] of the rounds."""
    v = sorted(values)
    return [v[0], v[len(v) // 2], v[-1]]


def summarize(x: float, times: dict[str, list[float]]) -> dict[str, Any]:
    """A point of a curve: each library's best round (and spread), and the speed-up as the
    median over rounds of TorchRL's time ÷ mixreplay's in the same round (back to back)."""
    m, t = times["mixreplay"], times.get("torchrl")
    point: dict[str, Any] = {"x": x, "mixreplay_us": min(m), "mixreplay_range": spread(m)}
    if t:
        ratios = [b / a for a, b in zip(m, t)]
        point.update(
            torchrl_us=min(t),
            torchrl_range=spread(t),
            speedup=statistics.median(ratios),
            speedup_range=[min(ratios), max(ratios)],
        )
    return point


# -- the mixed buffers -------------------------------------------------------------------------


def build_mixreplay(chunks: Callable[[], Any], offline: int, online: int) -> Any:
    import mixreplay

    off = mixreplay.ReplayBuffer(storage=mixreplay.LazyTensorStorage(offline))
    for c in chunks():
        off.extend(c)
    rb = mixreplay.OfflineToOnlineReplayBuffer(
        off, online_capacity=online, offline_fraction=0.5, batch_size=256, generator=0
    )
    for c in chunks(seed_offset=1000, rows=online):
        rb.extend(c)
    return rb


def build_torchrl(chunks: Callable[[], Any], offline: int, online: int) -> Any:
    from torchrl.data import LazyTensorStorage, OfflineToOnlineReplayBuffer, ReplayBuffer

    logging.getLogger("torchrl").setLevel(logging.WARNING)  # not one INFO line per storage

    off = ReplayBuffer(storage=LazyTensorStorage(offline))
    for c in chunks():
        off.extend(c)
    rb = OfflineToOnlineReplayBuffer(off, online_capacity=online, offline_fraction=0.5)
    for c in chunks(seed_offset=1000, rows=online):
        rb.extend(c)
    return rb


def chunker(make: Callable[[int, int], Any], rows: int, chunk: int = 1 << 20) -> Callable:
    """``chunks(seed_offset=0, rows=rows)``: the rows to fill a source with, 1M rows at a time."""

    def chunks(seed_offset: int = 0, rows: int = rows):
        for i, a in enumerate(range(0, rows, chunk)):
            yield make(min(chunk, rows - a), seed_offset + i)

    return chunks


def build_pair(make, offline: int, online: int, est_bytes: int, peers: bool) -> tuple[dict, str]:
    """Both libraries' buffers; TorchRL's only when it fits (else the reason it does not)."""
    chunks = chunker(make, offline)
    buffers = {"mixreplay": build_mixreplay(chunks, offline, online)}
    if not peers:
        return buffers, "not run (--no-torchrl)"
    need, have = est_bytes, mem_available()
    if need > 0.6 * have:
        return buffers, (
            f"stopped: its buffers need ~{need / 2**30:.1f} GiB, {have / 2**30:.1f} GiB available"
        )
    t = time.perf_counter()
    try:
        buffers["torchrl"] = build_torchrl(chunks, offline, online)
    except (MemoryError, RuntimeError) as err:
        return buffers, f"stopped: {type(err).__name__}: {str(err).splitlines()[0][:80]}"
    return buffers, f"built in {time.perf_counter() - t:.1f} s"


def time_points(cases: list[tuple[float, dict, int]], args) -> list[dict]:
    """Time ``sample(batch)`` of every buffer of every ``(x, buffers, batch)`` case.

    All points of a curve are timed in the same rounds (every point, both libraries, the order
    reversed every round), so a change of the machine's load shifts the whole curve rather
    than bending it.
    """
    fns = {
        (i, lib): (lambda rb=rb, b=batch: rb.sample(b))
        for i, (_, buffers, batch) in enumerate(cases)
        for lib, rb in buffers.items()
    }
    times = alternate(fns, args.rounds, args.seconds, args.clock)
    return [
        summarize(x, {lib: times[(i, lib)] for lib in buffers})
        for i, (x, buffers, _) in enumerate(cases)
    ]


# -- curves 1-3: sampling time -----------------------------------------------------------------


def curve_batch(args, cfg) -> dict:
    from bench_sampling import hopper_rows

    buffers, note = build_pair(
        hopper_rows, cfg["offline"], cfg["online"], 0, peers=not args.no_torchrl
    )
    points = time_points([(b, buffers, b) for b in cfg["batches"]], args)
    return {
        "title": "mixed sample(B) against batch size B",
        "setup": f"offline {cfg['offline']:,} + online {cfg['online']:,} Hopper-shaped rows "
        "(108 B of data), offline_fraction 0.5",
        "x": "batch size (rows)",
        "points": points,
        "torchrl_note": note,
        "torchrl_stopped_at": None,
    }


def curve_capacity(args, cfg) -> dict:
    def pendulum(n: int, seed: int):
        return obs_rows(n, 3, seed)

    cases, stopped = [], None
    for cap in cfg["capacities"]:
        # TorchRL keeps one tensor per key (36 B a row here, 48 with padding), 2 sources.
        buffers, note = build_pair(
            pendulum, cap, cap, 2 * cap * 48, peers=not args.no_torchrl and not stopped
        )
        if "torchrl" not in buffers and stopped is None and not args.no_torchrl:
            stopped = {"x": cap, "why": note}
        cases.append((cap, buffers, 256))
        print(f"  capacity {cap:,}: TorchRL {note}", flush=True)
    points = time_points(cases, args)
    for point, (_, buffers, _) in zip(points, cases):
        point["packed_bytes"] = buffers["mixreplay"].online_buffer.storage.row_bytes
    del cases, buffers
    return {
        "title": "mixed sample(256) against ring capacity C",
        "setup": "online ring of capacity C, full, + offline dataset of C rows; Pendulum-shaped "
        "rows (36 B of data)",
        "x": "ring capacity C (rows; the offline dataset holds C rows too)",
        "points": points,
        "torchrl_note": "",
        "torchrl_stopped_at": stopped,
    }


def curve_rowsize(args, cfg) -> dict:
    cases, stopped = [], None
    for target in cfg["row_bytes"]:
        d = obs_dim_for(target)
        nbytes = data_bytes(d)
        rows = max(1024, int(cfg["source_mb"] * MiB) // nbytes)
        buffers, note = build_pair(
            lambda n, seed, d=d: obs_rows(n, d, seed),
            rows,
            rows,
            2 * rows * nbytes,
            peers=not args.no_torchrl and not stopped,
        )
        if "torchrl" not in buffers and stopped is None and not args.no_torchrl:
            stopped = {"x": nbytes, "why": note}
        cases.append((nbytes, buffers, 256))
    points = time_points(cases, args)
    for point, (_, buffers, _) in zip(points, cases):
        storage = buffers["mixreplay"].online_buffer.storage
        point.update(rows=len(storage), packed_bytes=storage.row_bytes)
    del cases, buffers
    return {
        "title": "mixed sample(256) against row size",
        "setup": "observation + next observation f32[d], action, reward, 4 flags; "
        f"{cfg['source_mb']:g} MiB of rows per source (at least 1,024 rows)",
        "x": "row size (bytes of data per transition)",
        "points": points,
        "torchrl_note": "",
        "torchrl_stopped_at": stopped,
    }


# -- curve 4: memory of a memmap dataset ---------------------------------------------------------


def child_memory(path: str, samples: int, threads: int) -> dict:
    """Run in a fresh process: open the dataset, sample, report memory growth."""
    import torch

    from mixreplay.datasets.memmap import load_memmap

    torch.set_num_threads(threads)
    gc.collect()
    m0 = memory_now()
    u0 = resource.getrusage(resource.RUSAGE_SELF)
    ds = load_memmap(path, batch_size=256, generator=0)
    m1 = memory_now()
    ds.sample()
    t = time.perf_counter()
    for _ in range(samples - 1):
        ds.sample()
    us = (time.perf_counter() - t) / max(1, samples - 1) * 1e6
    gc.collect()
    m2 = memory_now()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    m2["dataset_pages"] = mapped_rss(str(Path(path).resolve() / "rows.bin"))
    m0["dataset_pages"] = 0
    return {
        "rows": len(ds),
        "before": m0,
        "open": {k: m1[k] - m0[k] for k in m1},
        "sampled": {k: m2[k] - m0[k] for k in m0},
        "sample_us": us,
        "faults": {  # page faults while opening and sampling; major ones read the disk
            "minor": usage.ru_minflt - u0.ru_minflt,
            "major": usage.ru_majflt - u0.ru_majflt,
        },
    }


def curve_memory(args, cfg) -> dict:
    from bench_datasets import ROW_BYTES, hopper_chunks

    from mixreplay.datasets.memmap import write_memmap_dataset

    points, stopped = [], None
    scratch = Path(tempfile.mkdtemp(prefix="mixreplay-curves-", dir=args.dir))
    try:
        for mb in cfg["dataset_mb"]:
            rows = int(mb * MiB) // ROW_BYTES
            free = shutil.disk_usage(scratch).free
            if rows * ROW_BYTES > free - 2 * 2**30:
                stopped = {"x": mb, "why": f"stopped: {free / 2**30:.1f} GiB of free disk"}
                break
            path = scratch / f"hopper-{mb:g}mb"
            t = time.perf_counter()
            write_memmap_dataset(
                path, hopper_chunks(rows), episode_starts=range(0, rows, 1000), overwrite=True
            )
            write_s = time.perf_counter() - t
            size = (path / "rows.bin").stat().st_size
            cmd = [sys.executable, __file__, "--child", str(path), str(cfg["samples"])]
            cmd += ["--threads", str(args.threads)]
            out = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if out.returncode:
                raise RuntimeError(f"memory child failed:\n{out.stderr[-3000:]}")
            r = json.loads(out.stdout.strip().splitlines()[-1])
            r.update(x=size / MiB, file_bytes=size, write_s=write_s)
            points.append(r)
            print(f"  {size / MiB:,.0f} MiB: written in {write_s:.1f} s, measured", flush=True)
            shutil.rmtree(path)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return {
        "title": "memory of a process sampling a memmap dataset",
        "setup": f"load_memmap + {cfg['samples']} sample(256), Hopper-shaped rows "
        f"({ROW_BYTES} B packed), each file just written (so in the page cache, but for pages "
        "the kernel evicted: the major faults); fresh process per size",
        "x": "dataset size (MiB on disk)",
        "points": points,
        "torchrl_note": "",
        "torchrl_stopped_at": stopped,
    }


# -- the report --------------------------------------------------------------------------------


def command(args, curve: str) -> str:
    parts = ["python benchmarks/bench_curves.py", f"--curve {curve}"]
    if args.quick:
        parts.append("--quick")
    for flag, value in args.given.items():
        parts.append(f"--{flag} {value}")
    if args.threads != 1:
        parts.append(f"--threads {args.threads}")
    if args.clock != ("cpu" if args.threads == 1 else "wall"):
        parts.append(f"--clock {args.clock}")
    if args.no_torchrl:
        parts.append("--no-torchrl")
    return " ".join(parts)


def fmt_us(us: float) -> str:
    return f"{us:,.0f}" if us >= 100 else f"{us:.1f}"


def fmt_x(curve: str, x: float) -> str:
    if curve == "rowsize":
        return f"{x:,.0f} B"
    if curve == "memory":
        return f"{x:,.0f} MiB"
    return f"{x:,.0f}"


def print_table(name: str, res: dict) -> None:
    print(f"\n### curve {name}: {res['title']}")
    print(f"command: {res['command']}")
    print(f"setup: {res['setup']}; {res['meta']}")
    if name == "memory":
        print(
            "| dataset | rows | anonymous growth | anonymous ÷ dataset | dataset pages resident "
            "| total RSS growth | sample(256) µs | page faults: minor, major |"
        )
        print("|---:|---:|---:|---:|---:|---:|---:|---:|")
        for p in res["points"]:
            s = p["sampled"]
            print(
                f"| {fmt_x(name, p['x'])} | {p['rows']:,} | {s['Anonymous'] / MiB:.2f} MiB "
                f"| {100 * s['Anonymous'] / p['file_bytes']:.2g} % | {s['dataset_pages'] / MiB:.1f} MiB "
                f"| {s['VmRSS'] / MiB:.1f} MiB | {p['sample_us']:.1f} "
                f"| {p['faults']['minor']:,}, {p['faults']['major']:,} |"
            )
    else:
        print(
            f"| {res['x'].split(' (')[0]} | mixreplay µs: best (median, worst) "
            "| TorchRL µs: best (median, worst) | mixreplay/TorchRL | speed-up: median (range) |"
        )
        print("|---:|---:|---:|---:|---:|")
        for p in res["points"]:
            _, med, hi = p["mixreplay_range"]
            m = f"{fmt_us(p['mixreplay_us'])} ({fmt_us(med)}, {fmt_us(hi)})"
            t = r = s = "—"
            if "torchrl_us" in p:
                _, med, hi = p["torchrl_range"]
                t = f"{fmt_us(p['torchrl_us'])} ({fmt_us(med)}, {fmt_us(hi)})"
                r = f"{1 / p['speedup']:.3f}"
                lo, hi = p["speedup_range"]
                s = f"{p['speedup']:.1f}× ({lo:.1f}–{hi:.1f})"
            print(f"| {fmt_x(name, p['x'])} | {m} | {t} | {r} | {s} |")
    if res.get("torchrl_stopped_at"):
        st = res["torchrl_stopped_at"]
        who = "the dataset" if name == "memory" else "the TorchRL"
        print(f"{who} curve stops at {fmt_x(name, st['x'])}: {st['why']}")


def si(value: float, _pos: object = None) -> str:
    """Tick labels a reader takes in at a glance: 300, 3k, 10M."""
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:g}{suffix}"
    return f"{value:g}"


def minor_label(value: float, _pos: object = None) -> str:
    """Label 2× and 5× ticks too: a curve spanning less than a decade still gets numbers."""
    import math

    if value <= 0:
        return ""
    lead = round(value / 10 ** math.floor(math.log10(value) + 1e-9))
    return si(value) if lead in (2, 5) else ""


def draw(results: dict, out: Path, env: dict) -> None:
    import textwrap

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    fig, axes = plt.subplots(2, 2, figsize=(12.5, 10))
    for ax, name in zip(axes.flat, CURVES):
        res = results.get(name)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.grid(True, which="major", alpha=0.3)
        if res is None or not res["points"]:
            ax.set_title(f"{name}: not measured")
            ax.set_axis_off()
            ax.text(
                0.5,
                0.5,
                f"run: python benchmarks/bench_curves.py --curve {name}",
                ha="center",
                transform=ax.transAxes,
            )
            continue
        ax.set_title(res["title"], fontsize=11)
        notes = textwrap.wrap(f"{res['setup']}; {res['meta']}", 80)
        ax.set_xlabel("\n".join([res["x"], *notes]), fontsize=9)
        if name == "memory":
            draw_memory(ax, res["points"])
        else:
            draw_times(ax, res["points"], env)
        for axis in (ax.xaxis, ax.yaxis):
            axis.set_major_formatter(FuncFormatter(si))
            axis.set_minor_formatter(FuncFormatter(minor_label))
        st = res.get("torchrl_stopped_at")
        if st:
            who = "dataset curve" if name == "memory" else "TorchRL curve"
            ax.text(
                0.98,
                0.03,
                f"{who} stops at {fmt_x(name, st['x'])}:\n"
                + "\n".join(textwrap.wrap(st["why"], 50)),
                ha="right",
                va="bottom",
                fontsize=8,
                color="0.2",
                transform=ax.transAxes,
            )
    fig.suptitle(
        f"mixreplay {env.get('mixreplay', '')} against TorchRL {env.get('torchrl', '')}, "
        f"torch {env.get('torch', '')}, {env.get('cpus', '?')} CPUs (a shared machine)\n"
        "times: median call of the best round, the libraries alternated; bands: best to median "
        "round;\nboxed labels: TorchRL's time ÷ mixreplay's, median over the rounds",
        fontsize=10,
    )
    fig.tight_layout(rect=(0, 0, 1, 0.96), h_pad=2.0)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)


def annotated(points: list) -> list:
    """First, middle and last point: enough ratios to read the trend without clutter."""
    if len(points) <= 3:
        return points
    return [points[0], points[len(points) // 2], points[-1]]


def draw_times(ax, pts: list, env: dict) -> None:
    colors = {"mixreplay": "#1f77b4", "torchrl": "#d62728"}
    labels = {"mixreplay": "mixreplay", "torchrl": f"TorchRL {env.get('torchrl', '')}"}
    for lib in ("mixreplay", "torchrl"):
        have = [p for p in pts if f"{lib}_us" in p]
        if not have:
            continue
        xs = [p["x"] for p in have]
        ax.plot(xs, [p[f"{lib}_us"] for p in have], "o-", color=colors[lib], label=labels[lib])
        ax.fill_between(
            xs,
            [p[f"{lib}_range"][0] for p in have],
            [p[f"{lib}_range"][1] for p in have],  # the better half of the rounds
            color=colors[lib],
            alpha=0.15,
            linewidth=0,
        )
    for p in annotated([p for p in pts if "speedup" in p]):
        ax.annotate(
            f"{p['speedup']:.1f}×",
            (p["x"], (p["mixreplay_us"] * p["torchrl_us"]) ** 0.5),  # halfway on a log axis
            ha="center",
            va="center",
            fontsize=9,
            bbox={"boxstyle": "round,pad=0.2", "fc": "white", "ec": "0.7"},
        )
    ax.set_ylabel("time per sample() call (µs)")
    ax.legend(loc="upper left", fontsize=9)


def draw_memory(ax, pts: list) -> None:
    xs = [p["x"] for p in pts]
    floor = 0.01  # MiB: a log axis cannot show 0; less growth than this is drawn at it
    series = (
        ("Anonymous", "anonymous (private) memory: what the process costs", "#1f77b4", "o-"),
        (
            "dataset_pages",
            "dataset pages mapped (page cache: shared, reclaimable)",
            "#ff7f0e",
            "s--",
        ),
        ("VmRSS", "total RSS (anonymous + every file-backed page)", "0.55", "^:"),
    )
    for key, label, color, style in series:
        ys = [max(floor, p["sampled"][key] / MiB) for p in pts]
        ax.plot(xs, ys, style, color=color, label=label, markersize=5)
    ax.plot(xs, xs, "-", color="0.8", linewidth=3, label="dataset size (loaded into RAM)", zorder=0)
    for p in annotated(pts):
        anon = p["sampled"]["Anonymous"] / MiB
        ax.annotate(
            f"{anon:.2f} MiB\n= {100 * anon / p['x']:.2g} %",
            (p["x"], max(floor, anon)),
            textcoords="offset points",
            xytext=(0, 7),
            ha="center",
            fontsize=8,
        )
    ax.set_ylabel("growth after open + sampling (MiB)")
    ax.margins(x=0.1)
    ax.legend(loc="center right", fontsize=8)


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(
        allow_abbrev=False,
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--curve", choices=(*CURVES, "all"), action="append", help="repeatable")
    p.add_argument("--quick", action="store_true", help="tiny sizes, one round: a smoke test")
    p.add_argument("--rounds", type=int, default=None, help="default 9 (--quick: 2)")
    p.add_argument(
        "--seconds",
        type=float,
        default=None,
        help="per library, round and point; default 0.1 (--quick: 0.01)",
    )
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    p.add_argument(
        "--clock",
        choices=tuple(CLOCKS),
        default=None,
        help="cpu: CPU time of the timing thread (the default with --threads 1: immune to other "
        "processes' load); wall: elapsed time (the default, and the only choice, with more threads)",
    )
    p.add_argument("--out", type=Path, default=HERE.parent / "docs" / "perf.png")
    p.add_argument("--replot", action="store_true", help="only redraw from the saved numbers")
    p.add_argument("--no-torchrl", action="store_true", help="measure mixreplay only")
    p.add_argument("--dir", default=None, help="scratch directory of the memory curve")
    p.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    given = {"rounds": args.rounds, "seconds": args.seconds}  # echoed in the commands
    args.given = {k: v for k, v in given.items() if v is not None}
    if args.rounds is None:
        args.rounds = 2 if args.quick else 9
    if args.seconds is None:
        args.seconds = 0.01 if args.quick else 0.1
    if args.clock is None:
        args.clock = "cpu" if args.threads == 1 else "wall"
    if args.clock == "cpu" and args.threads != 1:
        p.error(
            f"--clock cpu times the calling thread only, so it needs --threads 1, got "
            f"--threads {args.threads}: pass --clock wall"
        )

    if args.child:
        import torch

        torch.set_num_threads(args.threads)
        print(json.dumps(child_memory(args.child[0], int(args.child[1]), args.threads)))
        return {}

    warnings.filterwarnings("ignore")
    saved_path = args.out.with_suffix(".json")
    saved = json.loads(saved_path.read_text()) if saved_path.exists() else {}
    wanted = [] if args.replot else list(CURVES)
    if args.curve and "all" not in args.curve:
        wanted = [c for c in CURVES if c in args.curve]
    results = {k: v for k, v in saved.get("curves", {}).items() if not args.quick}
    env = saved.get("env", {})
    if wanted:
        import torch

        torch.set_num_threads(args.threads)
        env = machine()
    cfgs = sizes(args.quick)
    measure = {
        "batch": curve_batch,
        "capacity": curve_capacity,
        "rowsize": curve_rowsize,
        "memory": curve_memory,
    }
    for name in wanted:
        print(f"measuring curve {name} ...", flush=True)
        t, load = time.perf_counter(), os.getloadavg()[0]
        res = measure[name](args, cfgs[name])
        res["command"] = command(args, name)
        timing = (
            ""
            if name == "memory"
            else f"{args.clock} time, best of {args.rounds} rounds of ~{args.seconds:g} s, "
        )
        res["meta"] = (
            f"{time.strftime('%Y-%m-%d %H:%M')}, {timing}{env['threads']} torch thread(s), "
            f"load {load:.1f}→{os.getloadavg()[0]:.1f}, took {time.perf_counter() - t:.0f} s"
        )
        results[name] = res
    for name in CURVES:
        if name in results:
            print_table(name, results[name])
    if args.quick and args.out == p.get_default("out"):
        print("\n(--quick: docs/perf.png left as it is; pass --out to draw the quick curves)")
        return results
    draw(results, args.out, env)
    saved_path.write_text(json.dumps({"env": env, "curves": results}, indent=1))
    print(f"\nwrote {args.out} and {saved_path}")
    if set(wanted) == set(CURVES):  # every curve of this run: one results file
        save(args, results)
    return results


def save(args, results: dict) -> None:
    """benchmarks/results/bench_curves.json: every timed point against TorchRL's (best rounds),
    and the memory curve's growth per dataset size."""
    from results import command_line, row, write_results

    rows = []
    for name in ("batch", "capacity", "rowsize"):
        what = {
            "batch": "mixed sample(B), B = {}",
            "capacity": "mixed sample(256), ring of {} rows",
            "rowsize": "mixed sample(256), rows of {}",
        }[name]
        for p in results[name]["points"]:
            trl = p.get("torchrl_us")
            rows.append(
                row(
                    what.format(fmt_x(name, p["x"])),
                    "us",
                    p["mixreplay_us"],
                    peer="torchrl" if trl else None,
                    peer_value=trl,
                )
            )
    for p in results["memory"]["points"]:
        sampled = p["sampled"]
        size = fmt_x("memory", p["x"])
        rows.append(
            row(
                f"memmap dataset of {size}: anonymous memory growth",
                "MiB",
                sampled["Anonymous"] / MiB,
            )
        )
        rows.append(
            row(
                f"memmap dataset of {size}: dataset pages mapped",
                "MiB",
                sampled["dataset_pages"] / MiB,
            )
        )
    write_results(
        "bench_curves",
        command_line(),
        rows,
        settings={"rounds": args.rounds, "seconds_per_point": args.seconds,
                  "clock": args.clock, "torch_threads": args.threads,
                  "setups": {k: v["setup"] for k, v in results.items()}},
        notes=(
            "Mixed sampling time against batch size, ring capacity and row size (mixreplay and "
            "TorchRL's OfflineToOnlineReplayBuffer built from the same rows in one process, "
            "every point of a curve and both libraries timed in the same rounds; each call in "
            "CPU time of the calling thread; the best round), and the memory of a process that "
            "opens a memmap dataset and draws 1,000 sample(256), against the dataset's size "
            "(growth from before the open). docs/perf.json holds every round."
        ),
    )  # fmt: skip


if __name__ == "__main__":
    main()
