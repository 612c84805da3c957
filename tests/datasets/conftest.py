"""Real, small datasets for the loader tests, a real HTTP server, and the dataset commands.

Minari datasets are written by Minari's own ``create_dataset_from_buffers``
around real Gymnasium environments; D4RL files are written with h5py. The
top-level autouse fixture already sends ``MINARI_DATASETS_PATH``,
``MIXREPLAY_DATA_DIR`` and ``D4RL_DATASET_DIR`` to a fresh temp dir per test;
the read-only Minari datasets below are built once per session in their own
root, which :func:`minari_root` points ``MINARI_DATASETS_PATH`` at.

D4RL downloads never leave the machine: an autouse fixture points
``MIXREPLAY_D4RL_BASE_URL`` at a closed local port, and :func:`d4rl_server`
serves files over real HTTP on 127.0.0.1 (ranges, ETags, digests, cut connections).
"""

from __future__ import annotations

import argparse
import base64
import dataclasses
import email.utils
import hashlib
import http.server
import re
import socket
import threading
import warnings

import gymnasium as gym
import h5py
import minari
import numpy as np
import pytest
import torch
from minari.data_collector import EpisodeBuffer
from tensordict import TensorDict

from mixreplay.datasets import Source

PENDULUM = "test/pendulum-v0"
MOUNTAINCAR = "test/mountaincar-v0"
DICTOBS = "test/dictobs-v0"


def nested_dict_pendulum(max_steps: int):
    """Pendulum with a nested Dict observation: ``{"angle": [2], "extra": {"velocity": [1]}}``."""

    class NestedDictObs(gym.ObservationWrapper):
        def __init__(self, env):
            super().__init__(env)
            self.observation_space = gym.spaces.Dict(
                {
                    "angle": gym.spaces.Box(-1.0, 1.0, (2,), np.float32),
                    "extra": gym.spaces.Dict(
                        {"velocity": gym.spaces.Box(-8.0, 8.0, (1,), np.float32)}
                    ),
                }
            )

        def observation(self, obs):
            return {
                "angle": obs[:2].astype(np.float32),
                "extra": {"velocity": obs[2:].astype(np.float32)},
            }

    return gym.wrappers.TimeLimit(NestedDictObs(gym.make("Pendulum-v1").unwrapped), max_steps)


@dataclasses.dataclass
class Recorded:
    """What was fed to Minari, episode by episode, to check converted rows against."""

    env: object
    episodes: list  # EpisodeBuffer


def _stack(obs_list):
    if isinstance(obs_list[0], dict):
        return {k: _stack([o[k] for o in obs_list]) for k in obs_list[0]}
    return np.stack(obs_list)


def record(
    env, n_episodes: int, *, seed: int = 0, policy=None, infos: bool = False, first_id: int = 0
) -> list:
    """Roll ``env`` for ``n_episodes`` (random actions unless ``policy(obs, rng)``); ids from ``first_id``."""
    rng = np.random.default_rng(seed)
    env.action_space.seed(seed)
    episodes = []
    for e in range(n_episodes):
        obs, _ = env.reset(seed=seed + e)
        observations, actions, rewards, terms, truncs, steps = [obs], [], [], [], [], [0.0]
        terminated = truncated = False
        while not (terminated or truncated):
            action = env.action_space.sample() if policy is None else policy(obs, rng)
            obs, reward, terminated, truncated, _ = env.step(action)
            observations.append(obs)
            actions.append(np.asarray(action, dtype=np.float32))
            rewards.append(float(reward))
            terms.append(bool(terminated))
            truncs.append(bool(truncated))
            steps.append(float(len(actions)))
        episodes.append(
            EpisodeBuffer(
                id=first_id + e,
                seed=seed + e,
                observations=_stack(observations),
                actions=np.stack(actions),
                rewards=rewards,
                terminations=terms,
                truncations=truncs,
                infos={"step": np.asarray(steps)} if infos else {},
            )
        )
    return episodes


def expert(obs, rng):
    """MountainCar: push the way the car moves; reaches the goal (terminates) in ~100 steps."""
    return np.array([1.0 if obs[1] >= 0 else -1.0], dtype=np.float32)


