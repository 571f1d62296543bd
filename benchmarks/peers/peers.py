#!/usr/bin/env python3
"""Weir against the engines a user would pick instead, on the same Nexmark events file.

Runs Nexmark queries over one exported events file (Beam's JSON lines) on:

- Weir, batch (results counted) and streaming (results written as JSON lines), through the
  Nexmark launcher: `nexmark --events-file FILE --query N [--streaming --results DIR]`;
- DuckDB (pip `duckdb`): `read_json` into a table, then the query into a table (load + query);
- DataFusion (pip `datafusion`): the file registered as a table of the events' schema, then the
  query collected into Arrow batches (the file is read by the query);
- Spark (pip `pyspark`, a Java runtime), batch: `spark.read.json` and the query in Spark SQL,
  written to the `noop` sink; and Structured Streaming: a file stream source, the query in the
  DataFrame API, written as JSON files with `Trigger.AvailableNow`.

Every engine gets the same number of cores (`--cores`, default 2):

- Weir `--parallelism C`;
- DuckDB `SET threads = C`;
- DataFusion `target_partitions = C` (its threads follow);
- Spark `local[C]`, with `spark.sql.shuffle.partitions = C`.

The queries have Beam's semantics, and each engine's result count must equal Weir batch's, or
the harness says MISMATCH and exits non-zero. The windows are event-time windows over
`dateTime`:

- q0: every event;
- q1: every bid, price * 89 / 100;
- q2: bids whose auction % 123 == 0;
- q5: per sliding window of 10 s every 5 s, the auctions with the most bids;
- q7: per fixed window of 10 s, the bids with the highest price;
- q8: per fixed window of 10 s, each (person, auction) pair where the auction's seller is a
  person who joined in the same window.

Times are wall seconds, from the engine being asked to the results being there. Weir's include
its process start. DuckDB's include loading the file. Spark's run in one warm session (the JVM
start, ~10 s, is not counted). At the end of a bounded input, Beam's watermark passes every
window. Spark's never does, so the streaming input gets three more files (one micro-batch each), with a
bid far in the future that every query filters out: they only move the watermark past the last
windows.

`--format csv|parquet` has every engine's batch read DuckDB's CSV or Parquet table of the export
instead (`--table-by weir`: the launcher's own `--export-events` file); Spark's streaming cells
still read the JSON lines. `--queries ingest` times reading the
file alone: Weir's `--generator-only` (every event read and counted), DuckDB's load into a table,
DataFusion's every column of every row collected.

Usage:
    python3 benchmarks/peers/peers.py --num-events 1000000          # export, then all engines
    python3 benchmarks/peers/peers.py --format parquet --engines weir,duckdb --modes batch --queries ingest,0,5
    python3 benchmarks/peers/peers.py --events /tmp/events.jsonl --engines weir,duckdb
"""

import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

QUERIES = [0, 1, 2, 5, 7, 8]
# Not a query: reading the file, every event kept (Weir's --generator-only, DuckDB's load alone).
INGEST = -1
NAMES = {0: "PASSTHROUGH", 1: "CURRENCY_CONVERSION", 2: "SELECTION", 5: "HOT_ITEMS", 7: "HIGHEST_BID",
         8: "MONITOR_NEW_USERS"}

# Every field of the three kinds of event: a line is a person, an auction or a bid, and the
# fields it does not have are null.
FIELDS = [("id", "BIGINT"), ("name", "VARCHAR"), ("emailAddress", "VARCHAR"), ("creditCard", "VARCHAR"),
          ("city", "VARCHAR"), ("state", "VARCHAR"), ("dateTime", "BIGINT"), ("extra", "VARCHAR"),
          ("itemName", "VARCHAR"), ("description", "VARCHAR"), ("initialBid", "BIGINT"), ("reserve", "BIGINT"),
          ("expires", "BIGINT"), ("seller", "BIGINT"), ("category", "BIGINT"), ("auction", "BIGINT"),
          ("bidder", "BIGINT"), ("price", "BIGINT")]

