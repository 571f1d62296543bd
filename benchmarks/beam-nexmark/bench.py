#!/usr/bin/env python3
"""Beam's own Java Nexmark on Weir, side by side with Beam's Direct, Spark and Flink runners.

The same launcher, `org.apache.beam.sdk.nexmark.Main` from `beam-sdks-java-nexmark`, runs every
query of the list once per runner and mode, one after another, with the same configuration:

    direct            Beam's DirectRunner (Beam's defaults, as its users run it)
    spark             Beam's Spark runner, Spark 3.5 in local mode (--sparkMaster=local[2])
    flink             Beam's Flink runner, Flink 1.19 embedded (--flinkMaster=[local] --parallelism=2)
    weir-microbatch   Beam's PortableRunner against weir-job-server --runner microbatch
    weir-timely       Beam's PortableRunner against weir-job-server --runner timely --workers 2

Weir's runs take their Java harnesses from --environment: LOOPBACK (in the launcher's JVM) or
PROCESS (started by the job server with Beam's Java boot). Sizes: Nexmark's SMOKE configuration
(100,000 events, 10,000 for queries 4, 6 and 9), or --num-events for every query.

For each query and mode it prints Nexmark's own figures (runtime and events/s, from the first
event to the last result, and the result count), the ratio of Weir's best to the DirectRunner
and to the faster of Spark and Flink, and, for Weir, the CPU of the job server (the runner)
against the whole job's. It writes the figures as JSON, a Markdown table and an HTML page with
charts into --out. A count that differs from the DirectRunner's is marked; --check fails the run
on one (for the queries whose counts Beam's model fixes: see COUNTS_FIXED).

    cargo build --release -p weir-portable --bin weir-job-server
    python3 benchmarks/beam-nexmark/bench.py --queries 0,1,2,3,5,7,8,11,12 --modes batch,streaming

Needs Java 17 and Maven (the classpaths come from this directory's pom.xml, profiles `portable`
and `classic`).
"""

import argparse
import html
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
RUNNERS = ["direct", "spark", "flink", "weir-microbatch", "weir-timely"]
# Queries whose result count Beam's model fixes. The others fire triggers per pane
# (AfterPane.elementCountAtLeast(1) in q6; processing-time triggers in q12...) or write
# files (q10), so a runner may emit fewer, larger panes and still be right.
COUNTS_FIXED = {0, 1, 2, 3, 4, 5, 7, 8, 9, 11, 13, 14, 15, 16}
# What Spark needs of Java 17's modules.
JVM_FLAGS = [
    "--add-opens=java.base/java.nio=ALL-UNNAMED",
    "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED",
    "--add-opens=java.base/java.lang=ALL-UNNAMED",
    "--add-opens=java.base/java.util=ALL-UNNAMED",
    "--add-opens=java.base/java.lang.invoke=ALL-UNNAMED",
]


# Nexmark's queries by number (NexmarkQueryName).
NAMES = ["PASSTHROUGH", "CURRENCY_CONVERSION", "SELECTION", "LOCAL_ITEM_SUGGESTION",
         "AVERAGE_PRICE_FOR_CATEGORY", "HOT_ITEMS", "AVERAGE_SELLING_PRICE_BY_SELLER", "HIGHEST_BID",
         "MONITOR_NEW_USERS", "WINNING_BIDS", "LOG_TO_SHARDED_FILES", "USER_SESSIONS",
         "PROCESSING_TIME_WINDOWS", "BOUNDED_SIDE_INPUT_JOIN", "SESSION_SIDE_INPUT_JOIN",
         "PORTABILITY_BATCH", "RESHUFFLE"]


def smoke_events(query):
    """Nexmark's SMOKE suite: 100,000 events, a tenth of that for queries 4, 6 and 9."""
    return 10_000 if query in (4, 6, 9) else 100_000


