#!/usr/bin/env python3
"""What exactly-once costs: streaming Nexmark queries with a checkpoint every batch, side by
side with the same runs without one (issue 52's targets).

For each query, one round runs it checkpointed (a fresh --checkpoint-dir) and then without a
checkpoint, back to back, so the machine's load falls on both alike. From the checkpointed
run's progress (every batch's StreamingQueryProgress, read from the engine's debug log) it
reports, for the first and the last tenth of the batches, the commit's time on the batch's
path (`durationMs.commitOffsets`: sinks, the wait for the state thread, the commit log) and
the state's commit work wherever it ran (the stateful steps' `commitTimeMs`: taking, encoding,
writing and flushing their state files, on the thread that overlaps the next batch's reading),
and the ratio of the latter: a commit that grows with the whole state instead of with what
changed shows as a ratio well above 1. Throughput is the launcher's events/s; peak RSS is the
kernel's account of each run.

    cargo build --release -p weir-nexmark
    python3 benchmarks/state/state_bench.py --queries 3,5,8,11 --num-events 20000000

Targets: last tenth's state commit work within 1.3x the first tenth's, and checkpointed throughput
at least 0.8x the run without a checkpoint.
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run(binary, args, env):
    """Runs the launcher; returns (events/s, wall seconds, peak RSS MB, stderr lines)."""
    err = tempfile.TemporaryFile(mode="w+")
    started = time.time()
    p = subprocess.Popen([binary] + args, stdout=subprocess.PIPE, stderr=err, env=env, text=True)
    out = p.stdout.read()
    _, status, usage = os.wait4(p.pid, 0)
    wall = time.time() - started
    err.seek(0)
    lines = err.read().splitlines()
    if status != 0:
        raise SystemExit(f"{' '.join(args)} failed:\n" + "\n".join(lines[-20:]))
    rows = [l.split() for l in out.splitlines() if re.match(r"^\s+\d{4}\s+[\d.]+\s+[\d.]+", l)]
    eps = float(rows[-1][2]) if rows else 0.0
    return eps, wall, usage.ru_maxrss / 1024.0, lines


def progress(lines):
    """Every batch's progress, in order."""
    out = []
    for l in lines:
        at = l.find("batch committed progress=")
        if at >= 0:
            out.append(json.loads(l[at + len("batch committed progress="):]))
    return out


def tenth(batches, last, of):
    n = max(1, len(batches) // 10)
    part = batches[-n:] if last else batches[:n]
    return sum(of(b) for b in part) / len(part)


def on_path(b):
    """The commit's time on the batch's path (`durationMs.commitOffsets`)."""
    return b["durationMs"].get("commitOffsets", 0)


def state_work(b):
    """The time taking, encoding, writing and flushing the batch's state took, over its
    stateful steps (their `commitTimeMs`), wherever it ran."""
    return sum(o.get("commitTimeMs", 0) for o in b.get("stateOperators", []))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--queries", default="3,5,8,11")
    ap.add_argument("--num-events", type=int, default=20_000_000)
    ap.add_argument("--binary", default=os.path.join(ROOT, "target", "release", "nexmark"))
    ap.add_argument("--extra", default="", help="more launcher flags for every run")
    a = ap.parse_args()
    binary = a.binary
    if not os.path.exists(binary):
        target = os.environ.get("CARGO_TARGET_DIR")
        binary = os.path.join(target, "release", "nexmark") if target else binary
    env = dict(os.environ, RUST_LOG="warn,weir_runner_microbatch::engine::progress=debug")
    print(f"{'query':>5} {'batches':>7} {'path first':>10} {'last':>6} {'state first':>11} {'last':>6} {'ratio':>6} "
          f"{'ck ev/s':>10} {'no-ck ev/s':>10} {'ck/no-ck':>8} {'ck RSS MB':>9} {'no-ck RSS MB':>12}")
    for q in a.queries.split(","):
        common = ["--streaming", "--query", q, "--num-events", str(a.num_events)] + a.extra.split()
        cp = tempfile.mkdtemp(prefix="weir-state-bench-")
        try:
            ck_eps, _, ck_rss, lines = run(binary, common + ["--checkpoint-dir", cp], env)
        finally:
            shutil.rmtree(cp, ignore_errors=True)
        no_eps, _, no_rss, _ = run(binary, common, env)
        batches = progress(lines)
        if not batches:
            raise SystemExit(f"query {q}: no batch progress in the log")
        path = tenth(batches, False, on_path), tenth(batches, True, on_path)
        first, last = tenth(batches, False, state_work), tenth(batches, True, state_work)
        ratio = last / first if first else float("inf")
        print(f"{q:>5} {len(batches):>7} {path[0]:>8.1f}ms {path[1]:>4.1f}ms {first:>9.1f}ms {last:>4.1f}ms {ratio:>6.2f} "
              f"{ck_eps:>10.0f} {no_eps:>10.0f} {ck_eps / no_eps:>8.2f} {ck_rss:>9.0f} {no_rss:>12.0f}", flush=True)


if __name__ == "__main__":
    main()
