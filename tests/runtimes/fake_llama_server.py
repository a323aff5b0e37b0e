"""A stand-in for llama-server's start-up behaviour, for launcher tests: listens at once, answers /health 503
("Loading model") for FAKE_LOADING_S seconds, then 200; serves /props. FAKE_EXIT makes it die at start,
FAKE_IGNORE_TERM makes it ignore SIGTERM."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("-m")
    parser.add_argument("--host")
    parser.add_argument("--port", type=int)
    parser.add_argument("--parallel", type=int)
    args, _ = parser.parse_known_args()
    print("argv:", json.dumps(sys.argv[1:]), flush=True)
    if os.environ.get("FAKE_EXIT"):
        print("error: failed to load model", flush=True)
        raise SystemExit(int(os.environ["FAKE_EXIT"]))
    if os.environ.get("FAKE_IGNORE_TERM"):
        signal.signal(signal.SIGTERM, lambda *_: print("ignoring SIGTERM", flush=True))
    ready_at = time.monotonic() + float(os.environ.get("FAKE_LOADING_S", "0"))

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/health":
                loading = time.monotonic() < ready_at
                body = {"error": {"message": "Loading model", "code": 503}} if loading else {"status": "ok"}
                self._send(503 if loading else 200, body)
            elif self.path == "/props":
                self._send(200, {"build_info": "b0-fake", "total_slots": args.parallel, "model_path": args.m,
                                 "default_generation_settings": {"n_ctx": 1024}})
            else:
                self._send(404, {"error": {"message": "File Not Found", "code": 404}})

        def _send(self, status: int, body: object) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *a: object) -> None:
            return

    ThreadingHTTPServer((args.host, args.port), Handler).serve_forever()


if __name__ == "__main__":
    main()