def make_minari(dataset_id: str, env, episodes) -> None:
    with warnings.catch_warnings():
        # Minari's advice about metadata (eval_env, reference scores) is not what these tests check
        warnings.simplefilter("ignore", UserWarning)
        _create(dataset_id, env, episodes)


def _create(dataset_id: str, env, episodes) -> None:
    minari.create_dataset_from_buffers(
        dataset_id=dataset_id,
        buffer=episodes,
        env=env,
        algorithm_name="test",
        observation_space=env.observation_space,
        action_space=env.action_space,
        author="mixreplay tests",
        author_email="tests@example.invalid",
        code_permalink="https://example.invalid/mixreplay/tests/datasets/conftest.py",
        description="a tiny dataset for mixreplay's loader tests",
    )


def pendulum_env(max_steps: int = 12):
    return gym.make("Pendulum-v1", max_episode_steps=max_steps)


def make_pendulum(dataset_id: str = PENDULUM, n_episodes: int = 3, seed: int = 0) -> Recorded:
    env = pendulum_env()
    eps = record(env, n_episodes, seed=seed)
    make_minari(dataset_id, env, eps)
    return Recorded(env, eps)


@pytest.fixture(scope="session")
def minari_session(tmp_path_factory):
    """Three read-only Minari datasets, built once: ``{dataset_id: Recorded}`` and their root."""
    root = tmp_path_factory.mktemp("minari_root")
    built = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MINARI_DATASETS_PATH", str(root))
        built[PENDULUM] = make_pendulum()
        # expert episodes terminate at the goal; the random one is truncated by the time limit
        env = gym.make("MountainCarContinuous-v0", max_episode_steps=120)
        eps = record(env, 2, seed=1, policy=expert) + record(env, 1, seed=5, first_id=2)
        make_minari(MOUNTAINCAR, env, eps)
        built[MOUNTAINCAR] = Recorded(env, eps)
        env = nested_dict_pendulum(8)
        eps = record(env, 2, seed=2, infos=True)
        make_minari(DICTOBS, env, eps)
        built[DICTOBS] = Recorded(env, eps)
    return root, built


@pytest.fixture
def minari_root(minari_session, monkeypatch):
    """Point ``MINARI_DATASETS_PATH`` at the session's datasets; returns ``{id: Recorded}``."""
    root, built = minari_session
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(root))
    return built


# -- D4RL-layout files ---------------------------------------------------------------------------


@dataclasses.dataclass
class D4RLArrays:
    observations: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    terminals: np.ndarray
    timeouts: np.ndarray
    next_observations: np.ndarray | None
    qpos: np.ndarray


def d4rl_arrays(*, seed: int = 0, with_next: bool = True) -> D4RLArrays:
    """20 rows in 5 episodes: terminal ends, timeout ends, and an unfinished last episode.

    Observations are ``[episode, step, i]`` so every row is identifiable.
    """
    lengths_and_ends = [(4, "terminal"), (5, "timeout"), (3, "terminal"), (4, "timeout"), (4, None)]
    obs, nxt, rew, term, tout = [], [], [], [], []
    i = 0
    for e, (n, end) in enumerate(lengths_and_ends):
        for t in range(n + 1):
            row = [e, t, i]
            if t < n:
                obs.append(row)
                rew.append(float(i) + 0.25)
                last = t == n - 1
                term.append(last and end == "terminal")
                tout.append(last and end == "timeout")
                i += 1
            if t > 0:
                nxt.append(row)
    g = np.random.default_rng(seed)
    n = len(obs)
    return D4RLArrays(
        observations=np.asarray(obs, dtype=np.float32),
        actions=g.normal(size=(n, 2)).astype(np.float32),
        rewards=np.asarray(rew, dtype=np.float64),
        terminals=np.asarray(term),
        timeouts=np.asarray(tout),
        next_observations=np.asarray(nxt, dtype=np.float32) if with_next else None,
        qpos=g.normal(size=(n, 4)),
    )


def write_d4rl(path, arrays: D4RLArrays, *, drop: tuple[str, ...] = ()) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with h5py.File(path, "w") as f:
        for name in (
            "observations",
            "actions",
            "rewards",
            "terminals",
            "timeouts",
            "next_observations",
        ):
            value = getattr(arrays, name)
            if value is not None and name not in drop:
                f[name] = value
        f["infos/qpos"] = arrays.qpos
        f["metadata/algorithm"] = "test"


