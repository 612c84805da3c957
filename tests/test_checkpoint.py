"""Checkpoints: exact resume, only the filled rows on disk, crash safety, and every refusal."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from tensordict import TensorDict

from mixreplay import (
    CheckpointError,
    LazyMemmapStorage,
    LazyTensorStorage,
    MixtureReplayBuffer,
    OfflineDataset,
    OfflineToOnlineReplayBuffer,
    RandomSampler,
    ReplayBuffer,
)
from mixreplay.checkpoint import load_state
from mixreplay.datasets.memmap import load_memmap, write_memmap_dataset
from mixreplay.persist.container import _checksum
from mixreplay.samplers import PrioritizedSampler, SliceSampler
from mixreplay.schedules import Cosine, Linear, Proportional
from tests.helpers import OFFLINE_BASE, assert_same, assert_state_equal, id_rows, ids

OFFLINE = OfflineDataset.from_tensordict(id_rows(OFFLINE_BASE, 300))
METADATA = "metadata.json"


# -- the buffers under test -------------------------------------------------------------------


def _replay(capacity, tmp):
    return ReplayBuffer(storage=LazyTensorStorage(capacity), batch_size=8, generator=3)


def _replay_memmap(capacity, tmp):
    return ReplayBuffer(
        storage=LazyMemmapStorage(capacity, scratch_dir=tmp), batch_size=8, generator=3
    )


def _o2o(capacity, tmp):
    return OfflineToOnlineReplayBuffer(
        OFFLINE, online_capacity=capacity, offline_fraction=0.3, batch_size=10, generator=5
    )


def _o2o_prioritized(capacity, tmp):
    return OfflineToOnlineReplayBuffer(
        OFFLINE,
        online_capacity=capacity,
        offline_fraction=0.4,
        batch_size=10,
        generator=5,
        online_sampler=PrioritizedSampler(alpha=0.7, beta=0.5),
    )


def _o2o_linear(capacity, tmp):
    return OfflineToOnlineReplayBuffer(
        OFFLINE,
        online_capacity=capacity,
        offline_fraction=Linear(0.9, 0.1, 20),
        batch_size=10,
        generator=5,
    )


def _o2o_proportional(capacity, tmp):
    return OfflineToOnlineReplayBuffer(
        OFFLINE,
        online_storage=LazyMemmapStorage(capacity, scratch_dir=tmp),
        offline_fraction=Proportional("offline"),
        batch_size=10,
        generator=5,
    )


def _mixture(capacity, tmp):
    prioritized_offline = OfflineDataset(
        OFFLINE.storage, sampler=PrioritizedSampler(alpha=1.0), metadata=OFFLINE.metadata
    )
    return MixtureReplayBuffer(
        {
            "off": prioritized_offline,
            "a": LazyTensorStorage(capacity),
            "b": LazyTensorStorage(capacity + 3),
        },
        {"off": Cosine(0.8, 0.2, 15), "a": 1.0, "b": 2.0},
        samplers={"b": PrioritizedSampler(alpha=0.5)},
        batch_size=12,
        generator=9,
        source_key="src",
    )


BUILDERS = {
    "replay": _replay,
    "replay-memmap": _replay_memmap,
    "o2o": _o2o,
    "o2o-prioritized": _o2o_prioritized,
    "o2o-linear": _o2o_linear,
    "o2o-proportional": _o2o_proportional,
    "mixture": _mixture,
}


def write(rb, start: int, n: int) -> None:
    if isinstance(rb, MixtureReplayBuffer):
        rb.extend(id_rows(start, n), source="a" if start % 2 else "b")
    else:
        rb.extend(id_rows(start, n))


def step(rb, k: int, gen: random.Random) -> tuple:
    """One learner step: move the schedule, draw a batch, update priorities where there are any."""
    if hasattr(rb, "set_step"):
        rb.set_step(k)
    out = rb.sample(return_info=True)
    info = out[1]
    if isinstance(rb, ReplayBuffer):
        if isinstance(rb.sampler, PrioritizedSampler):
            rb.update_priority(
                info["index"], torch.tensor([gen.random() for _ in range(info.batch_size[0])])
            )
    else:
        rb.update_priority(
            info, torch.tensor([gen.random() * 3 for _ in range(info.batch_size[0])])
        )
    return out


# -- exact resume -----------------------------------------------------------------------------


@given(
    kind=st.sampled_from(sorted(BUILDERS)),
    capacity=st.integers(1, 9),
    chunks=st.lists(st.integers(1, 13), min_size=1, max_size=5),
    draws=st.integers(0, 3),
)
@settings(max_examples=30, deadline=None)
def test_loaded_twin_draws_the_same_batches_across_wrap_states(kind, capacity, chunks, draws):
    """Empty, partly filled, exactly full and wrapped rings; before and after more writes."""
    with tempfile.TemporaryDirectory() as tmp:
        make = BUILDERS[kind]
        a, g_a = make(capacity, tmp), random.Random(1)
        n = 0
        for c in chunks:
            write(a, n, c)
            n += c
        for k in range(draws):
            step(a, k, g_a)
        a.dumps(Path(tmp) / "ckpt")
        b, g_b = make(capacity, tmp), random.Random(1)
        b.loads(Path(tmp) / "ckpt")
        g_b.setstate(g_a.getstate())
        for k in range(draws, draws + 3):
            assert_same(step(a, k, g_a), step(b, k, g_b))
        write(a, n, capacity + 2)  # wraps the ring (again)
        write(b, n, capacity + 2)
        for k in range(draws + 3, draws + 6):
            assert_same(step(a, k, g_a), step(b, k, g_b))


def test_slices_resume_exactly(tmp_path):
    def make():
        return ReplayBuffer(
            storage=LazyTensorStorage(23), sampler=SliceSampler(3), batch_size=9, generator=2
        )

    a = make()
    a.extend(id_rows(0, 40))  # wrapped: the cursor cuts an episode
    a.sample()
    a.dumps(tmp_path / "ck")
    b = make()
    b.loads(tmp_path / "ck")
    for _ in range(4):
        assert_same(a.sample(), b.sample())


def test_state_dict_is_a_snapshot_and_loads_in_memory():
    a = _o2o(10, None)
    a.extend(id_rows(0, 14))
    state = a.state_dict()
    b = _o2o(10, None)
    b.load_state_dict(state)
    a.extend(id_rows(14, 5))  # after the snapshot: not in it
    assert state["sources"]["online"]["storage"]["write_count"] == 14
    c = _o2o(10, None)
    c.load_state_dict(state)
    for _ in range(3):
        assert_same(b.sample(), c.sample())


def test_anneal_state_is_restored(tmp_path):
    a = _o2o(50, None)
    a.extend(id_rows(0, 30))
    a.anneal(30, 100)
    a.dumps(tmp_path / "ck")
    b = _o2o(50, None)
    b.loads(tmp_path / "ck")
    assert (
        b.offline_fraction == pytest.approx(0.3 * 0.7) and b.offline_fraction == a.offline_fraction
    )
    b.anneal(50, 100)
    assert b.offline_fraction == pytest.approx(0.15)  # the base fraction came back too


def test_loading_replaces_what_the_buffer_held(tmp_path):
    a = _o2o(8, None)
    a.extend(id_rows(0, 3))
    a.dumps(tmp_path / "ck")
    b = _o2o(8, None)
    b.extend(id_rows(100, 8))
    b.sample()
    b.loads(tmp_path / "ck")
    assert len(b.online_buffer) == 3 and b.online_buffer.storage.cursor == 3
    assert ids(b.online_buffer[:]) == [0, 1, 2]
    assert_same(a.sample(), b.sample())


# -- what is on disk --------------------------------------------------------------------------


def test_only_filled_rows_are_written_and_offline_is_referenced(tmp_path):
    offline = OfflineDataset.from_tensordict(id_rows(OFFLINE_BASE, 5000))
    rb = OfflineToOnlineReplayBuffer(offline, online_capacity=100_000, batch_size=4, generator=0)
    rb.extend(id_rows(0, 250))
    path = tmp_path / "ck"
    rb.dumps(path)
    row_bytes = rb.online_buffer.storage.row_bytes
    rows_file = path / "sources.online.storage.rows.bin"
    assert rows_file.stat().st_size == 250 * row_bytes
    raw = torch.from_file(str(rows_file), size=250 * row_bytes // 8, dtype=torch.int64).view(
        250, -1
    )
    assert torch.equal(
        raw, rb.online_buffer.storage.rows
    )  # raw little-endian packed words, slot order
    others = sum(f.stat().st_size for f in path.iterdir()) - rows_file.stat().st_size
    assert (
        others < 30_000 < len(offline) * row_bytes
    )  # metadata and generator states; no offline row
    assert sorted(os.listdir(tmp_path)) == ["ck"]  # no temporary or aside directory left


def test_metadata_records_the_run(tmp_path):
    ds_path = write_memmap_dataset(
        tmp_path / "ds", id_rows(OFFLINE_BASE, 300), source_id="test:ids-v0"
    )
    ds = load_memmap(ds_path)
    rb = OfflineToOnlineReplayBuffer(
        ds,
        online_capacity=7,
        offline_fraction=Linear(0.75, 0.25, 10),
        batch_size=4,
        online_sampler=PrioritizedSampler(),
        generator=0,
    )
    rb.extend(id_rows(0, 9))
    rb.set_step(4)
    rb.dumps(tmp_path / "ck")
    meta = json.loads((tmp_path / "ck" / METADATA).read_text())
    assert meta["format"] == "mixreplay-checkpoint" and meta["format_version"] == 3
    assert meta["mixreplay_version"] and meta["checksum"].startswith("sha256:")
    state = meta["state"]
    assert state["kind"] == "OfflineToOnlineReplayBuffer"
    online = state["sources"]["online"]["storage"]
    assert (online["max_size"], online["len"], online["cursor"], online["write_count"]) == (
        7,
        7,
        2,
        9,
    )
    assert online["schema"] == ds.schema.to_json()
    assert online["rows"]["__tensor__"]["shape"] == [7, ds.storage.layout.row_words]
    offline = state["sources"]["offline"]
    ref = offline["storage"]
    assert ref["reference"] and ref["fingerprint"] == ds.fingerprint and ref["rows"] == 300
    assert offline["reference"] == {"source_id": "test:ids-v0", "path": str(ds_path)}
    fraction = state["fraction"]
    assert fraction["schedule"] == {"type": "Linear", "start": 0.75, "end": 0.25, "steps": 10}
    assert fraction["step"] == 4 and fraction["base_offline_fraction"] == 0.75
    sampler = state["sources"]["online"]["sampler"]
    assert sampler["type"].endswith("PrioritizedSampler")
    assert sampler["state"]["priorities"]["__tensor__"]["dtype"] == "float64"
    assert state["_rng"]["state"]["__tensor__"]["dtype"] == "uint8"


def test_callable_schedules_are_kept_from_the_buffer(tmp_path):
    def half_then_quarter(step):
        return 0.5 if step < 3 else 0.25

    a = OfflineToOnlineReplayBuffer(
        OFFLINE, online_capacity=9, offline_fraction=half_then_quarter, batch_size=8, generator=1
    )
    a.extend(id_rows(0, 5))
    a.set_step(4)
    a.dumps(tmp_path / "ck")
    b = OfflineToOnlineReplayBuffer(
        OFFLINE, online_capacity=9, offline_fraction=half_then_quarter, batch_size=8, generator=1
    )
    b.loads(tmp_path / "ck")
    assert b.offline_fraction == 0.25
    assert_same(a.sample(), b.sample())
    c = _o2o(9, None)
    with pytest.raises(
        CheckpointError, match="was a plain function .* build the buffer with that same function"
    ):
        c.loads(tmp_path / "ck")


# -- refusals ---------------------------------------------------------------------------------


def _saved(tmp_path, make=None) -> Path:
    a = (make or (lambda: _o2o(10, None)))()
    a.extend(id_rows(0, 12))
    a.sample()
    path = tmp_path / "ck"
    a.dumps(path)
    return path


def _edit_metadata(path: Path, edit, *, fix_checksum: bool | None) -> None:
    """Edit metadata.json; its checksum recomputed (True), kept as it was (False) or removed (None)."""
    meta = json.loads((path / METADATA).read_text())
    old = meta.pop("checksum")
    edit(meta)
    if fix_checksum is not None:
        meta["checksum"] = _checksum(meta) if fix_checksum else old
    (path / METADATA).write_text(json.dumps(meta))


def _rows_file(path: Path) -> Path:
    return path / "sources.online.storage.rows.bin"


def _symlink_outside(path):
    """The rows file replaced by a link to an identical file outside the checkpoint."""
    outside = path.parent / "outside.bin"
    shutil.move(_rows_file(path), outside)
    _rows_file(path).symlink_to(outside)


def _truncate(path):
    f = _rows_file(path)
    f.write_bytes(f.read_bytes()[:-8])


def _flip_a_byte(path):
    f = _rows_file(path)
    data = bytearray(f.read_bytes())
    data[len(data) // 2] ^= 0xFF
    f.write_bytes(bytes(data))


def _edited_with_nan(value):
    """An edit (the fraction 0.3 -> 0.9) that hides behind a non-JSON number and no checksum."""

    def edit(m):
        m["state"]["fraction"]["schedule"]["value"] = 0.9
        m["state"]["fraction"]["base_offline_fraction"] = 0.9
        m["pad"] = value

    return lambda p: _edit_metadata(p, edit, fix_checksum=None)


def _insert_raw(path: Path, text: str) -> None:
    """Add ``text`` right after the opening brace of metadata.json (the checksum unchanged)."""
    raw = (path / METADATA).read_text()
    (path / METADATA).write_text("{" + text + "," + raw.lstrip()[1:])


CORRUPTIONS = {
    "NaN in metadata without a checksum": (
        _edited_with_nan(float("nan")),
        "metadata.json is not strict JSON: NaN is not a JSON value",
    ),
    "Infinity in metadata without a checksum": (
        _edited_with_nan(float("-inf")),
        "metadata.json is not strict JSON: -Infinity is not a JSON value",
    ),
    "a number that overflows a float": (
        lambda p: _insert_raw(p, '"pad": 1e999'),
        "metadata.json is not strict JSON: the number 1e999 overflows a float",
    ),
    "a key repeated with the same value": (
        lambda p: _insert_raw(p, '"format": "mixreplay-checkpoint"'),
        "metadata.json is not strict JSON: the key 'format' appears twice in one object",
    ),
    "an edit with the checksum removed": (
        lambda p: _edit_metadata(
            p, lambda m: m["state"]["fraction"].update(base_offline_fraction=0.9), fix_checksum=None
        ),
        "metadata.json has no checksum, which every checkpoint of format version 3 carries",
    ),
    "format 1 claimed, without a checksum": (
        lambda p: _edit_metadata(p, lambda m: m.update(format_version=1), fix_checksum=None),
        "metadata.json has no checksum, which every checkpoint of format version 1 carries",
    ),
    "unknown format version": (
        lambda p: _edit_metadata(p, lambda m: m.update(format_version=99), fix_checksum=True),
        r"in checkpoint format version 99; this mixreplay .* reads versions 1 to 3: upgrade mixreplay",
    ),
    "not a checkpoint format": (
        lambda p: _edit_metadata(p, lambda m: m.update(format="something-else"), fix_checksum=True),
        "is not a mixreplay checkpoint \\(format 'something-else'",
    ),
    "edited metadata": (
        lambda p: _edit_metadata(
            p,
            lambda m: m["state"]["sources"]["online"]["storage"].update(cursor=1),
            fix_checksum=False,
        ),
        "metadata.json was edited or corrupted",
    ),
    "edited metadata with a matching checksum": (
        lambda p: _edit_metadata(
            p,
            lambda m: m["state"]["sources"]["online"]["storage"].update(cursor=10),
            fix_checksum=True,
        ),
        r"source 'online': storage: inconsistent ring \(len=10, cursor=10, write_count=12, "
        r"max_size=10\); the state is corrupt",
    ),
    "invalid JSON": (
        lambda p: (p / METADATA).write_text("{not json"),
        "metadata.json is not valid UTF-8 JSON",
    ),
    "missing metadata": (lambda p: (p / METADATA).unlink(), "metadata.json is missing"),
    "metadata not UTF-8": (
        lambda p: (p / METADATA).write_bytes(b"\xff\xfe{}"),
        "metadata.json is not valid UTF-8 JSON \\(UnicodeDecodeError",
    ),
    "metadata not an object": (
        lambda p: (p / METADATA).write_text("[1, 2]"),
        "metadata.json holds a JSON list, not an object",
    ),
    "deeply nested metadata": (
        lambda p: (p / METADATA).write_text("[" * 100_000 + "]" * 100_000),
        "metadata.json is not valid UTF-8 JSON \\(RecursionError",
    ),
    "nested deeper than written": (
        lambda p: _edit_metadata(
            p, lambda m: m.update(deep=json.loads("[" * 80 + "]" * 80)), fix_checksum=True
        ),
        "nested deeper than 64 levels",
    ),
    "CRC stored as text": (
        lambda p: _edit_metadata(
            p,
            lambda m: m["state"]["sources"]["online"]["storage"]["rows"]["__tensor__"].update(
                crc32="0"
            ),
            fix_checksum=True,
        ),
        "crc32 must be an int in \\[0, 2\\*\\*32\\), got '0'",
    ),
    "symlink to a file outside": (
        lambda p: _symlink_outside(p),
        "is a symbolic link; a .* file must be a regular file inside",
    ),
    "missing checkpoint": (
        lambda p: shutil.rmtree(p),
        "no checkpoint at .*: the directory does not exist",
    ),
    "missing tensor file": (
        lambda p: _rows_file(p).unlink(),
        r"rows.bin is missing; the files are incomplete",
    ),
    "truncated tensor file": (
        _truncate,
        r"holds \d+ bytes, expected \d+ \(int64\[10, \d+\]\); the file is truncated",
    ),
    "corrupt tensor file": (_flip_a_byte, "is corrupt: its CRC-32 is"),
    "malformed state": (
        lambda p: _edit_metadata(
            p, lambda m: m["state"]["sources"]["online"].pop("storage"), fix_checksum=True
        ),
        "source 'online': storage: a storage state is a dict, got NoneType",
    ),
}


@pytest.mark.parametrize("what", sorted(CORRUPTIONS))
def test_corrupt_checkpoints_are_refused_and_the_buffer_is_unchanged(tmp_path, what):
    path = _saved(tmp_path)
    corrupt, match = CORRUPTIONS[what]
    corrupt(path)
    rb = _o2o(10, None)
    rb.extend(id_rows(500, 3))
    before = rb.state_dict()
    with pytest.raises(CheckpointError, match=match):
        rb.loads(path)
    assert_state_equal(before, rb.state_dict())


def _obs4_rows(start, n):
    td = id_rows(start, n)
    td["observation"] = torch.zeros(n, 4)
    return td


MISFITS = {
    "another capacity": (
        lambda: _o2o(11, None),
        None,
        r"the saved ring has max_size 10, this storage 11; build it with the same capacity "
        r"\(e.g. online_capacity=10\)",
    ),
    "another buffer kind": (
        lambda: _replay(10, None),
        None,
        "holds a OfflineToOnlineReplayBuffer, not a ReplayBuffer",
    ),
    "another sampler": (
        lambda: OfflineToOnlineReplayBuffer(
            OFFLINE,
            online_capacity=10,
            online_sampler=RandomSampler(replacement=False),
            generator=5,
        ),
        None,
        r"saved with a RandomSampler, this buffer samples with a SamplerWithoutReplacement; "
        r"build the buffer with the same sampler",
    ),
    "another schema in the buffer": (
        lambda: ReplayBuffer(storage=LazyTensorStorage(10), generator=3),
        lambda rb: rb.extend(_obs4_rows(0, 2)),
        r"the saved rows do not match this storage's \('observation': storage float32\[4\], state "
        r"float32\[3\] \(shape\)\)",
    ),
    "another offline dataset": (
        lambda: OfflineToOnlineReplayBuffer(
            OfflineDataset.from_tensordict(id_rows(OFFLINE_BASE, 299)),
            online_capacity=10,
            generator=5,
        ),
        None,
        r"source 'offline': the rows are not the ones this state was saved with .*fingerprint "
        r".* saved, .* given; 300 rows saved, 299 given.*allow_offline_mismatch=True",
    ),
    "an offline dataset of another schema": (
        lambda: OfflineToOnlineReplayBuffer(
            OfflineDataset.from_tensordict(_obs4_rows(OFFLINE_BASE, 300)),
            online_capacity=10,
            generator=5,
        ),
        None,
        "source 'offline': the rows are not the ones this state was saved with",
    ),
}


@pytest.mark.parametrize("what", sorted(MISFITS))
def test_checkpoints_that_do_not_fit_the_buffer_are_refused(tmp_path, what):
    make, prepare, match = MISFITS[what]
    saved_from = (lambda: _replay(10, None)) if what == "another schema in the buffer" else None
    path = _saved(tmp_path, saved_from)
    rb = make()
    if prepare:
        prepare(rb)
    before = rb.state_dict()
    with pytest.raises(CheckpointError, match=match):
        rb.loads(path)
    assert_state_equal(before, rb.state_dict())


def test_offline_mismatch_can_be_overridden(tmp_path, caplog):
    path = _saved(tmp_path)
    other = OfflineDataset.from_tensordict(id_rows(OFFLINE_BASE + 1, 300))  # same shape, other rows
    rb = OfflineToOnlineReplayBuffer(
        other, online_capacity=10, offline_fraction=0.3, batch_size=10, generator=5
    )
    with pytest.raises(CheckpointError, match="fingerprint"):
        rb.loads(path)
    rb.loads(path, allow_offline_mismatch=True)
    assert "resuming anyway" in caplog.text
    assert len(rb.online_buffer) == 10 and rb.online_buffer.storage.write_count == 12


def test_in_memory_states_are_checked_too():
    rb = _o2o(10, None)
    with pytest.raises(
        CheckpointError, match="a OfflineToOnlineReplayBuffer state is a dict, got list"
    ):
        rb.load_state_dict([])
    state = _o2o(10, None).state_dict()
    state["kind"] = "MixtureReplayBuffer"
    with pytest.raises(
        CheckpointError, match="the state holds a MixtureReplayBuffer, not a Offline"
    ):
        rb.load_state_dict(state)


def test_dumps_never_replaces_a_directory_that_is_not_a_checkpoint(tmp_path):
    precious = tmp_path / "data"
    precious.mkdir()
    (precious / "keep.txt").write_text("mine")
    rb = _o2o(10, None)
    with pytest.raises(
        CheckpointError, match="exists and is not a mixreplay checkpoint; refusing to replace it"
    ):
        rb.dumps(precious)
    assert (precious / "keep.txt").read_text() == "mine"


@pytest.mark.torchrl
def test_a_torchrl_online_storage_round_trips(tmp_path):
    from torchrl.data import LazyTensorStorage as TorchRLStorage

    def make():
        return OfflineToOnlineReplayBuffer(
            OFFLINE, online_storage=TorchRLStorage(10), batch_size=8, generator=4
        )

    a = make()
    a.extend(id_rows(0, 13))  # wraps
    a.sample()
    a.dumps(tmp_path / "ck")
    b = make()
    b.loads(tmp_path / "ck")
    assert b.online_buffer.storage.write_count == 13 and len(b.online_buffer) == 10
    for _ in range(3):
        assert_same(a.sample(), b.sample())


# -- crash safety -----------------------------------------------------------------------------


def test_an_interrupted_swap_is_read_by_readers_and_recovered_by_the_next_writer(tmp_path):
    path = _saved(tmp_path)
    aside = tmp_path / ".ck.old"
    # Killed between "old aside" and "new in": only the aside copy exists.
    os.replace(path, aside)
    stale_tmp = tmp_path / ".ck.tmp-999999999-abc"  # a dead writer's half-written directory
    stale_tmp.mkdir()
    (stale_tmp / "sources.online.storage.rows.bin").write_bytes(b"\0" * 10)
    listing = sorted(os.listdir(tmp_path))
    rb = _o2o(10, None)
    rb.loads(path)  # a reader reads the previous checkpoint, and changes nothing
    assert len(rb.online_buffer) == 10 and sorted(os.listdir(tmp_path)) == listing
    rb.dumps(path)  # the next writer recovers, cleans up and saves
    assert sorted(os.listdir(tmp_path)) == ["ck"]
    # Killed while removing the old copy: both exist, the new one wins and the old is dropped.
    shutil.copytree(path, aside)
    (aside / METADATA).write_text("{half deleted")
    rb.loads(path)
    rb.dumps(path)
    assert sorted(os.listdir(tmp_path)) == ["ck"]  # aside and the dead writer's temp dir are gone


ZYGOTE = textwrap.dedent(
    r"""
    import os, sys, traceback
    import torch
    torch.set_num_threads(1)
    from tensordict import TensorDict
    from mixreplay import OfflineDataset, OfflineToOnlineReplayBuffer

    path, capacity = sys.argv[1], int(sys.argv[2])

    def id_rows(start, n):
        f = torch.arange(start, start + n, dtype=torch.float32).unsqueeze(-1)
        return TensorDict({"observation": f.expand(n, 3).clone(), "next": {"reward": f.clone()}}, [n])

    def make():
        off = OfflineDataset.from_tensordict(id_rows(-1000, 50))
        return OfflineToOnlineReplayBuffer(off, online_capacity=capacity, batch_size=64, generator=0)

    for line in sys.stdin:
        cmd, *args = line.split()
        if cmd == "fork":
            pid = os.fork()
            if pid == 0:  # the writer: resume from the checkpoint, then write, sample, save, forever
                try:
                    rb = make()
                    rb.loads(path)
                    n = rb.online_buffer.storage.write_count
                    while True:
                        rb.extend(id_rows(n, 997))
                        n += 997
                        rb.sample()
                        rb.dumps(path)
                except BaseException:
                    traceback.print_exc()
                    sys.stderr.flush()
                os._exit(1)
            print(pid, flush=True)
        elif cmd == "wait":
            _, status = os.waitpid(int(args[0]), 0)
            print(status, flush=True)
    """
)


def _zygote_rows(start, n):
    f = torch.arange(start, start + n, dtype=torch.float32).unsqueeze(-1)
    return TensorDict({"observation": f.expand(n, 3).clone(), "next": {"reward": f.clone()}}, [n])


def _zygote_buffer(capacity):
    off = OfflineDataset.from_tensordict(_zygote_rows(-1000, 50))
    return OfflineToOnlineReplayBuffer(off, online_capacity=capacity, batch_size=64, generator=0)


@pytest.mark.heavy  # a forked writer SIGKILLed at random moments, many times
def test_sigkill_at_random_moments_of_dumps_leaves_a_loadable_checkpoint(tmp_path):
    """A writer process is killed (SIGKILL) 25 times at random instants while it saves in a loop.

    After every kill the checkpoint loads, its rows are exactly the ring a run of
    ``write_count`` writes holds, and it never goes back to an older state.
    The writers fork from one process that imported torch once (a fresh
    interpreter per kill would take seconds).
    """
    capacity, kills = 20_000, 25
    path = tmp_path / "ck"
    first = _zygote_buffer(capacity)
    first.extend(_zygote_rows(0, 997))
    first.dumps(path)
    log = (tmp_path / "zygote.log").open("w+")
    zygote = subprocess.Popen(
        [sys.executable, "-c", ZYGOTE, str(path), str(capacity)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
    )
    rng = random.Random(0)
    last, interrupted = 0, 0
    try:
        for _ in range(kills):
            zygote.stdin.write("fork\n")
            zygote.stdin.flush()
            pid = int(zygote.stdout.readline())
            time.sleep(rng.uniform(0.03, 0.25))
            os.kill(pid, signal.SIGKILL)
            zygote.stdin.write(f"wait {pid}\n")
            zygote.stdin.flush()
            status = int(zygote.stdout.readline())
            log.seek(0)
            assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, log.read()
            leftovers = [p.name for p in tmp_path.iterdir() if p.name.startswith(".ck.")]
            interrupted += bool(leftovers)
            rb = _zygote_buffer(capacity)
            rb.loads(path)
            storage = rb.online_buffer.storage
            written = storage.write_count
            assert written >= last and written % 997 == 0
            slots = torch.arange(len(storage))
            newest = (
                written - 1 - ((written - 1 - slots) % capacity)
            )  # the last id written to each slot
            assert torch.equal(storage.column(("next", "reward")).squeeze(-1).long(), newest)
            last = written
    finally:
        zygote.stdin.close()
        zygote.wait(timeout=30)
        zygote.stdout.close()
        log.close()
    assert last > 997  # the writers made progress
    assert interrupted >= 1  # some kills landed inside a save (temporary or aside directory left)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_a_ring_on_the_gpu_resumes_exactly(tmp_path):
    def make():
        return OfflineToOnlineReplayBuffer(
            OFFLINE, online_storage=LazyTensorStorage(9, device="cuda"), batch_size=10, generator=5
        )

    a = make()
    a.extend(id_rows(0, 13))
    a.sample()
    a.dumps(tmp_path / "ck")
    b = make()
    b.loads(tmp_path / "ck")
    assert b.online_buffer.storage.rows.device.type == "cuda"
    for _ in range(3):
        assert_same(a.sample(), b.sample())


@pytest.mark.parametrize("kind", sorted(BUILDERS))
def test_the_directory_holds_exactly_the_state_dict(kind, tmp_path):
    rb = BUILDERS[kind](6, tmp_path)
    write(rb, 0, 9)
    step(rb, 0, random.Random(0))
    rb.dumps(tmp_path / "ck")
    assert_state_equal(rb.state_dict(), load_state(tmp_path / "ck"))


def test_a_plain_buffer_as_offline_side_is_fingerprinted_by_its_rows(tmp_path):
    offline = ReplayBuffer(storage=LazyTensorStorage(400), generator=1)
    offline.extend(id_rows(OFFLINE_BASE, 300))

    def make():
        return OfflineToOnlineReplayBuffer(offline, online_capacity=10, batch_size=8, generator=2)

    a = make()
    a.extend(id_rows(0, 4))
    a.dumps(tmp_path / "ck")
    b = make()
    b.loads(tmp_path / "ck")
    assert_same(a.sample(), b.sample())
    offline.extend(id_rows(0, 1))  # the "offline" rows changed since the save
    with pytest.raises(
        CheckpointError,
        match="source 'offline': the rows are not the ones .*300 rows saved, 301 given",
    ):
        make().loads(tmp_path / "ck")


# -- format 1 (before the redesign) -----------------------------------------------------------

FIXTURES = Path(__file__).parent / "fixtures" / "v1"


def _v1_twins():
    """The buffers tests/fixtures/make_v1_fixtures.py saved, built the same way."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "make_v1", FIXTURES.parent / "make_v1_fixtures.py"
    )
    make = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make)
    return {
        "replay_buffer": ReplayBuffer(
            storage=LazyTensorStorage(16),
            sampler=PrioritizedSampler(alpha=0.7, beta=0.5),
            batch_size=4,
            generator=1,
        ),
        "offline_to_online": OfflineToOnlineReplayBuffer(
            make.offline(),
            online_capacity=32,
            offline_fraction=Linear(0.6, 0.1, steps=100),
            batch_size=8,
            generator=2,
        ),
        "offline_to_online_annealed": OfflineToOnlineReplayBuffer(
            make.offline(), online_capacity=32, offline_fraction=0.5, batch_size=8, generator=3
        ),
        "mixture": MixtureReplayBuffer(
            {
                "expert": make.offline(),
                "play": LazyTensorStorage(10),
                "online": LazyTensorStorage(20),
            },
            {"expert": 0.5, "play": 0.3, "online": 0.2},
            batch_size=10,
            generator=4,
        ),
    }


