"""The rollups' SQL: each rollup table's columns, how the folded rows make them, and how two of one key merge."""

from __future__ import annotations

from collector.store.rollup_schema import WAIT_LE_COLUMNS, WAIT_LE_S

SAMPLE_MINUTE_S = 60  # a sample rollup's width


def _merge(column: str, how: str) -> str:
    if how == "sum":
        return f"{column} = IFNULL({column}, 0) + IFNULL(excluded.{column}, 0)"
    if how in ("min", "max"):
        return f"{column} = {how.upper()}(IFNULL({column}, excluded.{column}), IFNULL(excluded.{column}, {column}))"
    if how == "new":
        return f"{column} = IFNULL(excluded.{column}, {column})"
    return f"{column} = {column}"  # "old": PERCENTILES updates it


# (column, its aggregate over the folded rows, how two rollups of one key merge)
BATCH_ROLLUP = (
    ("first_idx", "MIN(idx)", "min"),
    ("last_idx", "MAX(idx)", "max"),
    ("start_ts", "MIN(ts - wait_s)", "min"),
    ("end_ts", "MAX(ts)", "max"),
    ("batches", "COUNT(*)", "sum"),
    ("wait_s", "TOTAL(wait_s)", "sum"),
    ("wait_min_s", "MIN(wait_s)", "min"),
    ("wait_p50_s", "NULL", "old"),  # set after, from the rows: PERCENTILES
    ("wait_p95_s", "NULL", "old"),
    ("wait_max_s", "MAX(wait_s)", "max"),
    ("stall_s", "TOTAL(MAX(0.0, wait_s - :handoff))", "sum"),
    ("handoff_s", ":handoff", "new"),
    ("step_s", "TOTAL(step_s)", "sum"),
    ("step_n", "COUNT(step_s)", "sum"),
    ("ready_sum", "SUM(ready)", "sum"),
    ("ready_n", "COUNT(ready)", "sum"),
    ("ready_min", "MIN(ready)", "min"),
    ("ready_max", "MAX(ready)", "max"),
    ("in_flight_max", "MAX(in_flight)", "max"),
    ("load_cpu_s", "SUM(load_cpu_s)", "sum"),
    ("load_cpu_n", "COUNT(load_cpu_s)", "sum"),
    ("load_runq_s", "SUM(load_runq_s)", "sum"),
    ("gpu_idle_s", "SUM(gpu_idle_s)", "sum"),
    ("gpu_idle_n", "COUNT(gpu_idle_s)", "sum"),
    ("samples", "SUM(samples)", "sum"),
    ("nbytes", "SUM(nbytes)", "sum"),
    ("described", "COUNT(samples)", "sum"),
    ("pinned", "SUM(pinned)", "sum"),
    ("pinned_n", "COUNT(pinned)", "sum"),
    ("fetches", "COUNT(f_wall)", "sum"),
    ("fetch_wall_s", "SUM(f_wall)", "sum"),
    ("fetch_cpu_s", "SUM(f_cpu)", "sum"),
    ("fetch_runq_s", "SUM(f_runq)", "sum"),
    *((column, f"TOTAL(wait_s <= {bound!r})", "sum") for column, bound in zip(WAIT_LE_COLUMNS, WAIT_LE_S, strict=True)),
)
FETCH_ROLLUP = (
    ("fetches", "COUNT(*)", "sum"),
    ("wall_s", "TOTAL(wall_s)", "sum"),
    ("wall_max_s", "MAX(wall_s)", "max"),
    ("cpu_s", "TOTAL(cpu_s)", "sum"),
    ("runq_s", "SUM(runq_s)", "sum"),
)
GPU_ROLLUP = (
    ("samples", "COUNT(*)", "sum"),
    ("util_n", "COUNT(util_pct)", "sum"),
    ("util_pct", "SUM(util_pct)", "sum"),
    ("util_min_pct", "MIN(util_pct)", "min"),
    ("util_max_pct", "MAX(util_pct)", "max"),
    ("mem_used_max_bytes", "MAX(mem_used_bytes)", "max"),
    ("mem_total_bytes", "MAX(mem_total_bytes)", "max"),
    ("power_n", "COUNT(power_w)", "sum"),
    ("power_w", "SUM(power_w)", "sum"),
)
HOST_ROLLUP = (
    ("samples", "COUNT(*)", "sum"),
    ("cpu_n", "COUNT(cpu_pct)", "sum"),
    ("cpu_pct", "SUM(cpu_pct)", "sum"),
    ("cpu_max_pct", "MAX(cpu_pct)", "max"),
    ("mem_available_min_bytes", "MIN(mem_available_bytes)", "min"),
    ("disk_n", "COUNT(disk_read_bps)", "sum"),
    ("disk_read_bps", "SUM(disk_read_bps)", "sum"),
)
PROC_ROLLUP = (
    ("role", "MAX(role)", "new"),
    ("worker_id", "MAX(worker_id)", "new"),
    ("samples", "COUNT(*)", "sum"),
    ("cpu_n", "COUNT(cpu_pct)", "sum"),
    ("cpu_pct", "SUM(cpu_pct)", "sum"),
    ("rss_max_bytes", "MAX(rss_bytes)", "max"),
    ("pss_max_bytes", "MAX(pss_bytes)", "max"),
    ("cpu_s", "MAX(cpu_s)", "max"),
    ("runq_s", "MAX(runq_s)", "max"),
    ("threads_max", "MAX(threads)", "max"),
)


