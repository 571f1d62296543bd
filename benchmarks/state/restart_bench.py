#!/usr/bin/env python3
"""A restart of a checkpointed streaming query whose state waits on disk: what resuming costs.

A streaming Nexmark query runs on the disk state backend with a checkpoint every batch and is
stopped (SIGTERM: it stops after the current batch commits) after `--stop-after` seconds. The
checkpoint and the results so far are copied once per launcher given, and each launcher resumes
its copy to the end, back to back, under /usr/bin/time. It prints, per launcher, the resumed
run's seconds and peak RSS, and checks that every resumed run's results equal an uninterrupted
run's.

    cargo build --release -p weir-nexmark
    python3 benchmarks/state/restart_bench.py --query 9 --num-events 20000000 --budget 64m

`--resume-args '--partitions 3'` resumes at another parallelism (the first run has the
default, eight partitions per core). `--launchers A,B` compares builds (say, one from before a change, copied aside, and the
current one); the first one runs the uninterrupted run and the stopped one.
"""

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from disk_bench import ROOT, lines, peak_rss_mb  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--query", default="9")
    ap.add_argument("--num-events", default="20000000")
    ap.add_argument("--budget", default="64m")
    ap.add_argument("--stop-after", type=float, default=10.0, help="seconds before the first run is stopped")
    ap.add_argument("--launchers", default=os.path.join(ROOT, "target", "release", "nexmark"))
    ap.add_argument("--query-args", default="", help="options added to every run, e.g. '--max-auctions-waiting-time 31536000'")
    ap.add_argument("--resume-args", default="",
                    help="options added to the resumed runs only, e.g. '--partitions 3' (a restart at another "
                         "parallelism: the state is spread over the new partitions key group by key group)")
    a = ap.parse_args()
    launchers = a.launchers.split(",")
    work = tempfile.mkdtemp(prefix="weir-restart-")
    try:
        base = ["--query", a.query, "--num-events", a.num_events, "--streaming", "--max-batch-size", "100000",
                "--state-backend", "disk", "--state-memory-budget", a.budget, "--state-local-dir", work] + a.query_args.split()
        whole = os.path.join(work, "whole")
        peak_rss_mb(launchers[0], base + ["--results", whole])
        cp, out = os.path.join(work, "cp"), os.path.join(work, "out")
        first = subprocess.Popen([launchers[0]] + base + ["--checkpoint-dir", cp, "--results", out],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        time.sleep(a.stop_after)
        if first.poll() is not None:
            raise SystemExit(f"the first run ended before it was stopped: raise --num-events\n{first.stderr.read()[-2000:]}")
        first.send_signal(signal.SIGTERM)
        first.communicate()
        state = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(os.path.join(cp, "state")) for f in fs)
        print(f"query {a.query}, {a.num_events} events, budget {a.budget}: stopped after {a.stop_after:.0f} s, "
              f"checkpointed state {state / 1e6:.0f} MB on disk")
        print(f"{'launcher':<40} {'resume s':>9} {'peak MB':>8}  results")
        for i, launcher in enumerate(launchers):
            cp_i, out_i = f"{cp}-{i}", f"{out}-{i}"
            shutil.copytree(cp, cp_i)
            shutil.copytree(out, out_i)
            resumed = base + ["--checkpoint-dir", cp_i, "--results", out_i] + a.resume_args.split()
            wall, _, mb = peak_rss_mb(launcher, resumed)
            same = "equal" if lines(out_i) == lines(whole) else "DIFFER"
            print(f"{launcher:<40} {wall:>9.1f} {mb:>8.0f}  {same}, {len(lines(out_i)):,}")
            shutil.rmtree(cp_i)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
