"""A stand-in llama-server process that answers with recorded payloads, standard library only.

Run as ``<python> fake_llama_server.py FIXTURE_DIR PORT [llama-server flags...]`` with ``argv[0]`` set to
``llama-server`` (``subprocess.Popen(executable=...)``), so the process looks to the exporter as a real one
does: its command line and environment are llama-server's, and ``/proc/PID/exe`` is whatever interpreter
binary started it. Tests run it under two copies of the interpreter that differ by a few bytes: two builds
that answer one build string. The flags are not read: ``/props`` and ``/slots`` are the recorded ones.
"""

from __future__ import annotations

import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROUTES = {"/health": "health_idle.json", "/props": "props.json", "/slots": "slots_idle.json",
          "/metrics": "metrics_idle.txt", "/v1/models": "models.json"}


def main() -> None:
    folder, port = Path(sys.argv[1]), int(sys.argv[2])
    bodies = {path: (folder / name).read_bytes() for path, name in ROUTES.items() if (folder / name).exists()}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = bodies.get(self.path.split("?")[0])
            self.send_response(200 if body is not None else 404)
            body = body if body is not None else b'{"error":{"code":404,"message":"File Not Found"}}'
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            """Quiet."""

    ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()


if __name__ == "__main__":
    main()
