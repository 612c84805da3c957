"""Count the ported TorchRL replay-buffer tests that pass on both targets, per test function.

Run the port on each target with a JUnit report, then compare them::

    MIXREPLAY_TORCHRL_TARGET=torchrl python -m pytest tests/torchrl/rb \\
        --ignore tests/torchrl/rb/test_writers_and_transforms.py --junitxml out/torchrl.xml
    python -m pytest tests/torchrl/rb \\
        --ignore tests/torchrl/rb/test_writers_and_transforms.py --junitxml out/mixreplay.xml
    python scripts/torchrl_port_counts.py out/torchrl.xml out/mixreplay.xml

A test function is TorchRL's ``def test_*`` (every parameter set together); a tutorial cell
and a docstring example count as one function each. A function passes on TorchRL when every
item of it that ran there passed (and at least one ran); it passes on mixreplay when each of
those items passed on mixreplay too. A strict xfail is not a pass.
"""

from __future__ import annotations

import argparse
import collections
import re
import sys
import xml.etree.ElementTree as ET

# files whose parametrized items are each a function (a tutorial cell, a docstring example)
_ONE_PER_ITEM = ("test_rb_tutorial", "test_rb_docstrings", "test_sampler_docstrings")


def _items(path: str) -> dict[str, str]:
    """``node -> outcome`` (passed, failed, skipped, xfailed) of a JUnit report."""
    out = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        node = f"{case.get('classname')}::{case.get('name')}"
        outcome = "passed"
        for child in case:
            if child.tag in ("failure", "error"):
                outcome = "failed"
            elif child.tag == "skipped":
                kind = child.get("type", "")
                outcome = "xfailed" if kind == "pytest.xfail" else "skipped"
        out[node] = outcome
    return out


def _function(node: str) -> tuple[str, str]:
    """``(file, function)`` of an item: its name without the parameter set."""
    classname, name = node.split("::", 1)
    parts = classname.split(".")
    module = next((p for p in parts if p.startswith("test_")), parts[-1])
    inner = ".".join(parts[parts.index(module) + 1 :]) if module in parts else ""
    if not module.startswith(_ONE_PER_ITEM):
        name = re.sub(r"\[.*\]$", "", name)
    return module, f"{inner}.{name}" if inner else name


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0], allow_abbrev=False)
    parser.add_argument("torchrl", help="JUnit XML of the run on TorchRL")
    parser.add_argument("mixreplay", help="JUnit XML of the run on mixreplay")
    parser.add_argument("--functions", action="store_true", help="list every function")
    args = parser.parse_args(argv)
    ref, mine = _items(args.torchrl), _items(args.mixreplay)
    ref_ok: dict[tuple[str, str], list[str]] = collections.defaultdict(list)
    ref_bad: set[tuple[str, str]] = set()
    for node, outcome in ref.items():
        key = _function(node)
        if key[0] == "test_writers_and_transforms":  # mixreplay's own tests in the same folder
            continue
        if outcome == "passed":
            ref_ok[key].append(node)
        elif outcome != "skipped":
            ref_bad.add(key)
    counted = {key: nodes for key, nodes in ref_ok.items() if key not in ref_bad}
    per_file: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0, 0, 0])
    rows = []
    for key in sorted(counted):
        nodes = counted[key]
        passed = [n for n in nodes if mine.get(n) == "passed"]
        ok = len(passed) == len(nodes)
        stats = per_file[key[0]]
        stats[0] += 1
        stats[1] += ok
        stats[2] += len(nodes)
        stats[3] += len(passed)
        rows.append((key, ok, len(passed), len(nodes)))
    total = [sum(s[i] for s in per_file.values()) for i in range(4)]
    print(
        "| file | functions passing on TorchRL | ... and on mixreplay | items | ... and on mixreplay |"
    )
    print("|---|---:|---:|---:|---:|")
    for name in sorted(per_file):
        f, fo, i, io = per_file[name]
        print(f"| `{name}.py` | {f} | {fo} ({100 * fo / f:.1f} %) | {i} | {io} |")
    f, fo, i, io = total
    print(
        f"| **all** | **{f}** | **{fo} ({100 * fo / f:.1f} %)** | {i} | {io} ({100 * io / i:.1f} %) |"
    )
    if args.functions:
        print()
        for (module, name), ok, p, n in rows:
            print(f"{'PASS' if ok else 'FAIL'} {module}::{name} ({p}/{n} items)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
