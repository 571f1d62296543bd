#!/usr/bin/env python3
"""State beyond memory: Nexmark queries on the disk state backend side by side with the memory
backend (issue 52's targets for `--state-backend disk`).

Each round runs a query on the memory backend and then on the disk backend with
`--state-memory-budget`, back to back, so the machine's load falls on both alike, writing both
runs' results (`--results`) and comparing them line by line. It prints, per query and mode,
seconds, events/s, peak RSS (the kernel's account) and whether the results are equal.

    cargo build --release -p weir-nexmark
    python3 benchmarks/state/disk_bench.py --queries 9 --num-events 20000000 --budget 512m

`--streaming --checkpoint` runs both in streaming with a checkpoint every batch. `--skip-memory`
leaves out the memory run (at 100 M events it does not fit a 24 GiB machine).
"""

import argparse
import os
import shutil
import subprocess
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run(binary, args):
    """Runs the launcher; returns (wall seconds, events/s)."""
    started = time.time()
    p = subprocess.Popen([binary] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = p.communicate()
    wall = time.time() - started
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed:\n{err[-4000:]}")
    eps = 0.0
    for line in out.splitlines():
        cols = line.split()
        if len(cols) >= 4 and cols[0].isdigit() and len(cols[0]) == 4:
            try:
                eps = float(cols[2])
            except ValueError:
                pass
    return wall, eps


def peak_rss_mb(binary, args):
    """Runs under /usr/bin/time for the peak resident set; returns (wall, events/s, MB)."""
    report = tempfile.NamedTemporaryFile(delete=False)
    report.close()
    wall, eps = run("/usr/bin/time", ["-f", "%M", "-o", report.name, binary] + args)
    with open(report.name) as f:
        kb = int(f.read().split()[-1])
    os.unlink(report.name)
    return wall, eps, kb / 1024.0


def lines(folder):
    """Every result line under `folder`, sorted (the sink's own metadata left out)."""
    out = []
    for dirpath, dirs, files in os.walk(folder):
        dirs[:] = [d for d in dirs if not d.startswith("_")]
        for name in files:
            if name.startswith((".", "_")):
                continue
            with open(os.path.join(dirpath, name)) as f:
                out.extend(f.read().splitlines())
    return sorted(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--queries", default="9")
    ap.add_argument("--num-events", default="20000000")
    ap.add_argument("--budget", default="512m")
    ap.add_argument("--streaming", action="store_true")
    ap.add_argument("--checkpoint", action="store_true")
    ap.add_argument("--skip-memory", action="store_true")
    ap.add_argument("--binary", default=os.path.join(ROOT, "target", "release", "nexmark"))
    a = ap.parse_args()
    rows = []
    for q in a.queries.split(","):
        work = tempfile.mkdtemp(prefix=f"weir-disk-bench-q{q}-")
        results = {}
        for mode in (["disk"] if a.skip_memory else ["memory", "disk"]):
            out = os.path.join(work, mode)
            args = ["--query", q, "--num-events", a.num_events, "--max-batch-size", "100000", "--results", out]
            if a.streaming:
                args.append("--streaming")
            if a.checkpoint:
                args += ["--checkpoint-dir", os.path.join(work, f"cp-{mode}")]
            if mode == "disk":
                args += ["--state-backend", "disk", "--state-memory-budget", a.budget, "--state-local-dir", work]
            wall, eps, rss = peak_rss_mb(a.binary, args)
            results[mode] = lines(out)
            rows.append((q, mode, wall, eps, rss, len(results[mode])))
            print(f"q{q} {mode:6} {wall:8.1f} s {eps:12,.0f} events/s  peak {rss:8,.0f} MB  {len(results[mode]):,} results", flush=True)
        if "memory" in results:
            equal = results["memory"] == results["disk"]
            print(f"q{q} results equal: {equal}", flush=True)
            m = [r for r in rows if r[0] == q]
            print(f"q{q} disk/memory: time x{m[1][2] / m[0][2]:.2f}, peak memory x{m[1][4] / m[0][4]:.2f}", flush=True)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