def _upsert(table: str, keys: tuple[str, ...], spec: tuple[tuple[str, str, str], ...], source: str) -> str:
    """INSERT ... SELECT (one row per key) ON CONFLICT adding the new rollup to the one already there."""
    columns = (*keys, *(c for c, _, _ in spec))
    select = ", ".join((*keys, *(expr for _, expr, _ in spec)))
    merges = ", ".join(_merge(c, how) for c, _, how in spec)
    return (
        f"INSERT INTO {table} ({', '.join(columns)}) SELECT {select} FROM ({source}) WHERE true"
        f" GROUP BY {', '.join(keys)} ON CONFLICT ({', '.join(keys)}) DO UPDATE SET {merges}"
    )


# The batches a fold takes: one key range, less what the window keeps. :cut is a whole second.
_TAKEN = (
    "b.run_id = :run AND (b.epoch, b.idx) >= (:lo_epoch, :lo_idx) AND (b.epoch, b.idx) < (:hi_epoch, :hi_idx)"
    " AND b.ts < :cut AND b.idx >= :head AND NOT (b.epoch = :first AND b.idx < :first_keep)"
)
_BATCH_SOURCE = (
    "SELECT :run AS run_id, b.epoch, CAST(b.ts AS INTEGER) AS second, b.idx, b.ts, b.wait_s, b.step_s, b.ready,"
    " b.in_flight, b.load_cpu_s, b.load_runq_s, b.gpu_idle_s, b.samples, b.nbytes, b.pinned,"
    " f.wall_s AS f_wall, f.cpu_s AS f_cpu, f.runq_s AS f_runq"
    " FROM batches b LEFT JOIN worker_fetches f ON f.run_id = b.run_id AND f.worker_pid = b.worker_pid"
    " AND f.worker_incarnation = b.worker_incarnation AND f.worker_seq = b.worker_seq"
    f" WHERE {_TAKEN}"
)
BATCH_FOLD = _upsert("batch_rollups", ("run_id", "epoch", "second"), BATCH_ROLLUP, _BATCH_SOURCE)
BATCH_DELETE = f"DELETE FROM batches AS b WHERE {_TAKEN}"
TAKEN_WAITS = (
    f"SELECT b.epoch, CAST(b.ts AS INTEGER), b.wait_s, b.ready FROM batches b WHERE {_TAKEN} ORDER BY b.epoch, b.idx"
)
# A second's p50 and p95 (sorting in Python costs a third of a window function's sort of the wide rows);
# a second folded in two parts (rare: NOTE [ Rollups ]) takes the batch-weighted mean of both.
PERCENTILES = (
    "UPDATE batch_rollups SET"
    " wait_p50_s = CASE WHEN wait_p50_s IS NULL THEN ?4 ELSE (wait_p50_s * (batches - ?6) + ?4 * ?6) / batches END,"
    " wait_p95_s = CASE WHEN wait_p95_s IS NULL THEN ?5 ELSE (wait_p95_s * (batches - ?6) + ?5 * ?6) / batches END"
    " WHERE run_id = ?1 AND epoch = ?2 AND second = ?3"
)
_FETCHES = "run_id = :run AND started_at >= :floor AND started_at < :cut"
FETCH_FOLD = _upsert(
    "fetch_rollups",
    ("run_id", "second", "worker_id"),
    FETCH_ROLLUP,
    f"SELECT CAST(started_at AS INTEGER) AS second, * FROM worker_fetches WHERE {_FETCHES}",
)
FETCH_DELETE = f"DELETE FROM worker_fetches WHERE {_FETCHES}"
SAMPLES = "run_id = :run AND ts >= :floor AND ts < :cut"


def _sample_fold(table: str, rollup: str, keys: tuple[str, ...], spec: tuple[tuple[str, str, str], ...]) -> str:
    minute = f"CAST(ts / {SAMPLE_MINUTE_S} AS INTEGER) * {SAMPLE_MINUTE_S} AS minute"
    source = f"SELECT {minute}, * FROM {table} WHERE {SAMPLES}"
    return _upsert(rollup, ("run_id", "minute", *keys), spec, source)


SAMPLE_FOLDS = {
    "gpu_samples": _sample_fold("gpu_samples", "gpu_rollups", ("gpu",), GPU_ROLLUP),
    "host_samples": _sample_fold("host_samples", "host_rollups", (), HOST_ROLLUP),
    "proc_samples": _sample_fold("proc_samples", "proc_rollups", ("pid",), PROC_ROLLUP),
}
