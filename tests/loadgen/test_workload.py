from __future__ import annotations

import json
import random
import statistics

from loadgen.config import LengthDist, WorkloadConfig
from loadgen.workload import PromptText, UserWorkload, build_body, draw_length


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
    assert chat["stream_options"] == {"include_usage": True} and chat["model"] == "m"
    assert 60 <= len(chat["messages"][0]["content"].split()) <= 64
    llama = json.loads(build_body("llamacpp", "", spec, text, cfg, "u2"))
    assert llama["n_predict"] == 64 and "model" not in llama and llama["prompt"].startswith("u2 r0: ")
    comp = json.loads(build_body("openai-completions", "m", spec, text, cfg, "u2"))
    assert comp["max_tokens"] == 64 and isinstance(comp["prompt"], str)
