# Ported from TorchRL's own replay-buffer tests, to check that mixreplay is a drop-in
# replacement for the names it exports under TorchRL's names (issue 19). Origin:
#   repository  https://github.com/pytorch/rl
#   path        test/rb/_rb_common.py
#   commit      373c31a85b30be19e5e1db5c466f25d15522ac98 (branch prepare-0.14, "Bump 0.14.0");
#               last changed in 0bde4b46e
# Changes: one import block that rebinds the names under test to the target's (see
# _target.py: mixreplay by default, TorchRL itself with MIXREPLAY_TORCHRL_TARGET=torchrl),
# and pytest marks (_marks.py: what is left out and why; strict xfails for mixreplay's
# documented differences). Nothing else.
#
# TorchRL's LICENSE file (MIT), which its notice requires to travel with the code:
#
# MIT License
#
# Copyright (c) Meta Platforms, Inc. and affiliates.
#
# Permission is hereby granted, free of charge, to any person obtaining a copy
# of this software and associated documentation files (the "Software"), to deal
# in the Software without restriction, including without limitation the rights
# to use, copy, modify, merge, publish, distribute, sublicense, and/or sell
# copies of the Software, and to permit persons to whom the Software is
# furnished to do so, subject to the following conditions:
#
# The above copyright notice and this permission notice shall be included in all
# copies or substantial portions of the Software.
#
# THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR
# IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY,
# FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE
# AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER
# LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM,
# OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE
# SOFTWARE.
#
# Copyright (c) Meta Platforms, Inc. and affiliates.
#
# This source code is licensed under the MIT license found in the
# LICENSE file in the root directory of this source tree.
from __future__ import annotations

import functools
import importlib
import sys

import torch
from packaging import version
from packaging.version import parse

from torchrl.data import ReplayBuffer, TensorDictReplayBuffer

from _target import ReplayBuffer, TensorDictReplayBuffer  # the names under test, rebound to the target's

OLD_TORCH = parse(torch.__version__) < parse("2.0.0")
_has_tv = importlib.util.find_spec("torchvision") is not None
_has_gym = importlib.util.find_spec("gym") is not None
_has_snapshot = importlib.util.find_spec("torchsnapshot") is not None
_os_is_windows = sys.platform == "win32"
_has_transformers = importlib.util.find_spec("transformers") is not None
_has_ray = importlib.util.find_spec("ray") is not None
_has_zstandard = importlib.util.find_spec("zstandard") is not None

TORCH_VERSION = version.parse(version.parse(torch.__version__).base_version)

torch_2_3 = version.parse(
    ".".join([str(s) for s in version.parse(str(torch.__version__)).release])
) >= version.parse("2.3.0")

ReplayBufferRNG = functools.partial(ReplayBuffer, generator=torch.Generator())
TensorDictReplayBufferRNG = functools.partial(
    TensorDictReplayBuffer, generator=torch.Generator()
)
