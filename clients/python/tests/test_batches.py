"""Batches (POST /batches and the routes under it), for Client and for
AsyncClient, against a real svc serve: the way a client that sends its
whole body before it reads runs a batch of any size."""

from __future__ import annotations

import time
from typing import Any, Iterator

import pytest

import svc_client as S
from adapters import SyncOverAsync
from conftest import Server


@pytest.fixture(params=["sync", "async"])
def c(request: pytest.FixtureRequest, server: Server) -> Iterator[Any]:
    cl = S.Client(server.url) if request.param == "sync" else SyncOverAsync(server.url)
    yield cl
    cl.close()


def tasks(n: int) -> Iterator[dict[str, Any]]:
    for i in range(n):
        yield {"id": f"t{i}", "input": i}


def wait_end(c: Any, batch_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + 30
    while True:
        st: dict[str, Any] = c.batch_status(batch_id)
        if st["state"] not in ("queued", "running") or time.monotonic() > deadline:
            return st
        time.sleep(0.02)


def test_batch_runs_every_task(c: Any) -> None:
    acc = c.submit_batch("echo", tasks(2000), max_concurrency=50)
    assert acc["total"] == 2000
    got = list(c.batch_results(acc["batch_id"], follow=True))
    assert [x["index"] for x in got] == list(range(2000))
    assert all(x["result"]["output"] == x["index"] and x["result"]["task_id"] == f"t{x['index']}" for x in got)
    st = wait_end(c, acc["batch_id"])
    assert st["state"] == "completed"
    assert st["counts"] == {"total": 2000, "succeeded": 2000, "failed": 0, "running": 0}
    tail = list(c.batch_results(acc["batch_id"], order="finish", after=1995))
    assert [x["seq"] for x in tail] == [1996, 1997, 1998, 1999, 2000]
    page = c.list_batches(limit=100)
    assert acc["batch_id"] in [b["batch_id"] for b in page["batches"]]


def test_bad_task_fails_alone(c: Any) -> None:
    acc = c.submit_batch("echo", [{"input": "a"}, S.InvalidTask("not a task"), {"input": "c"}])
    got = list(c.batch_results(acc["batch_id"], follow=True))
    assert [x["result"]["success"] for x in got] == [True, False, True]
    assert got[1]["result"]["error"]["type"] == "SpecValidationError"


def test_refusals(c: Any) -> None:
    with pytest.raises(S.RegistryError):
        c.submit_batch("nope", tasks(3))
    with pytest.raises(S.SpecValidationError):
        c.submit_batch("echo", tasks(3), max_concurrency=0)
    # mode provider: the test provider has no batch API, and the server says so.
    with pytest.raises(S.SpecValidationError, match="no batch API"):
        c.submit_batch("echo", tasks(3), mode="provider")
    with pytest.raises(ValueError):
        c.submit_batch("echo", tasks(3), mode="fast")
    with pytest.raises(S.RegistryError):
        c.batch_status("nope")
    with pytest.raises(S.RegistryError):
        c.cancel_batch("nope")
    with pytest.raises(S.RegistryError):
        list(c.batch_results("nope"))


def test_cancel(c: Any) -> None:
    acc = c.submit_batch("slow", tasks(50), max_concurrency=2)
    c.cancel_batch(acc["batch_id"])
    c.cancel_batch(acc["batch_id"])
    st = wait_end(c, acc["batch_id"])
    assert st["state"] == "cancelled" and st["counts"]["succeeded"] < 50
