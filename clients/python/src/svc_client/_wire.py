"""What the sync and the asyncio clients share: request ids, paths, task
encoding and the server-sent events parser."""

from __future__ import annotations

import json
import os
import time
import uuid
from dataclasses import dataclass
from typing import Any, Mapping
from urllib.parse import quote, urlsplit

from .errors import AgentRuntimeError, SpecValidationError

#: The default bound on one request, in seconds.
DEFAULT_TIMEOUT = 30.0
#: gather's default max_concurrency (the server's), and the largest it takes.
DEFAULT_GATHER_CONCURRENCY = 100
MAX_GATHER_CONCURRENCY = 10000

# Result's polling backoff, as the Go client's: quick for short runs, at
# most two requests a second for long ones.
POLL_START = 0.02
POLL_MAX = 0.5

# How often a run's event stream reconnects after a drop before its end,
# and the pause before the n-th attempt (n times this).
STREAM_RETRIES = 5
STREAM_RETRY_DELAY = 0.1

TERMINAL_STATES = frozenset({"completed", "failed", "cancelled"})

NDJSON = "application/x-ndjson"

JSON = Any
"""A JSON value as json.loads gives it."""


@dataclass(frozen=True)
class GatherItem:
    """One result of a streamed gather: the task's index in the input
    (0-based) and its AgentResult."""

    index: int
    result: dict[str, Any]


@dataclass(frozen=True)
class InvalidTask:
    """A task the caller knows to be bad (a line it could not parse, say):
    gather_stream sends a line the server refuses, and the task's result
    fails with a SpecValidationError carrying this message; the other tasks
    run."""

    message: str


def base_url(url: str) -> str:
    u = urlsplit(url)
    if u.scheme not in ("http", "https"):
        raise ValueError(f"svc_client: server URL {url!r}: the scheme must be http or https")
    if not u.hostname:
        raise ValueError(f"svc_client: server URL {url!r}: no host")
    if u.query or u.fragment:
        raise ValueError(f"svc_client: server URL {url!r}: a query or fragment is not allowed")
    if u.username or u.password:
        raise ValueError(f"svc_client: server URL {url!r}: credentials in the URL are not supported; pass token=")
    return url.rstrip("/")


def seg(name: str) -> str:
    """A path segment: a name, escaped."""
    if not isinstance(name, str) or name == "":
        raise TypeError(f"name {name!r}: want a non-empty string")
    return quote(name, safe="")


def new_request_id() -> str:
    """A UUIDv7, as the server's ids."""
    ms = time.time_ns() // 1_000_000
    b = bytearray(ms.to_bytes(6, "big") + os.urandom(10))
    b[6] = 0x70 | (b[6] & 0x0F)
    b[8] = 0x80 | (b[8] & 0x3F)
    return str(uuid.UUID(bytes=bytes(b)))


def task_dict(task: Mapping[str, Any]) -> dict[str, Any]:
    if not isinstance(task, Mapping):
        raise TypeError(f"task {task!r}: want a mapping such as {{'input': ...}}")
    return dict(task)


def run_request_id(task: Mapping[str, Any], request_id: str | None) -> str:
    """The request id of a run: the task's request_id, else the call's,
    else a new UUIDv7."""
    rid = task.get("request_id")
    if isinstance(rid, str) and rid:
        return rid
    return request_id or new_request_id()


def check_concurrency(n: int) -> None:
    if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= MAX_GATHER_CONCURRENCY:
        raise SpecValidationError(
            f"max_concurrency {n!r}: want 1..{MAX_GATHER_CONCURRENCY}", kind="SpecValidationError"
        )


def ahead_of(max_concurrency: int) -> int:
    """How many tasks a streamed gather sends ahead of the results it has
    read: a few times the server's window (max_concurrency plus
    max(max_concurrency, 16)), so the server never waits for tasks, and
    the source is not read much faster than the batch goes."""
    return max(1024, 4 * (max_concurrency + max(max_concurrency, 16)))


def encode_task(i: int, task: Any) -> tuple[bytes, InvalidTask | None]:
    """One NDJSON line of a streamed gather's body; a task that cannot be
    sent goes as a line the server refuses ("null"), and its result will
    carry the reason."""
    if isinstance(task, InvalidTask):
        return b"null\n", task
    try:
        if not isinstance(task, Mapping):
            raise TypeError(f"want a mapping such as {{'input': ...}}, not {type(task).__name__}")
        return json.dumps(task, separators=(",", ":"), ensure_ascii=False).encode() + b"\n", None
    except (TypeError, ValueError) as e:
        return b"null\n", InvalidTask(f"client: encoding task {i}: {e}")


class GatherLines:
    """Decodes the lines of a streamed gather's answer."""

    def __init__(self) -> None:
        self.invalid: dict[int, InvalidTask] = {}
        self.summary: dict[str, Any] | None = None

    def decode(self, line: bytes) -> GatherItem | None:
        """The item of a result line; None for a blank line or the summary
        (kept in .summary; an error in it is raised)."""
        t = line.strip()
        if not t:
            return None  # a keep-alive
        try:
            obj = json.loads(t)
        except ValueError as e:
            raise AgentRuntimeError(f"client: decoding a line of the gather stream: {e}") from None
        if isinstance(obj, dict) and isinstance(obj.get("summary"), dict):
            summary: dict[str, Any] = obj["summary"]
            self.summary = summary
            err = summary.get("error")
            if isinstance(err, dict) and err:
                from .errors import error_from_info

                raise error_from_info(err)
            return None
        if isinstance(obj, dict) and isinstance(obj.get("index"), int) and isinstance(obj.get("result"), dict):
            item = GatherItem(obj["index"], obj["result"])
            bad = self.invalid.get(item.index)
            if bad is not None:
                item.result["error"] = {"type": "SpecValidationError", "message": bad.message}
            return item
        raise AgentRuntimeError(f"client: a line of the gather stream is neither a result nor the summary: {t[:80]!r}")


class SSEParser:
    """The WHATWG server-sent events format, a line at a time: feed() each
    line (without its end) and get a frame (event, data, id) when a blank
    line ends one that had data."""

    def __init__(self) -> None:
        self.event = ""
        self.data: list[str] = []
        self.last_id: str | None = None

    def feed(self, line: str) -> tuple[str, str, str | None] | None:
        # httpx before 0.24 keeps each line's end; later ones strip it.
        line = line.rstrip("\r\n")
        if line == "":
            if not self.data:
                self.event = ""
                return None
            frame = (self.event, "\n".join(self.data), self.last_id)
            self.event, self.data = "", []
            return frame
        if line.startswith(":"):
            return None  # a comment: the heartbeat
        name, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if name == "data":
            self.data.append(value)
        elif name == "event":
            self.event = value
        elif name == "id" and "\0" not in value:
            self.last_id = value
        return None


def decode_event(data: str, need: str) -> dict[str, Any] | None:
    """A frame's data as an event object having the key need; None for a
    malformed frame, which the streams skip."""
    try:
        ev = json.loads(data)
    except ValueError:
        return None
    if not isinstance(ev, dict) or not ev.get(need):
        return None
    return ev
