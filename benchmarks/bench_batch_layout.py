"""How a sampled batch's leaves are laid out, and what each layout costs in ``sample(256)``.

A batch whose leaves are typed views over one packed buffer is the cheapest to build but is
not an ordinary batch (``torch.save`` refuses it; one key carries every key's bytes;
``resize_`` of one leaf reaches the others). This times ``sample(256)`` of a plain
``ReplayBuffer(LazyTensorStorage)`` and of an ``OfflineToOnlineReplayBuffer`` (offline
fraction 0.5) with each candidate layout, against TorchRL's same buffers, in one process,
alternating, best of several rounds:

- ``per_key`` (what mixreplay does): every leaf its own contiguous tensor: packed words
  gathered with one ``index_select`` per source into rows kept between batches, then every leaf
  copied out of them in one dispatch (``torch._foreach_clone`` of the leaves' kept typed views:
  ``RowLayout.copy_views``; the plain buffer's ``PackedStorage.gather_unlocked``);
- ``per_key_each`` (mixed) / ``per_key_copy`` (plain): every leaf its own tensor, one clone per
  leaf (mixed; the cost of the earlier ``narrow_copy`` per leaf) / a fresh packed gather copied
  out with ``RowLayout.copy_out`` (plain);
- ``per_key_sel`` (plain): every leaf its own tensor, read with its own ``index_select`` from a
  strided typed view of the stored rows (``RowLayout.gather``, what device storages do);
- ``per_group``: one new tensor per dtype group, leaves are views of their group's tensor
  (``torch.save`` works; a key carries its group's bytes; leaves are not contiguous);
- ``packed``: leaves are views of several dtypes over the packed words (mixreplay before
  issue 19: ``torch.save`` refuses the batch).

The other layouts are put in place on the buffers' storage and layout objects (instance
attributes) for the timing only.

    python benchmarks/bench_batch_layout.py [--rounds 7] [--rows 1000000]
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_sampling import best_of, hopper_rows  # noqa: E402
from results import command_line, write_results  # noqa: E402
from results import row as result_row  # noqa: E402


def per_group(layout):
    """A ``gather`` that reads one ``index_select`` per dtype group."""
    from mixreplay.layout import _build

    cache: dict = {}

    def gather(rows, index, device=None):
        views = cache.get(id(rows))
        if views is None:
            cache.clear()
            views = cache[id(rows)] = layout.group_views(rows)
        n = index.numel()
        leaves: list = [None] * len(layout.fields)
        for g, v in zip(layout.groups, views):
            part = torch.index_select(v, 0, index)
            sizes = [layout.fields[i].numel for i in g.fields]
            for fi, t in zip(g.fields, part.split(sizes, 1)):
                shape = layout.fields[fi].shape
                leaves[fi] = t if len(shape) == 1 else t.reshape(n, *shape)
        return _build(layout._tree, leaves, torch.Size([n]), device)

    return gather


def per_group_copy(layout, words, device=None):
    """Packed words as one new tensor per dtype group; its leaves are views of it."""
    from mixreplay.layout import _build

    n = words.shape[0]
    leaves: list = [None] * len(layout.fields)
    for g in layout.groups:
        part = words.view(g.dtype).narrow_copy(-1, g.start, g.stop - g.start)
        sizes = [layout.fields[i].numel for i in g.fields]
        for fi, t in zip(g.fields, part.split(sizes, 1)):
            shape = layout.fields[fi].shape
            leaves[fi] = t if len(shape) == 1 else t.reshape(n, *shape)
    return _build(layout._tree, leaves, torch.Size([n]), device)


def per_key_select(layout):
    """A ``gather`` that reads each leaf with its own ``index_select`` from a strided view."""

    def gather(rows, index, device=None):
        return layout.gather(rows, index, device)

    return gather


def per_key_copy(layout):
    """A ``gather`` that reads packed words with one ``index_select``, then copies each leaf out."""

    def gather(rows, index, device=None):
        return layout.copy_out(torch.index_select(rows, 0, index), device)

    return gather


def packed(layout):
    def gather(rows, index, device=None):
        return layout.unpack(torch.index_select(rows, 0, index), device)

    return gather


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--rows", type=int, default=1_000_000, help="rows in the plain buffer")
    p.add_argument("--online", type=int, default=100_000)
    p.add_argument("--number", type=int, default=2000, help="calls per round (mixreplay)")
    args = p.parse_args(argv)
    warnings.filterwarnings("ignore")
    torch.manual_seed(0)
    torch.set_num_threads(1)

    from torchrl.data import LazyTensorStorage as TLazy
    from torchrl.data import OfflineToOnlineReplayBuffer as TO2O
    from torchrl.data import ReplayBuffer as TRB

    import mixreplay

    data = hopper_rows(args.rows, seed=1)
    online = hopper_rows(args.online, seed=2)
    m_rb = mixreplay.ReplayBuffer(storage=mixreplay.LazyTensorStorage(args.rows), generator=0)
    m_rb.extend(data)
    m_o2o = mixreplay.OfflineToOnlineReplayBuffer(
        m_rb, online_capacity=args.online, offline_fraction=0.5, batch_size=256, generator=0
    )
    m_o2o.extend(online)
    m_o2o.sample(256)
    t_rb = TRB(storage=TLazy(args.rows))
    t_rb.extend(data)
    t_o2o = TO2O(t_rb, online_capacity=args.online, offline_fraction=0.5, batch_size=256)
    t_o2o.extend(online)

    layout = m_rb.storage.layout
    mix_layout = m_o2o._layout
    storage = m_rb.storage
    rows_ = storage._rows

    def bind(fn):
        return lambda index: fn(rows_, index, storage.device)

    plain_gather = {
        "per_key": lambda index: type(storage).gather_unlocked(storage, index),
        "per_key_copy": bind(per_key_copy(layout)),
        "per_key_sel": bind(per_key_select(layout)),
        "per_group": bind(per_group(layout)),
        "packed": bind(packed(layout)),
    }
    plain = plain_gather

    from mixreplay.layout import _build, _clone_each

    # the mixing buffer copies its batch out of kept packed rows through their kept leaf views
    def words_of(views):
        return views[0]._base  # every view is a typed view of the packed int64 rows

    def mixed_group(views, bs, device):
        return per_group_copy(mix_layout, words_of(views), device)

    mixed = {
        "per_key": type(mix_layout).copy_views.__get__(mix_layout),
        "per_key_each": lambda views, bs, device: _build(
            mix_layout._tree, _clone_each(views), bs, device
        ),
        "per_group": mixed_group,
        "packed": lambda views, bs, device: mix_layout.unpack(words_of(views), device),
    }

    def with_plain(name):
        def run():
            storage.gather_unlocked = plain_gather[name]
            try:
                return m_rb.sample(256)
            finally:
                del storage.gather_unlocked

        return run

    def with_mixed(name):
        def run():
            mix_layout.copy_views = mixed[name]
            try:
                return m_o2o.sample(256)
            finally:
                del mix_layout.copy_views

        return run

    n, r = args.number, args.rounds
    res: dict = {"plain": {}, "mixed": {}}
    res["plain"]["torchrl"] = best_of(lambda: t_rb.sample(256), r, max(200, n // 8))
    res["mixed"]["torchrl"] = best_of(lambda: t_o2o.sample(256), r, max(200, n // 8))
    for name in plain:
        res["plain"][name] = best_of(with_plain(name), r, n)
    for name in mixed:
        res["mixed"][name] = best_of(with_mixed(name), r, n)
    res["plain"]["torchrl"] = min(
        res["plain"]["torchrl"], best_of(lambda: t_rb.sample(256), r, max(200, n // 8))
    )
    res["mixed"]["torchrl"] = min(
        res["mixed"]["torchrl"], best_of(lambda: t_o2o.sample(256), r, max(200, n // 8))
    )
    load = os.getloadavg()
    print(
        f"torch {torch.__version__}, 1 thread, {args.rows:,} rows (+{args.online:,} online), "
        f"row {m_rb.storage.row_bytes} bytes packed, load {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}"
    )
    print(f"{'buffer':<8}{'layout':<11}{'sample(256) µs':>16}{'× TorchRL':>11}{'owns':>7}")
    owns = {"per_key": "yes", "per_key_sel": "yes", "per_key_copy": "yes", "per_key_each": "yes"}
    owns.update(per_group="no", packed="no")
    owns["torchrl"] = "yes"
    for buf, row in res.items():
        t = row["torchrl"]
        for name, us in row.items():
            print(f"{buf:<8}{name:<11}{us:16.1f}{t / us:10.1f}x{owns[name]:>7}")
    rows = []
    for buf, times in res.items():
        for name, us in times.items():
            if name != "torchrl":
                what = "owned leaves" if owns[name] == "yes" else "shared leaves"
                rows.append(
                    result_row(f"{buf} sample(256): {name} ({what})", "us", us, peer="torchrl",
                        peer_value=times["torchrl"])
                )  # fmt: skip
    write_results(
        "bench_batch_layout",
        command_line(),
        rows,
        settings={"rounds": args.rounds, "calls_per_round": args.number, "rows": args.rows,
                  "online_rows": args.online, "torch_threads": torch.get_num_threads()},
        notes=(
            "sample(256) of a plain ReplayBuffer(LazyTensorStorage) and of an "
            "OfflineToOnlineReplayBuffer (fraction 0.5) with each candidate batch layout put in "
            "place for the timing, against TorchRL's same buffers in one process, alternating. "
            "per_key is what mixreplay does (every leaf its own contiguous tensor, copied out "
            "of kept packed rows in one _foreach_clone); per_group and packed share memory "
            "between leaves, so their batches are not ordinary (torch.save refuses packed)."
        ),
    )  # fmt: skip
    return res


if __name__ == "__main__":
    main()
