from __future__ import annotations

import json
import random
import re
import statistics

import pytest

from satbench.loadgen.config import LengthDist, WorkloadConfig
from satbench.loadgen.workload import PromptText, UserWorkload, build_body, draw_length


def specs(cfg: WorkloadConfig, user: int, n: int = 50) -> list:
    wl = UserWorkload(cfg, "dense", 4, user)
    return [wl.next_spec() for _ in range(n)]


def test_same_seed_same_requests_different_seed_or_user_differs() -> None:
    cfg = WorkloadConfig(seed=3, prompt_tokens=LengthDist(kind="uniform", low=10, high=500),
                         output_tokens=LengthDist(kind="lognormal", median=64, sigma=0.7, low=1, high=1000),
                         prefill_probe_share=0.2)
    assert specs(cfg, 0) == specs(cfg, 0)
    assert specs(cfg, 0) != specs(cfg, 1)
    assert specs(cfg, 0) != specs(cfg.model_copy(update={"seed": 4}), 0)


def test_distributions_stay_in_bounds_and_fixed_is_fixed() -> None:
    rng = random.Random(1)
    uni = [draw_length(LengthDist(kind="uniform", low=5, high=9), rng) for _ in range(500)]
    assert min(uni) == 5 and max(uni) == 9
    logn = [draw_length(LengthDist(kind="lognormal", median=100, sigma=0.5, low=20, high=300), rng)
            for _ in range(2000)]
    assert min(logn) >= 20 and max(logn) <= 300
    assert 85 <= statistics.median(logn) <= 115
    assert {draw_length(LengthDist(kind="fixed", value=33), rng) for _ in range(10)} == {33}


def test_prefill_probe_share_and_length() -> None:
    cfg = WorkloadConfig(prefill_probe_share=0.25, prefill_probe_tokens=900)
    drawn = specs(cfg, 0, 2000)
    probes = [s for s in drawn if s.probe]
    assert 0.2 < len(probes) / len(drawn) < 0.3
    assert {s.prompt_tokens for s in probes} == {900}
    assert not any(s.probe for s in specs(WorkloadConfig(), 0, 200))


def test_prompt_text_has_the_asked_word_count_and_bodies_per_flavour() -> None:
    text = PromptText(1000)
    assert len(text.prompt(250).split()) == 250
    assert len(text.prompt(5000).split()) == 1000
    cfg = WorkloadConfig()
    spec = specs(cfg, 2, 1)[0]
    chat = json.loads(build_body("openai-chat", "m", spec, text, cfg, "u2"))
    assert chat["max_tokens"] == 64 and chat["stream"] and chat["ignore_eos"] and chat["user"] == "u2"
    assert chat["stream_options"] == {"include_usage": True, "continuous_usage_stats": True} and chat["model"] == "m"
    assert 60 <= len(chat["messages"][0]["content"].split()) <= 64
    llama = json.loads(build_body("llamacpp", "", spec, text, cfg, "u2"))
    assert llama["n_predict"] == 64 and "model" not in llama and llama["prompt"].startswith(f"{spec.head} u2: ")
    comp = json.loads(build_body("openai-completions", "m", spec, text, cfg, "u2"))
    assert comp["max_tokens"] == 64 and isinstance(comp["prompt"], str)


SHARED = {"share": 0.5, "prefixes": 4, "tokens": 100}


def test_shared_prefixes_are_seeded_and_open_the_configured_share() -> None:
    cfg = WorkloadConfig(seed=2, prompt_tokens=LengthDist(value=300), shared_prefix=SHARED)
    drawn = specs(cfg, 0, 2000)
    assert drawn == specs(cfg, 0, 2000)
    opened = [s.prefix for s in drawn if s.prefix is not None]
    assert 0.45 < len(opened) / len(drawn) < 0.55 and set(opened) == {0, 1, 2, 3}
    assert [s.prompt_tokens for s in drawn] == [s.prompt_tokens for s in specs(WorkloadConfig(seed=2, prompt_tokens=
                                                                                LengthDist(value=300)), 0, 2000)]
    text = PromptText(400, seed=2)
    bodies = [json.loads(build_body("llamacpp", "", s, text, cfg, "u0"))["prompt"] for s in drawn[:200]]
    prefixes = {text.shared_prefix(k, 100) for k in range(4)}
    assert len(prefixes) == 4 and all(len(p.split()) == 100 for p in prefixes)
    for spec, prompt in zip(drawn, bodies, strict=False):
        if spec.prefix is None:
            assert prompt.startswith(f"{spec.head} u0: ") and not any(prompt.startswith(p) for p in prefixes)
        else:  # the prefix, then the request's own head and text: the drawn length in all
            head = text.shared_prefix(spec.prefix, 100) + f" {spec.head} u0: "
            assert prompt.startswith(head) and len(prompt.split()) == 300 - 2  # BOS and ':' are tokens
    assert PromptText(400, seed=2).shared_prefix(1, 100) == text.shared_prefix(1, 100)
    assert PromptText(400, seed=3).shared_prefix(1, 100) != text.shared_prefix(1, 100)
    chat = json.loads(build_body("openai-chat", "m", next(s for s in drawn if s.prefix == 2), text, cfg, "u0"))
    assert chat["messages"][0] == {"role": "system", "content": text.shared_prefix(2, 100)}
    assert chat["messages"][1]["role"] == "user" and len(chat["messages"]) == 2


