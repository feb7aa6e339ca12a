"""``stallwatch exporter [DB ...]``: serve a node's stallwatch files to Prometheus at ``/metrics``."""

from __future__ import annotations

import argparse
import errno
import sys
from typing import Any

from collector.cli.args import EXIT_USAGE, positive_float
from collector.store.schema import default_db_path


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "exporter",
        help="serve this node's stallwatch files as Prometheus metrics (reads them only, while they are written)",
        description="A node-level Prometheus exporter, like dcgm-exporter: follows stallwatch files read-only "
        "and serves every live run's metrics at http://HOST:PORT/metrics. Each DB is a file (it may not "
        "exist yet), a directory (its *.sqlite files) or a quoted glob; all are re-read on every scrape. "
        "The metrics are documented in docs/metrics.md.",
    )
    parser.add_argument(
        "db", nargs="*", help="stallwatch files, directories or globs (default: $STALLWATCH_DB or %(default)s)"
    )
    parser.add_argument("--port", type=_port, default=9464, help="TCP port (default %(default)s)")
    parser.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (default %(default)s; 0.0.0.0 for a remote Prometheus)",
    )
    parser.add_argument(
        "--grace-s", type=positive_float, default=300.0, help="export an ended run this long (default %(default)g s)"
    )
    parser.add_argument(
        "--window-s", type=positive_float, default=60.0, help="window of the stall ratio (default %(default)g s)"
    )
    parser.set_defaults(handler=_main)


def _port(text: str) -> int:
    if not text.isdigit() or not 0 <= int(text) <= 65535:
        raise argparse.ArgumentTypeError(f"must be a port number 0-65535, got {text!r}")
    return int(text)


def _main(args: argparse.Namespace) -> int:
    try:
        from collector.export.server import ExporterServer
    except ImportError as exc:
        print(
            f"stallwatch: the exporter needs prometheus_client ({exc}): pip install 'stallwatch[exporter]'",
            file=sys.stderr,
        )
        return EXIT_USAGE
    from collector.export.sources import Exporter

    exporter = Exporter(args.db or [default_db_path()], grace_s=args.grace_s, window_s=args.window_s)
    try:
        server = ExporterServer(exporter, args.host, args.port)
    except OSError as exc:
        reason = "address already in use" if exc.errno == errno.EADDRINUSE else (exc.strerror or str(exc))
        print(
            f"stallwatch: cannot listen on {args.host}:{args.port}: {reason} (choose another --port)", file=sys.stderr
        )
        return EXIT_USAGE
    first = exporter.refresh()  # the catch-up of long runs happens here, not in the first scrape
    print(
        f"stallwatch exporter: {len(first.runs)} run(s) from {sum(first.files.values())} file(s) "
        f"on {server.url} ({first.seconds:.2f} s to catch up)",
        flush=True,
    )
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.shutdown()
    return 0
