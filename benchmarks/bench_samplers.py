"""Prioritized and slice sampling against the uniform sample of the same run, and sum-tree designs.

The mixed two-source buffer of ``bench_sampling.py`` (Hopper-shaped rows,
offline 1,000,000 rows, online 100,000 rows, batch 256), sampled uniformly,
with a prioritized online side, and with slices of 8 on both sides. Every
operation is timed in rounds that interleave all of them (so a busy machine
slows them alike); each figure is the best round, and each ratio is taken
against the uniform ``sample(256)`` of the same run. Targets (issue 13):
prioritized ``sample(256)`` with weights <= 3x, ``sample`` + ``update_priority``
<= 4x (issue 20: one prioritized source alone, ``sample(256)`` with weights <= 2.5x
a uniform source of the same rows; TorchRL's ``PrioritizedReplayBuffer`` is timed
beside it where its C++ extension loads), slices(8) ``sample(256)`` <= 2x, one-row ``extend`` with a slice sampler
<= 2x a plain one.

``--designs`` times the sum-tree structures the prioritized sampler could use,
on 100,000 and 1,000,000 slots, all in torch on the same data: mixreplay's
(arity 32, a flat-searched top level of <= 4,096 values, a min tree beside),
its variants, the previous mixreplay tree (32-ary from a root), a binary segment
tree pair as TorchRL's C++ ``SumSegmentTree``/``MinSegmentTree`` lay it out (its
extension does not load on this torch build: the error is printed), flashbax's
binary flat-array tree with delta propagation, and no tree (a cumsum per draw).

``--profile`` prints the torch ops of what remains (prioritized sample +
update, slices sample).

    python benchmarks/bench_samplers.py [--rounds 9] [--offline 1000000] [--designs] [--profile]
"""

from __future__ import annotations

import argparse
import gc
import itertools
import math
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repo's benchmarks package
from results import command_line, row, write_results  # noqa: E402

from benchmarks.bench_sampling import hopper_rows  # noqa: E402


def interleaved(fns: dict[str, Callable[[], object]], rounds: int, number: int) -> dict:
    """Per function: the best mean time per call (µs) over ``rounds`` and each round's time.

    Rounds interleave the functions, so the machine's load hits them alike.
    """
    for f in fns.values():
        for _ in range(min(number, 30)):
            f()
    per_round: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(rounds):
        for k, f in fns.items():
            gc.disable()
            t = time.perf_counter()
            for _ in range(number):
                f()
            per_round[k].append((time.perf_counter() - t) / number * 1e6)
            gc.enable()
    return {k: (min(v), v) for k, v in per_round.items()}


def ratio_range(times: dict, name: str, base: str) -> tuple[float, float, float]:
    """Best-to-best ratio, and the range of the per-round ratios."""
    best = times[name][0] / times[base][0]
    rounds = [a / b for a, b in zip(times[name][1], times[base][1])]
    return best, min(rounds), max(rounds)


# -- the buffers ------------------------------------------------------------------------------


def buffers(n_off: int, n_on: int):
    import mixreplay
    from mixreplay.samplers import PrioritizedSampler, SliceSampler

    off_rows, on_rows = hopper_rows(n_off, seed=1), hopper_rows(n_on, seed=2)
    offline = mixreplay.ReplayBuffer(storage=mixreplay.LazyTensorStorage(n_off))
    offline.extend(off_rows)

    def o2o(offline_buffer, **kwargs):
        rb = mixreplay.OfflineToOnlineReplayBuffer(
            offline_buffer, online_capacity=n_on, offline_fraction=0.5, generator=0, **kwargs
        )
        rb.extend(on_rows)
        return rb

    sliced_offline = mixreplay.ReplayBuffer(storage=offline.storage, sampler=SliceSampler(8))
    prio_offline = mixreplay.ReplayBuffer(
        storage=offline.storage, sampler=PrioritizedSampler(alpha=0.6, beta=0.4)
    )
    return {
        "uniform": o2o(offline),
        "prioritized": o2o(offline, online_sampler=PrioritizedSampler(alpha=0.6, beta=0.4)),
        "prioritized both": o2o(
            prio_offline, online_sampler=PrioritizedSampler(alpha=0.6, beta=0.4)
        ),
        "slices": o2o(sliced_offline, online_sampler=SliceSampler(8)),
        # one source, the online rows alone: the sampler's own cost, nothing mixed in
        "single uniform": single(on_rows, None),
        "single prioritized": single(on_rows, PrioritizedSampler(alpha=0.6, beta=0.4)),
    }


