"""The memmap dataset format with ``dedup_next=True``: observations stored once on disk,
rows read back identical to the plain format's."""

from __future__ import annotations

import json
import re

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mixreplay import DatasetError, EmptyBufferError, FrozenStorage, OfflineDataset
from mixreplay.datasets.memmap import load_memmap, write_memmap_dataset
from mixreplay.samplers import (
    PrioritizedSampler,
    RandomSampler,
    SamplerWithoutReplacement,
    SliceSampler,
)
from mixreplay.storages.dedup import DedupFrozenStorage
from tests.helpers import assert_identical, episodes

SAMPLERS = {
    "uniform": RandomSampler,
    "without_replacement": SamplerWithoutReplacement,
    "prioritized": lambda: PrioritizedSampler(alpha=0.7, beta=0.5),
    "slices": lambda: SliceSampler(2),
}


def split(td, size):
    return [td[i : i + size] for i in range(0, td.batch_size[0], size)]


@given(
    lengths=st.lists(st.integers(1, 9), min_size=1, max_size=10),
    glitch=st.sampled_from([0.0, 0.3]),
    chunk=st.integers(1, 25),
    seed=st.integers(0, 2**16),
)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_a_dedup_dataset_reads_and_samples_as_the_plain_one(
    tmp_path_factory, lengths, glitch, chunk, seed
):
    td = episodes(lengths, seed=seed, glitch=glitch)
    starts = torch.cat([torch.zeros(1, dtype=torch.int64), torch.tensor(lengths).cumsum(0)[:-1]])
    root = tmp_path_factory.mktemp("ds")
    plain_dir = write_memmap_dataset(root / "plain", split(td, chunk), episode_starts=starts)
    dedup_dir = write_memmap_dataset(
        root / "dedup", split(td, chunk), episode_starts=starts.tolist(), dedup_next=True
    )
    plain, dedup = load_memmap(plain_dir), load_memmap(dedup_dir)
    assert isinstance(dedup.storage, DedupFrozenStorage)
    assert not isinstance(plain.storage, DedupFrozenStorage)
    assert_identical(dedup.storage[:], plain.storage[:])
    assert_identical(dedup.storage[:], FrozenStorage.from_tensordict(td)[:])
    assert dedup.storage.fingerprint == plain.storage.fingerprint
    assert torch.equal(dedup.episode_starts, plain.episode_starts)
    # the rows before each episode start (and the last row) keep their own next values
    slots = set(dedup.storage.parts().next_slots.tolist())
    assert {int(s) - 1 for s in starts[1:]} | {td.batch_size[0] - 1} <= slots
    for name, make in SAMPLERS.items():
        a = OfflineDataset(plain.storage, episode_starts=starts, sampler=make(), generator=seed)
        b = OfflineDataset(dedup.storage, episode_starts=starts, sampler=make(), generator=seed)
        for _ in range(3):
            try:
                want = a.sample(4, return_info=True)
            except (ValueError, EmptyBufferError) as err:  # no slice fits: both refuse alike
                with pytest.raises(type(err), match=re.escape(str(err))):
                    b.sample(4)
                continue
            got = b.sample(4, return_info=True)
            assert_identical(got[0], want[0])
            assert_identical(got[1], want[1])
            if name == "prioritized":
                p = torch.rand(4, generator=torch.Generator().manual_seed(seed)) + 0.1
                a.update_priority(want[1]["index"], p)
                b.update_priority(got[1]["index"], p)


def test_pixel_datasets_take_about_half_the_disk(tmp_path):
    td = episodes([40, 60, 100], zeros=False)
    td["pixels"] = torch.randint(0, 255, (200, 84, 84, 3), dtype=torch.uint8)
    td["next", "pixels"] = torch.cat([td["pixels"][1:], td["pixels"][:1]])
    starts = [0, 40, 100]
    plain = write_memmap_dataset(tmp_path / "plain", td, episode_starts=starts)
    dedup = write_memmap_dataset(tmp_path / "dedup", td, episode_starts=starts, dedup_next=True)

    def size(d):
        return sum(p.stat().st_size for p in d.iterdir() if p.suffix == ".bin")

    assert size(dedup) / size(plain) < 0.55
    meta = json.loads((dedup / "metadata.json").read_text())
    assert meta["dedup_next"] == [["next", "pixels"], ["next", "state"], ["next", "step_count"]]
    assert meta["files"]["next_slots"]["shape"] == [3]  # the three episode ends
    assert json.loads((plain / "metadata.json").read_text())["dedup_next"] is None
    assert_identical(load_memmap(dedup).storage[:], load_memmap(plain).storage[:])


def edit_metadata(path, change):
    """Edit metadata.json and re-seal its checksum, as a buggy writer would."""
    from mixreplay.datasets.memmap import FORMAT
    from mixreplay.persist import write_metadata

    meta = json.loads((path / "metadata.json").read_text())
    change(meta)
    fields = {k: v for k, v in meta.items() if k not in ("format", "version", "checksum")}
    fields.pop("mixreplay_version", None)
    write_metadata(path, FORMAT, fields)


def test_damaged_dedup_datasets_are_refused(tmp_path):
    td = episodes([3, 4])
    path = write_memmap_dataset(tmp_path / "d", td, episode_starts=[0, 3], dedup_next=True)
    with pytest.raises(TypeError, match="dedup_next must be True or False, got str 'yes'"):
        write_memmap_dataset(tmp_path / "e", td, dedup_next="yes")
    edit_metadata(path, lambda m: m.update(dedup_next="pixels"))
    with pytest.raises(DatasetError, match="dedup_next must be a list of keys"):
        load_memmap(path)
    edit_metadata(path, lambda m: m.update(dedup_next=[["next", "reward"]]))
    with pytest.raises(DatasetError, match="dedup_next does not fit the schema"):
        load_memmap(path)
    edit_metadata(path, lambda m: m.update(dedup_next=[["next", "pixels"]]))
    with pytest.raises(DatasetError, match="the rows file entry .* does not match"):
        load_memmap(path)  # the stored rows are narrower than that layout's
    path = write_memmap_dataset(
        tmp_path / "d", td, episode_starts=[0, 3], dedup_next=True, overwrite=True
    )
    edit_metadata(path, lambda m: m["files"].pop("next_rows"))
    with pytest.raises(DatasetError, match="lists no next_slots and next_rows files"):
        load_memmap(path)
