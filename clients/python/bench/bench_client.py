"""One measurement of the Python client against a running svc serve,
printed as one JSON line: the streamed gather of N test:echo tasks
(Client.gather_stream, tasks made as they are read) or sync runs with
AsyncClient at C requests in flight. rss_mb is this process's peak
resident set (VmHWM: ru_maxrss would count the parent's when a Go
program started it, which forks by vfork). bench/pyclient_bench_test.go runs it beside
the Go client; by hand:

    python3 clients/python/bench/bench_client.py --url http://127.0.0.1:8420 --mode stream --tasks 100000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any, Iterator

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import svc_client  # noqa: E402


def tasks(n: int) -> Iterator[dict[str, Any]]:
    for i in range(n):
        yield {"input": {"n": i, "text": "hello world"}}


def stream(url: str, n: int, conc: int) -> dict[str, Any]:
    start = time.perf_counter()
    got = failed = 0
    with svc_client.Client(url) as c:
        for item in c.gather_stream("echo", tasks(n), max_concurrency=conc):
            got += 1
            failed += not item.result["success"]
    took = time.perf_counter() - start
    if got != n or failed:
        raise SystemExit(f"{got} results for {n} tasks, {failed} failed")
    return {"per_s": n / took, "seconds": took}


async def runs(url: str, n: int, conc: int) -> dict[str, Any]:
    left = n
    failed = 0

    async def worker(c: svc_client.AsyncClient) -> None:
        nonlocal left, failed
        while left > 0:
            left -= 1
            r = await c.run("echo", {"input": {"n": left, "text": "hello world"}})
            failed += not r["success"]

    async with svc_client.AsyncClient(url) as c:
        await c.run("echo", {"input": 0})  # a warm connection
        start = time.perf_counter()
        await asyncio.gather(*(worker(c) for _ in range(conc)))
        took = time.perf_counter() - start
    if failed:
        raise SystemExit(f"{failed} runs failed")
    return {"per_s": n / took, "seconds": took}


def peak_rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--url", required=True)
    p.add_argument("--mode", choices=["stream", "runs"], required=True)
    p.add_argument("--tasks", type=int, default=100_000)
    p.add_argument("--concurrency", type=int, default=64)
    a = p.parse_args()
    if a.mode == "stream":
        out = stream(a.url, a.tasks, a.concurrency)
    else:
        out = asyncio.run(runs(a.url, a.tasks, a.concurrency))
    out["rss_mb"] = peak_rss_mb()
    out["python"] = sys.version.split()[0]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
