"""Copy TorchRL's training programs into this folder, each import of a replay-buffer name
followed by one line that rebinds it to the target's (``_target.py``).

Run from the repository root with a local mirror of pytorch/rl (a bare git directory):

    python tests/torchrl/programs/copy_programs.py /path/to/pytorch+rl/repo

It writes the files listed in ``FILES`` (``<folder>/<file>``), each with a header naming its
origin (repository, path, commit) and TorchRL's MIT licence. Nothing else in the programs
changes: sizes are set at run time (hydra overrides; for the tutorials, the assignments
``run_program.py`` substitutes), the same on both targets.
"""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys

REPOSITORY = "https://github.com/pytorch/rl"
COMMIT = "ae9719f17b1517af5c2523a36c4616f003ee55cf"
#: how the header describes the commit
COMMIT_NOTE = (
    "main, 2026-08-22: the newest commit of the 0.14 series (version.txt 0.14.0; pytorch/rl\n"
    "has no v0.14.1 tag and no commit whose version.txt says 0.14.1; this one has the\n"
    "replay-buffer package layout of the torchrl 0.14.1 wheel)"
)

HERE = pathlib.Path(__file__).resolve().parent

#: this folder's ``<folder>/<file>`` -> the path in pytorch/rl
FILES: dict[str, str] = {}
for folder, names in {
    "sac": ["sac.py", "utils.py", "config.yaml"],
    "td3": ["td3.py", "utils.py", "config.yaml"],
    "ddpg": ["ddpg.py", "utils.py", "config.yaml"],
    "redq": ["redq.py", "utils.py", "config.yaml"],
    "iql": [
        "iql_online.py",
        "iql_offline.py",
        "utils.py",
        "online_config.yaml",
        "offline_config.yaml",
    ],
    "cql": [
        "cql_online.py",
        "cql_offline.py",
        "utils.py",
        "online_config.yaml",
        "offline_config.yaml",
    ],
    "td3_bc": ["td3_bc.py", "utils.py", "config.yaml"],
    "dqn": ["dqn_cartpole.py", "utils_cartpole.py", "config_cartpole.yaml"],
    "ppo": ["ppo_mujoco.py", "utils_mujoco.py", "config_mujoco.yaml"],
    "decision_transformer": [
        "dt.py",
        "online_dt.py",
        "utils.py",
        "lamb.py",
        "dt_config.yaml",
        "odt_config.yaml",
    ],
}.items():
    for name in names:
        FILES[f"{folder}/{name}"] = f"sota-implementations/{folder}/{name}"
# (the replay-buffer tutorial is not copied here: the port's copy, tests/torchrl/rb/rb_tutorial.py,
# is the same file, and run_program.py runs that one)
for name in ["coding_ddpg.py"]:
    FILES[f"tutorials/{name}"] = f"tutorials/sphinx-tutorials/{name}"

#: the replay-buffer names ``_target.py`` provides (TorchRL's, or mixreplay's)
TARGET_NAMES = frozenset(
    {
        "D4RLExperienceReplay",
        "LazyMemmapStorage",
        "LazyStackStorage",
        "LazyTensorStorage",
        "ListStorage",
        "MinariExperienceReplay",
        "PrioritizedReplayBuffer",
        "PrioritizedSampler",
        "RandomSampler",
        "ReplayBuffer",
        "SamplerWithoutReplacement",
        "SliceSampler",
        "TensorDictPrioritizedReplayBuffer",
        "TensorDictReplayBuffer",
        "TensorStorage",
    }
)


def _licence(mirror: pathlib.Path) -> str:
    return _show(mirror, "LICENSE")


def _show(mirror: pathlib.Path, path: str) -> str:
    return subprocess.run(
        ["git", "-C", str(mirror), "show", f"{COMMIT}:{path}"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout


def header(path: str, licence: str, kind: str) -> str:
    change = {
        "rebound": "after each import of a replay-buffer name, one line that rebinds it to\n"
        "the target's (_target.py beside this folder: mixreplay by default, TorchRL with\n"
        "MIXREPLAY_TORCHRL_TARGET=torchrl). Nothing else.",
        "python": "none (this file imports no replay-buffer name).",
        "config": "none (sizes are hydra overrides given at run time).",
    }[kind]
    text = (
        "Copied from TorchRL's training programs, to run them on TorchRL and on mixreplay\n"
        "(tests/torchrl/programs/run_program.py). Origin:\n"
        f"  repository  {REPOSITORY}\n"
        f"  path        {path}\n"
        f"  commit      {COMMIT}\n"
        + "".join(f"              {line}\n" for line in COMMIT_NOTE.splitlines())
        + f"Changes: {change}\n\n"
        "TorchRL's LICENSE file (MIT), which its notice requires to travel with the code:\n\n"
        + licence.strip()
        + "\n"
    )
    return "".join(f"# {line}".rstrip() + "\n" for line in text.splitlines()) + "\n"


def rebind_imports(source: str) -> str:
    """``source`` with ``from _target import ...`` after each import of a target name."""
    tree = ast.parse(source)
    lines = source.split("\n")
    inserts: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom) or not (node.module or "").startswith("torchrl"):
            continue
        names = [a.asname or a.name for a in node.names if a.name in TARGET_NAMES]
        if not names:
            continue
        for alias in node.names:
            if alias.name in TARGET_NAMES and alias.asname:
                raise ValueError(f"line {node.lineno}: 'import {alias.name} as ...' is not handled")
        indent = " " * node.col_offset
        line = f"{indent}from _target import {', '.join(names)}  # the name(s) under test"
        assert node.end_lineno is not None
        inserts.append((node.end_lineno, line))
    for end, line in sorted(inserts, reverse=True):
        lines.insert(end, line)
    return "\n".join(lines)


def main(mirror: pathlib.Path) -> None:
    licence = _licence(mirror)
    for dest, origin in FILES.items():
        source = _show(mirror, origin)
        kind = "config"
        if dest.endswith(".py"):
            rebound = rebind_imports(source)
            kind = "python" if rebound == source else "rebound"
            source = rebound
        out = HERE / dest
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(header(origin, licence, kind) + source)
        print(f"{dest} <- {origin}")


if __name__ == "__main__":
    main(pathlib.Path(sys.argv[1]))
