import pytest

from mixreplay import OfflineDataset, list_prefixes, load_dataset, register_dataset
from mixreplay.errors import DatasetPrefixTakenError, MissingDependencyError
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


@pytest.mark.parametrize("err", [KeyError, ValueError, DatasetPrefixTakenError])
def test_reregistering_needs_replace(err):
    """TorchRL raises KeyError here; the error is also the ValueError mixreplay raised before."""
    register_dataset("reg-twice", lambda rest: None, replace=True)
    with pytest.raises(
        err, match="^dataset prefix 'reg-twice' is already registered; pass replace=True"
    ):
        register_dataset("reg-twice", lambda rest: None)
    with pytest.raises(err, match="'minari' is already registered"):
        register_dataset("minari", lambda rest: None)
    with pytest.raises(err, match="'reg-twice' is already registered"):
        register_dataset(" REG-Twice ", lambda rest: None)  # the same prefix, normalized


def test_prefixes_are_lower_cased_and_stripped():
    register_dataset("  Reg-Case ", lambda rest, **kw: OfflineDataset.from_tensordict(ted_rows(3)))
    assert "reg-case" in list_prefixes() and "  Reg-Case " not in list_prefixes()
    assert len(load_dataset("REG-CASE:x")) == 3
    assert len(load_dataset(" reg-case :x")) == 3


def test_a_factory_may_be_a_lazy_module_attribute_string(monkeypatch):
    """As in TorchRL: ``"module:attribute"`` is imported when the prefix is first used."""
    register_dataset("reg-lazy", "tests.test_registry:lazy_factory", replace=True)
    assert load_dataset("reg-lazy:7", batch_size=2) == ("7", {"batch_size": 2})
    register_dataset(
        "reg-lazy-missing", "no_such_module_xyz:Thing", replace=True
    )  # not imported yet
    with pytest.raises(ModuleNotFoundError, match="no_such_module_xyz"):
        load_dataset("reg-lazy-missing:x")


def lazy_factory(rest, **kwargs):
    return rest, kwargs


@pytest.mark.parametrize("spec", ["no_colon", ":attr", "module:"])
def test_bad_lazy_strings(spec):
    with pytest.raises(ValueError, match=r"a factory given as a string is 'module:attribute', got"):
        register_dataset("reg-bad-lazy", spec)
    assert "reg-bad-lazy" not in list_prefixes()


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


TORCHRL_SOURCES = [
    "atari",
    "atari_dqn",
    "gen_dgrl",
    "lerobot",
    "openml",
    "openx",
    "roboset",
    "vd4rl",
]


def test_every_torchrl_prefix_is_known():
    assert set(TORCHRL_SOURCES) | {"d4rl", "minari", "memmap"} <= set(list_prefixes())


@pytest.mark.parametrize("prefix", TORCHRL_SOURCES)
def test_torchrl_sources_need_torchrl(prefix, monkeypatch):
    """Without TorchRL installed, the prefix says which extra installs it."""
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "torchrl" else real(name, *a)
    )
    with pytest.raises(
        MissingDependencyError,
        match=rf"the dataset source '{prefix}' opens through TorchRL \(torchrl\.data\.datasets\..*"
        r"\), which is not installed\. Install it with: pip install \"mixreplay\[torchrl\]\"",
    ):
        load_dataset(f"{prefix}:some-id")