# The queries in SQL. `{div}` is integer division (DuckDB `//`, Spark `div`); `{top5}` and
# `{top7}` keep the rows tied for the highest value of their window.
SQL = {
    INGEST: "SELECT * FROM events LIMIT 0",
    0: "SELECT * FROM events",
    1: "SELECT auction, bidder, (price * 89) {div} 100 AS price, dateTime, extra FROM events "
       "WHERE auction IS NOT NULL",
    2: "SELECT auction, price FROM events WHERE auction IS NOT NULL AND auction % 123 = 0",
    5: "WITH b AS (SELECT auction, explode(array(dateTime - dateTime % 5000, dateTime - dateTime % 5000 - 5000)) "
       "AS ws FROM events WHERE auction IS NOT NULL), "
       "c AS (SELECT ws, auction, count(*) AS n FROM b GROUP BY ws, auction), "
       "m AS (SELECT auction, n, max(n) OVER (PARTITION BY ws) AS top FROM c) "
       "SELECT auction, n FROM m WHERE n = top",
    7: "SELECT auction, bidder, price, dateTime, extra FROM (SELECT auction, bidder, price, dateTime, extra, "
       "max(price) OVER (PARTITION BY dateTime {div} 10000) AS top FROM events WHERE auction IS NOT NULL) "
       "WHERE price = top",
    8: "SELECT p.id, p.name, a.reserve FROM events p JOIN events a "
       "ON p.id = a.seller AND p.dateTime {div} 10000 = a.dateTime {div} 10000 "
       "WHERE p.name IS NOT NULL AND a.itemName IS NOT NULL",
}


def duckdb_sql(q):
    return SQL[q].format(div="//").replace("explode(array(", "unnest([").replace(
        "- 5000)) AS ws", "- 5000]) AS ws")


def datafusion_sql(q):
    # Identifiers keep their case (see `datafusion_batch`); integer `/` divides as DuckDB's `//`.
    if q == INGEST:
        return "SELECT * FROM events"
    return SQL[q].format(div="/").replace("explode(array(", "unnest(make_array(")


def spark_sql(q):
    return SQL[q].format(div="div")


def timed(f):
    start = time.perf_counter()
    out = f()
    return time.perf_counter() - start, out


# --- Weir -------------------------------------------------------------------------------------

