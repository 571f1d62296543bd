#!/usr/bin/env python3
"""The anchor for what exactly-once costs: Spark Structured Streaming with its RocksDB state store
and changelog checkpointing, side by side with Weir's micro-batch runner, on the same Nexmark
events, a checkpoint every batch (issue 52).

It exports the events once (`nexmark --export-events`), cuts them into files of `--batch` events
(Spark reads one file a micro-batch, `maxFilesPerTrigger` 1; Weir reads `--max-batch-size`
events a batch), and runs Nexmark q5 (bids per auction in sliding windows of 10 s every 5 s,
then the auctions with the most bids per window) on both:

- Spark (pip `pyspark`, a Java runtime), `local[C]` with `spark.sql.shuffle.partitions` C, the
  RocksDB state store provider with changelog checkpointing, a checkpoint location, the event
  time watermark at 0 s, as in `benchmarks/peers/peers.py`;
- Weir, `nexmark --events-file FILE --query 5 --streaming --checkpoint-dir DIR --parallelism C`.

From every batch's progress (Spark's `StreamingQueryProgress`; Weir's, read from its debug log)
it prints, for the first and the last tenth of the batches, the commit's time on the batch's
path (`durationMs.commitOffsets`) and the state operators' `commitTimeMs` summed (Spark's:
the time to commit the state store's changes; Weir's: taking, encoding, writing and flushing
its state files), their last-to-first ratio, and events/s over the whole run (input rows over
the sum of the batches' `triggerExecution`). Spark's JVM start and its query planning before
the first batch are not counted.

    cargo build --release -p weir-nexmark
    pip install pyspark
    python3 benchmarks/state/spark_anchor.py --num-events 4000000
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from state_bench import on_path, progress, state_work, tenth  # noqa: E402


def report(name, batches):
    """One line of the table from every batch's progress (as dicts)."""
    batches = [b for b in batches if b.get("numInputRows", 0) > 0]
    if not batches:
        sys.exit(f"{name}: no batch read any input")
    p_first, p_last = tenth(batches, False, on_path), tenth(batches, True, on_path)
    s_first, s_last = tenth(batches, False, state_work), tenth(batches, True, state_work)
    rows = sum(b["numInputRows"] for b in batches)
    secs = sum(b["durationMs"].get("triggerExecution", 0) for b in batches) / 1000.0
    ratio = s_last / s_first if s_first else float("inf")
    print(f"{name:28} {len(batches):>7} {p_first:>9.1f}ms {p_last:>7.1f}ms {s_first:>9.1f}ms {s_last:>7.1f}ms "
          f"{ratio:>6.2f} {rows / max(secs, 1e-3):>11,.0f}", flush=True)


def spark_run(args, stream_dir, work):
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    spark = (SparkSession.builder.master(f"local[{args.cores}]").appName("weir-state-anchor")
             .config("spark.sql.shuffle.partitions", str(args.cores))
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.driver.memory", "4g")
             .config("spark.sql.session.timeZone", "UTC")
             .config("spark.sql.streaming.numRecentProgressUpdates", "100000")
             .config("spark.sql.streaming.stateStore.providerClass",
                     "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider")
             .config("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled", "true")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    fields = [("auction", T.LongType()), ("bidder", T.LongType()), ("price", T.LongType()),
              ("dateTime", T.LongType()), ("extra", T.StringType())]
    schema = T.StructType([T.StructField(n, t) for n, t in fields])
    e = spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).json(stream_dir)
    e = e.withColumn("ts", F.timestamp_millis("dateTime")).withWatermark("ts", "0 seconds")
    bids = e.filter("auction IS NOT NULL")
    counts = bids.groupBy(F.window("ts", "10 seconds", "5 seconds"), "auction").count()
    tops = counts.groupBy("window").agg(F.max("count").alias("top"),
                                        F.collect_list(F.struct("auction", "count")).alias("all"))
    result = tops.select(F.explode(F.expr("filter(all, x -> x.count = top)")).alias("t")).select(
        "t.auction", "t.count")
    out, ck = os.path.join(work, "spark-out"), os.path.join(work, "spark-ck")
    query = (result.writeStream.format("json").option("path", out).option("checkpointLocation", ck)
             .outputMode("append").trigger(availableNow=True).start())
    query.awaitTermination()
    batches = [json.loads(p.json) for p in query.recentProgress]
    spark.stop()
    return batches


def weir_run(args, events, work):
    cp = os.path.join(work, "weir-ck")
    env = dict(os.environ, RUST_LOG="warn,weir_runner_microbatch::engine::progress=debug")
    cmd = [args.nexmark, "--events-file", events, "--query", "5", "--streaming", "--checkpoint-dir", cp,
           "--parallelism", str(args.cores), "--max-batch-size", str(args.batch)]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{p.stderr[-4000:]}")
    return progress(p.stderr.splitlines())


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--num-events", type=int, default=4_000_000)
    ap.add_argument("--batch", type=int, default=100_000, help="events a micro-batch reads")
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--nexmark", default=os.path.join(ROOT, "target", "release", "nexmark"))
    ap.add_argument("--engines", default="spark,weir")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="weir-state-anchor-")
    try:
        events = os.path.join(work, "events.jsonl")
        subprocess.run([args.nexmark, "--export-events", events, "--num-events", str(args.num_events)],
                       check=True, capture_output=True)
        # One file a Spark micro-batch, named in order (Spark takes files by modification time,
        # then by path).
        stream_dir = os.path.join(work, "spark-input")
        os.makedirs(stream_dir)
        with open(events) as f:
            part, lines = 0, []
            for line in f:
                lines.append(line)
                if len(lines) == args.batch:
                    with open(os.path.join(stream_dir, f"{part:06}.json"), "w") as out:
                        out.writelines(lines)
                    part, lines = part + 1, []
            if lines:
                with open(os.path.join(stream_dir, f"{part:06}.json"), "w") as out:
                    out.writelines(lines)
        print(f"{'engine':28} {'batches':>7} {'path first':>11} {'last':>9} {'state first':>11} {'last':>9} "
              f"{'ratio':>6} {'events/s':>11}", flush=True)
        if "spark" in args.engines:
            report("Spark, RocksDB + changelog", spark_run(args, stream_dir, work))
        if "weir" in args.engines:
            report("Weir micro-batch", weir_run(args, events, work))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
