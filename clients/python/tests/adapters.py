"""Both clients behind one blocking surface, so that the contract cases
run once for each: AsyncClient's calls are run on an event loop of the
adapter's own thread, its async iterators pulled one item at a time."""

from __future__ import annotations

import asyncio
import threading
from typing import Any, AsyncIterator, Callable, Iterator

import svc_client


class SyncOverAsync:
    """An AsyncClient with Client's blocking calls."""

    def __init__(self, url: str, **kw: Any) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="svc-test-loop", daemon=True)
        self._thread.start()

        async def make() -> svc_client.AsyncClient:
            return svc_client.AsyncClient(url, **kw)

        self._c = self._wait(make())

    def _wait(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def _iter(self, agen: AsyncIterator[Any]) -> Iterator[Any]:
        try:
            while True:
                try:
                    yield self._wait(agen.__anext__())
                except StopAsyncIteration:
                    return
        finally:
            aclose = getattr(agen, "aclose", None)
            if aclose is not None:
                self._wait(aclose())

    def close(self) -> None:
        self._wait(self._c.aclose())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()

    def __getattr__(self, name: str) -> Callable[..., Any]:
        fn = getattr(self._c, name)

        def call(*a: Any, **kw: Any) -> Any:
            if name in ("gather_stream", "run_events", "stream_events", "run_stream"):
                return self._iter(fn(*a, **kw))
            if name == "run_handle":
                return HandleOverAsync(self, fn(*a, **kw))
            out = self._wait(fn(*a, **kw))
            if isinstance(out, svc_client.AsyncRunHandle):
                return HandleOverAsync(self, out)
            return out

        return call


class HandleOverAsync:
    def __init__(self, owner: SyncOverAsync, h: svc_client.AsyncRunHandle) -> None:
        self._o = owner
        self._h = h
        self.run_id = h.run_id
        self.target = h.target

    def status(self, **kw: Any) -> Any:
        return self._o._wait(self._h.status(**kw))

    def result(self, **kw: Any) -> Any:
        return self._o._wait(self._h.result(**kw))

    def resume(self, *a: Any, **kw: Any) -> Any:
        return self._o._wait(self._h.resume(*a, **kw))

    def cancel(self, **kw: Any) -> Any:
        return self._o._wait(self._h.cancel(**kw))

    def events(self, **kw: Any) -> Iterator[Any]:
        return self._o._iter(self._h.events(**kw))
