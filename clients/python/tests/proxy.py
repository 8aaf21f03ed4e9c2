"""A proxy in front of a real svc serve that breaks event streams the way
networks do: it cuts the first /runs/{id}/stream after two frames, and
the first /events/stream after two malformed frames and one real one
(both cuts mid-body: a chunked answer without its last chunk)."""

from __future__ import annotations

import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx


class Proxy:
    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.run_streams: list[str | None] = []  # the Last-Event-ID of each run stream request
        self.event_streams = 0
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a: Any) -> None:
                pass

            def do_GET(self) -> None:
                owner.handle(self)

            def do_POST(self) -> None:
                owner.handle(self)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join()

    def handle(self, h: BaseHTTPRequestHandler) -> None:
        path = h.path
        headers = {k: v for k, v in h.headers.items() if k.lower() not in ("host", "connection", "content-length")}
        n = int(h.headers.get("Content-Length") or 0)
        body = h.rfile.read(n) if n else None
        cut = False
        inject = False
        if path.startswith("/runs/") and path.split("?")[0].endswith("/stream"):
            self.run_streams.append(h.headers.get("Last-Event-ID"))
            cut = len(self.run_streams) == 1
        if path.startswith("/events/stream"):
            self.event_streams += 1
            cut = inject = self.event_streams == 1
        with httpx.Client(timeout=None) as c, c.stream(h.command, self.upstream + path, headers=headers, content=body) as r:
            h.send_response(r.status_code)
            for k, v in r.headers.items():
                if k.lower() not in ("transfer-encoding", "content-length", "connection"):
                    h.send_header(k, v)
            h.send_header("Transfer-Encoding", "chunked")
            h.end_headers()

            def chunk(b: bytes) -> None:
                h.wfile.write(b"%x\r\n%s\r\n" % (len(b), b))
                h.wfile.flush()

            if inject:
                chunk(b"data: {not json\n\n")
                chunk(b'data: ["a", "list"]\n\n')
                chunk(b": a comment\n\n")
            frames = 0
            buf = b""
            for data in r.iter_raw():
                if not cut:
                    chunk(data)
                    continue
                buf += data
                while b"\n\n" in buf and frames < (1 if inject else 2):
                    frame, buf = buf.split(b"\n\n", 1)
                    if frame.startswith(b":"):
                        continue  # a heartbeat
                    chunk(frame + b"\n\n")
                    frames += 1
                if frames >= (1 if inject else 2):
                    # Cut: no last chunk, the connection reset.
                    h.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                    h.connection.close()
                    h.close_connection = True
                    return
            h.wfile.write(b"0\r\n\r\n")
            h.wfile.flush()
