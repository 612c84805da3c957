"""Dataset loading: open time and memory of cached datasets, conversion throughput.

    python benchmarks/bench_datasets.py                 # everything (~4 GB of scratch disk)
    python benchmarks/bench_datasets.py --skip-big      # without the 4 GB dataset
    python benchmarks/bench_datasets.py --quick         # tiny sizes, each figure once: a smoke test
    python benchmarks/bench_datasets.py --skip-big --compare-with /path/to/other/checkout

Every figure is measured in a fresh child process, so RSS deltas belong to the
operation alone. Rows are Hopper-shaped: observation f32[11], action f32[3],
next observation f32[11], reward f32[1], done/terminated/truncated bool[1] at
the root and under ``next`` (110 bytes of data, 112 per packed row).

Peers, in the same run: TorchRL 0.14's ``MinariExperienceReplay`` converting the
same Minari dataset (it loads the whole HDF5 file into memory first), and
``TensorDict.load_memmap`` opening the same 1M rows stored as one file per key
(TorchRL's on-disk dataset format).

RSS is split into anonymous memory (private: what a process really costs) and
file-backed pages (the mapped dataset: page cache, shared and reclaimable). The
file-backed part grows with the pages sampling touches, and more: on a file
already in the page cache the kernel maps whole cached folios around each fault,
so random sampling soon maps most of the file. It is memory the kernel can take
back at any time (clean pages of a read-only mapping), not memory the process owns.
Scratch files go to a temp dir (``--dir``) and are deleted at the end.

``--compare-with DIR`` measures every conversion and cached open a second time with
the mixreplay of another checkout (``PYTHONPATH=DIR``; e.g. a git worktree of an
older commit), runs of the two alternating, and prints this tree's rate as a
ratio of that one's: a before/after comparison from one run of one machine.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

OBS, ACT = 11, 3
ROW_BYTES = 112


def rss() -> dict:
    """Current anonymous and file-backed resident memory, in bytes (Linux)."""
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("RssAnon", "RssFile", "VmRSS"):
                out[key] = int(value.split()[0]) * 1024
    return out


def peak_rss() -> int:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def delta(a: dict, b: dict) -> dict:
    return {k: b[k] - a[k] for k in a}


# -- sources ------------------------------------------------------------------------------------


def hopper_chunks(rows: int, chunk: int = 1 << 20, episode_len: int = 1000):
    """TED TensorDicts of Hopper-shaped rows (values cheap to make, not all zero)."""
    import torch
    from tensordict import TensorDict

    for a in range(0, rows, chunk):
        n = min(chunk, rows - a)
        i = torch.arange(a, a + n, dtype=torch.float32).unsqueeze(-1)
        end = ((torch.arange(a, a + n) % episode_len) == episode_len - 1).unsqueeze(-1)
        live = torch.zeros(n, 1, dtype=torch.bool)
        yield TensorDict(
            {
                "observation": i.expand(n, OBS) * 1e-3,
                "action": i.expand(n, ACT) * -1e-3,
                "done": live,
                "terminated": live,
                "truncated": live,
                "next": {
                    "observation": (i + 1).expand(n, OBS) * 1e-3,
                    "reward": i * 1e-6,
                    "done": end,
                    "terminated": torch.zeros_like(end),
                    "truncated": end,
                },
            },
            batch_size=[n],
        )


def write_d4rl_file(path: Path, rows: int, *, with_next: bool, episode_len: int = 1000) -> None:
    import h5py
    import numpy as np

    g = np.random.default_rng(0)
    obs = g.standard_normal((rows + 1, OBS), dtype=np.float32)
    ends = (np.arange(rows) % episode_len) == episode_len - 1
    with h5py.File(path, "w") as f:
        f["observations"] = obs[:-1]
        f["actions"] = g.standard_normal((rows, ACT), dtype=np.float32)
        f["rewards"] = g.standard_normal(rows, dtype=np.float32)
        f["terminals"] = np.zeros(rows, dtype=bool)
        f["timeouts"] = ends
        if with_next:
            f["next_observations"] = obs[1:]


def write_minari(dataset_id: str, rows: int, episode_len: int) -> None:
    import warnings

    import gymnasium as gym
    import minari
    import numpy as np
    from minari.data_collector import EpisodeBuffer

    g = np.random.default_rng(0)
    box = lambda n: gym.spaces.Box(-np.inf, np.inf, (n,), np.float32)  # noqa: E731
    episodes = []
    for e in range(rows // episode_len):
        n = episode_len
        trunc = [False] * (n - 1) + [True]
        episodes.append(
            EpisodeBuffer(
                id=e,
                observations=g.standard_normal((n + 1, OBS), dtype=np.float32),
                actions=g.standard_normal((n, ACT), dtype=np.float32),
                rewards=g.standard_normal(n).tolist(),
                terminations=[False] * n,
                truncations=trunc,
                infos={},
            )
        )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        minari.create_dataset_from_buffers(
            dataset_id,
            episodes,
            observation_space=box(OBS),
            action_space=box(ACT),
            algorithm_name="bench",
            author="bench",
            author_email="bench@example.invalid",
            code_permalink="https://example.invalid",
            description="bench",
        )


# -- child tasks (run in fresh processes) -------------------------------------------------------


def child_open(dataset_id: str, samples: int, cold: bool = False) -> dict:
    import torch

    import mixreplay  # noqa: F401  (imports are timed apart)
    from mixreplay import load_dataset

    t0 = time.perf_counter()
    import mixreplay.datasets.cache  # noqa: F401  (the loader's modules, in every version)

    if dataset_id.startswith("d4rl:"):
        import mixreplay.datasets.d4rl  # noqa: F401  (a cache hit needs no h5py)
    elif dataset_id.startswith("minari:"):
        import minari  # noqa: F401  (the loader resolves IDs with Minari's own API)

        import mixreplay.datasets.minari  # noqa: F401
    t_import = time.perf_counter() - t0
    if cold:  # evict this file's pages from the page cache (this file only): reads come from disk
        rows_file = dataset_id.partition(":")[2] + "/rows.bin"
        fd = os.open(rows_file, os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)
    torch.manual_seed(0)
    r0 = rss()
    t0 = time.perf_counter()
    ds = load_dataset(dataset_id, batch_size=256, generator=0)
    t_open = time.perf_counter() - t0
    r1 = rss()
    for _ in range(10):
        ds.sample()
    r10 = rss()
    t0 = time.perf_counter()
    for _ in range(samples - 10):
        ds.sample()
    t_sample = (time.perf_counter() - t0) / max(1, samples - 10)
    r2 = rss()
    return {
        "rows": len(ds),
        "open_s": t_open,
        "open": delta(r0, r1),
        "sampled10": delta(r0, r10),
        "sampled": delta(r0, r2),
        "sample_s": t_sample,
        "row_bytes": ds.storage.row_bytes,
        "import_s": t_import,
    }


def child_open_tensordict(path: str) -> dict:
    from tensordict import TensorDict

    r0 = rss()
    t0 = time.perf_counter()
    td = TensorDict.load_memmap(path)
    t_open = time.perf_counter() - t0
    return {"rows": td.batch_size[0], "open_s": t_open, "open": delta(r0, rss())}


def child_convert(dataset_id: str, kwargs: dict) -> dict:
    import mixreplay  # noqa: F401
    from mixreplay import load_dataset

    if dataset_id.startswith("minari:"):
        import minari  # noqa: F401

        import mixreplay.datasets.minari  # noqa: F401
    else:
        import h5py  # noqa: F401

        import mixreplay.datasets.d4rl  # noqa: F401
    r0 = rss()
    t0 = time.perf_counter()
    ds = load_dataset(dataset_id, refresh=True, **kwargs)
    dt = time.perf_counter() - t0
    return {
        "rows": len(ds),
        "seconds": dt,
        "rows_per_s": len(ds) / dt,
        "peak_growth": peak_rss() - r0["VmRSS"],
    }


def child_torchrl_minari(dataset_id: str, root: str) -> dict:
    import warnings

    warnings.simplefilter("ignore")
    from torchrl.data.datasets import MinariExperienceReplay

    r0 = rss()
    t0 = time.perf_counter()
    ds = MinariExperienceReplay(dataset_id, batch_size=256, root=root, load_from_local_minari=True)
    dt = time.perf_counter() - t0
    n = len(ds)
    return {"rows": n, "seconds": dt, "rows_per_s": n / dt, "peak_growth": peak_rss() - r0["VmRSS"]}


CHILDREN = {
    "open": child_open,
    "open_tensordict": child_open_tensordict,
    "convert": child_convert,
    "torchrl_minari": child_torchrl_minari,
}


def run_child(task: str, *args, env: dict | None = None) -> dict:
    """Run ``task`` in a fresh process (``env`` overrides the environment, PYTHONPATH included)."""
    cmd = [sys.executable, __file__, "--child", task, json.dumps(args)]
    out = subprocess.run(
        cmd, capture_output=True, text=True, env={**os.environ, **(env or {})}, check=False
    )
    if out.returncode:
        raise RuntimeError(f"child {task} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def best_of(repeat: int, task: str, *args, env: dict, fresh=None, baseline=None) -> dict:
    """The fastest of ``repeat`` runs (the machine is shared: the best run is the steadiest figure).

    With ``baseline`` (an environment selecting another checkout), the same task runs
    there too, alternating with this tree's runs; its best lands under ``"baseline"``.
    """
    runs, base = [], []
    for _ in range(repeat):
        if fresh is not None:
            fresh()
        runs.append(run_child(task, *args, env=env))
        if baseline is not None:
            base.append(run_child(task, *args, env=baseline))
    best = min(runs, key=lambda r: r["seconds"])
    if base:
        best = {**best, "baseline": min(base, key=lambda r: r["seconds"])}
    return best


def vs_baseline(r: dict, key: str = "rows_per_s") -> str:
    """`` (baseline 1,000 rows/s; this tree 1.05×)`` or ``""``."""
    b = r.get("baseline")
    if not b:
        return ""
    if key == "open_s":
        return f" (baseline {b['open_s'] * 1e3:.1f} ms; this tree {b['open_s'] / r['open_s']:.2f}× as fast)"
    return f" (baseline {b[key]:,.0f} rows/s; this tree {r[key] / b[key]:.2f}×)"


# -- the report ----------------------------------------------------------------------------------


def mb(n: float) -> str:
    return f"{n / 2**20:.1f} MB"


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--rows", type=int, default=1_000_000, help="rows of the cached dataset opened"
    )
    parser.add_argument("--big-gb", type=float, default=4.0, help="size of the big memmap dataset")
    parser.add_argument(
        "--convert-rows", type=int, default=100_000, help="rows of the converted sources"
    )
    parser.add_argument("--skip-big", action="store_true", help="skip the big dataset")
    parser.add_argument("--only-big", action="store_true", help="only the big dataset")
    parser.add_argument("--skip-peers", action="store_true", help="skip TorchRL")
    parser.add_argument("--repeat", type=int, default=3, help="conversions: best of this many runs")
    parser.add_argument("--dir", default=None, help="scratch directory (default: a temp dir)")
    parser.add_argument(
        "--compare-with",
        metavar="DIR",
        help="also measure conversions and opens with the mixreplay in DIR (another checkout)",
    )
    parser.add_argument(
        "--quick", action="store_true", help="tiny sizes, every figure measured once (smoke test)"
    )
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    opens_n = 3  # fresh processes per open figure, the best kept
    if args.quick:
        args.rows = args.convert_rows = 2000
        args.big_gb, args.repeat, opens_n = 0.001, 1, 1
    if args.child:
        task, payload = args.child
        print(json.dumps(CHILDREN[task](*json.loads(payload))))
        return

    scratch = Path(tempfile.mkdtemp(prefix="mixreplay-bench-", dir=args.dir))
    env = {
        "MIXREPLAY_DATA_DIR": str(scratch / "cache"),
        "MINARI_DATASETS_PATH": str(scratch / "minari"),
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
    }
    os.environ.update(env)
    baseline = None
    if args.compare_with:
        baseline = {
            **env,
            "PYTHONPATH": str(Path(args.compare_with).resolve()),
            "MIXREPLAY_DATA_DIR": str(scratch / "cache-baseline"),
        }
        env["PYTHONPATH"] = os.environ.get("PYTHONPATH") or str(Path(__file__).resolve().parents[1])
    results = []
    try:
        import torch

        from mixreplay.datasets.memmap import write_memmap_dataset

        print(f"torch {torch.__version__}, {os.cpu_count()} CPUs; scratch {scratch}\n", flush=True)

        if not args.only_big:
            # 1. conversion throughput
            n = args.convert_rows
            for label, rows_, ep in (("Minari", n, 1000), ("Minari, short episodes", n, 100)):
                dsid = f"bench/hopper-{ep}-v0"
                write_minari(dsid, rows_, ep)
                r = best_of(
                    args.repeat, "convert", f"minari:{dsid}", {}, env=env, baseline=baseline
                )
                line = {
                    "what": f"convert {label} ({rows_ // ep:,} episodes of {ep})",
                    "rows": r["rows"],
                    "time": r["seconds"],
                    "rate": r["rows_per_s"],
                    "peak": r["peak_growth"],
                    "baseline": r.get("baseline"),
                }
                if not args.skip_peers:
                    try:
                        p = best_of(
                            args.repeat,
                            "torchrl_minari",
                            dsid,
                            str(scratch / f"torchrl-{ep}"),
                            env=env,
                            fresh=lambda d=scratch / f"torchrl-{ep}": shutil.rmtree(
                                d, ignore_errors=True
                            ),
                        )
                        line["peer"] = p
                    except RuntimeError as err:
                        line["peer_error"] = str(err).splitlines()[-1]
                results.append(line)
                print(json.dumps(line), flush=True)
            for with_next in (True, False):
                path = scratch / f"hopper-{'next' if with_next else 'nonext'}.hdf5"
                write_d4rl_file(path, n, with_next=with_next)
                r = best_of(args.repeat, "convert", f"d4rl:{path}", {}, env=env, baseline=baseline)
                line = {
                    "what": f"convert D4RL ({'with' if with_next else 'without'} next_observations)",
                    "rows": r["rows"],
                    "time": r["seconds"],
                    "rate": r["rows_per_s"],
                    "peak": r["peak_growth"],
                    "baseline": r.get("baseline"),
                }
                results.append(line)
                print(json.dumps(line), flush=True)

            # 2. a cached 1M-row dataset: convert once (timed too), then open it in fresh processes
            big_src = scratch / "hopper-1m.hdf5"
            write_d4rl_file(big_src, args.rows, with_next=True)
            r = best_of(args.repeat, "convert", f"d4rl:{big_src}", {}, env=env, baseline=baseline)
            results.append(
                {
                    "what": f"convert D4RL, {args.rows:,} rows",
                    "rows": r["rows"],
                    "time": r["seconds"],
                    "rate": r["rows_per_s"],
                    "peak": r["peak_growth"],
                    "baseline": r.get("baseline"),
                }
            )
            print(json.dumps(results[-1]), flush=True)
            opens = [run_child("open", f"d4rl:{big_src}", 1000, env=env) for _ in range(opens_n)]
            best = min(opens, key=lambda o: o["open_s"])
            if baseline is not None:  # the baseline's cache: converted by the baseline above
                base = [
                    run_child("open", f"d4rl:{big_src}", 1000, env=baseline) for _ in range(opens_n)
                ]
                best["baseline"] = min(base, key=lambda o: o["open_s"])
            results.append(
                {"what": f"open cached d4rl: ({args.rows:,} rows) + 1000 sample(256)", **best}
            )
            print(json.dumps(results[-1]), flush=True)
            opens = [
                run_child("open", "minari:bench/hopper-1000-v0", 1000, env=env)
                for _ in range(opens_n)
            ]
            best = min(opens, key=lambda o: o["open_s"])
            results.append(
                {"what": f"open cached minari: ({best['rows']:,} rows) + 1000 sample(256)", **best}
            )
            print(json.dumps(results[-1]), flush=True)
            if not args.skip_peers:
                td_dir = scratch / "tensordict-1m"
                from tensordict import TensorDict

                td = torch.cat(list(hopper_chunks(args.rows)))
                td.memmap_(str(td_dir))
                del td
                peer = min(
                    (run_child("open_tensordict", str(td_dir), env=env) for _ in range(opens_n)),
                    key=lambda o: o["open_s"],
                )
                results.append(
                    {
                        "what": f"peer: TensorDict.load_memmap ({args.rows:,} rows, one file per key)",
                        **peer,
                    }
                )
                print(json.dumps(results[-1]), flush=True)
                shutil.rmtree(td_dir)
                del TensorDict

        # 3. a dataset larger than the RSS budget by far
        if not args.skip_big:
            rows_big = int(args.big_gb * 2**30) // ROW_BYTES
            path = scratch / "big"
            t0 = time.perf_counter()
            write_memmap_dataset(
                path, hopper_chunks(rows_big), episode_starts=range(0, rows_big, 1000)
            )
            t_write = time.perf_counter() - t0
            size = (path / "rows.bin").stat().st_size
            opens = [
                run_child("open", f"memmap:{path}", 1000, env=env)
                for _ in range(max(1, opens_n - 1))
            ]
            best = min(opens, key=lambda o: o["open_s"])
            results.append(
                {
                    "what": f"open {size / 2**30:.2f} GiB memmap ({rows_big:,} rows) + 1000 sample(256), "
                    "file in the page cache",
                    "write_s": t_write,
                    **best,
                }
            )
            print(json.dumps(results[-1]), flush=True)
            cold = run_child("open", f"memmap:{path}", 1000, True, env=env)
            results.append(
                {
                    "what": "same, file evicted from the page cache first (cold, read from disk)",
                    **cold,
                }
            )
            print(json.dumps(results[-1]), flush=True)
            shutil.rmtree(path)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    print("\n| what | rows | time | rows/s | memory |")
    print("|---|---|---|---|---|")
    for r in results:
        if "open_s" in r:
            mem = f"open: anon {mb(r['open']['RssAnon'])}, file {mb(r['open']['RssFile'])}"
            if "sampled" in r:
                for label, key in (("10", "sampled10"), ("1000", "sampled")):
                    d = r[key]
                    mem += (
                        f"; after {label} samples: anon {mb(d['RssAnon'])}, file {mb(d['RssFile'])}, "
                        f"total {mb(d['VmRSS'])}"
                    )
                mem += f"; sample(256) {r['sample_s'] * 1e6:.0f} µs"
            imp = (
                f" (+{r['import_s'] * 1e3:.0f} ms loader imports)"
                if r.get("import_s", 0) > 0.005
                else ""
            )
            print(
                f"| {r['what']} | {r['rows']:,} | {r['open_s'] * 1e3:.1f} ms{imp}"
                f"{vs_baseline(r, 'open_s')} | | {mem} |"
            )
        else:
            base = {"rows_per_s": r["rate"], "baseline": r["baseline"]} if r.get("baseline") else {}
            print(
                f"| {r['what']} | {r['rows']:,} | {r['time']:.2f} s | {r['rate']:,.0f}"
                f"{vs_baseline(base)} | peak RSS +{mb(r['peak'])} |"
            )
            if "peer" in r:
                p = r["peer"]
                print(
                    f"| ↳ peer: TorchRL MinariExperienceReplay | {p['rows']:,} | {p['seconds']:.2f} s | "
                    f"{p['rows_per_s']:,.0f} (mixreplay: {r['rate'] / p['rows_per_s']:.1f}× this rate) | "
                    f"peak RSS +{mb(p['peak_growth'])} |"
                )
            elif "peer_error" in r:
                print(
                    f"| ↳ peer: TorchRL MinariExperienceReplay | failed: {r['peer_error']} | | | |"
                )
    print(
        "\ntargets: open a cached 1M-row dataset < 0.5 s and < 64 MB RSS growth; "
        "a 4 GB dataset opens and samples with < 64 MB RSS growth"
    )


if __name__ == "__main__":
    main()
