"""The stand-in tokenizer gives back the text it tokenized, even where two pieces' CRC ids clash: a process
that has met many pieces (a session's unique prompt tags) must not detokenize one word as another."""

from __future__ import annotations

import zlib

from satbench.simulator.tokens import detokenize, tokenize


def test_two_pieces_whose_crc_ids_clash_each_keep_their_own_id() -> None:
    # "50ac440a" (a request tag a prompt may carry) and " capital" share CRC32 % 30000; the tag seen first
    clash = ("50ac440a", " capital")
    assert len({zlib.crc32(p.encode()) % 30000 for p in clash}) == 1
    first = tokenize("x-50ac440a")
    text = "What is the capital of France ?"
    ids = tokenize(text)
    assert detokenize(ids) == text
    assert detokenize(first) == "x-50ac440a"
    assert tokenize(text) == ids  # stable within the process
    assert not set(first) & set(ids)
