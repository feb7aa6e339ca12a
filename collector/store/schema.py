"""The SQLite schema of a stallwatch file: tables, indexes and its version."""

from __future__ import annotations

import os
from collections.abc import Mapping

from collector.store.rollup_schema import ROLLUP_DDL
from collector.store.stage_sql import STAGES_DDL

APP_ID = "stallwatch"
DEFAULT_DB = "stallwatch.sqlite"  # the one default file name: watch(), every subcommand, the dashboard
ENV_DB = "STALLWATCH_DB"


def default_db_path(environ: Mapping[str, str] = os.environ) -> str:
    """``$STALLWATCH_DB``, else ``stallwatch.sqlite`` in the working directory."""
    return environ.get(ENV_DB) or DEFAULT_DB


SCHEMA_VERSION = 7
SAMPLE_TABLES = ("gpu_samples", "host_samples", "proc_samples")  # the tables the writer's Sampler fills
COLLECTOR_ROLES = ("writer", "helper")  # proc_samples.role of our own processes: NOTE [ Our own processes ]

# NOTE [ Schema versions ]
# A file keeps the version it was created with until a newer stallwatch
# writes to it: the writer then adds what is missing (MIGRATIONS, one
# transaction) and records the new version. Readers never write, so they read
# an older file as it is, with RUN_DEFAULTS standing in for the runs columns
# it lacks.
#   2: runs.job_id and runs.stage (a distributed job's shared id; train / val
#      / test / predict), runs.error_count, first_error, last_error (dataset
#      errors the loop saw, caught or not), runs.exit_code, runs.dropped_samples.
#   3: where the time goes (NOTE [ Where the time goes ] in
#      collector/sample/schedstat.py): batches.load_runq_s, worker_fetches.runq_s,
#      proc_samples.cpu_s, runq_s and threads (cumulative, every thread), the
#      worker_exits table (each worker's whole life), epochs.end_wait_s (the
#      final next() that ends the epoch), runs.torch_threads and
#      runs.interop_threads.
#   4: epochs.collector_s: the collector's own work on the training thread
#      inside the epoch's first_batch_s (NOTE [ The collector's own time ] in
#      collector/record/session.py), never counted as waiting for data.
#   5: the rollup tables (ROLLUP_DDL): rows past a run's window folded into
#      sums (NOTE [ Rollups ] in collector/store/fold.py).
#   6: live tuning (NOTE [ Live tuning ] in collector/tune/policy.py):
#      epochs.setting (the loader's setting that epoch, where a tuner changed
#      it) and the trials table (each trial: setting, predicted and measured
#      speed-up, kept or reverted, why).
#   7: the worker_stages table: each worker's time by stage, its totals
#      (NOTE [ Worker stages ] in collector/store/stage_sql.py).
TRIAL_COLUMNS = (
    "epoch",
    "start_idx",
    "batches",
    "started_at",
    "ended_at",
    "setting",
    "baseline",
    "predicted_speedup",
    "predicted_low",
    "predicted_high",
    "measured_speedup",
    "noise",
    "kept",
    "why",
)
TRIALS_DDL = (
    "CREATE TABLE IF NOT EXISTS trials ("
    " run_id INTEGER NOT NULL REFERENCES runs(id),"
    " epoch INTEGER NOT NULL,"  # the epoch the trial ran in
    " start_idx INTEGER NOT NULL,"  # the batch it started at: 0 for a whole epoch, else a window (a long epoch)
    " batches INTEGER,"  # batches measured
    " started_at REAL, ended_at REAL,"
    " setting TEXT NOT NULL,"  # JSON: the setting tried
    " baseline TEXT NOT NULL,"  # JSON: the setting it was measured against
    " predicted_speedup REAL, predicted_low REAL, predicted_high REAL,"
    " measured_speedup REAL,"  # seconds a batch at the baseline / at the setting tried
    " noise REAL,"  # the baseline's own epoch-to-epoch variation, as a fraction
    " kept INTEGER NOT NULL,"
    " why TEXT,"
    " PRIMARY KEY (run_id, epoch, start_idx))"
)
MIGRATIONS: dict[int, tuple[str, ...]] = {
    2: (
        "ALTER TABLE runs ADD COLUMN job_id TEXT",
        "ALTER TABLE runs ADD COLUMN stage TEXT",
        "ALTER TABLE runs ADD COLUMN error_count INTEGER NOT NULL DEFAULT 0",
        "ALTER TABLE runs ADD COLUMN first_error TEXT",
        "ALTER TABLE runs ADD COLUMN last_error TEXT",
        "ALTER TABLE runs ADD COLUMN exit_code INTEGER",
        "ALTER TABLE runs ADD COLUMN dropped_samples INTEGER NOT NULL DEFAULT 0",
    ),
    3: (
        "ALTER TABLE runs ADD COLUMN torch_threads INTEGER",
        "ALTER TABLE runs ADD COLUMN interop_threads INTEGER",
        "ALTER TABLE epochs ADD COLUMN end_wait_s REAL",
        "ALTER TABLE batches ADD COLUMN load_runq_s REAL",
        "ALTER TABLE worker_fetches ADD COLUMN runq_s REAL",
        "ALTER TABLE proc_samples ADD COLUMN cpu_s REAL",
        "ALTER TABLE proc_samples ADD COLUMN runq_s REAL",
        "ALTER TABLE proc_samples ADD COLUMN threads INTEGER",
        "CREATE TABLE IF NOT EXISTS worker_exits ("
        " run_id INTEGER NOT NULL REFERENCES runs(id), worker_pid INTEGER NOT NULL, worker_id INTEGER NOT NULL,"
        " started_at REAL NOT NULL, ended_at REAL NOT NULL, cpu_s REAL NOT NULL, runq_s REAL,"
        " PRIMARY KEY (run_id, worker_pid, started_at)) WITHOUT ROWID",
    ),
    4: ("ALTER TABLE epochs ADD COLUMN collector_s REAL",),
}
RUN_DEFAULTS: dict[str, object] = {
    "job_id": None,
    "stage": None,
    "error_count": 0,
    "first_error": None,
    "last_error": None,
    "exit_code": None,
    "dropped_samples": 0,
    "torch_threads": None,
    "interop_threads": None,
}

