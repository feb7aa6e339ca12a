"""The exporter's HTTP side: ``/metrics`` in Prometheus or OpenMetrics text, served by prometheus_client."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, ProcessCollector, make_wsgi_app

from collector.export.metrics import StallwatchCollector
from collector.export.sources import Exporter, Refresh

INDEX = b"stallwatch exporter: metrics at /metrics\n"


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True
    allow_reuse_address = True  # a restart may bind while the old socket sits in TIME_WAIT


class _Server6(_Server):
    address_family = socket.AF_INET6


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass  # no line per scrape


def registry_for(exporter: Exporter, on_refresh: Callable[[Refresh], None] | None = None) -> CollectorRegistry:
    """A registry with the stallwatch families and the exporter's own process metrics, nothing else."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StallwatchCollector(exporter, on_refresh))
    ProcessCollector(registry=registry)
    return registry


class ExporterServer:
    """Binds at once (an address in use raises ``OSError`` here), then serves until ``shutdown``."""

    def __init__(self, exporter: Exporter, host: str = "127.0.0.1", port: int = 9464) -> None:
        metrics = make_wsgi_app(registry_for(exporter))

        def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
            if environ.get("PATH_INFO") in ("", "/"):
                start_response("200 OK", [("Content-Type", "text/plain; charset=utf-8")])
                return [INDEX]
            if environ.get("PATH_INFO") != "/metrics":
                start_response("404 Not Found", [("Content-Type", "text/plain; charset=utf-8")])
                return [b"not found: try /metrics\n"]
            return metrics(environ, start_response)

        server_class = _Server6 if ":" in host else _Server
        self.httpd = make_server(host, port, app, server_class=server_class, handler_class=_QuietHandler)
        self.host = host
        self.port = int(self.httpd.server_port)
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    def serve_forever(self) -> None:
        self.httpd.serve_forever(poll_interval=0.5)

    def start(self) -> ExporterServer:
        """Serve from a background thread (tests, benchmarks)."""
        self._thread = threading.Thread(target=self.serve_forever, name="stallwatch-exporter", daemon=True)
        self._thread.start()
        return self

    def shutdown(self) -> None:
        """Stop serving and close the socket; idempotent."""
        if self._thread is not None:
            self.httpd.shutdown()
            self._thread.join(timeout=5.0)
            self._thread = None
        self.httpd.server_close()
