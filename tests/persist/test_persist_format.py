"""The container format read strictly: what an edit or damage cannot slip past (issue 18)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from tensordict import TensorDict

from mixreplay import DatasetError
from mixreplay.datasets.memmap import load_memmap, write_memmap_dataset
from mixreplay.persist.container import _checksum, parse_strict_json

V1 = Path(__file__).parent.parent / "fixtures" / "v1" / "dataset"
METADATA = "metadata.json"


def _dataset(path: Path) -> Path:
    rows = TensorDict({"x": torch.arange(6.0).unsqueeze(-1)}, [6])
    return write_memmap_dataset(path, rows)


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ('{"a": NaN}', "NaN is not a JSON value"),
        ('{"a": [Infinity]}', "Infinity is not a JSON value"),
        ('{"a": -Infinity}', "-Infinity is not a JSON value"),
        ('{"a": 1e400}', "the number 1e400 overflows a float"),
        ('{"a": {"b": 1, "b": 1}}', "the key 'b' appears twice in one object"),
    ],
)
def test_strict_json_refuses_what_the_standard_does_not_allow(text, match):
    with pytest.raises(ValueError, match=match):
        parse_strict_json(text)


def test_strict_json_reads_what_mixreplay_writes():
    value = {"a": [1, 2.5, -0.0, 1e300, None, True, "NaN"], "b": {"c": {}}}
    assert parse_strict_json(json.dumps(value)) == value


def test_a_dataset_without_its_checksum_is_refused(tmp_path):
    path = _dataset(tmp_path / "d")
    meta = json.loads((path / METADATA).read_text())
    del meta["checksum"]
    meta["info"] = {"edited": True}
    (path / METADATA).write_text(json.dumps(meta))
    with pytest.raises(
        DatasetError, match="has no checksum, which every dataset of format version 2"
    ):
        load_memmap(path)


def test_a_format_1_dataset_loads_without_a_checksum_but_not_with_nan(tmp_path):
    path = shutil.copytree(V1, tmp_path / "v1")
    assert len(load_memmap(path)) == 30  # format 1 predates checksums
    meta = json.loads((path / METADATA).read_text())
    meta["info"] = {"x": float("nan")}
    (path / METADATA).write_text(json.dumps(meta))
    with pytest.raises(DatasetError, match="is not strict JSON: NaN is not a JSON value"):
        load_memmap(path)


@pytest.mark.parametrize(("old", "new"), [("4", "4.0"), ("true", "1"), ("0.0", "-0.0")])
def test_the_checksum_tells_apart_values_python_calls_equal(tmp_path, old, new):
    """An edit to a value equal in Python (``4 == 4.0``, ``True == 1``, ``0.0 == -0.0``)."""
    path = _dataset(tmp_path / "d")
    meta = json.loads((path / METADATA).read_text())
    meta["info"] = {"edited": json.loads(old)}
    del meta["checksum"]
    meta["checksum"] = _checksum(meta)
    text = json.dumps(meta).replace(f'"edited": {old}', f'"edited": {new}')
    (path / METADATA).write_text(text)
    assert json.loads(text)["info"]["edited"] == json.loads(old)
    with pytest.raises(DatasetError, match="metadata.json was edited or corrupted"):
        load_memmap(path)