# NOTE [ Schema ]
# Units are in the column names: *_s seconds, *_bytes bytes, *_pct percent,
# *_w watts, *_bps bytes per second. Timestamps (*_at, ts) are Unix wall-clock
# seconds; durations come from monotonic clocks. NULL always means "not
# available" (no GPU, no worker, unsupported metric), never zero.
# The batch <-> worker-fetch link is (run_id, worker_pid, worker_incarnation,
# worker_seq): the k-th fetch of a worker process in one fetcher incarnation is
# the k-th batch the main process consumed from it. See NOTE [ Worker timing ].
DDL = """
CREATE TABLE IF NOT EXISTS meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    name TEXT NOT NULL,
    status TEXT NOT NULL,            -- running | completed | crashed | interrupted
    error TEXT,
    started_at REAL NOT NULL,
    ended_at REAL,
    heartbeat_at REAL,
    hostname TEXT,
    pid INTEGER,
    command TEXT,
    rank INTEGER,
    world_size INTEGER,
    tags TEXT,                       -- JSON object, e.g. {"sweep": "..."}
    config TEXT,                     -- JSON: the loader's configuration
    host TEXT,                       -- JSON: cores, RAM, GPUs, driver
    versions TEXT,                   -- JSON: python, torch, stallwatch
    dropped_records INTEGER NOT NULL DEFAULT 0,
    warnings TEXT,                   -- JSON list of warnings the collector gave
    job_id TEXT,                     -- shared by the ranks of one distributed job
    stage TEXT,                      -- train | val | test | predict, when a framework says
    error_count INTEGER NOT NULL DEFAULT 0,  -- exceptions the loader raised into the loop
    first_error TEXT,
    last_error TEXT,
    exit_code INTEGER,               -- the process's, when it exited non-zero
    dropped_samples INTEGER NOT NULL DEFAULT 0,  -- GPU/host/process samples lost
    torch_threads INTEGER,           -- torch.get_num_threads() in the training process (latest epoch)
    interop_threads INTEGER          -- torch.get_num_interop_threads()
);
CREATE TABLE IF NOT EXISTS epochs (
    run_id INTEGER NOT NULL REFERENCES runs(id),
    epoch INTEGER NOT NULL,
    started_at REAL NOT NULL,
    ended_at REAL,
    first_batch_s REAL,              -- iter() to the first batch: worker start-up
    batches INTEGER,
    worker_pids TEXT,                -- JSON list
    end_wait_s REAL,                 -- the final next() that ends the epoch (and shuts workers down)
    collector_s REAL,                -- of first_batch_s, the collector's own work (session start, hooks): not waiting
    setting TEXT,                    -- JSON: the loader's setting this epoch, where a tuner changed it (else NULL)
    PRIMARY KEY (run_id, epoch)
);
CREATE TABLE IF NOT EXISTS batches (
    run_id INTEGER NOT NULL REFERENCES runs(id),
    epoch INTEGER NOT NULL,
    idx INTEGER NOT NULL,            -- position in the epoch
    ts REAL NOT NULL,                -- when the batch was handed to the loop
    wait_s REAL NOT NULL,            -- time blocked inside next()
    step_s REAL,                     -- previous batch's return to this request
    ready INTEGER,                   -- batches ready in the loader at next()
    in_flight INTEGER,               -- requested from workers, not yet consumed
    worker_id INTEGER,
    worker_pid INTEGER,
    worker_incarnation INTEGER,
    worker_seq INTEGER,
    samples INTEGER,
    nbytes INTEGER,
    pinned INTEGER,                  -- 1 if every tensor is in pinned memory
    gpu_idle_s REAL,                 -- GPU stream idle during the wait (CUDA events)
    load_cpu_s REAL,                 -- CPU the loading threads spent inside next() (sampled batches)
    load_runq_s REAL,                -- the training thread's wait for a core inside next() (sampled)
    PRIMARY KEY (run_id, epoch, idx)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS worker_fetches (
    run_id INTEGER NOT NULL REFERENCES runs(id),
    worker_pid INTEGER NOT NULL,
    worker_id INTEGER NOT NULL,
    worker_incarnation INTEGER NOT NULL,
    worker_seq INTEGER NOT NULL,
    started_at REAL NOT NULL,
    wall_s REAL NOT NULL,            -- __getitem__ + collate, wall clock
    cpu_s REAL NOT NULL,             -- CPU time the worker thread used for it
    runq_s REAL,                     -- time it was runnable, waiting for a core (schedstat)
    PRIMARY KEY (run_id, worker_pid, worker_incarnation, worker_seq)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS worker_exits (
    run_id INTEGER NOT NULL REFERENCES runs(id),
    worker_pid INTEGER NOT NULL,
    worker_id INTEGER NOT NULL,
    started_at REAL NOT NULL,        -- the worker's own start (its init_fn)
    ended_at REAL NOT NULL,          -- its exit
    cpu_s REAL NOT NULL,             -- its whole life, every thread
    runq_s REAL,                     -- its whole life waiting for a core
    PRIMARY KEY (run_id, worker_pid, started_at)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS gpu_samples (
    run_id INTEGER NOT NULL REFERENCES runs(id),
    ts REAL NOT NULL,
    gpu INTEGER NOT NULL,            -- NVML device index
    util_pct REAL,
    mem_used_bytes INTEGER,
    mem_total_bytes INTEGER,
    power_w REAL
);
CREATE INDEX IF NOT EXISTS gpu_samples_run_ts ON gpu_samples (run_id, ts);
CREATE TABLE IF NOT EXISTS host_samples (
    run_id INTEGER NOT NULL REFERENCES runs(id),
    ts REAL NOT NULL,
    cpu_pct REAL,                    -- whole machine, 100 = every core busy
    per_core_pct TEXT,               -- JSON list, one value per logical core
    mem_available_bytes INTEGER,
    disk_read_bps REAL
);
CREATE INDEX IF NOT EXISTS host_samples_run_ts ON host_samples (run_id, ts);
CREATE TABLE IF NOT EXISTS proc_samples (
    run_id INTEGER NOT NULL REFERENCES runs(id),
    ts REAL NOT NULL,
    pid INTEGER NOT NULL,
    role TEXT NOT NULL,              -- main | worker | writer | helper (the collector's own)
    worker_id INTEGER,
    cpu_pct REAL,                    -- 100 = one core busy
    rss_bytes INTEGER,
    uss_bytes INTEGER,
    pss_bytes INTEGER,
    cpu_s REAL,                      -- cumulative CPU seconds, every thread (schedstat)
    runq_s REAL,                     -- cumulative seconds runnable, waiting for a core
    threads INTEGER
);
CREATE INDEX IF NOT EXISTS proc_samples_run_ts ON proc_samples (run_id, ts);
"""

MIGRATIONS[5] = tuple(statement.strip() for statement in ROLLUP_DDL.split(";") if statement.strip())
MIGRATIONS[6] = ("ALTER TABLE epochs ADD COLUMN setting TEXT", TRIALS_DDL)
MIGRATIONS[7] = (STAGES_DDL,)
DDL += TRIALS_DDL + ";\n" + STAGES_DDL + ";\n"
