"""Callbacks (callback_url) of batches and submitted runs, for Client and
AsyncClient, against a real svc serve with --webhook-key-file and a
receiver on 127.0.0.1 that checks X-Svc-Signature as docs/api.md shows."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

import svc_client as S
from adapters import SyncOverAsync
from conftest import Server, start

KEY = b"a webhook key for the Python tests"


def verify(key: bytes, header: str, body: bytes, tolerance: float = 300) -> bool:
    parts = dict(p.split("=", 1) for p in header.split(",") if "=" in p)
    t, sig = parts.get("t", ""), parts.get("v1", "")
    want = hmac.new(key, t.encode() + b"." + body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(want, sig) and abs(time.time() - int(t)) < tolerance


class Receiver:
    def __init__(self) -> None:
        self.posts: list[tuple[dict[str, str], bytes]] = []
        outer = self

        class H(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                outer.posts.append(({k.lower(): v for k, v in self.headers.items()}, body))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *a: Any) -> None:
                pass

        self.srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.url = f"http://127.0.0.1:{self.srv.server_address[1]}"
        self.thread = threading.Thread(target=self.srv.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.srv.shutdown()
        self.srv.server_close()


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()


@pytest.fixture(scope="module")
def hook_server(svc_bin: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    key_file: Path = tmp_path_factory.mktemp("key") / "webhook.key"
    key_file.write_bytes(KEY + b"\n")
    s = start(svc_bin, "--webhook-key-file", str(key_file), "--webhook-allow-private")
    yield s
    s.stop()


@pytest.fixture(params=["sync", "async"])
def c(request: pytest.FixtureRequest, hook_server: Server) -> Iterator[Any]:
    cl = S.Client(hook_server.url) if request.param == "sync" else SyncOverAsync(hook_server.url)
    yield cl
    cl.close()


def delivered(status: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    deadline = time.monotonic() + 30
    while True:
        st = status()
        if (st.get("callback") or {}).get("state") == "delivered":
            return st
        assert time.monotonic() < deadline, f"not delivered: {st}"
        time.sleep(0.05)


def test_callbacks_signed(c: Any, receiver: Receiver) -> None:
    acc = c.submit_batch("echo", [{"input": 1}, {"input": 2}], callback_url=receiver.url + "/batch")
    st = delivered(lambda: c.batch_status(acc["batch_id"]))
    assert st["callback"]["last_status"] == 204 and st["callback"]["attempts"] == 1
    run = c.submit("echo", {"input": "hi"}, callback_url=receiver.url + "/run")
    delivered(lambda: run.status())
    posts = {h["x-svc-delivery"]: (h, b) for h, b in receiver.posts}
    bh, bb = posts["batch:" + acc["batch_id"]]
    rh, rb = posts["run:" + run.run_id]
    assert verify(KEY, bh["x-svc-signature"], bb) and verify(KEY, rh["x-svc-signature"], rb)
    assert not verify(b"another key", bh["x-svc-signature"], bb)
    assert json.loads(bb)["batch"]["counts"]["succeeded"] == 2
    assert json.loads(rb)["result"]["output"] == "hi"


def test_callback_refused_without_key(server: Server) -> None:
    with S.Client(server.url) as cl:
        with pytest.raises(S.SpecValidationError, match="--webhook-key-file"):
            cl.submit_batch("echo", [{"input": 1}], callback_url="https://example.com/x")
        with pytest.raises(S.SpecValidationError, match="--webhook-key-file"):
            cl.submit("echo", {"input": 1}, callback_url="https://example.com/x")
