"""The rollup tables' DDL (schema 5): what rows past a run's window are folded into."""

from __future__ import annotations

# The exporter's wait histogram bounds, in seconds: from a ready batch's hand-off
# (well under a millisecond) to a worker start-up (seconds). A batch rollup keeps
# the count at or under each (wait_le_0 ...), so the exporter's counters stay exact.
WAIT_LE_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
WAIT_LE_COLUMNS = tuple(f"wait_le_{i}" for i in range(len(WAIT_LE_S)))
ROLLUP_TABLES = ("batch_rollups", "fetch_rollups", "gpu_rollups", "host_rollups", "proc_rollups")

# NOTE [ Rollup tables ]
# Rows older than a run's window (keep_batches, NOTE [ Rollups ] in
# collector/store/fold.py) are folded into these and deleted, in the writer's
# transaction. A batch rollup is one epoch's batches handed out in one Unix
# second (``second``); fetch rollups are per worker id and second; sample
# rollups per minute (``minute``: its first Unix second). Sums, not means, so
# two rollups of one key add up; *_n counts the rows a nullable sum is over.
ROLLUP_DDL = f"""
CREATE TABLE IF NOT EXISTS batch_rollups (
    run_id INTEGER NOT NULL REFERENCES runs(id),
    epoch INTEGER NOT NULL,
    second INTEGER NOT NULL,         -- the Unix second its batches were handed out in
    first_idx INTEGER NOT NULL,
    last_idx INTEGER NOT NULL,
    start_ts REAL NOT NULL,          -- the first batch's request (its ts - wait_s)
    end_ts REAL NOT NULL,            -- the last batch's ts
    batches INTEGER NOT NULL,
    wait_s REAL NOT NULL,            -- sums from here on, unless named otherwise
    wait_min_s REAL,
    wait_p50_s REAL,                 -- of the second's batches (two folds of one second: weighted)
    wait_p95_s REAL,
    wait_max_s REAL,
    stall_s REAL NOT NULL,           -- waits beyond handoff_s
    handoff_s REAL,                  -- median wait of a ready batch, over the fold
    step_s REAL NOT NULL,
    step_n INTEGER NOT NULL,
    ready_sum INTEGER,               -- queue depth at next(), summed over ready_n batches
    ready_n INTEGER NOT NULL,
    ready_min INTEGER,
    ready_max INTEGER,
    in_flight_max INTEGER,
    load_cpu_s REAL,
    load_cpu_n INTEGER NOT NULL,
    load_runq_s REAL,
    gpu_idle_s REAL,
    gpu_idle_n INTEGER NOT NULL,
    samples INTEGER,
    nbytes INTEGER,
    described INTEGER NOT NULL,      -- batches with samples/nbytes measured
    pinned INTEGER,
    pinned_n INTEGER NOT NULL,
    fetches INTEGER NOT NULL,        -- their worker fetches, joined as Reader.batches does
    fetch_wall_s REAL,
    fetch_cpu_s REAL,
    fetch_runq_s REAL,
    {", ".join(f"{c} INTEGER NOT NULL" for c in WAIT_LE_COLUMNS)},
    PRIMARY KEY (run_id, epoch, second)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS fetch_rollups (
    run_id INTEGER NOT NULL REFERENCES runs(id),
    second INTEGER NOT NULL,         -- the Unix second the fetches started in
    worker_id INTEGER NOT NULL,
    fetches INTEGER NOT NULL,
    wall_s REAL NOT NULL,
    wall_max_s REAL,
    cpu_s REAL NOT NULL,
    runq_s REAL,
    PRIMARY KEY (run_id, second, worker_id)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS gpu_rollups (
    run_id INTEGER NOT NULL REFERENCES runs(id),
    minute INTEGER NOT NULL,         -- its first Unix second
    gpu INTEGER NOT NULL,
    samples INTEGER NOT NULL,
    util_n INTEGER NOT NULL,
    util_pct REAL,                   -- summed over util_n samples
    util_min_pct REAL,
    util_max_pct REAL,
    mem_used_max_bytes INTEGER,
    mem_total_bytes INTEGER,
    power_n INTEGER NOT NULL,
    power_w REAL,                    -- summed over power_n samples
    PRIMARY KEY (run_id, minute, gpu)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS host_rollups (
    run_id INTEGER NOT NULL REFERENCES runs(id),
    minute INTEGER NOT NULL,
    samples INTEGER NOT NULL,
    cpu_n INTEGER NOT NULL,
    cpu_pct REAL,                    -- summed over cpu_n samples
    cpu_max_pct REAL,
    mem_available_min_bytes INTEGER,
    disk_n INTEGER NOT NULL,
    disk_read_bps REAL,              -- summed over disk_n samples
    PRIMARY KEY (run_id, minute)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS proc_rollups (
    run_id INTEGER NOT NULL REFERENCES runs(id),
    minute INTEGER NOT NULL,
    pid INTEGER NOT NULL,
    role TEXT NOT NULL,
    worker_id INTEGER,
    samples INTEGER NOT NULL,
    cpu_n INTEGER NOT NULL,
    cpu_pct REAL,                    -- summed over cpu_n samples
    rss_max_bytes INTEGER,
    pss_max_bytes INTEGER,
    cpu_s REAL,                      -- the cumulative counters at the minute's last sample
    runq_s REAL,
    threads_max INTEGER,
    PRIMARY KEY (run_id, minute, pid)
) WITHOUT ROWID
"""
