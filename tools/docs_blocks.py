#!/usr/bin/env python3
"""The shell commands of Weir's docs (README.md and docs/*.md), for the tests that run them.

Every ```sh block is preceded by a marker saying which test runs it, as written:

    <!-- docs-test: fast -->    tests/tests/docs.rs, in `cargo test --workspace`
    <!-- docs-test: long -->    tests/tests/docs.rs with --ignored (long runs, benchmarks)
    <!-- docs-test: wheel -->   python/test-wheel.sh, in a fresh virtual environment
    <!-- docs-test: maven -->   java/test-runner.sh
    <!-- docs-test: ci -->      .ci/run itself (the test command)

    tools/docs_blocks.py --list            every block as JSON lines: file, line, marker, text
    tools/docs_blocks.py --marker wheel    the blocks with that marker, as one bash script
"""

import argparse
import glob
import json
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MARKER = re.compile(r"^<!-- docs-test: (\w+) -->$")


def blocks():
    files = ["README.md"] + sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "docs", "*.md")))
    for name in files:
        lines = open(os.path.join(ROOT, name)).read().split("\n")
        marker, i = None, 0
        while i < len(lines):
            line = lines[i]
            m = MARKER.match(line.strip())
            if m:
                marker = m.group(1)
            elif line.startswith("```sh"):
                start, body = i + 1, []
                i += 1
                while i < len(lines) and not lines[i].startswith("```"):
                    body.append(lines[i])
                    i += 1
                yield {"file": name, "line": start, "marker": marker, "text": "\n".join(body)}
                marker = None
            elif line.strip():
                marker = None
            i += 1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--marker")
    args = ap.parse_args()
    if args.list:
        for b in blocks():
            print(json.dumps(b))
        return
    if not args.marker:
        ap.error("--list or --marker")
    found = [b for b in blocks() if b["marker"] == args.marker]
    if not found:
        sys.exit(f"docs_blocks.py: no block is marked {args.marker!r}")
    for b in found:
        print(f"# {b['file']}:{b['line']}")
        print(b["text"])


if __name__ == "__main__":
    main()
