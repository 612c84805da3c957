"""Helpers shared by the distributed tests: Hopper-shaped rows, reading the ring, waiting for a restart."""

from __future__ import annotations

import time

import torch
from tensordict import TensorDict

from mixreplay.errors import BufferActorError
from mixreplay.layout import RowLayout
from mixreplay.schema import Schema


def hopper_rows(n: int, tag: float = 0.0, start: int = 0) -> TensorDict:
    """Hopper-shaped TED rows; ``action`` holds ``tag``, ``("next", "reward")`` the row number."""
    i = torch.arange(start, start + n, dtype=torch.float32).unsqueeze(-1)
    flag = (torch.arange(start, start + n) % 7 == 0).unsqueeze(-1)
    return TensorDict(
        {
            "observation": tag + i.expand(n, 11).clone(),
            "action": torch.full((n, 3), tag),
            "done": flag.clone(),
            "terminated": flag.clone(),
            "next": {
                "observation": tag + 1 + i.expand(n, 11).clone(),
                "reward": i.clone(),
                "done": flag.clone(),
                "terminated": flag.clone(),
            },
        },
        batch_size=[n],
    )


def ring_rows(state: dict) -> TensorDict:
    """The online ring's rows in slot order, from an OfflineToOnlineReplayBuffer's state dict."""
    ring = state["sources"]["online"]["storage"]
    return RowLayout(Schema.from_json(ring["schema"])).unpack(ring["rows"])


def stored_online_rows(rb) -> TensorDict:
    """The online ring's rows in slot order, read through the forwarded ``state_dict``."""
    return ring_rows(rb.state_dict())


def wait_until_back(rb) -> dict:
    """Block until a restarting buffer actor answers again; return its ``actor_info()``.

    Ray answers calls made while it restarts the actor with an error (the actor is
    unavailable), so this asks again until one succeeds. The bound on attempts only
    keeps a broken restart from hanging the suite; it asserts nothing about speed.
    """
    for _ in range(6000):
        try:
            return rb.actor_info()
        except BufferActorError as err:
            if "is unavailable" not in str(err) and "died" not in str(err):
                raise
            time.sleep(0.1)
    raise AssertionError("the buffer actor never answered again after its restart")