@pytest.mark.parametrize(
    "name", ["replay_buffer", "offline_to_online", "offline_to_online_annealed", "mixture"]
)
def test_format_1_checkpoints_load_and_draw_what_the_old_version_drew(name, tmp_path):
    """Checkpoints written before the state redesign are migrated and resume exactly."""
    expected = json.loads((FIXTURES / "next_batches.json").read_text())[name]
    path = tmp_path / name
    shutil.copytree(FIXTURES / name, path)  # a load may recover or clean up: never in the tree
    rb = _v1_twins()[name]
    rb.loads(path)
    batch = rb.sample()
    got = {
        ".".join(k) if isinstance(k, tuple) else k: batch.get(k).tolist()
        for k in batch.keys(include_nested=True, leaves_only=True)
    }
    assert got == expected
    rb.dumps(tmp_path / "again")  # and is saved in the current format
    assert json.loads((tmp_path / "again" / METADATA).read_text())["format_version"] == 3


def test_the_annealed_fraction_of_a_format_1_checkpoint_resumes_as_it_was(tmp_path):
    shutil.copytree(FIXTURES / "offline_to_online_annealed", tmp_path / "ck")
    rb = _v1_twins()["offline_to_online_annealed"]
    rb.loads(tmp_path / "ck")
    assert rb.offline_fraction == 0.5 * (1 - 25 / 100)
    rb.anneal(50, 100)  # the base fraction came back too
    assert rb.offline_fraction == 0.25


