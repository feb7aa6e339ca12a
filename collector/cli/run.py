"""``python -m collector run script.py [args...]``: record every DataLoader of an unmodified script."""

from __future__ import annotations

import argparse
import atexit
import os
import runpy
import signal
import socket
import sys
import time
from types import TracebackType
from typing import Any, TextIO

from collector.cli.args import add_db_option
from collector.errors import StallwatchError
from collector.sample.sampler import DEFAULT_GPU_HZ, DEFAULT_HOST_HZ, Rates
from collector.store.fold import DEFAULT_KEEP_BATCHES

EXIT_EXCEPTION = 1  # what Python itself exits with on an uncaught exception
SIGINT_EXIT = 130  # what a shell reports for a process ended by Ctrl-C


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "run",
        help="run a training script unchanged, recording every DataLoader in it, then print the verdict",
        description="Run SCRIPT (or -m MODULE) as Python would, with every DataLoader iteration recorded "
        "as if wrapped with watch(): one run per DataLoader, named after the file:line that created it. "
        "The script's arguments, output, exceptions and exit code pass through unchanged; stallwatch "
        "prints its verdict on stderr when the script ends. Options go before the script.",
        usage="python -m collector run [--db DB] [--gpu-hz HZ] [--host-hz HZ] [--keep-batches N] [--tune [N]]"
        " (SCRIPT | -m MODULE) [ARGS ...]",
    )
    add_db_option(parser)
    parser.add_argument("--gpu-hz", type=float, default=DEFAULT_GPU_HZ, help="GPU samples per second (0: off)")
    parser.add_argument(
        "--host-hz", type=float, default=DEFAULT_HOST_HZ, help="host and process samples per second (0: off)"
    )
    parser.add_argument(
        "--keep-batches",
        type=_keep,
        default=DEFAULT_KEEP_BATCHES,
        metavar="N",
        help=f"per-batch rows kept: the newest N batches of each run and its first epoch; older ones are "
        f"folded into per-second rollups (default {DEFAULT_KEEP_BATCHES:,}; 'all' keeps every row)",
    )
    parser.add_argument("--no-verdict", action="store_true", help="do not print the verdict when the script ends")
    parser.add_argument(
        "--tune",
        nargs="?",
        const=True,
        default=False,
        type=_every,
        metavar="N",
        help="tune each DataLoader live: try the model's advice an epoch at a time, keep what measures faster "
        "(at most one epoch in N on a trial once a gain is kept; 4 by default). See docs/tuning.md",
    )
    parser.add_argument(
        "-m", dest="module", nargs=argparse.REMAINDER, metavar="MODULE", help="run a module, as python -m does"
    )
    parser.add_argument("argv", nargs=argparse.REMAINDER, metavar="SCRIPT ARGS", help="the script and its arguments")
    parser.set_defaults(handler=_main)


