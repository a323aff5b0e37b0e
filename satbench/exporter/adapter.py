"""The seam between the collector and a runtime, and the concurrent, deadline-bound HTTP fetch they share.

A :class:`RuntimeAdapter` turns one runtime node into a :class:`~exporter.snapshot.RuntimeSnapshot` within a
time budget. The collector knows nothing else about the runtime, so a vLLM or SGLang adapter is one new
module plus one entry in :data:`exporter.flavours.ADAPTERS`; the collector does not change.

:class:`EndpointFetcher` gets several endpoints at once on a small thread pool and gives up on whatever has
not answered when the budget runs out (the abandoned request still ends by itself at its own HTTP timeout),
so a hung runtime costs a scrape at most its budget, never the scraper's timeout. A path may carry query
parameters (``(path, {"model": name})``), which httpx escapes.

Every fetch ends by its deadline and reads at most ``max_body_bytes`` (:mod:`exporter.bounded_http`: the
deadline clamps every socket operation, headers included, and the body is cut at the cap), so a runtime
that trickles bytes or sends a gigabyte of ``/slots`` costs one bounded fetch, its worker thread is free
again at the deadline, and :meth:`EndpointFetcher.close` returns within one scrape budget.

A runtime started with an API key (llama-server's ``--api-key``) answers ``/metrics``, ``/slots`` and ``/props``
401 without it (only ``/health``, ``/models`` and the web UI are public); ``api_key`` is then sent with every
read as ``Authorization: Bearer KEY``, which llama-server and the simulator both take. A 401 or 403 comes back
as a reply whose error says which of the two is wrong: no key given, or the one given refused.

``fetch`` takes ``model`` only from callers that were asked for one model of a router node (the exporter's
``/metrics?model=NAME``); an adapter of a runtime without router mode may leave it out of its signature.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Protocol

import httpx

from satbench.exporter.bounded_http import TooLarge, bounded_transport, deadline, read_bounded
from satbench.exporter.snapshot import EndpointReply, RuntimeSnapshot

__all__ = ["MAX_BODY_BYTES", "NO_KEY", "REFUSED_KEY", "Clock", "EndpointFetcher", "Path", "RuntimeAdapter"]

MAX_BODY_BYTES = 16 << 20  # a /slots of 256 busy slots is about 1 MB; a /metrics a few kB
# why a 401/403 came back: the exporter's settings that would mend it, never the key
NO_KEY = ("the runtime wants an API key; give the exporter its key (--runtime-api-key-file or "
          "$SATBENCH_EXPORTER_RUNTIME_API_KEY)")
REFUSED_KEY = ("the runtime refused the exporter's API key (--runtime-api-key-file or "
               "$SATBENCH_EXPORTER_RUNTIME_API_KEY)")

Clock = Callable[[], float]
Path = str | tuple[str, Mapping[str, str]]


class RuntimeAdapter(Protocol):
    """One runtime flavour. ``fetch`` must return within about ``budget_s`` and must not raise."""

    flavour: str

    def fetch(self, budget_s: float, model: str | None = None) -> RuntimeSnapshot: ...

    def close(self) -> None: ...


class EndpointFetcher:
    """GETs ``base_url + path`` for several endpoints concurrently, each bounded by one shared deadline and
    ``max_body_bytes``."""

    def __init__(
        self,
        base_url: str,
        client: httpx.Client | None = None,
        clock: Clock = time.monotonic,
        max_workers: int = 16,
        max_body_bytes: int = MAX_BODY_BYTES,
        api_key: str | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._headers = {"Accept-Encoding": "identity"}
        if api_key is not None:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self._refused = REFUSED_KEY if api_key is not None else NO_KEY
        self._own_client = client is None
        self._client = client if client is not None else httpx.Client(transport=bounded_transport())
        self._clock = clock
        self.max_body_bytes = max_body_bytes
        self._pool = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="exporter-fetch")

    def get(self, name: str, path: Path, timeout_s: float) -> EndpointReply:
        """One GET that ends within ``timeout_s`` in all (connect, headers and body) and reads at most
        ``max_body_bytes``; never raises. A connection the runtime closed before any answer byte is tried
        once more on a new one, within the same time: the keep-alive race (the runtime closed an idle
        connection just as the client reused it), which RFC 9110 9.2.2 lets a client retry for a GET."""
        start = self._clock()
        ends = time.monotonic() + timeout_s
        reply, unanswered = self._get_once(name, path, timeout_s, ends, start)
        if unanswered and time.monotonic() < ends:
            reply, _ = self._get_once(name, path, timeout_s, ends, start)
        return reply

    def _get_once(self, name: str, path: Path, timeout_s: float, ends: float,
                  start: float) -> tuple[EndpointReply, bool]:
        """The reply, and whether the connection was lost before the answer's head (worth one retry)."""
        route, params = (path, None) if isinstance(path, str) else path
        answered = False
        try:
            with deadline(ends), self._client.stream(
                    "GET", self.base_url + route, params=params,
                    timeout=httpx.Timeout(max(0.0, ends - time.monotonic())),
                    headers=self._headers) as resp:
                answered = True
                raw = read_bounded(resp, self.max_body_bytes)
                body = raw.decode(resp.encoding or "utf-8", errors="replace")
        except TooLarge as exc:
            return EndpointReply(name, None, "", self._clock() - start, f"refused: {exc}"), False
        except httpx.TimeoutException:
            return EndpointReply(name, None, "", self._clock() - start, f"timed out after {timeout_s:g}s"), False
        except httpx.HTTPError as exc:
            lost = not answered and isinstance(exc, (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError))
            return EndpointReply(name, None, "", self._clock() - start, f"{type(exc).__name__}: {exc}"[:200]), lost
        except Exception as exc:  # a transport may raise anything; a scrape must not
            return EndpointReply(name, None, "", self._clock() - start, f"{type(exc).__name__}: {exc}"[:200]), False
        refused = self._refused if resp.status_code in (401, 403) else None
        return EndpointReply(name, resp.status_code, body, self._clock() - start,
                             None if refused is None else f"HTTP {resp.status_code}: {refused}"), False

    def fetch_many(self, paths: Mapping[str, Path], budget_s: float) -> dict[str, EndpointReply]:
        """``name -> reply`` for every ``name -> path``; unanswered by the deadline -> a timed-out reply."""
        start = self._clock()
        if budget_s <= 0:
            return {name: EndpointReply(name, None, "", 0.0, "no time left in the scrape budget") for name in paths}
        futures: dict[str, Future[EndpointReply]] = {
            name: self._pool.submit(self.get, name, path, budget_s) for name, path in paths.items()
        }
        wait(list(futures.values()), timeout=budget_s)
        replies: dict[str, EndpointReply] = {}
        for name, future in futures.items():
            if future.done():
                replies[name] = future.result()
            else:
                future.cancel()
                elapsed = self._clock() - start
                replies[name] = EndpointReply(name, None, "", elapsed, f"no answer within {budget_s:g}s")
        return replies

    def close(self) -> None:
        """Waits for requests in flight (each ends by its own deadline), then closes the client."""
        self._pool.shutdown(wait=True, cancel_futures=True)
        if self._own_client:
            self._client.close()
