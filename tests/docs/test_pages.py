"""Every code block of the README and of the documentation site says what it is, and every
``python`` block runs.

Pages run as a reader would use them: a page of ``docs/recipes/`` is one script whose blocks
run in order in one fresh interpreter (a recipe builds on its earlier blocks); on any other
page each block runs alone, in a fresh interpreter, as pasted into a file. Two pages have
runners of their own (their blocks need fixtures or check printed figures): ``datasets.md``
(``tests/datasets/test_datasets_doc.py``) and ``scaling.md`` (``tests/distributed/test_docs.py``).
Every block leaves no file behind in the temporary directory.
"""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys
import textwrap

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md", *sorted(p for p in DOCS.rglob("*.md") if "_build" not in p.parts)]
#: pages whose python blocks another test module runs (it names the page)
OWN_RUNNERS = {
    DOCS / "datasets.md": ROOT / "tests" / "datasets" / "test_datasets_doc.py",
    DOCS / "scaling.md": ROOT / "tests" / "distributed" / "test_docs.py",
}


SETUP = "<!-- test-setup:"


def blocks(path: pathlib.Path) -> list[tuple[str, str]]:
    """(language, code) of each fenced code block of a Markdown page, dedented (some sit in
    list items). MyST directives (```{toctree}, ```{include}) are not code and are skipped.

    A comment ``<!-- test-setup: CODE -->`` right above a block (hidden on the page) is code
    that runs before it: the names a short example takes as given (``dataset``)."""
    found, lines, i = [], path.read_text().splitlines(keepends=True), 0
    setup = ""
    while i < len(lines):
        stripped = lines[i].lstrip(" ")
        if stripped.startswith(SETUP):
            j = i
            while "-->" not in lines[j]:
                j += 1
            comment = "".join(lines[i : j + 1]).strip()
            setup = textwrap.dedent(comment[len(SETUP) : -len("-->")]).strip() + "\n"
            if not lines[j + 1].lstrip(" ").startswith("```python"):
                raise AssertionError(f"{path.name}: line {i + 1}: a test-setup not above a block")
            i = j + 1
            continue
        if stripped.startswith("```"):
            info = stripped[3:].strip()
            j = i + 1
            while j < len(lines) and lines[j].strip() != "```":
                j += 1
            if j == len(lines):
                raise AssertionError(
                    f"{path.name}: a code fence opened on line {i + 1} never closes"
                )
            code = setup + textwrap.dedent("".join(lines[i + 1 : j]))
            setup = ""
            if not info.startswith("{"):
                found.append((info.split()[0] if info else "", code))
            i = j + 1
        else:
            i += 1
    return found


def _name(path: pathlib.Path) -> str:
    return str(path.relative_to(ROOT))


def _marks(code: str) -> list:
    marks = [pytest.mark.ray] if "import ray" in code else []
    if "torchrl" in code:
        marks.append(pytest.mark.torchrl)
    return marks


def _cases() -> list:
    cases = []
    for path in PAGES:
        if path in OWN_RUNNERS:
            continue
        code = [c for lang, c in blocks(path) if lang == "python"]
        if not code:
            continue
        if path.parent.name == "recipes":
            script = "\n\n".join(code)
            # a recipe is a whole script (a training loop, a resumed run): heavy
            marks = [*_marks(script), pytest.mark.heavy]
            cases.append(pytest.param(script, marks=marks, id=_name(path)))
        else:
            cases += [
                pytest.param(c, marks=_marks(c), id=f"{_name(path)}-{i}")
                for i, c in enumerate(code)
            ]
    return cases


@pytest.mark.parametrize("path", PAGES, ids=_name)
def test_every_block_says_what_it_is(path):
    """A block is `python` (run by a test), `bash` (commands) or `text` (output, layouts):
    an unmarked or `py` block would be code nobody runs."""
    langs = [lang for lang, _ in blocks(path)]
    assert set(langs) <= {"python", "bash", "text"}, (path.name, langs)


def test_the_pages_with_runners_of_their_own_are_named_by_them():
    for page, runner in OWN_RUNNERS.items():
        assert page.name in runner.read_text(), (page, runner)


def test_every_recipe_has_code_to_run():
    recipes = sorted((DOCS / "recipes").glob("*.md"))
    assert [p.stem for p in recipes] == ["gpu-learner", "gymnasium-loop", "own-dataset", "resume"]
    for path in recipes:
        assert any(lang == "python" for lang, _ in blocks(path)), path.name


def test_a_test_setup_comment_runs_before_its_block_only(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "<!-- test-setup: a = 1\nb = 2 -->\n```python\nprint(a + b)\n```\n\n```python\nc = 3\n```\n"
    )
    assert blocks(page) == [("python", "a = 1\nb = 2\nprint(a + b)\n"), ("python", "c = 3\n")]
    page.write_text("<!-- test-setup: a = 1 -->\n\ntext\n```python\nx\n```\n")
    with pytest.raises(AssertionError, match="not above a block"):
        blocks(page)


def test_the_block_parser_skips_directives_and_sees_indented_blocks(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "```{toctree}\nguide\n```\n\n- item\n\n  ```python\n  x = 1\n  ```\n\n```text\nout\n```\n"
    )
    assert blocks(page) == [("python", "x = 1\n"), ("text", "out\n")]


@pytest.mark.parametrize("code", _cases())
def test_python_blocks_run(code, tmp_path):
    """Each block (each recipe) runs as written in a fresh interpreter and leaves no file behind."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = {**os.environ, "TMPDIR": str(scratch)}  # the data roots of conftest travel with it
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr[-3000:]
    # Ray's workers leave multiprocessing's empty pymp-* directories: not the block's
    assert [p.name for p in scratch.iterdir() if not p.name.startswith("pymp-")] == []


def test_the_quick_demo_time_in_help_is_the_one_the_docs_give():
    """`mixreplay demo --help` and the pages say the same about how long --quick takes."""
    out = subprocess.run(
        [sys.executable, "-m", "mixreplay", "demo", "--help"], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    said = " ".join(out.stdout.split())
    seconds = re.search(r"--quick\s.*?about (\d+) s on 2 idle cores", said, flags=re.S)
    assert seconds, said
    for page in (ROOT / "README.md", DOCS / "getting-started.md"):
        text = " ".join(page.read_text().split())
        assert f"about {seconds[1]} s on 2 idle cores" in text, page.name