def weir_batch(args, q, work):
    perf = os.path.join(work, f"weir-perf-{q}.json")
    if os.path.exists(perf):
        os.remove(perf)
    # Ingest: the events read, and nothing else (the launcher's --generator-only).
    what = ["--generator-only"] if q == INGEST else ["--query", str(q)]
    cmd = [args.nexmark, "--events-file", args.input, *what, "--parallelism", str(args.cores), "--perf-file", perf]
    secs, _ = timed(lambda: subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    with open(perf) as f:
        records = [json.loads(line) for line in f if line.strip()]
    return secs, records[-1]["numEvents" if q == INGEST else "numResults"]


def weir_streaming(args, q, work):
    out = os.path.join(work, f"weir-results-{q}")
    shutil.rmtree(out, ignore_errors=True)
    cmd = [args.nexmark, "--streaming", "--events-file", args.input, "--query", str(q), "--parallelism",
           str(args.cores), "--results", out]
    secs, _ = timed(lambda: subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    return secs, count_lines(glob.glob(os.path.join(out, NAMES[q], "*.jsonl")))


def count_lines(files):
    n = 0
    for path in files:
        with open(path, "rb") as f:
            n += sum(1 for line in f if line.strip())
    return n


# --- DuckDB -----------------------------------------------------------------------------------

def duckdb_batch(args, q, work):
    import duckdb
    con = duckdb.connect()
    con.execute(f"SET threads = {args.cores}")
    columns = "{" + ", ".join(f"'{n}': '{t}'" for n, t in FIELDS) + "}"

    if args.format == "parquet":
        read = f"read_parquet('{args.input}')"
    elif args.format == "csv":
        read = f"read_csv('{args.input}', header = true, columns = {columns})"
    else:
        read = f"read_json('{args.input}', format = 'newline_delimited', columns = {columns})"

    def run():
        con.execute(f"CREATE TABLE events AS SELECT * FROM {read}")
        con.execute(f"CREATE TABLE r AS {duckdb_sql(q)}")
    secs, _ = timed(run)
    n = con.execute(f"SELECT count(*) FROM {'events' if q == INGEST else 'r'}").fetchone()[0]
    con.close()
    return secs, n


# --- DataFusion -------------------------------------------------------------------------------

def datafusion_batch(args, q, work):
    import pyarrow as pa
    from datafusion import SessionConfig, SessionContext
    config = (SessionConfig().with_target_partitions(args.cores)
              .set("datafusion.sql_parser.enable_ident_normalization", "false"))
    ctx = SessionContext(config)
    kinds = {"BIGINT": pa.int64(), "VARCHAR": pa.string()}
    schema = pa.schema([(n, kinds[t]) for n, t in FIELDS])
    extension = os.path.splitext(args.input)[1] or ""

    def run():
        if args.format == "parquet":
            ctx.register_parquet("events", args.input, file_extension=extension)
        elif args.format == "csv":
            ctx.register_csv("events", args.input, schema=schema, has_header=True, file_extension=extension)
        else:
            ctx.register_json("events", args.input, schema=schema, file_extension=extension)
        return ctx.sql(datafusion_sql(q)).collect()
    secs, batches = timed(run)
    return secs, sum(b.num_rows for b in batches)


# --- Spark ------------------------------------------------------------------------------------

class Spark:
    def __init__(self, args, work):
        from pyspark.sql import SparkSession
        from pyspark.sql import types as T
        self.args, self.work = args, work
        self.spark = (SparkSession.builder.master(f"local[{args.cores}]").appName("weir-peers")
                      .config("spark.sql.shuffle.partitions", str(args.cores))
                      .config("spark.ui.enabled", "false")
                      .config("spark.ui.showConsoleProgress", "false")
                      .config("spark.driver.memory", "4g")
                      .config("spark.sql.session.timeZone", "UTC")
                      .getOrCreate())
        self.spark.sparkContext.setLogLevel("ERROR")
        kinds = {"BIGINT": T.LongType(), "VARCHAR": T.StringType()}
        self.schema = T.StructType([T.StructField(n, kinds[t]) for n, t in FIELDS])
        # The streaming input: the events file, then one bid far in the future (see the top).
        self.stream_dir = os.path.join(work, "spark-stream-input")
        shutil.rmtree(self.stream_dir, ignore_errors=True)
        os.makedirs(self.stream_dir)
        os.symlink(os.path.abspath(args.events), os.path.join(self.stream_dir, "a-events.json"))
        # One file per micro-batch (maxFilesPerTrigger 1): the watermark a batch ends with applies
        # from the next batch on, and a chained aggregation (q5) needs one batch more.
        for i in range(3):
            with open(os.path.join(self.stream_dir, f"z{i}-end-of-input.json"), "w") as f:
                f.write(json.dumps({"auction": -1, "bidder": -1, "price": -1, "dateTime": 2 ** 52 + i, "extra": ""})
                        + "\n")

    def batch(self, q):
        def run():
            fmt, path = self.args.format, self.args.input
            if fmt == "parquet":
                df = self.spark.read.parquet(path)
            elif fmt == "csv":
                df = self.spark.read.schema(self.schema).option("header", True).csv(path)
            else:
                df = self.spark.read.schema(self.schema).json(path)
            df.createOrReplaceTempView("events")
            result = self.spark.sql(spark_sql(q))
            result.write.format("noop").mode("overwrite").save()
            return result
        secs, result = timed(run)
        return secs, result.count()

    def streaming(self, q):
        from pyspark.sql import functions as F
        out = os.path.join(self.work, f"spark-stream-out-{q}")
        ck = os.path.join(self.work, f"spark-stream-ck-{q}")
        shutil.rmtree(out, ignore_errors=True)
        shutil.rmtree(ck, ignore_errors=True)

        def events():
            e = self.spark.readStream.schema(self.schema).option("maxFilesPerTrigger", 1).json(self.stream_dir)
            e = e.withColumn("ts", F.timestamp_millis("dateTime")).withWatermark("ts", "0 seconds")
            # The end-of-input bids go here, after the watermark has seen them. The filter names
            # `ts` so that Spark does not push it below the watermark.
            return e.filter("auction IS NULL OR auction >= 0 OR ts IS NULL")

        def run():
            e = events()
            bids = e.filter("auction IS NOT NULL")
            if q == 0:
                result = e.drop("ts")
            elif q == 1:
                result = bids.selectExpr("auction", "bidder", "(price * 89) div 100 AS price", "dateTime", "extra")
            elif q == 2:
                result = bids.filter("auction % 123 = 0").select("auction", "price")
            elif q == 5:
                counts = bids.groupBy(F.window("ts", "10 seconds", "5 seconds"), "auction").count()
                tops = counts.groupBy("window").agg(F.max("count").alias("top"),
                                                    F.collect_list(F.struct("auction", "count")).alias("all"))
                result = tops.select(F.explode(F.expr("filter(all, x -> x.count = top)")).alias("t")).select(
                    "t.auction", "t.count")
            elif q == 7:
                tops = bids.groupBy(F.window("ts", "10 seconds")).agg(
                    F.max("price").alias("top"),
                    F.collect_list(F.struct("auction", "bidder", "price", "dateTime", "extra")).alias("all"))
                result = tops.select(F.explode(F.expr("filter(all, x -> x.price = top)")).alias("b")).select("b.*")
            elif q == 8:
                persons = e.filter("name IS NOT NULL").select("id", "name", F.window("ts", "10 seconds").alias("pw"))
                auctions = events().filter("itemName IS NOT NULL").select(
                    "seller", "reserve", F.window("ts", "10 seconds").alias("aw"))
                result = persons.join(auctions, F.expr("id = seller AND pw = aw")).select("id", "name", "reserve")
            query = (result.writeStream.format("json").option("path", out).option("checkpointLocation", ck)
                     .outputMode("append").trigger(availableNow=True).start())
            query.awaitTermination()
        secs, _ = timed(run)
        return secs, count_lines(glob.glob(os.path.join(out, "*.json")))

    def stop(self):
        self.spark.stop()


# --- The table --------------------------------------------------------------------------------

COLUMNS = [("weir", "batch", "Weir batch"), ("weir", "streaming", "Weir streaming"),
           ("duckdb", "batch", "DuckDB (load + query)"), ("datafusion", "batch", "DataFusion"),
           ("spark", "batch", "Spark batch"),
           ("spark", "streaming", "Spark Structured Streaming")]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", help="a Nexmark events file (Beam's JSON lines); exported when not given")
    ap.add_argument("--num-events", type=int, default=1_000_000, help="events to export without --events")
    ap.add_argument("--nexmark", default=None, help="the launcher binary (default: target/release/nexmark)")
    ap.add_argument("--queries", default=",".join(map(str, QUERIES)))
    ap.add_argument("--engines", default="weir,duckdb,datafusion,spark")
    ap.add_argument("--modes", default="batch,streaming")
    ap.add_argument("--cores", type=int, default=2, help="cores every engine may use")
    ap.add_argument("--rounds", type=int, default=1, help="runs of each cell; the median is shown")
    ap.add_argument("--work", default=None, help="scratch directory (default: a temporary one)")
    ap.add_argument("--json", default=None, help="also write the measurements here")
    ap.add_argument("--format", default="jsonl", choices=["jsonl", "csv", "parquet"],
                    help="the file every engine reads: the JSON-lines export, or a CSV or Parquet table of it")
    ap.add_argument("--table-by", default="duckdb", choices=["duckdb", "weir"],
                    help="who writes the CSV or Parquet table: DuckDB from the JSON lines, or the launcher's "
                         "--export-events")
    args = ap.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    args.nexmark = args.nexmark or os.path.join(root, "target", "release", "nexmark")
    queries = [INGEST if q == "ingest" else int(q) for q in args.queries.split(",")]
    engines, modes = args.engines.split(","), args.modes.split(",")
    for q in queries:
        if q not in SQL:
            sys.exit(f"--queries: q{q} is not one of {QUERIES} or ingest")
    work = args.work or tempfile.mkdtemp(prefix="weir-peers-")
    os.makedirs(work, exist_ok=True)
    if "weir" in engines and not os.path.exists(args.nexmark):
        sys.exit(f"{args.nexmark}: no launcher; build it with `cargo build --release -p weir-nexmark --features parquet`")
    if not args.events:
        args.events = os.path.join(work, "events.jsonl")
        subprocess.run([args.nexmark, "--export-events", args.events, "--num-events", str(args.num_events)],
                       check=True, stdout=subprocess.DEVNULL)
    args.input = args.events
    if args.format != "jsonl":
        args.input = os.path.join(work, f"events-{args.table_by}.{args.format}")
        if args.table_by == "weir":
            subprocess.run([args.nexmark, "--export-events", args.input, "--num-events", str(args.num_events)],
                           check=True, stdout=subprocess.DEVNULL)
        else:
            # DuckDB's own table of the export: what a user would have, made by another tool.
            import duckdb
            options = "FORMAT parquet" if args.format == "parquet" else "HEADER"
            duckdb.sql(f"COPY (SELECT * FROM read_json_auto('{args.events}')) TO '{args.input}' ({options})")
    size_mb = os.path.getsize(args.input) / 1e6
    print(f"events: {args.input} ({size_mb:.0f} MB); cores: {args.cores}; rounds: {args.rounds}", flush=True)

    runners = {("weir", "batch"): lambda q: weir_batch(args, q, work),
               ("weir", "streaming"): lambda q: weir_streaming(args, q, work),
               ("duckdb", "batch"): lambda q: duckdb_batch(args, q, work),
               ("datafusion", "batch"): lambda q: datafusion_batch(args, q, work)}
    cells = [(e, m, title) for e, m, title in COLUMNS if e in engines and m in modes]
    results, failed = {}, False
    # Engine by engine, so that no engine's idle threads (Spark's JVM) run beside another's.
    for engine in dict.fromkeys(e for e, _, _ in cells):
        spark = Spark(args, work) if engine == "spark" else None
        if spark:
            runners[("spark", "batch")] = spark.batch
            runners[("spark", "streaming")] = spark.streaming
        for q in queries:
            for e, mode, title in cells:
                if e != engine:
                    continue
                times, counts = [], set()
                for _ in range(args.rounds):
                    secs, n = runners[(engine, mode)](q)
                    times.append(secs)
                    counts.add(n)
                times.sort()
                results[(q, engine, mode)] = (times[len(times) // 2], counts)
                print(f"  {'ingest' if q == INGEST else f'q{q}'} {title}: {times[len(times) // 2]:.2f} s, {sorted(counts)} results", flush=True)
        if spark:
            spark.stop()

    header = ["q"] + [title for _, _, title in cells]
    ratios = [("duckdb", "batch", "weir", "batch", "DuckDB / Weir batch"),
              ("datafusion", "batch", "weir", "batch", "DataFusion / Weir batch"),
              ("spark", "batch", "weir", "batch", "Spark / Weir batch"),
              ("spark", "streaming", "weir", "streaming", "Spark SS / Weir streaming")]
    ratios = [r for r in ratios if r[0] in engines and r[2] in engines and r[1] in modes and r[3] in modes]
    header += [r[4] for r in ratios] + ["results"]
    rows = []
    for q in queries:
        row = ["ingest" if q == INGEST else str(q)] + [f"{results[(q, e, m)][0]:.2f}" for e, m, _ in cells]
        for a, am, b, bm, _ in ratios:
            row.append(f"{results[(q, a, am)][0] / results[(q, b, bm)][0]:.2f}x")
        counts = set().union(*(results[(q, e, m)][1] for e, m, _ in cells))
        if len(counts) == 1:
            row.append(str(counts.pop()))
        else:
            failed = True
            row.append("MISMATCH " + ", ".join(f"{t}={sorted(results[(q, e, m)][1])}" for e, m, t in cells))
        rows.append(row)
    print()
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join("---" for _ in header) + "|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump([{"query": q, "engine": e, "mode": m, "seconds": s, "results": sorted(c)}
                       for (q, e, m), (s, c) in results.items()], f, indent=1)
    if failed:
        sys.exit("result counts differ between engines")


if __name__ == "__main__":
    main()
