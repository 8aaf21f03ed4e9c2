"""Fixtures: a real ``svc serve`` built from this repository (once per
session, or $SVC_BIN), on a free 127.0.0.1 port, with a data directory of
its own and the contract fixture's specs (tests/specs: agents echo, fail,
slow, clock, writer, gated, asker; groups pair, split, slowpair), stopped
by its PID."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator

import httpx
import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
sys.path.insert(0, str(HERE.parent / "src"))


@pytest.fixture(scope="session")
def svc_bin(tmp_path_factory: pytest.TempPathFactory) -> str:
    if os.environ.get("SVC_BIN"):
        return os.environ["SVC_BIN"]
    out = tmp_path_factory.mktemp("bin") / "svc"
    subprocess.run(["go", "build", "-o", str(out), "./cmd/svc"], cwd=REPO, check=True)
    return str(out)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """One svc serve process."""

    def __init__(self, binary: str, specs: Path, *args: str) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="svc-py-"))
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = self.dir / "log"
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [binary, "serve", "--specs", str(specs), "--host", "127.0.0.1", "--port", str(self.port),
             "--data-dir", str(self.dir / "data"), *args],
            stdout=self._log, stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 30
        while True:
            if self.proc.poll() is not None:
                self.stop()
                raise RuntimeError(f"svc serve exited ({self.proc.returncode}):\n{self.log()}")
            try:
                if httpx.get(self.url + "/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"svc serve did not answer /healthz within 30 s:\n{self.log()}")
            time.sleep(0.05)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self._log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def start(binary: str, *args: str) -> Server:
    return Server(binary, HERE / "specs", "--prices", str(HERE / "prices.yaml"), *args)


@pytest.fixture(scope="session")
def server(svc_bin: str) -> Iterator[Server]:
    """One server for the session: for tests that do not count events."""
    s = start(svc_bin)
    yield s
    s.stop()


@pytest.fixture
def fresh_server(svc_bin: str) -> Iterator[Server]:
    """A server of the test's own, with an empty event store."""
    s = start(svc_bin)
    yield s
    s.stop()
