"""The public surface: a sorted __all__, py.typed, lazy optional imports, runnable docs."""

import doctest
import importlib
import pathlib
import pkgutil
import re
import subprocess
import sys

import pytest

import mixreplay

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_exported_members_are_sorted_and_pinned():
    assert mixreplay.__all__ == sorted(mixreplay.__all__)
    assert set(mixreplay.__all__) == {
        "BufferActorError",
        "CheckpointError",
        "CheckpointNotFoundError",
        "DatasetError",
        "DatasetNotFoundError",
        "EmptyBufferError",
        "Field",
        "FrozenStorage",
        "LazyMemmapStorage",
        "LazyTensorStorage",
        "MissingDependencyError",
        "MixreplayError",
        "MixtureReplayBuffer",
        "OfflineDataset",
        "OfflineToOnlineReplayBuffer",
        "PrioritizedSampler",
        "PriorityError",
        "RandomSampler",
        "ReadOnlyError",
        "ReplayBuffer",
        "Sampler",
        "SamplerWithoutReplacement",
        "Schema",
        "SchemaMismatchError",
        "SliceSampler",
        "Storage",
        "TensorStorage",
        "__version__",
        "list_prefixes",
        "load_dataset",
        "prefill_replay_buffer",
        "register_dataset",
        "split_counts",
    }
    for name in mixreplay.__all__:
        assert hasattr(mixreplay, name), name


def test_py_typed_ships():
    assert (pathlib.Path(mixreplay.__file__).parent / "py.typed").exists()


def test_import_pulls_no_optional_dependency():
    code = (
        "import sys, mixreplay, mixreplay.cli;"
        "bad = [m for m in ('torchrl', 'ray', 'minari', 'gymnasium', 'h5py', 'matplotlib') if m in sys.modules];"
        "print(','.join(bad))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def _modules():
    for info in pkgutil.walk_packages(mixreplay.__path__, "mixreplay."):
        if ".demo" in info.name or info.name.endswith("__main__"):
            continue
        yield info.name


@pytest.mark.parametrize("name", sorted(_modules()))
def test_docstring_examples_run(name):
    try:
        module = importlib.import_module(name)
    except ImportError as err:  # an optional extra missing
        pytest.skip(str(err))
    finder = doctest.DocTestFinder(exclude_empty=True)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    for test in finder.find(module):
        runner.run(test)
    assert runner.summarize(verbose=False).failed == 0


def test_every_public_class_has_an_example():
    missing = []
    for name in mixreplay.__all__:
        obj = getattr(mixreplay, name)
        if (
            isinstance(obj, type)
            and not issubclass(obj, Exception)
            and ">>>" not in (obj.__doc__ or "")
        ):
            missing.append(name)
    assert missing == []


def _readme_blocks():
    text = (ROOT / "README.md").read_text()
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


@pytest.mark.parametrize("index", range(len(_readme_blocks())))
def test_readme_python_blocks_run(index, tmp_path):
    code = _readme_blocks()[index]
    subprocess.run([sys.executable, "-c", code], cwd=tmp_path, check=True, timeout=120)
