"""The architecture, checked: the import graph has no cycles and the core imports no periphery.

Every ``import`` in mixreplay's source counts, at module level or inside a function
(a function-level import is a cycle that merely waits for its first call).
"""

from __future__ import annotations

import ast
import pathlib

import mixreplay

PACKAGE = pathlib.Path(mixreplay.__file__).parent

#: the core: rows, storages, samplers, the split, schedules, buffers, mixing, checkpoints
CORE_PREFIXES = (
    "mixreplay.schema",
    "mixreplay.layout",
    "mixreplay.storages",
    "mixreplay.samplers",
    "mixreplay.split",
    "mixreplay.schedules",
    "mixreplay.buffers",
    "mixreplay.mixing",
    "mixreplay.transforms",
    "mixreplay.checkpoint",
    "mixreplay.persist",
    "mixreplay.prefetch",
    "mixreplay.prefill",
    "mixreplay._state",
    "mixreplay._validate",
    "mixreplay.errors",
)
PERIPHERY = (
    "mixreplay.datasets",
    "mixreplay.distributed",
    "mixreplay.demo",
    "mixreplay.cli",
    "mixreplay.torchrl",
)
#: the one sanctioned way in from the core: a dataset given as an ID string is loaded lazily
ALLOWED = {
    ("mixreplay.mixing.offline_to_online", "mixreplay.datasets"),
    ("mixreplay.prefill", "mixreplay.datasets"),
}


def module_name(path: pathlib.Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: pathlib.Path) -> set[str]:
    """Every mixreplay module ``path`` imports, wherever the import statement is."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("mixreplay"))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(
                    package.split(".")[: len(package.split(".")) - node.level + 1]
                    + ([base] if base else [])
                )
            if base.startswith("mixreplay"):
                for alias in node.names:  # `from mixreplay.x import y` may import module x.y
                    sub = f"{base}.{alias.name}"
                    out.add(sub if sub in MODULES else base)
    return {m for m in out if m != name}


MODULES = {module_name(p) for p in PACKAGE.rglob("*.py")}
GRAPH = {module_name(p): imports_of(p) for p in PACKAGE.rglob("*.py")}


def resolve(target: str) -> str:
    """The module a name resolves to (a package's ``__init__`` if it is a package)."""
    while target not in MODULES and "." in target:
        target = target.rpartition(".")[0]
    return target


def test_the_core_imports_no_periphery():
    bad = []
    for module, targets in GRAPH.items():
        if not module.startswith(CORE_PREFIXES):
            continue
        for target in targets:
            if (
                target.startswith(PERIPHERY)
                and (module, resolve(target).rsplit(".", 1)[0]) not in ALLOWED
                and (module, resolve(target)) not in ALLOWED
            ):
                bad.append(f"{module} -> {target}")
    assert bad == []


def test_there_is_no_import_cycle():
    graph = {
        m: {
            resolve(t)
            for t in ts
            if (m, resolve(t)) not in ALLOWED and (m, resolve(t).rsplit(".", 1)[0]) not in ALLOWED
        }
        for m, ts in GRAPH.items()
    }
    # a package's __init__ re-exporting its submodules is the public surface, not a dependency
    # of those submodules on each other; an edge into a package counts as an edge into its
    # __init__, so cycles through re-exports are still found.
    cycles = []
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for t in sorted(graph.get(m, ())):
            if t == m:
                continue
            if state.get(t) == 1:
                cycles.append(" -> ".join(stack[stack.index(t) :] + [t]))
            elif t not in state:
                visit(t)
        stack.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m)
    assert cycles == [], "\n".join(cycles)


def ray_private_uses(source: str) -> list[str]:
    """Where ``source`` imports or names ``ray._private`` (Ray's internals), as ``line: code``."""
    uses = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            names = [base, *(f"{base}.{a.name}" for a in node.names)]
        elif isinstance(node, ast.Attribute):
            names = [ast.unparse(node)]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            names = [node.value]  # importlib.import_module("ray._private...")
        else:
            continue
        if any(
            n == "ray._private" or "ray._private." in n or n.startswith("ray._private")
            for n in names
        ):
            uses.append(f"{node.lineno}: {ast.unparse(node)}")
    return uses


def test_the_finder_of_ray_internals_finds_each_way_to_reach_them():
    snippet = (
        "import ray\n"
        "import ray._private.worker\n"
        "from ray._private.state import actors\n"
        "from ray import _private\n"
        "w = ray._private.worker.global_worker\n"
        "m = importlib.import_module('ray._private.state')\n"
        "ok = ray.get_runtime_context().get_task_id()\n"
    )
    lines = {int(u.split(":")[0]) for u in ray_private_uses(snippet)}
    assert lines == {2, 3, 4, 5, 6}


def test_no_module_reaches_into_ray_internals():
    """Ray's public API only: ``ray._private`` changes between Ray releases without notice."""
    uses = {
        module_name(p): found
        for p in sorted(PACKAGE.rglob("*.py"))
        if (found := ray_private_uses(p.read_text()))
    }
    assert uses == {}