# -- online rows from a live environment ---------------------------------------------------------


def env_ted_rows(env, n: int, seed: int = 0) -> TensorDict:
    """``n`` transitions stepped from ``env`` with random actions, in the TED layout (float32)."""
    env.action_space.seed(seed)
    obs, _ = env.reset(seed=seed)
    cols = {k: [] for k in ("obs", "act", "rew", "nobs", "term", "trunc")}
    for _ in range(n):
        a = env.action_space.sample()
        nobs, r, term, trunc, _ = env.step(a)
        for k, v in zip(cols, (obs, a, [r], nobs, [term], [trunc])):
            cols[k].append(np.asarray(v))
        obs = env.reset()[0] if term or trunc else nobs
    f32 = lambda k: torch.as_tensor(np.stack(cols[k]), dtype=torch.float32)  # noqa: E731
    flag = lambda k: torch.as_tensor(np.stack(cols[k]), dtype=torch.bool)  # noqa: E731
    live = torch.zeros(n, 1, dtype=torch.bool)
    return TensorDict(
        {
            "observation": f32("obs"),
            "action": f32("act"),
            "done": live,
            "terminated": live.clone(),
            "truncated": live.clone(),
            "next": {
                "observation": f32("nobs"),
                "reward": f32("rew"),
                "done": flag("term") | flag("trunc"),
                "terminated": flag("term"),
                "truncated": flag("trunc"),
            },
        },
        batch_size=[n],
    )


# -- the dataset commands --------------------------------------------------------------------------


def dataset_cli(argv: list[str]) -> int:
    """Run a dataset command as ``mixreplay`` does: its parser, then ``args.func(args)``.

    Errors propagate: the ``mixreplay`` command (mixreplay.cli) is what prints them as
    one line; these tests check what the commands raise.
    """
    from mixreplay.cli.cache import add_cache_parser
    from mixreplay.cli.datasets import add_dataset_parsers

    parser = argparse.ArgumentParser(prog="mixreplay")
    sub = parser.add_subparsers(dest="command", required=True)
    add_dataset_parsers(sub)
    add_cache_parser(sub)
    args = parser.parse_args(argv)
    return args.func(args)


# -- a Source of one's own -------------------------------------------------------------------------


class Ramp(Source):
    """``<prefix>:<n>``: n rows (episodes of 4) whose float64 observation is the row number."""

    def __init__(self, name, *, scale: float = 1.0, **base):
        super().__init__(name, **base)
        self.scale = scale
        self.options = {**self.options, "scale": scale}

    def files(self):
        return []

    def rows_hint(self):
        return int(self.name)

    def read(self):
        n = int(self.name)
        i = torch.arange(n, dtype=torch.float64).unsqueeze(-1)
        end = (torch.arange(n) % 4 == 3).unsqueeze(-1)
        rows = TensorDict(
            {
                "observation": i * self.scale,
                "action": torch.zeros(n, 1),
                "next": {"observation": (i + 1) * self.scale, "reward": i, "done": end},
            },
            [n],
        )
        return iter([self.policy.apply_td(rows, where=self.source_id)]), list(range(0, n, 4)), {}


@pytest.fixture
def registry():
    """The dataset registry module (the top-level autouse fixture restores it after each test)."""
    from mixreplay.datasets import registry as module

    return module


# -- a real HTTP server for D4RL downloads ---------------------------------------------------------


