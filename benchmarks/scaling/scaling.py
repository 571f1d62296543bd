#!/usr/bin/env python3
"""Nexmark configurations side by side, interleaved, with the median events/s and ratios.

Each round runs every configuration once, one after another, so the machine's load (which on
a shared machine moves by tens of percent over minutes) falls on all of them alike. The table
gives each query's median events/s per configuration over the rounds, and the ratio of every
configuration to the first, as medians of the per-round ratios (a round's ratio compares two
runs made seconds apart). CPU seconds (user + system, from the kernel's accounting of the
child) are reported beside, since they do not depend on what else the machine runs: a
configuration that scales badly shows it as extra CPU.

A configuration is a label and the launcher flags that make it, `label=flags`, or with a binary
of its own, `label@path=flags` (to compare two builds):

    # the Timely runner's scaling, 2 workers against 1 (issue: q5, q8, q9 at >= 1.7x)
    python3 benchmarks/scaling/scaling.py --rounds 7 --queries 5,8,9 --num-events 2000000 \\
        "w1=--runner timely --workers 1" "w2=--runner timely --workers 2"
    # micro-batch parallelism, and oversubscription (4 threads on 2 cores)
    python3 benchmarks/scaling/scaling.py --queries 5,8,9 \\
        "p1=--parallelism 1" "p2=--parallelism 2" "p4=--parallelism 4"
    # timely with one worker against micro-batch with one partition
    python3 benchmarks/scaling/scaling.py --suite smoke --num-events 1000000 \\
        "mb=--runner microbatch --parallelism 1" "t1=--runner timely --workers 1"

Every run is `nexmark --num-events N [--query Q...] FLAGS`, with the release binary
(`cargo build --release -p weir-nexmark`, with `--features timely` for `--runner timely`).
"""

import argparse
import os
import re
import resource
import shlex
import statistics
import subprocess
import sys

ROW = re.compile(r"^\s*(\d{4})\s+([\d.]+)\s+([\d.]+)\s+(-?\d+)\s*$")
CONF = re.compile(r"^\s*(\d{4})\s+query:(\w+)")


def run(binary, flags, args):
    cmd = [binary, "--num-events", str(args.num_events)]
    if args.suite:
        cmd += ["--suite", args.suite]
    for q in args.queries:
        cmd += ["--query", q]
    cmd += flags
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    p = subprocess.run(cmd, capture_output=True, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0:
        sys.exit(f"failed ({p.returncode}): {shlex.join(cmd)}\n{p.stderr[-2000:]}")
    names, rates, results = {}, {}, {}
    for line in p.stdout.splitlines():
        m = CONF.match(line)
        if m:
            names[m.group(1)] = m.group(2)
            continue
        m = ROW.match(line)
        if m and m.group(1) in names:
            rates[names[m.group(1)]] = float(m.group(3))
            results[names[m.group(1)]] = int(m.group(4))
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return rates, results, cpu


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("configs", nargs="+", help="label=launcher flags; the first is the baseline")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--num-events", type=int, default=2000000)
    ap.add_argument("--queries", default="", help="comma-separated query numbers or names")
    ap.add_argument("--suite", default="", help="a suite instead of (or with) --queries")
    ap.add_argument("--binary", default=os.path.join(os.path.dirname(__file__), "..", "..", "target", "release",
                                                       "nexmark"))
    args = ap.parse_args()
    args.queries = [q for q in args.queries.split(",") if q]
    if not args.queries and not args.suite:
        args.suite = "smoke"
    configs = []
    for c in args.configs:
        label, _, flags = c.partition("=")
        label, _, binary = label.partition("@")
        configs.append((label, (binary or args.binary, shlex.split(flags))))
    rates = {label: [] for label, _ in configs}
    cpus = {label: [] for label, _ in configs}
    counts = {}
    for r in range(args.rounds):
        for label, flags in configs:
            got, results, cpu = run(flags[0], flags[1], args)
            rates[label].append(got)
            cpus[label].append(cpu)
            for q, n in results.items():
                if counts.setdefault(q, n) != n:
                    sys.exit(f"MISMATCH: {q} gave {n} results on {label}, {counts[q]} before")
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
    base = configs[0][0]
    queries = list(rates[base][0].keys())
    head = ["query"] + [f"{l} ev/s" for l, _ in configs] + [f"{l}/{base}" for l, _ in configs[1:]]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for q in queries:
        cells = [q]
        for label, _ in configs:
            cells.append(f"{statistics.median(run[q] for run in rates[label]):,.0f}")
        for label, _ in configs[1:]:
            ratios = [a[q] / b[q] for a, b in zip(rates[label], rates[base])]
            cells.append(f"{statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f})")
        print("| " + " | ".join(cells) + " |")
    print()
    print("CPU seconds per run (user + system, median): " +
          ", ".join(f"{l} {statistics.median(cpus[l]):.2f}" for l, _ in configs))


if __name__ == "__main__":
    main()
