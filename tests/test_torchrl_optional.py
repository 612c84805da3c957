"""``mixreplay.torchrl`` without TorchRL: the error names the extra that installs it.

Runs without TorchRL too (TorchRL is hidden from a subprocess), so it is not marked torchrl.
"""

import subprocess
import sys

import pytest

CODE = """
import sys

import pytest
sys.modules["torchrl"] = None  # as if TorchRL were not installed
import mixreplay
try:
    import mixreplay.torchrl
except mixreplay.MissingDependencyError as err:
    print(type(err).__name__, "|", err)
"""


@pytest.mark.heavy  # a fresh interpreter that imports torch with TorchRL hidden
def test_the_trainer_module_needs_the_torchrl_extra():
    out = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == (
        "MissingDependencyError | mixreplay.torchrl (TorchRL's trainer) needs the optional "
        "package 'torchrl', which is not installed. Install it with: "
        'pip install "mixreplay[torchrl]"'
    )
