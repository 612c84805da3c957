"""The public surface: a sorted __all__, py.typed, lazy optional imports, runnable docs."""

import doctest
import importlib
import os
import pathlib
import pkgutil
import re
import subprocess
import sys
import tempfile
import textwrap

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


FENCE = re.compile(r"^( *)```(\w*)\n(.*?)^\1```", flags=re.S | re.M)
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _blocks(path: pathlib.Path) -> list[tuple[str, str]]:
    """(language, code) of each fenced block, dedented (some sit in list items)."""
    return [(lang, textwrap.dedent(code)) for _, lang, code in FENCE.findall(path.read_text())]


def _readme_python_blocks() -> list:
    params = []
    for code in (code for lang, code in _blocks(ROOT / "README.md") if lang == "python"):
        marks = [pytest.mark.ray] if "import ray" in code else []
        if "torchrl" in code:
            marks.append(pytest.mark.torchrl)
        params.append(pytest.param(code, marks=marks))
    return params


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.name)
def test_every_doc_block_says_what_it_is(path):
    """A block is `python` (run by a test), `bash` (commands) or `text` (output, layouts):
    an unmarked or `py` block would be code nobody runs."""
    langs = [lang for lang, _ in _blocks(path)]
    assert set(langs) <= {"python", "bash", "text"}, (path.name, langs)


def test_every_doc_python_block_is_run_by_a_test():
    """README.md here; docs/datasets.md and docs/scaling.md by their own tests."""
    runners = {
        "README.md": "tests/test_package.py",
        "datasets.md": "tests/datasets/test_datasets_doc.py",
        "scaling.md": "tests/distributed/test_docs.py",
        "offline-data-helps.md": "tests/demo/test_offline_data_doc.py",
    }
    for path in DOCS:
        if any(lang == "python" for lang, _ in _blocks(path)):
            runner = runners.get(path.name)
            assert runner is not None, f"{path.name} has python blocks that no test runs"
            assert path.name in (ROOT / runner).read_text(), (path.name, runner)


@pytest.mark.parametrize("code", _readme_python_blocks())
def test_readme_python_blocks_run(code, tmp_path):
    """Each block runs as written in a fresh interpreter, and leaves no file behind."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = {**os.environ, "TMPDIR": str(scratch)}
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr[-3000:]
    # Ray's workers leave multiprocessing's empty pymp-* directories: not the block's
    assert [p.name for p in scratch.iterdir() if not p.name.startswith("pymp-")] == []