def single(rows, sampler):
    import mixreplay

    rb = mixreplay.ReplayBuffer(
        storage=mixreplay.LazyTensorStorage(rows.shape[0]), sampler=sampler, generator=0
    )
    rb.extend(rows)
    return rb


def torchrl_prioritized(rows):
    """TorchRL's PrioritizedReplayBuffer on the same rows, or why it cannot run here."""
    try:
        from torchrl.data import LazyTensorStorage, PrioritizedReplayBuffer

        rb = PrioritizedReplayBuffer(
            alpha=0.6, beta=0.4, storage=LazyTensorStorage(rows.shape[0]), batch_size=256
        )
        rb.extend(rows)
        rb.sample()
    except Exception as err:  # noqa: BLE001 - report whatever stops it
        return (
            None,
            f"TorchRL's PrioritizedReplayBuffer does not run here: {type(err).__name__}: {str(err)[:80]}",
        )
    return rb, "TorchRL's PrioritizedReplayBuffer runs here"


def mixed(args) -> dict:
    bufs = buffers(args.offline, args.online)
    uniform, prio, prio2, sl = (
        bufs["uniform"],
        bufs["prioritized"],
        bufs["prioritized both"],
        bufs["slices"],
    )
    one = hopper_rows(1, seed=3)
    g = torch.Generator().manual_seed(0)
    pr = torch.rand(256, generator=g) + 0.01

    def sample_update(rb):
        def f():
            _, info = rb.sample(256, return_info=True)
            rb.update_priority(info, pr)

        return f

    def step(rb):
        def f():
            rb.extend(one)
            rb.sample(256)

        return f

    su, sp = bufs["single uniform"], bufs["single prioritized"]
    trl, trl_note = torchrl_prioritized(hopper_rows(args.online, seed=2))

    def descending():
        # what every draw cost before the tree kept its leaves' prefix sums, and what the
        # first draw after each change still costs: forget them (and the count of draws since
        # the change) so that this draw descends; the slots are the same either way
        tree = sp.sampler.tree
        tree._flat, tree._served = None, 0
        return sp.sample(256, return_info=True)

    # The floor of a pure-torch prioritized draw on these rows: the same torch ops as the
    # sampler (stratified draw, one search over every leaf's prefix sum, the leaves' values,
    # the weights) and the buffer's own gather, with nothing around them, against the same
    # bare loop for a uniform draw. What is left between the floor and the buffer is Python.
    tree = sp.sampler.tree
    prefix = tree.leaves.cumsum(0)
    scale = tree.total() * (1.0 - 2.0**-50) / 256
    low, leaves, store = tree.min_tensor(), tree.leaves, sp.storage
    bare_g = torch.Generator().manual_seed(5)

    fixed = torch.rand(256, generator=bare_g, dtype=torch.float64)
    fixed.add_(torch.randperm(256, generator=bare_g, dtype=torch.float64)).mul_(scale)

    def bare_prioritized(new_sums: bool):
        """The bare draw; without ``new_sums`` it searches one fixed set of sums every call
        (its path then in cache and its branches predicted, as a benchmark reusing its
        queries sees), the draw's ops still run."""

        def draw():
            u = torch.rand(256, generator=bare_g, dtype=torch.float64)
            u.add_(torch.randperm(256, generator=bare_g, dtype=torch.float64)).mul_(scale)
            slots = torch.searchsorted(prefix, u if new_sums else fixed, right=True)
            weights = torch.div(low, leaves.index_select(0, slots)).pow_(0.4).to(torch.float32)
            return store.gather_unlocked(slots), weights

        return draw

    def bare_uniform():
        return store.gather_unlocked(torch.randint(len(store), (256,), generator=bare_g))

    fns = {
        "uniform sample(256)": lambda: uniform.sample(256),
        "bare torch: uniform draw + gather": bare_uniform,
        "bare torch: prioritized draw + weights": bare_prioritized(new_sums=True),
        "bare torch: the same, fixed search sums": bare_prioritized(new_sums=False),
        "one source: uniform sample(256)": lambda: su.sample(256),
        "one source: prioritized sample + weights": lambda: sp.sample(256, return_info=True),
        "one source: the same, descending each time": descending,
        "one source: prioritized sample + update": lambda: sp.update_priority(
            sp.sample(256, return_info=True)[1]["index"], pr
        ),
        "uniform sample(256, return_info)": lambda: uniform.sample(256, return_info=True),
        "prioritized sample(256) + weights": lambda: prio.sample(256, return_info=True),
        "prioritized sample + update_priority(256)": sample_update(prio),
        "both prioritized: sample + weights": lambda: prio2.sample(256, return_info=True),
        "both prioritized: sample + update": sample_update(prio2),
        "slices(8) sample(256)": lambda: sl.sample(256),
        "uniform extend(1)": lambda: uniform.extend(one),
        "slices extend(1)": lambda: sl.extend(one),
        "prioritized extend(1)": lambda: prio.extend(one),
        "uniform step: extend(1) + sample(256)": step(uniform),
        "slices step: extend(1) + sample(256)": step(sl),
    }
    if trl is not None:
        fns["TorchRL prioritized sample(256)"] = lambda: trl.sample(256)
    times = interleaved(fns, args.rounds, args.number)
    rows = [
        ("one source: prioritized sample + weights", "one source: uniform sample(256)", 2.5),
        ("one source: the same, descending each time", "one source: uniform sample(256)", None),
        ("one source: prioritized sample + update", "one source: uniform sample(256)", None),
        ("bare torch: prioritized draw + weights", "one source: uniform sample(256)", None),
        ("bare torch: prioritized draw + weights", "bare torch: uniform draw + gather", None),
        ("bare torch: the same, fixed search sums", "one source: uniform sample(256)", None),
        (
            "one source: prioritized sample + weights",
            "bare torch: prioritized draw + weights",
            None,
        ),
        ("prioritized sample(256) + weights", "uniform sample(256)", 3.0),
        ("prioritized sample + update_priority(256)", "uniform sample(256)", 4.0),
        ("slices(8) sample(256)", "uniform sample(256)", 2.0),
        ("slices extend(1)", "uniform extend(1)", 2.0),
        ("uniform sample(256, return_info)", "uniform sample(256)", None),
        ("both prioritized: sample + weights", "uniform sample(256)", None),
        ("both prioritized: sample + update", "uniform sample(256)", None),
        ("prioritized extend(1)", "uniform extend(1)", None),
        ("slices step: extend(1) + sample(256)", "uniform step: extend(1) + sample(256)", None),
    ]
    if trl is not None:
        rows.append(
            ("one source: prioritized sample + weights", "TorchRL prioritized sample(256)", None)
        )
    print(trl_note)
    print(
        f"torch {torch.__version__}, threads {torch.get_num_threads()}, offline {args.offline:,} "
        f"rows, online {args.online:,} rows, best of {args.rounds} interleaved rounds"
    )
    print(
        f"{'operation':<44}{'µs':>9}  {'against':<38}{'µs':>9}{'ratio':>8}  {'rounds':>13}  target"
    )
    out: dict = {}
    listed: list = []
    for name, base, target in rows:
        best, lo, hi = ratio_range(times, name, base)
        mark = "" if target is None else f"<= {target:g}x " + ("ok" if best <= target else "MISSED")
        print(
            f"{name:<44}{times[name][0]:9.1f}  {base:<38}{times[base][0]:9.1f}{best:7.2f}x  "
            f"{lo:5.2f}-{hi:5.2f}x  {mark}"
        )
        out[name] = {"us": times[name][0], "against": base, "ratio": best, "range": (lo, hi)}
        listed.append((name, {"us": times[name][0], "against": base, "against_us": times[base][0]}))
    out["rows"] = listed
    out["note"] = trl_note
    return out