def _keep(text: str) -> int | None:
    """--keep-batches: a whole number, or 'all' (every batch stays a row)."""
    if text.strip().lower() in ("all", "none"):
        return None
    try:
        return int(text.replace(",", "").replace("_", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"a whole number of batches or 'all', got {text!r}") from None


def _every(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--tune takes an integer N >= 2, got {text!r}") from None
    if value < 2:
        raise argparse.ArgumentTypeError(f"--tune takes an integer N >= 2, got {value}")
    return value


def _main(args: argparse.Namespace) -> int:
    from collector.record.autowatch import AutoWatch
    from collector.record.childboot import child_environment, set_environment
    from collector.record.runinfo import job_start
    from collector.tune.every import tune_every
    from collector.verdict.helper import start_helper
    from collector.writer.channel import prestart

    if args.module is not None:
        if not args.module:
            raise StallwatchError("-m needs a module name, e.g. python -m collector run -m mypackage.train")
        target, script_args, is_module = args.module[0], args.module[1:], True
    elif args.argv:
        target, script_args, is_module = args.argv[0], args.argv[1:], False
        if not os.path.isfile(target):
            raise StallwatchError(f"no file {target}: give the training script, e.g. python -m collector run train.py")
    else:
        raise StallwatchError("give a script to run: python -m collector run train.py [args...] (or -m package.module)")
    if os.path.isdir(args.db):
        raise StallwatchError(f"--db {args.db} is a directory; pass a file path")
    try:
        rates = Rates(gpu_hz=args.gpu_hz, host_hz=args.host_hz, keep_batches=args.keep_batches)
    except ValueError as exc:
        raise StallwatchError(str(exc)) from None
    script = " ".join([("-m " if is_module else "") + target, *script_args])
    tags = {"collector_run": script, "launch": f"{socket.gethostname()}:{os.getpid()}:{time.time():.3f}"}
    tune = tune_every(args.tune)
    auto = AutoWatch(os.path.abspath(args.db), rates, tags=tags, tune=tune)
    # Every Python the script starts records too (Lightning's DDP launcher, spawn): NOTE [ Child processes ].
    children = child_environment(
        os.path.abspath(args.db), args.gpu_hz, args.host_hz, tags, os.environ, keep_batches=args.keep_batches, tune=tune
    )
    helper = None if args.no_verdict else start_helper()  # NOTE [ Verdict beside the job ]
    prestart()  # the writer boots beside the script's imports: NOTE [ One writer a process ]
    restore = set_environment({**children, **job_start(os.environ)})
    try:
        code, exit_request = run_script(target, script_args, is_module, auto)
    finally:
        restore()
    if not args.no_verdict:
        print_verdict(auto, args.db, sys.stderr, helper)
    if code == SIGINT_EXIT:
        exit_by_sigint()
    if exit_request is not None:
        raise exit_request  # the script's own sys.exit(...), code and message untouched
    return code


def run_script(target: str, argv: list[str], is_module: bool, auto: Any) -> tuple[int, SystemExit | None]:
    """Run the script as ``python`` would, recorded; (exit code, the script's SystemExit if it raised one)."""
    saved_argv, saved_path0 = sys.argv[:], sys.path[0] if sys.path else None
    sys.argv = [target, *argv]
    if not is_module:
        directory = os.path.dirname(os.path.abspath(target))
        if sys.path:
            sys.path[0] = directory  # as `python script.py` puts the script's directory first
        else:
            sys.path.insert(0, directory)
    auto.install()
    try:
        if is_module:
            runpy.run_module(target, run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(os.path.abspath(target), run_name="__main__")  # __file__ absolute, as python gives it
    except SystemExit as exc:
        from collector.record.exits import process_ends

        process_ends(exc)  # sys.exit(n): the runs record n
        return 0, exc
    except BaseException as exc:  # noqa: BLE001 - shown exactly as Python shows an uncaught exception
        tb = _script_frames(exc.__traceback__)
        sys.excepthook(type(exc), exc.with_traceback(tb), tb)  # also marks the runs crashed or interrupted
        return (SIGINT_EXIT if isinstance(exc, KeyboardInterrupt) else EXIT_EXCEPTION), None
    finally:
        auto.uninstall()
        sys.argv = saved_argv
        if saved_path0 is not None and sys.path:
            sys.path[0] = saved_path0
        auto.close()
    return 0, None


def exit_by_sigint() -> None:
    """End as Python ends on an uncaught Ctrl-C: exit handlers first, then death by SIGINT (a shell's 130)."""
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGINT)


def _script_frames(tb: TracebackType | None) -> TracebackType | None:
    """The traceback from the script's first frame on, as plain ``python script.py`` prints it."""
    ours = {os.path.abspath(__file__), os.path.abspath(runpy.__file__)}
    while tb is not None and (
        os.path.abspath(tb.tb_frame.f_code.co_filename) in ours or tb.tb_frame.f_code.co_filename.startswith("<frozen")
    ):
        tb = tb.tb_next
    return tb


def print_verdict(auto: Any, db: str, out: TextIO, helper: Any = None) -> None:
    """One block per recorded DataLoader, one per distributed job, from rank 0 only: see collector/verdict/printing.py."""
    from collector.verdict.helper import print_verdict_text

    print_verdict_text(helper, db, auto.run_ids(), out, launch=auto.tags.get("launch"))
