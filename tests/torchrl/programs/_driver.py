"""Run one copied TorchRL program in this process; ``run_program.py`` starts it in a subprocess.

``python _driver.py spec.json``: the spec names the program, its command line (hydra
overrides) or, for a tutorial, the assignments to substitute (its sizes), and where to write
what the run logged. Before the program is imported, TorchRL's ``get_logger`` is replaced
by one that returns a :class:`Recorder`: every scalar a program logs (through
``log_metrics``, ``log_scalar`` or TorchRL's trainer hooks) is kept, and written as JSON
when the program ends, however it ends. Nothing in the program changes; the recorder stands
in for the program's logger backend (``logger.backend=csv`` on the command line makes the
programs build one; TorchRL's CSV logger itself stops on the ``None`` and list values the
programs log).
"""

from __future__ import annotations

import json
import math
import os
import pathlib
import runpy
import sys
import time
import traceback
from typing import Any

HERE = pathlib.Path(__file__).resolve().parent


def _plain(value: Any) -> Any:
    """A logged value as JSON: a float, a list of floats, or ``None`` (not a number)."""
    if hasattr(value, "detach"):
        value = value.detach().cpu()
        value = value.item() if value.numel() == 1 else value.flatten().tolist()
    if isinstance(value, (list, tuple)):
        out = [_plain(v) for v in value]
        return [v for v in out if v is not None]
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)):
        return float(value) if math.isfinite(value) else str(value)
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def make_recorder() -> Any:
    from torchrl.record.loggers.common import Logger

    class Recorder(Logger):
        """A TorchRL logger that keeps every scalar: ``{name: [[step, value], ...]}``."""

        def __init__(self) -> None:
            self.scalars: dict[str, list[list[Any]]] = {}
            super().__init__(exp_name="recorder", log_dir=None)

        def _create_experiment(self) -> None:
            return None

        def log_scalar(self, name: str, value: Any, step: int | None = None) -> None:
            plain = _plain(value)
            if plain is not None and plain != []:
                self.scalars.setdefault(name, []).append(
                    [None if step is None else int(step), plain]
                )

        def log_video(self, name: str, video: Any, step: int | None = None, **kwargs: Any) -> None:
            pass

        def log_hparams(self, cfg: Any) -> None:
            pass

        def log_histogram(self, name: str, data: Any, **kwargs: Any) -> None:
            pass

        def __repr__(self) -> str:
            return f"Recorder({sorted(self.scalars)})"

    return Recorder()


def _watch_trainers() -> list[Any]:
    """The TorchRL ``Trainer`` instances the program builds (their ``_log_dict`` holds what
    they log: TorchRL's trainer passes a value on to the logger only every 10,000 frames)."""
    from torchrl.trainers import trainers as module

    built: list[Any] = []
    init = module.Trainer.__init__

    def remember(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        built.append(self)

    module.Trainer.__init__ = remember  # type: ignore[method-assign]
    return built


def main(spec_path: str) -> int:
    spec = json.loads(pathlib.Path(spec_path).read_text())
    script = (HERE / spec["script"]).resolve()
    sys.path[:0] = [str(script.parent), str(HERE)]  # the program's own modules, then _target
    start = time.perf_counter()
    result: dict[str, Any] = {"scalars": {}, "namespace": {}, "error": None}
    recorder = None
    trainers: list[Any] = []
    try:
        import torchrl.record.loggers as loggers
        import torchrl.record.loggers.utils as logger_utils

        recorder = make_recorder()

        def get_logger(logger_type: Any, *args: Any, **kwargs: Any) -> Any:
            return recorder if logger_type else None

        loggers.get_logger = logger_utils.get_logger = get_logger  # type: ignore[assignment]
        trainers = _watch_trainers()
        os.chdir(spec["workdir"])
        if spec.get("substitutions") is not None:  # a tutorial: its module, sizes substituted
            source = script.read_text()
            for old, new in spec["substitutions"]:
                if source.count(old) != 1:
                    raise RuntimeError(f"the setting {old!r} is not in {script.name} exactly once")
                source = source.replace(old, new)
            namespace: dict[str, Any] = {"__name__": "__main__", "__file__": str(script)}
            sys.argv = [str(script)]
            try:
                exec(compile(source, str(script), "exec"), namespace)
            finally:
                # a tutorial logs nothing: what it keeps in variables is its record
                for name in spec.get("collect", []):
                    if name in namespace:
                        result["namespace"][name] = _rows(namespace[name])
        else:
            sys.argv = [str(script), *spec["argv"]]
            runpy.run_path(str(script), run_name="__main__")
        code = 0
    except BaseException as err:  # noqa: BLE001  (SystemExit from hydra included: reported)
        if isinstance(err, SystemExit) and err.code in (None, 0):
            code = 0
        else:
            result["error"] = "".join(traceback.format_exception(err))[-8000:]
            code = 1
    result["run_s"] = time.perf_counter() - start
    if recorder is not None:
        result["scalars"] = recorder.scalars
        for trainer in trainers:
            for key, values in getattr(trainer, "_log_dict", {}).items():
                rows = [[None, v] for v in (_plain(x) for x in values) if v is not None]
                if rows:
                    result["scalars"][f"trainer/{key}"] = rows
    pathlib.Path(spec["out"]).write_text(json.dumps(result))
    return code


def _rows(value: Any) -> list[list[Any]]:
    """A tutorial's variable as logged rows: ``[(step, value), ...]`` or one value."""
    if isinstance(value, (list, tuple)):
        rows = []
        for item in value:
            if isinstance(item, (list, tuple)) and len(item) == 2:
                rows.append([_plain(item[0]), _plain(item[1])])
            else:
                rows.append([None, _plain(item)])
        return [r for r in rows if r[1] is not None]
    plain = _plain(value)
    return [] if plain is None else [[None, plain]]


if __name__ == "__main__":
    exit_code = main(sys.argv[1])
    sys.stdout.flush()
    sys.stderr.flush()
    # The result is written: end now. A program that failed with environment workers alive
    # (coding_ddpg's ParallelEnv) would otherwise wait for them at interpreter exit until the
    # watchdog; run_program.py kills the process group after the exit either way.
    os._exit(exit_code)
