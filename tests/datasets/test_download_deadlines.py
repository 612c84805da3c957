"""A download gives up on a server that never finishes its response head.

A socket's timeout bounds each read, not the response: a server that drips its status
line and headers a byte at a time (each byte well within the timeout) kept ``download``
waiting for as long as it dripped. The head (connecting, status line, headers, redirects)
now has one deadline per attempt, ``timeout``; the body keeps its stall rule. The
servers here are real sockets on 127.0.0.1 that would drip for minutes; a watchdog
(``run_threads``) bounds each call far below that, so only a hang fails it.
"""

from __future__ import annotations

import re
import socket
import threading
import time

import pytest

from mixreplay import DatasetError
from mixreplay.datasets import download as download_module
from tests.helpers import run_threads

BODY = b"0123456789" * 50
HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n" % len(BODY)
    + b"X-Pad: "
    + b"a" * 2000  # dripped at 20 bytes/s: about 100 s
    + b"\r\n\r\n"
)
DRIP_S = 0.05
WATCHDOG_S = 30  # far below the drip's 100 s, far above the 2 attempts' deadlines


class RawServer:
    """Answers each connection as ``mode`` says, over a plain socket (no HTTP library)."""

    def __init__(self, mode: str):
        self.mode, self.stop = mode, threading.Event()
        self.requests: list[str] = []
        self.ended = threading.Semaphore(0)  # a connection the client gave up on
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.settimeout(0.1)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/f.bin"
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()
        self.sock.close()

    def _drip(self, conn: socket.socket, data: bytes) -> None:
        for byte in data:
            if self.stop.is_set():
                return
            conn.sendall(bytes([byte]))
            time.sleep(DRIP_S)

    def _answer(self, conn: socket.socket) -> None:
        try:
            request = conn.recv(65536).decode("latin-1")
            path = request.split(" ")[1] if " " in request else ""
            self.requests.append(path)
            if self.mode == "silent":  # until the client hangs up
                conn.settimeout(DRIP_S)
                while not self.stop.is_set():
                    try:
                        if conn.recv(1) == b"":
                            return
                    except TimeoutError:
                        continue
                return
            if self.mode == "redirect" and path == "/f.bin":  # at once; the target drips
                conn.sendall(b"HTTP/1.1 302 Found\r\nLocation: /g.bin\r\nContent-Length: 0\r\n\r\n")
                return
            if self.mode == "status-then-drip":
                conn.sendall(HEAD[:17])  # the status line at once
                self._drip(conn, HEAD[17:])
            elif self.mode == "pieces":  # a head in a few pieces, all within the deadline
                for i in range(0, len(HEAD), len(HEAD) // 3 + 1):
                    conn.sendall(HEAD[i : i + len(HEAD) // 3 + 1])
                    time.sleep(DRIP_S)
                conn.sendall(BODY)
                return
            else:
                self._drip(conn, HEAD)
        except OSError:  # the client closed the connection: it gave up
            pass
        finally:
            conn.close()
            self.ended.release()

    def close(self) -> None:
        self.stop.set()
        self.thread.join(10)


@pytest.fixture
def server(request):
    servers: list[RawServer] = []

    def start(mode: str) -> RawServer:
        servers.append(RawServer(mode))
        return servers[-1]

    yield start
    for s in servers:
        s.close()


@pytest.fixture(autouse=True)
def _short_backoff(monkeypatch):
    monkeypatch.setattr(download_module, "RETRY_DELAY_S", 0.01)


@pytest.mark.parametrize("mode", ["head-drip", "status-then-drip", "silent", "redirect"])
def test_a_response_head_that_never_completes_fails_each_attempt_at_its_deadline(
    server, tmp_path, mode
):
    srv = server(mode)

    def call() -> None:
        download_module.download(srv.url, tmp_path / "f.bin", timeout=0.5, retries=2)

    with pytest.raises(
        DatasetError,
        match=rf"download of {re.escape(srv.url)} failed after 2 attempts \(no complete "
        r"response head \(status line and headers\) within 0.5 s \(timeout=0.5\)\); 0 bytes "
        r"are kept in .*\.f\.bin\.part: run again to resume",
    ):
        run_threads(call, timeout=WATCHDOG_S, release=srv.stop.set)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".f.bin.lock"]  # nothing else
    expected = ["/f.bin", "/g.bin"] * 2 if mode == "redirect" else ["/f.bin"] * 2
    assert srv.requests == expected  # one request per attempt (and its redirect)
    for _ in expected:  # each attempt closed its connections: the server's drips ended
        assert srv.ended.acquire(timeout=WATCHDOG_S)


def test_a_head_that_arrives_in_pieces_within_the_deadline_is_read(server, tmp_path):
    srv = server("pieces")
    out = run_threads(
        lambda: download_module.download(srv.url, tmp_path / "f.bin", timeout=5, retries=1),
        timeout=WATCHDOG_S,
        release=srv.stop.set,
    )
    assert out == [tmp_path / "f.bin"] and (tmp_path / "f.bin").read_bytes() == BODY
