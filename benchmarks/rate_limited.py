#!/usr/bin/env python3
"""Rate-limited streaming Nexmark: the rate a query keeps up with, and its end-to-end latency.

For each rate asked, the launcher generates events at that rate in wall-clock time
(--is-rate-limited, event times on the wall clock with --use-wallclock-event-time, no random
delays) for --seconds seconds, and a query runs over them with a processing-time trigger, writing
its results (--results). Reported per query and rate:

- the rate reached: events over the run's wall time (the events cannot come faster than asked, so
  a run that keeps up takes the --seconds plus the last batch);
- the end-to-end latency of each result, p50 and p99: the commit of the file holding it (its
  modification time; a batch's files are written at its commit) less its timestamp, which is the
  wall-clock time at which the last event it depends on was due (an event for q2, the end of a
  window for q5; windows that end after the last event, closed by the end of the input, are left
  out). Event times are spaced in whole microseconds, as in Beam, so the rates asked are ones
  whose spacing is whole (1e6 / rate): then event times and due times agree;
- the CPU time the run used.

Usage: cargo build --release -p weir-nexmark
       python3 benchmarks/rate_limited.py [--rates 100000,200000,500000] [--queries 5,2] \\
           [--seconds 10] [--trigger-ms 500] [-- extra launcher flags]
"""
import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NEXMARK = os.path.join(ROOT, "target", "release", "nexmark")


def percentile(values, p):
    if not values:
        return float("nan")
    values = sorted(values)
    k = min(len(values) - 1, max(0, int(round(p / 100.0 * (len(values) - 1)))))
    return values[k]


def run(query, rate, seconds, trigger_ms, extra):
    out = tempfile.mkdtemp(prefix="weir-rate-")
    try:
        args = [NEXMARK, "--query", str(query), "--streaming", "--is-rate-limited",
                "--use-wallclock-event-time", "--occasional-delay-sec", "0",
                "--first-event-rate", str(rate), "--next-event-rate", str(rate),
                "--num-events", str(rate * seconds),
                "--trigger", "processing-time", "--trigger-interval-ms", str(trigger_ms),
                "--results", out] + extra
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.time()
        # Event times are on the wall clock from about the start, one every 1/rate s.
        last_due_ms = start * 1000.0 + seconds * 1000.0
        done = subprocess.run(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        wall = time.time() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if done.returncode != 0:
            sys.exit(f"q{query} at {rate}/s failed: {done.stderr[-2000:]}")
        latencies = []
        for folder, _, files in os.walk(out):
            if "_weir_metadata" in folder:
                continue
            for f in files:
                if not f.endswith(".jsonl"):
                    continue
                path = os.path.join(folder, f)
                committed_ms = os.stat(path).st_mtime * 1000.0
                with open(path) as lines:
                    for line in lines:
                        ts = json.loads(line)["timestamp"]
                        # Windows that end after the last event close with the end of the
                        # input, not with time: they have no due time.
                        if ts <= last_due_ms:
                            latencies.append(committed_ms - ts)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        return {
            "query": query, "rate": rate, "events": rate * seconds, "wall_s": wall,
            "reached": rate * seconds / wall, "results": len(latencies),
            "p50_ms": percentile(latencies, 50), "p99_ms": percentile(latencies, 99), "cpu_s": cpu,
        }
    finally:
        shutil.rmtree(out, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rates", default="100000,200000,250000,500000,1000000")
    ap.add_argument("--queries", default="5,2")
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--trigger-ms", type=int, default=500)
    ap.add_argument("extra", nargs="*", help="more launcher flags, after --")
    a = ap.parse_args()
    if not os.path.exists(NEXMARK):
        sys.exit(f"{NEXMARK} is missing: cargo build --release -p weir-nexmark")
    print(f"{'query':>5} {'asked/s':>9} {'events':>9} {'wall s':>7} {'reached/s':>10} {'share':>6} "
          f"{'results':>8} {'p50 ms':>8} {'p99 ms':>8} {'cpu s':>6}")
    for q in a.queries.split(","):
        for rate in (int(r) for r in a.rates.split(",")):
            r = run(q, rate, a.seconds, a.trigger_ms, a.extra)
            print(f"{r['query']:>5} {r['rate']:>9} {r['events']:>9} {r['wall_s']:>7.2f} {r['reached']:>10.0f} "
                  f"{r['reached'] / rate:>6.1%} {r['results']:>8} {r['p50_ms']:>8.0f} {r['p99_ms']:>8.0f} "
                  f"{r['cpu_s']:>6.2f}", flush=True)


if __name__ == "__main__":
    main()
