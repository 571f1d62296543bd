#!/usr/bin/env bash
# Installs the WeirRunner artifact (dev.weir:weir-beam-runner) into the local Maven repository,
# running its tests against a weir-job-server built here, then runs Beam's word count from a
# separate project that depends on the installed artifact, with --runner=WeirRunner and the job
# server found on the PATH, and checks its counts.
#
#   java/test-runner.sh             (needs Java 17 and Maven)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/.." && pwd)"
cd "$repo"
cargo build -q --release -p weir-portable --bin weir-job-server
server="$repo/target/release/weir-job-server"
mvn -q -B -f "$here/weir-runner/pom.xml" install -Dweir.jobServer="$server"
python3 - "$here/weir-runner/target/surefire-reports" <<'PY'
import glob, sys, xml.etree.ElementTree as ET
tests = failed = 0
for f in glob.glob(sys.argv[1] + "/TEST-*.xml"):
    s = ET.parse(f).getroot()
    tests += int(s.get("tests")); failed += int(s.get("failures")) + int(s.get("errors"))
print(f"WeirRunner's tests: {tests} ran, {failed} failed")
sys.exit(1 if tests == 0 or failed else 0)
PY
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
PATH="$repo/target/release:$PATH" mvn -q -B -f "$here/examples/pom.xml" compile exec:java \
  -Dexec.args="--runner=WeirRunner --inputFile=$repo/README.md --output=$scratch/counts" >"$scratch/log" 2>&1 \
  || { tail -40 "$scratch/log"; exit 1; }
python3 - "$repo/README.md" "$scratch" <<'PY'
import collections, glob, re, sys
want = collections.Counter(re.findall(r"[^\W\d_]+", open(sys.argv[1]).read()))
got = {}
for f in glob.glob(sys.argv[2] + "/counts-*"):
    for line in open(f):
        w, n = line.rstrip("\n").rsplit(": ", 1)
        got[w] = int(n)
assert got == dict(want), (len(got), len(want), sorted(set(got) ^ set(want))[:10])
print(f"Beam Java word count on WeirRunner: {len(got)} words, {sum(got.values())} in all, as counted here")
PY
# The docs' commands for Beam Java (README.md, docs/beam-java.md), as written.
rm -rf /tmp/weir-java
bash -euo pipefail -c "$(python3 tools/docs_blocks.py --marker maven)"
for written in counts portable; do
  test -n "$(cat /tmp/weir-java/$written-* 2>/dev/null)" || { echo "the docs' Beam Java commands wrote no /tmp/weir-java/$written-*" >&2; exit 1; }
done
echo "the docs' Beam Java commands ran"