def test_a_checkpoint_of_a_newer_format_says_so(tmp_path):
    path = _saved(tmp_path)
    _edit_metadata(
        path, lambda m: m.update(format_version=4, mixreplay_version="9.0"), fix_checksum=True
    )
    with pytest.raises(
        CheckpointError,
        match="written by mixreplay '9.0' in checkpoint format version 4; .*upgrade",
    ):
        _o2o(10, None).loads(path)


def test_a_missing_checkpoint_is_a_file_not_found_error(tmp_path):
    from mixreplay import CheckpointNotFoundError

    with pytest.raises(FileNotFoundError, match="no checkpoint at"):
        _o2o(10, None).loads(tmp_path / "nothing")
    with pytest.raises(CheckpointNotFoundError):
        _o2o(10, None).loads(tmp_path / "nothing")


def test_dumps_through_a_symlink_works_every_time(tmp_path):
    """The link is followed: the directory it points to is replaced, the link keeps pointing at it."""
    real = tmp_path / "real"
    link = tmp_path / "link"
    link.symlink_to(real, target_is_directory=True)
    rb = _o2o(10, None)
    for n in range(3):
        rb.extend(id_rows(n, 1))
        rb.dumps(link)
        assert link.is_symlink() and (real / METADATA).is_file()
        twin = _o2o(10, None)
        twin.loads(link)
        assert len(twin.online_buffer) == n + 1


