"""The token utility routes of the simulator's llama-server edge: ``/tokenize``, ``/detokenize``,
``/apply-template``, ``/chat/completions/input_tokens`` and the embeddings (``/embedding(s)``, ``--embeddings``).

They share the simulator's tokenizer and chat template (``simulator.tokens``, ``simulator.requests``) with the
generation routes but none of their streaming: each reads a JSON body and answers one JSON document.
``SimulatorApp`` holds one ``TokenRoutes`` (``app.tokens``); a router node proxies to it by that name.
Embeddings are prefilled by the engine (they take slots and time, as llama-server's do) and answered with a
deterministic unit vector per input: the numbers mean nothing, their cost does.
"""

from __future__ import annotations

import math
import random
import uuid
from collections.abc import Sequence

from aiohttp import web

from satbench.simulator.engine import ContextLimitError, RequestSpec
from satbench.simulator.requests import RequestError, chat_prompt_text, check_messages, prompt_ids
from satbench.simulator.runtime import RealTimeRuntime, Stream
from satbench.simulator.stream_routes import error_response, json_body, json_response, wait_finished
from satbench.simulator.tokens import BOS, BOS_ID, ids_digest, piece_of, tokenize_pieces

__all__ = ["EMBEDDINGS_501", "TokenRoutes"]

EMBEDDINGS_501 = "This server does not support embeddings. Start it with `--embeddings`"


class TokenRoutes:
    """The routes above for one model's engine (``runtime``), served as ``model_id``."""

    def __init__(self, runtime: RealTimeRuntime, *, model_id: str, n_embd: int, embeddings_on: bool) -> None:
        self.runtime = runtime
        self.model_id = model_id
        self.n_embd = n_embd
        self.embeddings_on = embeddings_on

    async def embeddings(self, request: web.Request) -> web.Response:
        if not self.embeddings_on:
            return error_response(501, EMBEDDINGS_501, "not_supported_error")
        body = await json_body(request)
        raw = body.get("input", body.get("content"))
        try:
            items = [raw] if isinstance(raw, str) or (isinstance(raw, list) and raw and isinstance(raw[0], int)) \
                else list(raw or [])
            if not items:
                raise RequestError("\"input\" must be a string or a non-empty list")
            all_ids = [prompt_ids(x) for x in items]
        except (RequestError, TypeError) as exc:
            return error_response(400, str(exc), "invalid_request_error")
        rid = request.headers.get("X-Request-ID") or uuid.uuid4().hex
        streams: list[Stream] = []
        try:
            try:
                for i, ids in enumerate(all_ids):
                    spec = RequestSpec(f"{rid}-{i}", len(ids), 0, ignore_eos=True, prompt_ids=ids,
                                       cache_prompt=False)
                    streams.append(self.runtime.submit(spec))
            except ContextLimitError as exc:
                return error_response(400, str(exc), "exceed_context_size_error", n_prompt_tokens=exc.n_prompt_tokens,
                              n_ctx=exc.n_ctx)
            for s in streams:
                if not await wait_finished(request, s):
                    return error_response(499, "the client closed the connection", "cancelled")
        except ConnectionResetError:
            return error_response(503, "simulator shutting down", "unavailable_error")
        finally:
            for s in streams:
                self.runtime.cancel(s)
        n = sum(len(ids) for ids in all_ids)
        data = [{"object": "embedding", "index": i, "embedding": _embedding(ids, self.n_embd)}
                for i, ids in enumerate(all_ids)]
        return json_response({"model": self.model_id, "object": "list",
                              "usage": {"prompt_tokens": n, "total_tokens": n}, "data": data})

    async def tokenize(self, request: web.Request) -> web.Response:
        body = await json_body(request)
        pieces = tokenize_pieces(str(body.get("content", "")))
        if body.get("add_special") is True:
            pieces.insert(0, (BOS_ID, BOS))
        if body.get("with_pieces") is True:
            return json_response({"tokens": [{"id": i, "piece": p} for i, p in pieces]})
        return json_response({"tokens": [i for i, _ in pieces]})

    async def detokenize(self, request: web.Request) -> web.Response:
        body = await json_body(request)
        tokens = body.get("tokens", [])
        if not isinstance(tokens, list) or not all(isinstance(t, int) for t in tokens):
            return error_response(400, "\"tokens\" must be a list of token ids", "invalid_request_error")
        return json_response({"content": "".join(piece_of(t) for t in tokens)})

    async def apply_template(self, request: web.Request) -> web.Response:
        body = await json_body(request)
        try:
            check_messages(body.get("messages"))
            return json_response({"prompt": chat_prompt_text(body)})
        except RequestError as exc:
            return error_response(400, str(exc), "invalid_request_error")

    async def input_tokens(self, request: web.Request) -> web.Response:
        body = await json_body(request)
        try:
            check_messages(body.get("messages"))
            n = len(prompt_ids(chat_prompt_text(body)))
        except RequestError as exc:
            return error_response(400, str(exc), "invalid_request_error")
        return json_response({"input_tokens": n, "object": "response.input_tokens"})


def _embedding(ids: Sequence[int], n: int) -> list[float]:
    """A deterministic unit vector for a token sequence (a stand-in: it means nothing)."""
    rng = random.Random(ids_digest(ids))
    v = [rng.gauss(0.0, 1.0) for _ in range(n)]
    norm = math.sqrt(sum(x * x for x in v)) or 1.0
    return [round(x / norm, 6) for x in v]
