"""The public surface: a sorted __all__, py.typed, lazy optional imports, runnable docs."""

import doctest
import importlib
import pathlib
import pkgutil
import subprocess
import sys
import tempfile

import pytest

import mixreplay

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_exported_members_are_sorted_and_pinned():
    assert mixreplay.__all__ == sorted(mixreplay.__all__)
    assert set(mixreplay.__all__) == {
        "BufferActorError",
        "BufferClosedError",
        "CheckpointError",
        "CheckpointNotFoundError",
        "D4RLExperienceReplay",
        "DatasetError",
        "DatasetNotFoundError",
        "EmptyBufferError",
        "Field",
        "FrozenStorage",
        "LazyMemmapStorage",
        "LazyStackStorage",
        "LazyTensorStorage",
        "ListStorage",
        "LockOrderError",
        "LockOwnerDiedError",
        "MinSize",
        "MinariExperienceReplay",
        "MissingDependencyError",
        "MixreplayError",
        "MixtureReplayBuffer",
        "OfflineDataset",
        "OfflineToOnlineReplayBuffer",
        "PrioritizedReplayBuffer",
        "PrioritizedSampler",
        "PriorityError",
        "RandomSampler",
        "RateLimitTimeoutError",
        "ReadOnlyError",
        "ReplayBuffer",
        "SampleToInsertRatio",
        "Sampler",
        "SamplerWithoutReplacement",
        "Schema",
        "SchemaMismatchError",
        "SliceSampler",
        "SliceSamplerWithoutReplacement",
        "Storage",
        "TensorDictPrioritizedReplayBuffer",
        "TensorDictReplayBuffer",
        "TensorStorage",
        "WriterEvictedError",
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


def _module_cases():
    for name in sorted(_modules()):
        # RayReplayBuffer's examples start and stop a local Ray cluster: heavy
        heavy = name == "mixreplay.distributed.handle"
        yield pytest.param(name, marks=[pytest.mark.heavy] if heavy else [], id=name)


@pytest.mark.parametrize("name", list(_module_cases()))
def test_docstring_examples_run(name, tmp_path, monkeypatch):
    """Every example runs as written and removes the temporary files it made."""
    module = importlib.import_module(name)
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    finder = doctest.DocTestFinder(exclude_empty=True)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    for test in finder.find(module):
        runner.run(test)
    assert runner.summarize(verbose=False).failed == 0
    # Ray's workers leave multiprocessing's empty pymp-* directories: not the example's
    assert [p.name for p in scratch.iterdir() if not p.name.startswith("pymp-")] == []


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


# The README's and the site's code blocks run in tests/docs/test_pages.py.


def test_the_changelog_releases_this_version_one_line_per_change():
    """CHANGELOG.md: `[Unreleased]` on top for the next changes, then a dated section for the
    version the package says it is (scripts/check_package.sh refuses a build without one), and
    each change one line under its version's Added, Changed or Fixed."""
    import re
    from pathlib import Path

    import mixreplay

    text = (Path(__file__).resolve().parents[1] / "CHANGELOG.md").read_text()
    versions = re.findall(r"^## \[([^\]]+)\](?: - (\d{4}-\d\d-\d\d))?$", text, re.M)
    assert versions[0] == ("Unreleased", "")
    assert versions[1] == (mixreplay.__version__, versions[1][1]) and versions[1][1]
    body = text.split("## [Unreleased]", 1)[1]
    for line in body.splitlines():
        assert line == "" or line.startswith(("## [", "### ", "- ")), line
    assert set(re.findall(r"^### (.+)$", body, re.M)) <= {"Added", "Changed", "Fixed", "Removed"}