# -- sum-tree designs ---------------------------------------------------------------------------


class RootTree:
    """mixreplay's previous tree: 32-ary levels from a 1-wide root, one searchsorted per level."""

    def __init__(self, capacity: int, b: int = 32):
        sizes = [capacity]
        while sizes[-1] > 1:
            sizes[-1] = -(-sizes[-1] // b) * b
            sizes.append(sizes[-1] // b)
        self.b, self.levels = b, [torch.zeros(n, dtype=torch.float64) for n in reversed(sizes)]

    def assign(self, index, values):
        index, values = _dedup(index, values)
        self.levels[-1][index] = values
        node = index
        for d in range(len(self.levels) - 1, 0, -1):
            node = torch.div(node, self.b, rounding_mode="floor")
            rows = self.levels[d].view(-1, self.b)
            self.levels[d - 1][node] = torch.index_select(rows, 0, node).sum(1)

    def sample(self, u):
        s = (u * self.levels[0][0]).reshape(-1, 1)
        node = torch.zeros_like(s, dtype=torch.int64)
        for level in self.levels[1:]:
            kids = torch.index_select(level.view(-1, self.b), 0, node.view(-1))
            cums = kids.cumsum(1)
            s = torch.minimum(s, cums[:, -1:] * (1 - 2.0**-51))
            child = torch.searchsorted(cums, s, right=True).remainder_(self.b)
            s = s - (cums - kids).gather(1, child)
            node = torch.add(child, node, alpha=self.b)
        return node.reshape(-1)

    def min(self):  # it had no min: a scan of the leaves
        leaves = self.levels[-1]
        return leaves[leaves > 0].min()


class BinaryTrees:
    """A sum and a min segment tree, binary, in arrays of 2 * size nodes (TorchRL's layout:
    node i has children 2i and 2i + 1, leaves at size + slot), searched and updated level by
    level in torch instead of TorchRL's per-element C++ loops."""

    def __init__(self, capacity: int):
        self.size = 1 << max(1, math.ceil(math.log2(capacity)))
        self.depth = int(math.log2(self.size))
        self.sum = torch.zeros(2 * self.size, dtype=torch.float64)
        self.mins = torch.full((2 * self.size,), math.inf, dtype=torch.float64)

    def assign(self, index, values):
        index, values = _dedup(index, values)
        node = index + self.size
        self.sum[node] = values
        self.mins[node] = values
        for _ in range(self.depth):
            node = torch.div(node, 2, rounding_mode="floor")
            left = 2 * node
            self.sum[node] = self.sum[left] + self.sum[left + 1]
            self.mins[node] = torch.minimum(self.mins[left], self.mins[left + 1])

    def sample(self, u):
        s = u * self.sum[1]
        node = torch.ones_like(s, dtype=torch.int64)
        for _ in range(self.depth):
            left = 2 * node
            lsum = self.sum[left]
            right = s >= lsum
            s = torch.where(right, s - lsum, s)
            node = left + right
        return node - self.size

    def min(self):
        return self.mins[1]


class FlashbaxTree:
    """flashbax's sum tree: one flat binary array (level d starts at 2^d - 1), sampled by a
    per-level descent, updated by propagating deltas up (scatter-add, duplicates divided out
    with bincount). No min tree: flashbax returns probabilities and leaves weights to the user."""

    def __init__(self, capacity: int):
        self.depth = max(1, math.ceil(math.log2(capacity)))
        self.capacity = capacity
        self.nodes = torch.zeros(2 ** (self.depth + 1) - 1, dtype=torch.float64)

    def assign(self, index, values):
        leaf = (1 << self.depth) - 1 + index
        old = self.nodes[leaf]
        self.nodes[leaf] = values
        delta = self.nodes[leaf] - old
        delta = delta / torch.bincount(index, minlength=self.capacity)[index]
        node = index
        for d in range(self.depth - 1, -1, -1):
            node = torch.div(node, 2, rounding_mode="floor")
            self.nodes.index_add_(0, (1 << d) - 1 + node, delta)

    def sample(self, u):
        s = u * self.nodes[0]
        node = torch.zeros_like(s, dtype=torch.int64)
        for d in range(1, self.depth + 1):
            left = 2 * node
            lsum = self.nodes[(1 << d) - 1 + left]
            right = s >= lsum
            s = torch.where(right, s - lsum, s)
            node = left + right
        return node

    def min(self):
        leaves = self.nodes[(1 << self.depth) - 1 :]
        return leaves[leaves > 0].min()


class FlatCumsum:
    """No tree: priorities in one array, a cumsum per draw, one binary search."""

    def __init__(self, capacity: int):
        self.p = torch.zeros(capacity, dtype=torch.float64)

    def assign(self, index, values):
        index, values = _dedup(index, values)
        self.p[index] = values

    def sample(self, u):
        c = self.p.cumsum(0)
        return torch.searchsorted(c, u * c[-1], right=True)

    def min(self):
        return self.p[self.p > 0].min()


class Ours:
    def __init__(self, capacity: int, **kwargs):
        from mixreplay.samplers.sumtree import SumTree

        self.tree = SumTree(capacity, **kwargs)

    def assign(self, index, values):
        self.tree.assign(index, values)

    def sample(self, u):
        return self.tree.sample(u)

    def min(self):
        return self.tree.min_tensor()


def _dedup(index, values):
    slots, order = torch.sort(index, stable=True)
    last = torch.ones_like(slots, dtype=torch.bool)
    last[:-1] = slots[1:] != slots[:-1]
    return slots[last], values[order[last]]


def designs(args) -> dict:
    try:
        from torchrl._torchrl import SumSegmentTreeFp32  # noqa: F401

        torchrl_note = "TorchRL's C++ SumSegmentTree loads: time it separately"
    except Exception as err:  # noqa: BLE001 - the point is to show why it does not load
        torchrl_note = (
            f"TorchRL's C++ tree does not load here: {type(err).__name__}: {str(err)[:90]}"
        )
    print(torchrl_note)
    out: dict = {}
    g = torch.Generator().manual_seed(0)
    for capacity in (100_000, 1_000_000):
        values = torch.rand(capacity, generator=g, dtype=torch.float64) + 1e-3
        trees = {
            "mixreplay (32-ary, flat top <= 4096, min tree)": Ours(capacity),
            "  arity 16": Ours(capacity, arity=16),
            "  arity 64": Ours(capacity, arity=64),
            "  top <= 1024": Ours(capacity, top=1024),
            "  top <= 16384": Ours(capacity, top=16384),
            "mixreplay before (32-ary from a root)": RootTree(capacity),
            "TorchRL layout (binary sum + min trees)": BinaryTrees(capacity),
            "flashbax layout (binary, delta updates)": FlashbaxTree(capacity),
            "no tree (cumsum per draw)": FlatCumsum(capacity),
        }
        for tree in trees.values():
            for chunk in torch.arange(capacity).split(65536):
                tree.assign(chunk, values[chunk])
        index = torch.randint(capacity, (256,), generator=g)
        new = torch.rand(256, generator=g, dtype=torch.float64) + 1e-3
        u = torch.rand(256, generator=g, dtype=torch.float64)
        fns = {}
        for name, t in trees.items():
            fns[(name, "sample")] = lambda t=t, u=u: t.sample(u)
            fns[(name, "update")] = lambda t=t, index=index, new=new: t.assign(index, new)
            fns[(name, "update+sample+min")] = lambda t=t, u=u, index=index, new=new: (
                t.assign(index, new),
                t.sample(u),
                t.min(),
            )
        times = interleaved(fns, args.rounds, max(20, args.number // 10))
        print(f"\n{capacity:,} slots, 256 draws / updates (µs, best round)")
        print(f"{'structure':<48}{'sample':>9}{'update':>9}{'upd+sample+min':>16}")
        out[capacity] = {}
        for name in trees:
            row = [times[(name, op)][0] for op in ("sample", "update", "update+sample+min")]
            out[capacity][name] = row
            print(f"{name:<48}{row[0]:9.1f}{row[1]:9.1f}{row[2]:16.1f}")
    return out


def profile(args) -> None:
    bufs = buffers(args.offline, args.online)
    prio, sl = bufs["prioritized"], bufs["slices"]
    su, sp = bufs["single uniform"], bufs["single prioritized"]
    pr = torch.rand(256) + 0.01
    index = sp.sample(256, return_info=True)[1]["index"]

    def sample_update():
        _, info = prio.sample(256, return_info=True)
        prio.update_priority(info, pr)

    for name, fn in (
        ("one source: uniform sample(256)", lambda: su.sample(256)),
        ("one source: prioritized sample(256) + weights", lambda: sp.sample(256, return_info=True)),
        ("one source: update_priority(256)", lambda: sp.update_priority(index, pr)),
        ("prioritized sample(256) + weights + update_priority", sample_update),
        ("slices(8) sample(256)", lambda: sl.sample(256)),
    ):
        for _ in range(50):
            fn()
        with torch.profiler.profile() as prof:
            for _ in range(200):
                fn()
        events = prof.key_averages()
        calls = sum(e.count for e in events) / 200
        # the op count decides on a CPU: each dispatch costs a few µs whatever its size
        print(f"\n{name}: {calls:.0f} aten calls per call (nested included; 200 calls)")
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=18))


def searches(args) -> dict:
    """One stratified draw's search (256 sums) over 100k leaves' prefix sums, laid out in ways
    pure torch can search, each checked to find the very slots of one ``searchsorted``. Every
    call searches new sums (64 sets in turn, as a sampler draws); "fixed sums" repeats one
    set, as a benchmark that reuses its queries would (its path in cache, its branches
    predicted)."""
    n, b, capacity = 256, 32, args.online
    top = -(-capacity // b)
    g = torch.Generator().manual_seed(0)
    leaves = torch.zeros(top * b, dtype=torch.float64)
    leaves[:capacity] = torch.rand(capacity, generator=g, dtype=torch.float64) + 1e-3
    flat = leaves.cumsum(0)
    rows = flat.view(-1, b)
    head = rows[:, -1].contiguous()  # each tree node's last prefix sum
    groups = -(-top // b)
    padded = torch.full((groups * b,), math.inf, dtype=torch.float64)
    padded[:top] = head
    head_rows = padded.view(-1, b)
    coarse = head_rows[:, -1].contiguous()
    scale = flat[-1].item() * (1.0 - 2.0**-50) / n
    sets = [
        (torch.rand(n, generator=g, dtype=torch.float64) + torch.randperm(n, generator=g)) * scale
        for _ in range(64)
    ]

    def flat_search(q):
        return torch.searchsorted(flat, q, right=True)

    def two_level(q):  # the node's row found among the nodes' last sums, then within it
        k = torch.searchsorted(head, q, right=True)
        return (
            torch.searchsorted(rows.index_select(0, k), q.unsqueeze(1), right=True)
            .view(-1)
            .add_(k, alpha=b)
        )

    def three_level(q):  # a group of 32 nodes, the node, the slot
        q1 = q.unsqueeze(1)
        c = torch.searchsorted(coarse, q, right=True)
        k = torch.searchsorted(head_rows.index_select(0, c), q1, right=True).view(-1)
        k = k.add_(c, alpha=b)
        return torch.searchsorted(rows.index_select(0, k), q1, right=True).view(-1).add_(k, alpha=b)

    def counting(q):  # branch-free: every level compares whole rows and counts
        q1 = q.unsqueeze(1)
        c = torch.le(coarse, q1).sum(1)
        k = torch.le(head_rows.index_select(0, c), q1).sum(1).add_(c, alpha=b)
        return torch.le(rows.index_select(0, k), q1).sum(1).add_(k, alpha=b)

    layouts = {
        "one searchsorted over every prefix sum": flat_search,
        "node, then slot (two searches)": two_level,
        "group, node, slot (three searches)": three_level,
        "group, node, slot (compare and count)": counting,
    }
    for name, fn in layouts.items():
        for q in sets:
            if not torch.equal(fn(q), flat_search(q)):
                raise AssertionError(f"{name} finds other slots than one searchsorted")
    turn = itertools.count()
    fns = {name: (lambda fn=fn: fn(sets[next(turn) % 64])) for name, fn in layouts.items()}
    fns["one searchsorted, fixed sums"] = lambda: flat_search(sets[0])
    fns["node search alone (every node's last sum)"] = lambda: torch.searchsorted(
        head, sets[next(turn) % 64], right=True
    )
    times = interleaved(fns, args.rounds, max(200, args.number))
    base = times["one searchsorted over every prefix sum"][0]
    print(f"\n{capacity:,} slots, one search of {n} sums (µs, best round; new sums each call)")
    out = {}
    for name, (best, _) in times.items():
        print(f"{name:<44}{best:9.1f}{best / base:8.2f}x")
        out[name] = best
    return out


def runs(args) -> dict:
    """Per draw, ``extend(1)`` and then ``D`` prioritized ``sample(256)`` + weights on one
    source (the extend changes the tree), for several ``D``: the tree as it decides when to
    keep its leaves' prefix sums, made to descend every draw, and made to build them on the
    second draw of every run (the rule before; both pay off only for long enough runs)."""
    import mixreplay
    from mixreplay.samplers import PrioritizedSampler

    rows, one = hopper_rows(args.online, seed=2), hopper_rows(1, seed=3)

    def step(draws: int, how: str) -> Callable[[], None]:
        rb = mixreplay.ReplayBuffer(  # one buffer per way: none sees another's runs
            storage=mixreplay.LazyTensorStorage(args.online),
            sampler=PrioritizedSampler(alpha=0.6, beta=0.4),
            generator=0,
        )
        rb.extend(rows)
        tree = rb.sampler.tree

        def f():
            rb.extend(one)
            for _ in range(draws):
                if how == "descending":
                    tree._flat, tree._served = None, 0
                elif how == "built on the 2nd draw":
                    tree._run = 1 << 30
                rb.sample(256, return_info=True)

        return f

    hows = ("as decided", "descending", "built on the 2nd draw")
    out: dict = {}
    print(f"\n{args.online:,} rows: µs per draw of extend(1) + D x sample(256, return_info)")
    print(f"{'D':>3}" + "".join(f"{h:>24}" for h in hows) + f"{'decided ÷ descending':>24}")
    for draws in (1, 2, 3, 4, 6, 10):
        fns = {how: step(draws, how) for how in hows}
        times = interleaved(fns, args.rounds, max(20, args.number // (4 * draws)))
        per = {how: times[how][0] / draws for how in hows}
        ratio = per["as decided"] / per["descending"]
        print(f"{draws:>3}" + "".join(f"{per[h]:24.1f}" for h in hows) + f"{ratio:23.2f}x")
        out[draws] = per
    return out


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(
        allow_abbrev=False,
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--number", type=int, default=300, help="calls per round")
    p.add_argument("--offline", type=int, default=1_000_000)
    p.add_argument("--online", type=int, default=100_000)
    p.add_argument("--designs", action="store_true", help="time sum-tree structures")
    p.add_argument("--profile", action="store_true", help="torch ops of what remains")
    p.add_argument("--searches", action="store_true", help="time layouts of the prefix-sum search")
    p.add_argument("--runs", action="store_true", help="time prioritized draws per tree change")
    p.add_argument(
        "--skip-mixed", action="store_true", help="only --designs / --searches / --runs / --profile"
    )
    args = p.parse_args(argv)
    warnings.filterwarnings("ignore")
    torch.manual_seed(0)
    result = {}
    if not args.skip_mixed:
        result["mixed"] = mixed(args)
    if args.designs:
        result["designs"] = designs(args)
    if args.searches:
        result["searches"] = searches(args)
    if args.runs:
        result["runs"] = runs(args)
    if args.profile:
        profile(args)
    save(args, result)
    return result


def save(args, result: dict) -> None:
    """One results file per part that ran: bench_samplers.json (each operation against the
    uniform operation of the same run), _designs, _searches, _runs."""
    settings = {
        "rounds": args.rounds,
        "calls_per_round": args.number,
        "offline_rows": args.offline,
        "online_rows": args.online,
        "torch_threads": torch.get_num_threads(),
    }
    command = command_line()
    if "mixed" in result:
        rows = [
            row(name, "us", r["us"], peer=r["against"], peer_value=r["against_us"])
            for name, r in result["mixed"]["rows"]
        ]
        write_results(
            "bench_samplers", command, rows, settings={**settings, "note": result["mixed"]["note"]},
            notes=(
                "Every operation timed in rounds that interleave them all, best round; each row "
                "against the uniform operation of the same run (its peer), so ratio < 1: the "
                "prioritized or slice operation costs 1/ratio times the uniform one. 'one "
                "source' rows use a 100k-row ReplayBuffer; the others the mixed 50/50 buffer "
                "of bench_sampling (Hopper-shaped rows). 'bare torch' rows are the same torch "
                "ops with nothing around them: the floor of a pure-torch sampler."
            ),
        )  # fmt: skip
    if "designs" in result:
        rows = []
        for capacity, trees in result["designs"].items():
            ours = next(iter(trees.values()))
            for name, times in trees.items():
                for op, us, base in zip(("sample", "update", "update+sample+min"), times, ours):
                    rows.append(
                        row(f"{name.strip()}: {op}, {capacity:,} slots", "us", us,
                            peer="mixreplay's tree", peer_value=base)
                    )  # fmt: skip
        write_results(
            "bench_samplers_designs", command, rows, settings=settings,
            notes=(
                "Sum-tree structures for prioritized sampling, all in torch on the same data "
                "(256 draws or updates, best round); each against the structure mixreplay uses. "
                "TorchRL's layout is re-implemented in torch: its C++ trees do not load on this "
                "torch build."
            ),
        )  # fmt: skip
    if "searches" in result:
        base = result["searches"]["one searchsorted over every prefix sum"]
        rows = [
            row(name, "us", us, peer="one searchsorted over every prefix sum", peer_value=base)
            for name, us in result["searches"].items()
        ]
        write_results(
            "bench_samplers_searches", command, rows, settings=settings,
            notes=(
                "Layouts of the prefix-sum search pure torch offers, 100,000 slots, 256 new sums "
                "per call (each checked to find the very slots of one searchsorted), against "
                "one searchsorted over every leaf's prefix sum (what the sampler does)."
            ),
        )  # fmt: skip
    if "runs" in result:
        rows = []
        for draws, per in result["runs"].items():
            for how in ("as decided", "built on the 2nd draw"):
                rows.append(
                    row(f"extend(1) + {draws} draws, per draw: {how}", "us", per[how],
                        peer="descending every draw", peer_value=per["descending"])
                )  # fmt: skip
        write_results(
            "bench_samplers_runs", command, rows, settings=settings,
            notes=(
                "One prioritized source: extend(1), then D x sample(256, return_info=True), "
                "time per draw; the tree as it decides when to keep its leaves' prefix sums, "
                "and made to build them on every run's second draw, against descending every "
                "draw."
            ),
        )  # fmt: skip


if __name__ == "__main__":
    main()