@pytest.fixture(autouse=True)
def _no_d4rl_network(monkeypatch):
    """A D4RL download a test did not arrange fails at once: nothing listens on this port."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("MIXREPLAY_D4RL_BASE_URL", f"http://127.0.0.1:{port}/offline_rl/")


@dataclasses.dataclass
class Served:
    """What the test server serves at one path, and how it misbehaves."""

    body: bytes
    etag: str = ""
    cut_after: int | None = None  # close the connection after this many body bytes...
    cuts: int = 0  # ...in this many responses (then serve whole)
    corrupt: bool = False  # flip a byte in the middle of what is sent
    digest: bool = False  # send Repr-Digest (of the true body)
    validators: str = "etag"  # "etag", "last-modified" (HTTP date of mtime), or "none"
    mtime: float = 1.7e9  # Last-Modified, with validators="last-modified"
    honour_if_range: bool = True  # False: a broken server that serves ranges of any version
    drip: float | None = None  # seconds between single bytes (then nothing else is sent)
    announce: int | None = None  # a Content-Length to announce instead of the true one
    length: bool = True  # False: no Content-Length, the body ends when the connection closes
    then: bytes | None = None  # the file changes to this after the first cut response

    def __post_init__(self):
        self.etag = self.etag or '"' + hashlib.sha256(self.body).hexdigest()[:16] + '"'

    @property
    def validator(self) -> str | None:
        if self.validators == "etag":
            return self.etag
        if self.validators == "last-modified":
            return email.utils.formatdate(self.mtime, usegmt=True)
        return None


class FileServer:
    """A real HTTP/1.1 server on 127.0.0.1: Range, If-Range, ETag or Last-Modified, Repr-Digest,
    cut connections, a byte at a time, a false Content-Length."""

    def __init__(self):
        self.files: dict[str, Served] = {}
        self.requests: list[dict] = []
        self.closing = threading.Event()
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet
                pass

            def do_GET(self):
                server.requests.append(
                    {
                        "path": self.path,
                        "range": self.headers.get("Range"),
                        "if_range": self.headers.get("If-Range"),
                    }
                )
                served = server.files.get(self.path.lstrip("/"))
                if served is None:
                    self.send_error(404, "Not Found")
                    return
                body, start = served.body, 0
                m = re.fullmatch(r"bytes=(\d+)-", self.headers.get("Range") or "")
                if_range = self.headers.get("If-Range")
                if m and (
                    if_range is None or if_range == served.validator or not served.honour_if_range
                ):
                    start = int(m.group(1))
                    if start >= len(body):
                        self.send_response(416)
                        self.send_header("Content-Range", f"bytes */{len(body)}")
                        self.send_header("Content-Length", "0")
                        self.end_headers()
                        return
                    self.send_response(206)
                    self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
                else:
                    self.send_response(200)
                length = len(body) - start if served.announce is None else served.announce
                if served.length:
                    self.send_header("Content-Length", str(length))
                else:
                    self.send_header("Connection", "close")
                    self.close_connection = True
                if served.validators == "etag":
                    self.send_header("ETag", served.etag)
                elif served.validators == "last-modified":
                    self.send_header("Last-Modified", served.validator)
                if served.digest:
                    b64 = base64.b64encode(hashlib.sha256(body).digest()).decode()
                    self.send_header("Repr-Digest", f"sha-256=:{b64}:")
                self.end_headers()
                out = memoryview(body)[start:]  # no copy: tests measure the client's memory
                if served.corrupt:
                    mid = len(out) // 2
                    out = memoryview(
                        bytes(out[:mid]) + bytes([out[mid] ^ 0xFF]) + bytes(out[mid + 1 :])
                    )
                try:
                    if served.drip is not None:
                        for i in range(len(out)):
                            if server.closing.wait(served.drip):
                                return
                            self.wfile.write(out[i : i + 1])
                            self.wfile.flush()
                        return
                    if served.cuts > 0 and served.cut_after is not None:
                        served.cuts -= 1
                        self.wfile.write(out[: served.cut_after])
                        self.wfile.flush()
                        self.close_connection = True
                        self.connection.shutdown(socket.SHUT_RDWR)
                        if served.then is not None:  # the file changes on the server now
                            served.body, served.then = served.then, None
                            served.etag = served.etag and ""
                            served.__post_init__()
                        return
                    self.wfile.write(out)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up
                    self.close_connection = True

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/offline_rl/"
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self.thread.start()

    def serve(self, path: str, body: bytes, **how) -> Served:
        self.files[f"offline_rl/{path}"] = served = Served(body, **how)
        return served

    def close(self):
        self.closing.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join()


@pytest.fixture
def d4rl_server(monkeypatch):
    """A file server standing in for D4RL's; ``MIXREPLAY_D4RL_BASE_URL`` points at it."""
    server = FileServer()
    monkeypatch.setenv("MIXREPLAY_D4RL_BASE_URL", server.base_url)
    yield server
    server.close()