HEAD = re.compile(r"[0-9a-f]{8} u1: ")  # a request's own text opens with its head (loadgen.workload)


def converse(cfg: WorkloadConfig, answers: list[str | None], api: str = "openai-chat") -> list[dict]:
    """The bodies one user sends when its requests get ``answers`` (None: the request failed)."""
    wl, text, out = UserWorkload(cfg, "dense", 2, 1), PromptText(200, cfg.seed), []
    for answer in answers:
        spec = wl.next_spec()
        out.append(json.loads(build_body(api, "m", spec, text, cfg, "u1")))  # type: ignore[arg-type]
        wl.answered(spec, answer)
    return out


def test_conversation_turns_extend_the_previous_exchange_then_reset() -> None:
    cfg = WorkloadConfig(seed=5, prompt_tokens=LengthDist(value=20), conversation={"turns": 3, "start": "fresh"})
    bodies = converse(cfg, [" a1", " a2", " a3", " b1", None, " c1"])
    lengths = [len(b["messages"]) for b in bodies]
    assert lengths == [1, 3, 5, 1, 3, 1]  # 3 turns, a new conversation, one cut short by a failure
    for earlier, later in ((bodies[0], bodies[1]), (bodies[1], bodies[2]), (bodies[3], bodies[4])):
        assert later["messages"][:len(earlier["messages"])] == earlier["messages"]  # the exchange repeated
    assert bodies[2]["messages"][3] == {"role": "assistant", "content": " a2"}
    assert HEAD.match(bodies[2]["messages"][4]["content"])  # a new message of the drawn length
    assert len(bodies[2]["messages"][4]["content"].split()) == 20 - 2  # BOS and ":" are tokens, not words
    assert converse(cfg, [" a1", " a2", " a3", " b1", None, " c1"]) == bodies  # seeded: same prompts
    prompts = [b["prompt"] for b in converse(cfg, [" a1", " a2", " a3", " b1"], "llamacpp")]
    assert prompts[1] == prompts[0] + " a1\n" + bodies[1]["messages"][2]["content"]
    assert prompts[2].startswith(prompts[1] + " a2\n") and HEAD.match(prompts[3])


def test_a_conversation_keeps_its_opening_prefix() -> None:
    cfg = WorkloadConfig(prompt_tokens=LengthDist(value=120), conversation={"turns": 4, "start": "fresh"},
                         shared_prefix={"share": 1.0, "prefixes": 1, "tokens": 100})
    bodies = converse(cfg, [" x", " y", " z"])
    assert [b["messages"][0]["role"] for b in bodies] == ["system"] * 3
    assert bodies[2]["messages"][:4] == bodies[1]["messages"]
    prompts = [b["prompt"] for b in converse(cfg, [" x", " y"], "openai-completions")]
    assert prompts[1].startswith(prompts[0] + " x\n") and HEAD.match(prompts[1][len(prompts[0]) + 3:])
    assert len(prompts[1].split()) == len(prompts[0].split()) + 1 + 120 - 2  # the new message is not cut


def test_a_steady_start_opens_each_user_at_a_stationary_depth() -> None:
    """With ``start = "steady"`` each user's first request is at a turn drawn uniformly from 1..N with its earlier
    exchanges synthesized, so the depths of the first requests (and of every request after them) are the
    stationary mix whatever the rung: over 400 users the mean opening depth is (N + 1) / 2 within noise."""
    cfg = WorkloadConfig(seed=1, prompt_tokens=LengthDist(value=20), output_tokens=LengthDist(value=8),
                         conversation={"turns": 4})
    text = PromptText(200, cfg.seed)
    depths = []
    for user in range(400):
        spec = UserWorkload(cfg, "dense", 16, user, text).next_spec()
        depths.append(spec.turn)
        assert all(len(answer.split()) == 8 for _, answer in spec.history)  # answers at the drawn length
    assert set(depths) == {1, 2, 3, 4}
    assert abs(sum(depths) / len(depths) - 2.5) < 0.2  # sd of the mean: 1.1 / sqrt(400) = 0.06
    body = json.loads(build_body("openai-chat", "m", spec, text, cfg, "u399"))
    assert len(body["messages"]) == 2 * spec.turn - 1


def test_cache_workload_settings_are_checked_naming_the_setting() -> None:
    from satbench.loadgen.config import ConfigError, load_config

    for overrides, named in [
        ({"workload.shared_prefix": {"share": 1.5}}, "workload.shared_prefix.share"),
        ({"workload.shared_prefix": {"prefixes": 0}}, "workload.shared_prefix.prefixes"),
        ({"workload.shared_prefix": {"tokens": 64}}, "workload.shared_prefix.tokens: 64 leaves no unique part"),
        ({"workload.shared_prefix": {"size": 3}}, "workload.shared_prefix.size: unknown setting"),
        ({"workload.conversation": {"turns": 0}}, "workload.conversation.turns"),
    ]:
        with pytest.raises(ConfigError) as err:
            load_config(None, overrides)
        assert named in str(err.value) and "\n" not in str(err.value)
    ok = load_config(None, {"workload.shared_prefix": {}, "workload.conversation": {}, "workload.prompt_tokens":
                            {"value": 300}})
    assert (ok.workload.shared_prefix.tokens, ok.workload.conversation.turns) == (256, 4)  # type: ignore[union-attr]
