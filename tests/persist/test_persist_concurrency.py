"""Readers and writers of one checkpoint path, in real processes, never break each other (issue 18, item 9).

A save swaps directories with two renames; a reader that looks in between used to "recover"
the old checkpoint itself, and the save then failed with ``Directory not empty``. Now readers
never change anything (they read the previous checkpoint, left aside, while a save is between
its renames), and writers swap one at a time under a lock on the parent directory.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

COMMON = textwrap.dedent(
    r"""
    import os, sys, time, traceback
    import torch
    torch.set_num_threads(1)
    from tensordict import TensorDict
    from mixreplay import LazyTensorStorage, ReplayBuffer

    CAPACITY = 3000

    def rows(start, n):
        f = torch.arange(start, start + n, dtype=torch.float64).unsqueeze(-1)
        return TensorDict({"id": f, "obs": f.expand(n, 3).float()}, [n])

    def make():
        return ReplayBuffer(storage=LazyTensorStorage(CAPACITY), batch_size=8, generator=0)

    def check(rb, chunks):
        # a complete checkpoint of one writer: write_count a sum of whole chunks, every slot
        # holding the last id written to it
        storage = rb.storage
        written = storage.write_count
        base = next((b for b, c in chunks if written % c == 0 and written > 0), None)
        if base is None:
            raise AssertionError(f"write_count {written} is no writer's")
        slots = torch.arange(len(storage), dtype=torch.float64)
        last = base + written - 1 - ((written - 1 - slots) % CAPACITY)
        if not torch.equal(storage.column("id").squeeze(-1), last):
            raise AssertionError(f"rows do not match write_count {written}")
        return base, written
    """
)

WRITER = COMMON + textwrap.dedent(
    r"""
    path, base, chunk, saves = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    rb = make()
    n = base
    try:
        for i in range(saves):
            rb.extend(rows(n, chunk))
            n += chunk
            rb.dumps(path)
    except BaseException:
        traceback.print_exc()
        sys.exit(1)
    print("saved", saves, flush=True)
    """
)

READER = COMMON + textwrap.dedent(
    r"""
    path, stop = sys.argv[1], sys.argv[2]
    chunks = [tuple(map(int, c.split(":"))) for c in sys.argv[3].split(",")]
    loads, seen = 0, set()
    try:
        while not os.path.exists(stop):
            rb = make()
            rb.loads(path)
            seen.add(check(rb, chunks))
            loads += 1
    except BaseException:
        traceback.print_exc()
        sys.exit(1)
    print("loads", loads, "distinct", len(seen), flush=True)
    """
)


def _start(script: str, *args: object) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", script, *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=os.environ.copy(),
    )


def _first_save(path: Path, base: int, chunk: int) -> None:
    done = subprocess.run(
        [sys.executable, "-c", WRITER, str(path), str(base), str(chunk), "1"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr


def _run(tmp_path: Path, writers: list[tuple[int, int]], saves: int, readers: int):
    path, stop = tmp_path / "ck", tmp_path / "stop"
    _first_save(path, *writers[0])
    chunks = ",".join(f"{b}:{c}" for b, c in writers)
    reading = [_start(READER, path, stop, chunks) for _ in range(readers)]
    writing = [_start(WRITER, path, b, c, saves) for b, c in writers]
    try:
        results = [w.communicate(timeout=600) for w in writing]
    finally:
        stop.touch()
    read = [r.communicate(timeout=300) for r in reading]
    for w, (out, err) in zip(writing, results):
        assert w.returncode == 0, err
        assert out.strip() == f"saved {saves}"
    for r, (out, err) in zip(reading, read):
        assert r.returncode == 0, err
        assert out.startswith("loads ")
    return [int(out.split()[1]) for out, _ in read], path


def test_a_reader_looping_while_a_writer_saves_never_breaks_it(tmp_path):
    """Every save succeeds and every load returns a complete checkpoint, old or new."""
    loads, path = _run(tmp_path, [(0, 997)], saves=150, readers=2)
    assert sum(loads) >= 20  # the readers really ran alongside the saves
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ck", "stop"]  # nothing left over


def test_two_writers_and_a_reader_of_one_path(tmp_path):
    """Concurrent saves of one path all succeed; the last one to swap is what remains."""
    loads, path = _run(tmp_path, [(0, 997), (10**9, 1009)], saves=60, readers=1)
    assert sum(loads) >= 5
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ck", "stop"]


# -- in one process: the same guarantees, deterministic -------------------------------------


def _buffer():
    import torch
    from tensordict import TensorDict

    from mixreplay import LazyTensorStorage, ReplayBuffer

    def rows(start, n):
        f = torch.arange(start, start + n, dtype=torch.float32).unsqueeze(-1)
        return TensorDict({"id": f}, [n])

    return ReplayBuffer(storage=LazyTensorStorage(100), batch_size=4, generator=0), rows


def test_a_read_whose_directory_is_replaced_under_it_reads_the_new_one(tmp_path):
    from mixreplay import CheckpointError
    from mixreplay.checkpoint import FORMAT
    from mixreplay.persist import decode_tensors, read_container, read_directory

    rb, rows = _buffer()
    rb.extend(rows(0, 5))
    path = tmp_path / "ck"
    rb.dumps(path)
    calls = []

    def read(directory, dir_fd):
        meta = read_container(directory, FORMAT, dir_fd=dir_fd)
        if not calls:  # a writer replaces the checkpoint after the metadata was read
            rb.extend(rows(5, 7))
            rb.dumps(path)
        calls.append(directory)
        return decode_tensors(meta["state"], directory, CheckpointError, dir_fd=dir_fd)

    state = read_directory(path, read)
    assert len(calls) == 2 and state["storage"]["write_count"] == 12
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ck"]


def test_a_read_that_fails_on_a_directory_in_place_is_not_retried(tmp_path):
    from mixreplay import CheckpointError
    from mixreplay.persist import read_directory

    rb, rows = _buffer()
    rb.extend(rows(0, 5))
    rb.dumps(tmp_path / "ck")
    calls = []

    def read(directory, dir_fd):
        calls.append(directory)
        raise CheckpointError("damaged")

    with pytest.raises(CheckpointError, match="damaged"):
        read_directory(tmp_path / "ck", read)
    assert len(calls) == 1


def test_threads_saving_and_loading_one_path_never_fail(tmp_path):
    import threading

    path = tmp_path / "ck"
    errors: list[BaseException] = []

    def save(k):
        rb, rows = _buffer()
        try:
            for i in range(15):
                rb.extend(rows(1000 * k + i, 1))
                rb.dumps(path)
        except BaseException as err:  # noqa: BLE001 - reported below
            errors.append(err)

    def load(stop):
        try:
            while not stop.is_set():
                rb, _ = _buffer()
                try:
                    rb.loads(path)
                except FileNotFoundError:  # before the first save
                    continue
                ids = rb.storage.column("id").squeeze(-1).long()
                k = int(ids[0]) // 1000  # one writer's rows, in order: never a mix
                assert ids.tolist() == list(range(1000 * k, 1000 * k + len(ids)))
        except BaseException as err:  # noqa: BLE001
            errors.append(err)

    stop = threading.Event()
    readers = [threading.Thread(target=load, args=(stop,)) for _ in range(2)]
    writers = [threading.Thread(target=save, args=(k,)) for k in range(3)]
    for t in readers + writers:
        t.start()
    for t in writers:
        t.join()
    stop.set()
    for t in readers:
        t.join()
    assert not errors, errors
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ck"]
