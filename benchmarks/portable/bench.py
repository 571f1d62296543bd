#!/usr/bin/env python3
"""Beam Python pipelines on Weir against Beam Python's own runner, side by side.

Beam Python's DirectRunner runs a batch pipeline on its FnApiRunner, in the submitting
process. Weir runs it through `weir-job-server`: Weir groups, windows and moves the data, and
Beam's SDK harnesses run the user's code. Each round runs every configuration once, one after
another, so the machine's load falls on all alike; the table gives median wall seconds (the
whole `python` command: start, submission, run) and each configuration's ratio to the
DirectRunner (the median of per-round ratios). The job server's own report of the data plane
(bundles, elements and bytes each way, per element cost) is printed for the last round.

    cargo build --release -p weir-portable --bin weir-job-server -p weir-nexmark
    python3 benchmarks/portable/bench.py --python ~/.cache/weir-beam-venv/bin/python \\
        --wordcount-mb 100 --nexmark-events 100000 --queries 0,1,2 --rounds 3

Configurations: `direct` (FnApiRunner), `weir-loopback` (the harness in the submitting process,
as `--environment_type=LOOPBACK`), `weir-process` (`--sdk-workers` harness processes started
by the job server, `--environment_type=PROCESS`).
"""

import argparse
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def make_text(path, megabytes, seed=7):
    """A text of `megabytes` MB: lines of 5 to 15 words from a 20,000-word vocabulary."""
    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = ["".join(rng.choice(letters) for _ in range(rng.randint(2, 9))) for _ in range(20000)]
    size, target = 0, megabytes * 1_000_000
    with open(path, "w") as f:
        while size < target:
            line = " ".join(rng.choice(words) for _ in range(rng.randint(5, 15))) + "\n"
            f.write(line)
            size += len(line)


class JobServer:
    """`weir-job-server` on a free port, with its log in a file."""

    def __init__(self, binary, args, log):
        self.log = log
        self.proc = subprocess.Popen(
            [binary, "--job-port", "0"] + args,
            stdout=subprocess.PIPE,
            stderr=open(log, "w"),
            text=True,
            env=dict(os.environ, RUST_LOG="weir_portable=info"))
        line = self.proc.stdout.readline()
        self.endpoint = "localhost:" + line.strip().rsplit(":", 1)[-1]

    def data_plane(self):
        with open(self.log) as f:
            lines = [l for l in f if "data plane:" in l]
        return lines[-1].split("data plane:", 1)[1].strip() if lines else "(none)"

    def stop(self):
        self.proc.kill()
        self.proc.wait()


def timed(cmd):
    began = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True)
    took = time.time() - began
    if p.returncode != 0:
        sys.exit("failed: %s\n%s" % (" ".join(cmd), p.stderr[-3000:]))
    return took


NEXMARK = """
import logging, sys
logging.basicConfig(level=logging.WARNING)
from apache_beam.testing.benchmarks.nexmark.nexmark_launcher import NexmarkLauncher
sys.argv = ["nexmark"] + sys.argv[1:]
launcher = NexmarkLauncher()
launcher.run()
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--python", default=os.environ.get("WEIR_BEAM_PYTHON", "python3"))
    ap.add_argument("--job-server", default=os.path.join(ROOT, "target/release/weir-job-server"))
    ap.add_argument("--nexmark", default=os.path.join(ROOT, "target/release/nexmark"))
    ap.add_argument("--wordcount-mb", type=int, default=100)
    ap.add_argument("--nexmark-events", type=int, default=100000)
    ap.add_argument("--queries", default="0,1,2")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--sdk-workers", type=int, default=2)
    ap.add_argument("--configs", default="direct,weir-loopback,weir-process")
    ap.add_argument("--streaming", action="store_true",
                    help="run the Nexmark queries in streaming mode (nexmark_streaming.py: an unbounded "
                         "replay of the events file) instead of Beam's batch launcher")
    ap.add_argument("--slices", type=int, default=20, help="event-time slices of a streaming replay")
    args = ap.parse_args()

    work = tempfile.mkdtemp(prefix="weir-portable-bench-")
    text = os.path.join(work, "text.txt")
    if args.wordcount_mb > 0:
        make_text(text, args.wordcount_mb)
    events = os.path.join(work, "events.json")
    subprocess.run([args.nexmark, "--num-events", str(args.nexmark_events), "--export-events", events],
                   check=True, capture_output=True)
    server = JobServer(args.job_server, ["--python", args.python, "--sdk-workers", str(args.sdk_workers)],
                       os.path.join(work, "job-server.log"))
    weir = ["--runner=PortableRunner", "--job_endpoint=" + server.endpoint]
    flags = {
        "direct": [],
        "weir-loopback": weir + ["--environment_type=LOOPBACK"],
        "weir-process": weir + ["--environment_type=PROCESS", '--environment_config={"command": "weir"}'],
    }
    configs = args.configs.split(",")
    jobs = [("wordcount %d MB" % args.wordcount_mb,
             lambda out: ["-m", "apache_beam.examples.wordcount", "--input", text, "--output", out])]
    if args.wordcount_mb <= 0:
        jobs = []
    streaming = os.path.join(ROOT, "benchmarks/portable/nexmark_streaming.py")
    for q in args.queries.split(","):
        if args.streaming:
            jobs.append(("streaming q%s %d events" % (q, args.nexmark_events),
                         lambda out, q=q: [streaming, "--events", events, "--slices", str(args.slices),
                                           "--query", q, "--num_events", str(args.nexmark_events)]))
        else:
            jobs.append(("nexmark q%s %d events" % (q, args.nexmark_events),
                         lambda out, q=q: ["-c", NEXMARK, "--query", q, "--input", events,
                                           "--num_events", str(args.nexmark_events)]))
    times = {(j, c): [] for j, _ in jobs for c in configs}
    planes = {}
    for r in range(args.rounds):
        for job, cmd in jobs:
            for c in configs:
                out = os.path.join(work, "out-%d-%s" % (r, c), "part")
                took = timed([args.python] + cmd(out) + flags[c])
                times[(job, c)].append(took)
                if c.startswith("weir"):
                    planes[(job, c)] = server.data_plane()
                print("round %d  %-28s %-14s %6.2f s" % (r + 1, job, c, took), flush=True)
    server.stop()
    print()
    print("%-28s %s" % ("job", "  ".join("%14s" % c for c in configs)))
    for job, _ in jobs:
        cells = []
        for c in configs:
            med = statistics.median(times[(job, c)])
            ratio = statistics.median(d / t for d, t in zip(times[(job, "direct")], times[(job, c)])) \
                if "direct" in configs else float("nan")
            cells.append("%6.2f s x%4.2f" % (med, ratio))
        print("%-28s %s" % (job, "  ".join("%14s" % x for x in cells)))
    print("\n(x: the DirectRunner's time over this one's, median of the rounds)")
    for (job, c), plane in sorted(planes.items()):
        print("%s, %s: %s" % (job, c, plane))


if __name__ == "__main__":
    main()
