"""Helpers shared by the test modules: TED rows tagged by source, rows that encode their id, the
row builders (counted, filled, seeded, of mixed dtypes), state comparisons, Hopper-shaped rows,
the online ring of a Ray-hosted buffer, and threads run under a watchdog.

The one helpers module of the suite (fixtures live in the ``conftest.py`` files). The Ray tests
register it with ``ray.cloudpickle.register_pickle_by_value`` so that workers, which cannot
import the test tree, get these functions by value.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import torch
from tensordict import TensorDict, tensorclass

from mixreplay.errors import BufferActorError
from mixreplay.layout import RowLayout
from mixreplay.schema import Schema

OFFLINE_BASE = -1000  # offline row i has id OFFLINE_BASE + i; online ids count from 0


def ted_rows(
    n: int, tag: float = 0.0, *, obs_dim: int = 3, act_dim: int = 2, seed: int = 0
) -> TensorDict:
    """``n`` transitions in TorchRL's TED layout; every float leaf of row ``i`` encodes ``tag`` and ``i``."""
    g = torch.Generator().manual_seed(seed)
    i = torch.arange(n, dtype=torch.float32).unsqueeze(-1)
    flags = torch.rand(n, 1, generator=g) < 0.1
    return TensorDict(
        {
            "observation": tag + 0 * torch.ones(n, obs_dim) + i / 1e6,
            "action": torch.full((n, act_dim), tag),
            "done": torch.zeros(n, 1, dtype=torch.bool),
            "terminated": torch.zeros(n, 1, dtype=torch.bool),
            "truncated": torch.zeros(n, 1, dtype=torch.bool),
            "next": {
                "observation": tag + torch.ones(n, obs_dim) + i / 1e6,
                "reward": i.clone(),
                "done": flags,
                "terminated": flags.clone(),
                "truncated": torch.zeros(n, 1, dtype=torch.bool),
            },
        },
        batch_size=[n],
    )


def id_rows(start: int, n: int) -> TensorDict:
    """TED rows whose every leaf encodes the row's id (episodes end every 5 ids)."""
    ids = torch.arange(start, start + n)
    f = ids.to(torch.float32).unsqueeze(-1)
    end = (ids % 5 == 4).unsqueeze(-1)
    return TensorDict(
        {
            "observation": f.expand(n, 3).clone(),
            "action": f.expand(n, 2).clone(),
            "done": end.clone(),
            "terminated": end.clone(),
            "truncated": torch.zeros(n, 1, dtype=torch.bool),
            "next": {
                "observation": (f + 0.5).expand(n, 3).clone(),
                "reward": f.clone(),
                "done": end.clone(),
                "terminated": end.clone(),
                "truncated": torch.zeros(n, 1, dtype=torch.bool),
            },
        },
        batch_size=[n],
    )


@tensorclass
class Inner:
    """A tensorclass nested in :class:`Outer` (tests of tensorclass rows)."""

    key1: torch.Tensor


@tensorclass
class Outer:
    """A tensorclass with a nested one, as TorchRL's tests build them."""

    key1: torch.Tensor
    next: Inner


def counted_rows(
    n: int, start: int = 0, *, dtype: torch.dtype = torch.int64, key: str = "x"
) -> TensorDict:
    """``n`` rows of one leaf ``key`` that counts ``start, start + 1, ...`` (the write order)."""
    return TensorDict({key: torch.arange(start, start + n, dtype=dtype)}, [n])


def float_rows(n: int, start: int = 0) -> TensorDict:
    """:func:`counted_rows` as float32 (rows that mix with float offline rows)."""
    return counted_rows(n, start, dtype=torch.float32)


def filled_rows(n: int, value: float, *, key: str = "x", width: int = 1) -> TensorDict:
    """``n`` rows of one float leaf ``key`` ``[width]`` that holds ``value`` (source *i* holds *i*)."""
    return TensorDict({key: torch.full((n, width), value)}, [n])


def random_rows(n: int, seed: int = 0) -> TensorDict:
    """``n`` seeded rows: ``observation`` float ``[3]`` and ``reward`` float ``[1]``."""
    g = torch.Generator().manual_seed(seed)
    return TensorDict(
        {"observation": torch.randn(n, 3, generator=g), "reward": torch.randn(n, 1, generator=g)},
        batch_size=[n],
    )