def classpath(profile, build):
    """The classpath of this directory's pom.xml under `profile`, resolved once per pom."""
    out = os.path.join(build, profile + ".cp")
    pom = os.path.join(HERE, "pom.xml")
    if not os.path.exists(out) or os.path.getmtime(out) < os.path.getmtime(pom):
        os.makedirs(build, exist_ok=True)
        subprocess.run(["mvn", "-q", "-B", "-f", pom, "-P" + profile, "dependency:build-classpath",
                        "-Dmdep.outputFile=" + out], check=True)
    with open(out) as f:
        return f.read().strip()


def cpu_seconds(pid):
    """(own, waited-for children's) CPU seconds of a process, from /proc."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / tick, (int(fields[13]) + int(fields[14])) / tick


def portable_bench():
    """benchmarks/portable/bench.py, for its JobServer (weir-job-server on a free port)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("portable_bench", os.path.join(ROOT, "benchmarks/portable/bench.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


PERF_ROW = re.compile(r"^\s*(\d{4})\s+(\*\*\* not run \*\*\*|[\d.]+)\s+(?:([\d.]+)\s+(-?\d+))?")


def parse_perf(out):
    """Nexmark's last Performance table: [(runtime s, events/s, results)] or None (not run)."""
    tables = out.split("Performance:")
    if len(tables) < 2:
        return None
    rows = []
    for line in tables[-1].splitlines()[2:]:
        m = PERF_ROW.match(line)
        if not m:
            break
        if m.group(2).startswith("***"):
            rows.append(None)
        else:
            rows.append((float(m.group(2)), float(m.group(3)), int(m.group(4))))
    return rows


def run_query(java, cp, runner_args, query, events, streaming, log, timeout):
    """One Nexmark Main run of one query: its figures, wall seconds and JVM CPU seconds."""
    cmd = [java] + JVM_FLAGS + ["-cp", cp, "org.apache.beam.sdk.nexmark.Main"] + runner_args + [
        "--suite=DEFAULT", "--query=%d" % query, "--numEvents=%d" % events,
        "--streaming=%s" % ("true" if streaming else "false"),
        "--manageResources=false", "--monitorJobs=true"]
    began = time.time()
    with open(log, "w") as f:
        f.write(" ".join(cmd) + "\n")
        f.flush()
        p = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT)
        killer = threading.Timer(timeout, p.kill)
        killer.start()
        try:
            _, status, usage = os.wait4(p.pid, 0)
            p.returncode = os.waitstatus_to_exitcode(status)
        finally:
            killer.cancel()
            if p.returncode is None:
                p.kill()
    wall = time.time() - began
    out = open(log).read()
    if wall >= timeout:
        out += "\nException in thread: killed after %d s (--timeout)\n" % timeout
    rows = parse_perf(out)
    row = rows[0] if rows else None
    error = None
    if p.returncode != 0 or row is None:
        m = re.findall(r"^(?:Exception in thread.*|Caused by: .*)$", out, re.M)
        error = (m[-1] if m else "exit %d" % p.returncode)[:300]
    return {"row": row, "wall": wall, "jvm_cpu": usage.ru_utime + usage.ru_stime, "error": error}


def runner_args(runner, endpoint, environment, boot):
    if runner == "direct":
        return ["--runner=DirectRunner"]
    if runner == "spark":
        return ["--runner=SparkRunner", "--sparkMaster=local[2]"]
    if runner == "flink":
        return ["--runner=FlinkRunner", "--flinkMaster=[local]", "--parallelism=2"]
    args = ["--runner=PortableRunner", "--jobEndpoint=" + endpoint]
    if environment == "loopback":
        return args + ["--defaultEnvironmentType=LOOPBACK"]
    return args + ["--defaultEnvironmentType=PROCESS",
                   '--defaultEnvironmentConfig={"command":"%s"}' % boot,
                   "--experiments=beam_fn_api,use_staged_dataflow_worker_jar,"
                   "use_custom_logging_libraries,disable_jamm_agent"]


def ratio(a, b):
    return None if not a or not b else a / b


def fmt(v, digits=1):
    return "-" if v is None else ("%.*f" % (digits, v))


def tables(results, runners, modes, queries):
    """The Markdown tables: per mode, per query, each runner's seconds and counts, the ratios."""
    lines = []
    weirs = [r for r in runners if r.startswith("weir")]
    for mode in modes:
        lines.append("\n### %s\n" % mode)
        head = ["query", "events"] + ["%s s" % r for r in runners] + ["results"]
        if weirs and "direct" in runners:
            head.append("Weir vs direct")
        if weirs and ("spark" in runners or "flink" in runners):
            head.append("Weir vs faster of Spark, Flink")
        if weirs and any("job_cpu" in v for v in results.values()):
            head.append("Weir's share of the job's CPU")
        lines.append("| " + " | ".join(head) + " |")
        lines.append("|" + "---|" * len(head))
        for q in queries:
            rs = {r: results.get("%s/%s/%d" % (r, mode, q)) for r in runners}
            if not any(rs.values()):
                continue
            secs = {r: (v["row"][0] if v and v["row"] else None) for r, v in rs.items()}
            counts = {r: (v["row"][2] if v and v["row"] else None) for r, v in rs.items()}
            events = next((v["events"] for v in rs.values() if v), 0)
            cells = ["q%d %s" % (q, NAMES[q].lower() if q < len(NAMES) else ""), "{:,}".format(events)]
            for r in runners:
                v = rs[r]
                cells.append(fmt(secs[r]) if secs[r] is not None else ("failed" if v and v["error"] else "-"))
            shown = sorted({c for c in counts.values() if c is not None})
            cells.append(", ".join("{:,}".format(c) for c in shown) if len(shown) > 1 or not shown else
                         "{:,}".format(shown[0]))
            if len(shown) > 1:
                cells[-1] += " (" + ", ".join("%s %s" % (r, "{:,}".format(c)) for r, c in counts.items()
                                            if c is not None) + ")"
            best = min((secs[r] for r in weirs if secs[r]), default=None)
            if "Weir vs direct" in head:
                v = ratio(secs.get("direct"), best)
                cells.append("x%.1f" % v if v else "-")
            if "Weir vs faster of Spark, Flink" in head:
                peer = min((secs[r] for r in ("spark", "flink") if secs.get(r)), default=None)
                v = ratio(peer, best)
                cells.append("x%.1f" % v if v else "-")
            if "Weir's share of the job's CPU" in head:
                shares = []
                for r in weirs:
                    v = rs[r]
                    if v and v.get("runner_cpu") is not None and v.get("job_cpu"):
                        shares.append("%s %.0f%%" % (r.split("-")[1], 100 * v["runner_cpu"] / v["job_cpu"]))
                cells.append(", ".join(shares) or "-")
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def bar_chart(title, bars, width=760):
    """An inline SVG of horizontal bars, longest scaled to the width."""
    top = max((v for _, v in bars if v), default=1.0)
    h = 22 * len(bars) + 30
    out = ['<svg width="%d" height="%d" role="img"><title>%s</title>' % (width, h, html.escape(title)),
           '<text x="0" y="16" font-weight="bold">%s</text>' % html.escape(title)]
    for i, (label, v) in enumerate(bars):
        y = 26 + 22 * i
        out.append('<text x="0" y="%d">%s</text>' % (y + 14, html.escape(label)))
        if v:
            w = max(1, int((width - 300) * v / top))
            out.append('<rect x="170" y="%d" width="%d" height="16" fill="%s"/>'
                       % (y + 2, w, "#2a7" if label.startswith("weir") else "#888"))
            out.append('<text x="%d" y="%d">%.0f events/s</text>' % (176 + w, y + 14, v))
        else:
            out.append('<text x="170" y="%d">not run</text>' % (y + 14))
    out.append("</svg>")
    return "".join(out)


def page(results, runners, modes, queries, table, note):
    charts = []
    for mode in modes:
        for q in queries:
            bars = []
            for r in runners:
                v = results.get("%s/%s/%d" % (r, mode, q))
                if v:
                    bars.append((r, v["row"][1] if v["row"] else None))
            if bars:
                charts.append(bar_chart("q%d %s: events/s (Nexmark's own figure)" % (q, mode), bars))
    return ("<!doctype html><meta charset=utf-8><title>Beam's Java Nexmark: Weir and Beam's runners</title>"
            "<style>body{font-family:sans-serif;max-width:900px;margin:2em auto}table{border-collapse:collapse}"
            "td,th{border:1px solid #ccc;padding:2px 6px}svg{display:block;margin:1em 0}</style>"
            "<h1>Beam's Java Nexmark: Weir and Beam's runners</h1><p>%s</p><pre>%s</pre>%s"
            % (html.escape(note), html.escape(table), "".join(charts)))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runners", default=",".join(RUNNERS))
    ap.add_argument("--modes", default="batch,streaming")
    ap.add_argument("--queries", default=",".join(str(q) for q in range(17)))
    ap.add_argument("--num-events", type=int, help="events per query (default: Nexmark's SMOKE sizes)")
    ap.add_argument("--environment", choices=["loopback", "process"], default="loopback",
                    help="where Weir's Java harnesses run")
    ap.add_argument("--sdk-workers", type=int, default=2, help="PROCESS harnesses per job (one per core)")
    ap.add_argument("--job-server", default=os.path.join(ROOT, "target/release/weir-job-server"))
    ap.add_argument("--java", default="java")
    ap.add_argument("--timeout", type=int, default=600,
                    help="seconds a run may take before it is killed and reported failed")
    ap.add_argument("--out", default=os.path.join(HERE, "target", "report"))
    ap.add_argument("--direct-modes", help="the modes the DirectRunner runs in (default: --modes); a mode it "
                    "does not run is checked against its batch counts, which Beam's model makes the same")
    ap.add_argument("--only", help="RUNNER/MODE pairs to run, comma-separated, instead of every runner in "
                    "every mode (e.g. direct/batch,weir-timely/streaming)")
    ap.add_argument("--resume", action="store_true",
                    help="keep the runs of --out's results.json (written after every run) and run the rest")
    ap.add_argument("--check", action="store_true",
                    help="fail when a run fails or a count Beam's model fixes differs from the DirectRunner's")
    args = ap.parse_args()
    runners = args.runners.split(",")
    for r in runners + [p.split("/")[0] for p in (args.only or "").split(",") if p]:
        if r not in RUNNERS:
            sys.exit("bench.py: unknown runner %s (one of %s)" % (r, ", ".join(RUNNERS)))
    modes = args.modes.split(",")
    only = set(args.only.split(",")) if args.only else None
    if only:
        runners = [r for r in RUNNERS if any(p.split("/")[0] == r for p in only)]
        modes = [m for m in ("batch", "streaming") if any(p.endswith("/" + m) for p in only)]
    direct_modes = args.direct_modes.split(",") if args.direct_modes else modes
    queries = [int(q) for q in args.queries.split(",")]
    build = os.path.join(HERE, "target")
    cps = {}
    if any(r.startswith("weir") for r in runners):
        cps["portable"] = classpath("portable", build)
    if any(not r.startswith("weir") for r in runners):
        cps["classic"] = classpath("classic", build)
    boot = None
    if args.environment == "process" and any(r.startswith("weir") for r in runners):
        boot = subprocess.run([os.path.join(ROOT, "portable/java-tests/boot.sh")], check=True,
                              capture_output=True, text=True).stdout.strip()
    os.makedirs(args.out, exist_ok=True)
    logs = tempfile.mkdtemp(prefix="weir-beam-nexmark-")
    artifacts = os.environ.get("WEIR_JAVA_ARTIFACTS", os.path.expanduser("~/.cache/weir-java-artifacts"))
    results = {}
    saved = os.path.join(args.out, "results.json")
    if args.resume and os.path.exists(saved):
        with open(saved) as f:
            results = json.load(f)["results"]
        print("resuming: %d runs in %s" % (len(results), saved))
    failures = []
    for runner in runners:
        server = None
        if runner.startswith("weir"):
            flags = ["--runner", "microbatch"] if runner == "weir-microbatch" else ["--runner", "timely", "--workers", "2"]
            if args.environment == "process":
                flags += ["--sdk-workers", str(args.sdk_workers)]
            server = portable_bench().JobServer(args.job_server, ["--artifact-dir", artifacts] + flags,
                                                os.path.join(logs, runner + "-server.log"))
        try:
            for mode in modes:
                if runner == "direct" and mode not in direct_modes:
                    continue
                if only and "%s/%s" % (runner, mode) not in only:
                    continue
                for q in queries:
                    if mode == "streaming" and q == 15:
                        continue  # PORTABILITY_BATCH: Nexmark runs it in batch only.
                    events = args.num_events or smoke_events(q)
                    if "%s/%s/%d" % (runner, mode, q) in results:
                        continue
                    log = os.path.join(logs, "%s-%s-q%d.log" % (runner, mode, q))
                    before = cpu_seconds(server.proc.pid) if server else None
                    cp = cps["portable" if server else "classic"]
                    r = run_query(args.java, cp, runner_args(runner, server and server.endpoint, args.environment, boot),
                                  q, events, mode == "streaming", log, args.timeout)
                    r["events"] = events
                    r["log"] = log
                    if server:
                        own, children = cpu_seconds(server.proc.pid)
                        r["runner_cpu"] = own - before[0]
                        r["data_plane"] = server.data_plane()
                        if args.environment == "process":
                            # The harnesses are the job server's children, reaped at the job's
                            # end: the job's CPU is theirs and the runner's, without the
                            # launcher's JVM (building, staging and monitoring the job).
                            r["harness_cpu"] = children - before[1]
                            r["job_cpu"] = r["runner_cpu"] + r["harness_cpu"]
                    results["%s/%s/%d" % (runner, mode, q)] = r
                    with open(saved, "w") as f:
                        json.dump({"results": results}, f, indent=1)
                    row = r["row"]
                    print("%-16s %-9s q%-2d %s" % (runner, mode, q,
                          "%.1f s, %.0f events/s, %d results (wall %.1f s)" % (row[0], row[1], row[2], r["wall"])
                          if row else "FAILED: %s (log %s)" % (r["error"], log)), flush=True)
        finally:
            if server:
                server.stop()
    # The report covers every run in the results, resumed ones included.
    ran = {k.split("/")[0] for k in results}
    runners = [r for r in RUNNERS if r in ran or r in runners]
    modes = [m for m in ("batch", "streaming") if m in modes or any(k.split("/")[1] == m for k in results)]
    # Counts against the DirectRunner's, in the same mode or else in batch.
    checked = 0
    for key, r in results.items():
        runner, mode, q = key.split("/")
        if not r["row"]:
            failures.append("%s %s q%s: %s (log %s)" % (runner, mode, q, r["error"], r["log"]))
        if runner == "direct" or "direct" not in runners or int(q) not in COUNTS_FIXED or not r["row"]:
            continue
        d = results.get("direct/%s/%s" % (mode, q)) or results.get("direct/batch/%s" % q)
        if not d or not d["row"]:
            failures.append("%s %s q%s: no count of the DirectRunner's to check against" % (runner, mode, q))
        elif r["row"][2] != d["row"][2]:
            failures.append("%s %s q%s: %d results, the DirectRunner %d" % (runner, mode, q, r["row"][2], d["row"][2]))
        else:
            checked += 1
    if "direct" in runners:
        print("%d counts checked equal to the DirectRunner's" % checked)
    table = tables(results, runners, modes, queries)
    note = ("Beam's Java Nexmark (beam-sdks-java-nexmark 2.60.0), %s events per query, Weir's harnesses %s; "
            "seconds and events/s are Nexmark's own (first event to last result)." %
            ("{:,}".format(args.num_events) if args.num_events else "SMOKE's", args.environment.upper()))
    print(note)
    print(table)
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump({"note": note, "results": results}, f, indent=1)
    with open(os.path.join(args.out, "table.md"), "w") as f:
        f.write(note + "\n" + table)
    with open(os.path.join(args.out, "index.html"), "w") as f:
        f.write(page(results, runners, modes, queries, table, note))
    print("written: %s/{results.json,table.md,index.html}; logs in %s" % (args.out, logs))
    for f in failures:
        print("NOT AS EXPECTED: " + f)
    if args.check and failures:
        sys.exit(1)


if __name__ == "__main__":
    main()