def _replacements(caplog) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "mixreplay.buffers.base" and r.levelname == "WARNING"
    ]


def test_loads_says_what_it_replaces_of_what_the_constructor_set(tmp_path, caplog):
    """A checkpoint's fraction and generator replace the constructor's: said at WARNING,
    naming both, when they differ; at INFO only when the buffer was built as the saved one."""
    saved = OfflineToOnlineReplayBuffer(
        OFFLINE, online_capacity=50, offline_fraction=0.25, generator=0, batch_size=8
    )
    saved.extend(id_rows(0, 10))
    saved.sample()
    saved.dumps(tmp_path / "ckpt")

    def load(**kwargs):
        caplog.clear()
        rb = OfflineToOnlineReplayBuffer(OFFLINE, online_capacity=50, batch_size=8, **kwargs)
        with caplog.at_level("INFO", logger="mixreplay.buffers.base"):
            rb.loads(tmp_path / "ckpt")
        return _replacements(caplog)

    assert load(offline_fraction=0.5, generator=1) == [
        "OfflineToOnlineReplayBuffer: the loaded state replaces what the constructor set: "
        "offline_fraction Constant(value=0.5) with the saved Constant(value=0.25); "
        "generator seed 1 with the saved seed 0"
    ]
    assert load(offline_fraction=Linear(0.9, 0.1, 100), generator=0) == [
        "OfflineToOnlineReplayBuffer: the loaded state replaces what the constructor set: "
        "offline_fraction Linear(start=0.9, end=0.1, steps=100) with the saved "
        "Constant(value=0.25)"
    ]
    assert load(offline_fraction=0.25, generator=0) == []  # as saved: INFO only
    assert "offline_fraction Constant(value=0.25), generator seed 0" in caplog.text
    assert load(offline_fraction=0.25) == []  # no generator given: its OS seed is not news

    mix = MixtureReplayBuffer(
        {"a": LazyTensorStorage(20), "b": LazyTensorStorage(20)}, {"a": 0.5, "b": 0.5}, generator=0
    )
    mix.extend(id_rows(0, 5), source="a")
    mix.dumps(tmp_path / "mix")
    other = MixtureReplayBuffer(
        {"a": LazyTensorStorage(20), "b": LazyTensorStorage(20)}, {"a": 0.7, "b": 0.3}, generator=0
    )
    caplog.clear()
    with caplog.at_level("INFO", logger="mixreplay.buffers.base"):
        other.loads(tmp_path / "mix")
    assert _replacements(caplog) == [
        "MixtureReplayBuffer: the loaded state replaces what the constructor set: fractions "
        "{a: Weight(value=0.7), b: Weight(value=0.3)} with the saved "
        "{a: Weight(value=0.5), b: Weight(value=0.5)}"
    ]