def mixed_rows(n: int, seed: int = 0, episode_len: int = 10) -> TensorDict:
    """Seeded TED rows whose leaves have several dtypes and shapes (packing mixes them in a row).

    ``step`` counts the rows, ``episode`` numbers episodes of ``episode_len`` rows.
    """
    g = torch.Generator().manual_seed(seed)
    return TensorDict(
        {
            "observation": torch.randn(n, 5, generator=g),
            "pixels": torch.randint(0, 255, (n, 2, 3), generator=g, dtype=torch.uint8),
            "action": torch.randn(n, 2, generator=g).double(),
            "step": torch.arange(n),
            "episode": torch.arange(n) // episode_len,
            "done": torch.rand(n, 1, generator=g) < 0.1,
            "next": {
                "observation": torch.randn(n, 5, generator=g),
                "reward": torch.randn(n, 1, generator=g),
                "done": torch.rand(n, 1, generator=g) < 0.1,
            },
        },
        batch_size=[n],
    )


def ids(batch) -> list[int]:
    return batch["next", "reward"].squeeze(-1).long().tolist()


def assert_same(x, y) -> None:
    """Two TensorDicts (or tuples of them) hold the same keys and equal tensors."""
    if isinstance(x, tuple):
        for a, b in zip(x, y, strict=True):
            assert_same(a, b)
        return
    kx = sorted(x.keys(include_nested=True, leaves_only=True), key=str)
    ky = sorted(y.keys(include_nested=True, leaves_only=True), key=str)
    assert kx == ky
    for k in kx:
        assert torch.equal(x[k], y[k]), k


