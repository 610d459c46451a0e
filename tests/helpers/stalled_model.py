"""A stand-in for the local model's server that stalls: it is ready (``GET /v1/models`` answers)
but accepts every completion request and never answers it.

    python tests/helpers/stalled_model.py --port N [--pid-file FILE]

It runs until killed (``LocalModelServer.stop`` SIGTERMs its process group).
"""

from __future__ import annotations

import argparse
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

_NEVER = threading.Event()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        body = b'{"object": "list", "data": [{"id": "smollm2", "object": "model"}]}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        _NEVER.wait()  # accepted, never answered


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--pid-file")
    args = parser.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", args.port), _Handler)
    server.daemon_threads = True
    if args.pid_file:
        Path(args.pid_file).write_text(str(os.getpid()))
    server.serve_forever()


if __name__ == "__main__":
    main()
