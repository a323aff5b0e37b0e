"""One generation request's tasks (a prompt, and a choice of it, each its own engine stream) and the answer a
client that did not ask to stream gets once every task has finished: llama-server's ``/completion`` object (or
list, one a prompt), or the OpenAI text and chat bodies (``payloads.ChatIds``), with ``__verbose`` where asked.
The streamed answer is ``simulator.server``'s, event by event.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from satbench.simulator.payloads import ChatIds, completion_final, pick_fields
from satbench.simulator.runtime import Stream
from satbench.simulator.tokens import BOS

__all__ = ["GenerationTask", "whole_body"]


@dataclass
class GenerationTask:
    """One generation task of a request: its prompt and what the engine made of it."""

    prompt_text: str
    ids: tuple[int, ...]
    index: int
    stream: Stream | None = None


def whole_body(kind: str, body: dict[str, Any], tasks: Sequence[GenerationTask], ids: ChatIds, model_id: str,
               verbose: bool) -> Any:
    """The non-streamed answer of ``tasks`` (each finished) to a ``kind`` request (``native``, ``text``,
    ``chat``); ``verbose``: the server's ``--verbose``, which adds ``__verbose`` as a body's ``verbose`` does."""
    reqs = [t.stream.request for t in tasks if t.stream is not None]
    if kind == "native":
        fields = body.get("response_fields")
        outs = []
        for t, req in zip(tasks, reqs, strict=True):
            out = completion_final(req, model_id, t.prompt_text, False, index=t.index,
                                   return_tokens=bool(body.get("return_tokens", False)))
            if isinstance(fields, list) and fields:
                out = pick_fields(out, fields)
            outs.append(out)
        return outs if len(outs) > 1 else outs[0]
    out = ids.text_final(reqs, False) if kind == "text" else ids.chat_body(reqs)
    if verbose or body.get("verbose") is True:
        out["__verbose"] = {"prompt": f"{BOS} {tasks[0].prompt_text}", "content": out.get("choices", [{}])[0],
                            "generation_settings": reqs[0].spec.params}
    return out