def assert_state_equal(a, b, where="state") -> None:
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b), where
    elif isinstance(a, dict):
        assert isinstance(b, dict) and set(a) == set(b), where
        for k in a:
            assert_state_equal(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (u, v) in enumerate(zip(a, b)):
            assert_state_equal(u, v, f"{where}[{i}]")
    else:
        assert a == b, f"{where}: {a!r} != {b!r}"


# -- TED episodes (observations stored once: tests/storages/test_dedup.py, datasets) ------

OBS = (2, 3)


def episodes(lengths: list[int], *, seed: int = 0, glitch: float = 0.0, zeros: bool = True):
    """TED rows of episodes back to back: ``next`` values are the following row's root values.

    ``glitch``: the share of in-episode rows whose next values differ from the following
    row's anyway (frame skips, relabelled data). With ``zeros``, the float ``state`` holds
    ``0.0`` / ``-0.0`` / NaN so that values equal as floats differ as bytes.
    """
    g = torch.Generator().manual_seed(seed)
    n = sum(lengths)
    states = []  # per episode: L + 1 observations
    for L in lengths:
        pix = torch.randint(0, 4, (L + 1, *OBS), generator=g, dtype=torch.uint8)
        if zeros:
            pick = torch.randint(0, 4, (L + 1, 2), generator=g)
            state = torch.tensor([0.0, -0.0, 1.0, float("nan")])[pick]
        else:
            state = torch.randn(L + 1, 2, generator=g)
        step = torch.arange(L + 1, dtype=torch.int64).unsqueeze(-1)
        states.append((pix, state, step))
    pix = torch.cat([s[0][:-1] for s in states])
    npix = torch.cat([s[0][1:] for s in states])
    state = torch.cat([s[1][:-1] for s in states])
    nstate = torch.cat([s[1][1:] for s in states])
    step = torch.cat([s[2][:-1] for s in states])
    nstep = torch.cat([s[2][1:] for s in states])
    ends = torch.zeros(n, dtype=torch.bool)
    ends[torch.tensor(lengths).cumsum(0) - 1] = True
    trunc = ends & (torch.rand(n, generator=g) < 0.5)
    term = ends & ~trunc
    if glitch:
        bad = (torch.rand(n, generator=g) < glitch) & ~ends
        npix[bad] = npix[bad] ^ 1
        flip = (torch.rand(n, generator=g) < glitch) & ~ends
        nstate[flip] = -nstate[flip]  # 0.0 -> -0.0: equal as floats, not as bytes
    eid = torch.repeat_interleave(torch.arange(len(lengths)), torch.tensor(lengths))
    no = torch.zeros(n, 1, dtype=torch.bool)
    return TensorDict(
        {
            "pixels": pix,
            "state": state,
            "step_count": step,
            "action": torch.randn(n, 2, generator=g),
            "eid": eid,
            "done": no.clone(),
            "terminated": no.clone(),
            "truncated": no.clone(),
            "next": {
                "pixels": npix,
                "state": nstate,
                "step_count": nstep,
                "reward": torch.randn(n, 1, generator=g),
                "done": (ends).unsqueeze(-1),
                "terminated": term.unsqueeze(-1),
                "truncated": trunc.unsqueeze(-1),
            },
        },
        batch_size=[n],
    )


def as_bytes(x: torch.Tensor) -> torch.Tensor:
    flat = x.reshape(-1)
    return flat.new_empty(flat.shape).copy_(flat).view(torch.uint8)


def assert_identical(a, b) -> None:
    """Same keys in the same order, same dtypes and shapes, same bytes."""
    ka = list(a.keys(include_nested=True, leaves_only=True))
    kb = list(b.keys(include_nested=True, leaves_only=True))
    assert ka == kb
    assert a.batch_size == b.batch_size and a.device == b.device
    for k in ka:
        x, y = a.get(k), b.get(k)
        assert x.dtype == y.dtype and x.shape == y.shape, k
        assert torch.equal(as_bytes(x), as_bytes(y)), k


# -- Ray-hosted buffers (tests/distributed) ----------------------------------------------------


def hopper_rows(n: int, tag: float = 0.0, start: int = 0) -> TensorDict:
    """Hopper-shaped TED rows; ``action`` holds ``tag``, ``("next", "reward")`` the row number."""
    i = torch.arange(start, start + n, dtype=torch.float32).unsqueeze(-1)
    flag = (torch.arange(start, start + n) % 7 == 0).unsqueeze(-1)
    return TensorDict(
        {
            "observation": tag + i.expand(n, 11).clone(),
            "action": torch.full((n, 3), tag),
            "done": flag.clone(),
            "terminated": flag.clone(),
            "next": {
                "observation": tag + 1 + i.expand(n, 11).clone(),
                "reward": i.clone(),
                "done": flag.clone(),
                "terminated": flag.clone(),
            },
        },
        batch_size=[n],
    )


def ring_rows(state: dict) -> TensorDict:
    """The online ring's rows in slot order, from an OfflineToOnlineReplayBuffer's state dict."""
    ring = state["sources"]["online"]["storage"]
    return RowLayout(Schema.from_json(ring["schema"])).unpack(ring["rows"])


def stored_online_rows(rb) -> TensorDict:
    """The online ring's rows in slot order, read through the forwarded ``state_dict``."""
    return ring_rows(rb.state_dict())


def wait_until_back(rb) -> dict:
    """Block until a restarting buffer actor answers again; return its ``actor_info()``.

    Ray answers calls made while it restarts the actor with an error (the actor is
    unavailable), so this asks again until one succeeds. The bound on attempts only
    keeps a broken restart from hanging the suite; it asserts nothing about speed.
    """
    for _ in range(6000):
        try:
            return rb.actor_info()
        except BufferActorError as err:
            if "is unavailable" not in str(err) and "died" not in str(err):
                raise
            time.sleep(0.1)
    raise AssertionError("the buffer actor never answered again after its restart")


def run_threads(*fns: Callable[[], object], timeout: float = 60.0, release=None) -> list:
    """Run each function in a thread of its own, under a watchdog; their results, in order.

    The first error a thread raised is raised here. A thread still running after
    ``timeout`` seconds fails the test (a hang): ``release()`` is called first (e.g. a
    buffer's ``close()``, which wakes every call waiting for its rate limiter) so that
    nothing is left blocked behind the failure. The bound asserts nothing about speed.
    """
    results: list = [None] * len(fns)
    errors: list[BaseException] = []

    def run(i: int, fn: Callable[[], object]) -> None:
        try:
            results[i] = fn()
        except BaseException as err:  # handed to the test's thread
            errors.append(err)

    threads = [threading.Thread(target=run, args=(i, f), daemon=True) for i, f in enumerate(fns)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + timeout
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    hung = [i for i, t in enumerate(threads) if t.is_alive()]
    if hung:
        if release is not None:
            release()
        for t in threads:
            t.join(10)
        raise AssertionError(f"threads {hung} were still running after {timeout} s (a hang)")
    if errors:
        raise errors[0]
    return results
