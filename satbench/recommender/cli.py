"""``satbench recommender``: serve the recommendations (FastAPI on uvicorn), bound to loopback by default.

Settings come from the environment (``SATBENCH_RECOMMENDER_*``), then the flags; the policy from
``--policy FILE`` (JSON or TOML). ``--prometheus-url none`` serves from run folders' records only.

Writes (``POST /runs``) need the write token: ``SATBENCH_RECOMMENDER_WRITE_TOKEN``, or ``--write-token-file``
(never a flag's value, which every user of the host can read); without either, one is made up at start and
printed once on stderr for the operator to hand to the load generators (the same variable).

The service answers only to its bind address, localhost and ``--allowed-host`` names (DNS rebinding), and
times out half-sent requests (``--request-timeout``) with its open connections bounded
(``recommender.http_server``).

The store's credentials and the fingerprint key come the same way, never as a flag's value:
``--prometheus-username`` with ``SATBENCH_RECOMMENDER_PROMETHEUS_PASSWORD`` or ``--prometheus-password-file``;
``SATBENCH_RECOMMENDER_FINGERPRINT_KEY`` or ``--fingerprint-key-file`` (docs/fleet-store.md, "Credentials").
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

__all__ = ["build_settings", "configure", "main"]


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--prometheus-url", help="Prometheus base URL ('none': records only)")
    parser.add_argument("--host", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, help="port to bind (default 9108)")
    parser.add_argument("--runs-dir", type=Path, help="folder of run folders (<run_id>/manifest.json)")
    parser.add_argument("--refresh-interval", type=float, dest="refresh_interval_s",
                        help="seconds between re-analyses (default 60)")
    parser.add_argument("--policy", type=Path, help="policy file (JSON or TOML)")
    parser.add_argument("--prometheus-header", action="append", default=None, metavar="NAME:VALUE",
                        dest="prometheus_header",
                        help="an HTTP header for every query (repeatable), e.g. 'X-Scope-OrgID: fleet' for Mimir")
    parser.add_argument("--validity-interval", type=float, dest="validity_interval_s",
                        help="seconds between checks of the answers against the live fingerprints "
                             "(default: the scrape interval)")
    parser.add_argument("--scrape-interval", type=float, dest="scrape_interval_s",
                        help="the Prometheus scrape interval of the load generator and exporters (default 1)")
    parser.add_argument("--write-token-file", type=Path, dest="write_token_file", metavar="PATH",
                        help="a file holding the bearer token writes need (default: "
                             "$SATBENCH_RECOMMENDER_WRITE_TOKEN, else one made up and printed at start)")
    parser.add_argument("--allowed-host", action="append", default=None, metavar="NAME", dest="allowed_hosts",
                        help="a name the service answers to besides its bind address and localhost (repeatable; "
                             "'*.example.org' for every name under it); any other Host header gets 421")
    parser.add_argument("--request-timeout", type=float, dest="request_timeout_s",
                        help="seconds a client may take to send a whole request (default 10)")
    parser.add_argument("--prometheus-username", dest="prometheus_username", metavar="USER",
                        help="basic-auth user for the store's queries (password: "
                             "$SATBENCH_RECOMMENDER_PROMETHEUS_PASSWORD or --prometheus-password-file)")
    parser.add_argument("--prometheus-password-file", type=Path, dest="prometheus_password_file", metavar="PATH",
                        help="a file holding the store's basic-auth password")
    parser.add_argument("--fingerprint-key-file", type=Path, dest="fingerprint_key_file", metavar="PATH",
                        help="a file holding the fleet key the exporters' fingerprint series are signed with "
                             "(default: $SATBENCH_RECOMMENDER_FINGERPRINT_KEY; unset: series are not verified)")
    parser.add_argument("--default-schema", choices=("v1", "v2"), dest="default_schema",
                        help="what GET /recommendations serves without ?schema= (default v2; v1 keeps an "
                             "unmigrated consumer working)")


def build_settings(args: argparse.Namespace) -> Any:
    from satbench.recommender.errors import BadInput
    from satbench.recommender.settings import RecommenderSettings, load_policy_file

    overrides: dict[str, Any] = {}
    for name in ("host", "port", "runs_dir", "refresh_interval_s", "validity_interval_s", "scrape_interval_s",
                 "default_schema", "allowed_hosts", "request_timeout_s", "prometheus_username"):
        value = getattr(args, name, None)
        if value is not None:
            overrides[name] = value
    url = getattr(args, "prometheus_url", None)
    if url is not None:
        overrides["prometheus_url"] = None if url.lower() == "none" else url
    headers = getattr(args, "prometheus_header", None)
    if headers:
        parsed = {}
        for item in headers:
            name, sep, value = item.partition(":")
            if not sep or not name.strip():
                raise BadInput(f"--prometheus-header {item!r}: write NAME: VALUE")
            parsed[name.strip()] = value.strip()
        overrides["prometheus_headers"] = parsed
    if getattr(args, "policy", None) is not None:
        overrides["policy"] = load_policy_file(args.policy)
    token_file = getattr(args, "write_token_file", None)
    if token_file is not None:
        try:
            token = token_file.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise BadInput(f"--write-token-file {token_file}: {exc.strerror or exc}") from exc
        if len(token) < 16:
            raise BadInput(f"--write-token-file {token_file}: a token of at least 16 characters is needed")
        overrides["write_token"] = token
    for flag, name in (("--prometheus-password-file", "prometheus_password"),
                       ("--fingerprint-key-file", "fingerprint_key")):
        path = getattr(args, f"{name}_file", None)
        if path is not None:
            overrides[name] = _secret_file(flag, path)
    return RecommenderSettings(**overrides)


def _secret_file(flag: str, path: Path) -> str:
    """A secret's text from a file (surrounding whitespace stripped), or ``BadInput`` naming the flag."""
    from satbench.core.config_files import read_secret_file
    from satbench.recommender.errors import BadInput

    try:
        return read_secret_file(flag, path)
    except ValueError as exc:
        raise BadInput(str(exc)) from exc


def main(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from satbench.core.config_files import format_validation_error
    from satbench.recommender.app import analysis_workers, create_app
    from satbench.recommender.errors import BadInput
    from satbench.recommender.http_server import serve
    from satbench.recommender.settings import RecommenderSettings

    try:
        settings = build_settings(args)
    except BadInput as exc:
        print(f"satbench recommender: {exc}", file=sys.stderr)
        return 2
    except ValidationError as exc:
        print(f"satbench recommender: {format_validation_error(exc, 'recommender', model=RecommenderSettings)}",
              file=sys.stderr)
        return 2
    with analysis_workers() as workers:  # analyses in their own process, off the serving loop and its GIL
        app = create_app(settings, analysis_executor=workers)
        if settings.write_token is None:
            print("satbench recommender: writes (POST /runs) need Authorization: Bearer "
                  f"{app.state.write_token} (made up at start; set SATBENCH_RECOMMENDER_WRITE_TOKEN to choose one)",
                  file=sys.stderr, flush=True)
        serve(app, settings)  # half-sent requests timed out, connections bounded (recommender.http_server)
    return 0
