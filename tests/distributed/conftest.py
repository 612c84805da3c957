"""A throwaway local Ray cluster for the distributed tests: temp dir, no dashboard, no token files."""

from __future__ import annotations

import pathlib
import tempfile
from types import SimpleNamespace

import pytest

HOME_RAY = pathlib.Path.home() / ".ray"


@pytest.fixture(scope="module")
def ray_cluster():
    """``ray.init(num_cpus=2)`` in a temp dir, shut down after the module.

    Token authentication is disabled for this throwaway cluster only (it would
    write ``~/.ray/auth_token``); the library itself never changes that setting.
    Yields ``ray`` and whether ``~/.ray`` existed before.
    """
    import ray

    existed = HOME_RAY.exists()
    mp = pytest.MonkeyPatch()
    mp.setenv("RAY_AUTH_MODE", "disabled")
    # Ray's socket paths must stay short: a temp dir directly under the system temp root.
    with tempfile.TemporaryDirectory(prefix="mixreplay-ray-") as temp_dir:
        ray.init(
            num_cpus=2,
            _temp_dir=temp_dir,
            include_dashboard=False,
            logging_level="ERROR",
            log_to_driver=False,
        )
        try:
            yield SimpleNamespace(ray=ray, home_ray_existed=existed)
        finally:
            ray.shutdown()
            mp.undo()
