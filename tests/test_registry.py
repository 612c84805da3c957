import pytest

from mixreplay import OfflineDataset, list_prefixes, load_dataset, register_dataset
from tests.conftest import ted_rows


def test_builtin_prefixes_are_known():
    assert {"minari", "d4rl", "memmap"} <= set(list_prefixes())


def test_register_and_route_kwargs():
    calls = []

    def factory(rest, **kwargs):
        calls.append((rest, kwargs))
        return OfflineDataset.from_tensordict(ted_rows(4))

    register_dataset("reg-test", factory, replace=True)
    ds = load_dataset("reg-test:some/name-v0", batch_size=7)
    assert len(ds) == 4 and calls == [("some/name-v0", {"batch_size": 7})]


def test_reregistering_needs_replace():
    register_dataset("reg-twice", lambda rest: None, replace=True)
    with pytest.raises(
        ValueError, match="dataset prefix 'reg-twice' is already registered; pass replace=True"
    ):
        register_dataset("reg-twice", lambda rest: None)
    with pytest.raises(ValueError, match="'minari' is already registered"):
        register_dataset("minari", lambda rest: None)


@pytest.mark.parametrize(
    "dataset_id, err, match",
    [
        (
            "hopper-medium-v2",
            ValueError,
            r"must be prefixed with its source: write it as '<prefix>:<name>' with a prefix among "
            r".*d4rl.*memmap.*minari",
        ),
        ("nope:hopper", ValueError, r"Unknown dataset source 'nope'; known prefixes: .*d4rl"),
        (":x", ValueError, "must be prefixed"),
        (3, TypeError, "dataset_id must be a string"),
    ],
)
def test_bad_ids(dataset_id, err, match):
    with pytest.raises(err, match=match):
        load_dataset(dataset_id)


@pytest.mark.parametrize("prefix", ["", "a:b", "with space", 5])
def test_bad_prefixes(prefix):
    with pytest.raises(ValueError, match="a dataset prefix must be a non-empty word"):
        register_dataset(prefix, lambda rest: None)


def test_factory_must_be_callable():
    with pytest.raises(TypeError, match="factory must be callable, got int"):
        register_dataset("reg-bad", 3)
