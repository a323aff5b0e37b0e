"""The API flavours a lane may speak, and the route each one streams from.

Three flavours cover llama-server and the OpenAI-compatible gateways in front of it: ``llamacpp``
(``POST /completion``, llama-server's native body and ``timings``), ``openai-completions`` and
``openai-chat``. The load generator builds its requests from them, the SSE parser decides what a content
token is per flavour, and the exporter's relay mode tells which route a request streams on. ``_PATHS`` is the
one table of them: :data:`API_FLAVOURS` (every command line's ``--api`` choices) is read from it, and a test
holds the ``ApiFlavour`` literal (what a config validates) to it.
"""

from __future__ import annotations

from typing import Literal

__all__ = ["API_FLAVOURS", "ApiFlavour", "endpoint_path"]

ApiFlavour = Literal["openai-chat", "openai-completions", "llamacpp"]

_PATHS: dict[ApiFlavour, str] = {
    "openai-chat": "/v1/chat/completions",
    "openai-completions": "/v1/completions",
    "llamacpp": "/completion",
}
API_FLAVOURS: tuple[ApiFlavour, ...] = tuple(_PATHS)


def endpoint_path(api: ApiFlavour) -> str:
    """The streaming route of ``api`` (``/completion`` for llama-server's native flavour)."""
    return _PATHS[api]
