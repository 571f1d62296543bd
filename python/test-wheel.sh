#!/usr/bin/env bash
# Builds the `weir-beam` wheel with maturin, installs it into a fresh virtual environment with
# Beam Python, and runs python/tests there with no Rust toolchain on the PATH: what a user who
# pip-installs the wheel gets.
#
#   python/test-wheel.sh            (needs maturin on the PATH: pip install maturin)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
beam_version="${WEIR_BEAM_VERSION:-2.77.0}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
(cd "$here" && maturin build --release --quiet --out "$work/wheels")
wheel="$(ls "$work"/wheels/weir_beam-*.whl)"
echo "== $(basename "$wheel"): $(du -h "$wheel" | cut -f1)"
python3 -m venv "$work/venv"
"$work/venv/bin/pip" install -q "$wheel" "apache-beam==$beam_version" pytest
# The user's environment: the venv and the system, no cargo, no rustc.
clean_path="$work/venv/bin:/usr/local/bin:/usr/bin:/bin"
if env PATH="$clean_path" sh -c 'command -v cargo || command -v rustc' >/dev/null; then
  echo "test-wheel.sh: a Rust toolchain is on the clean PATH ($clean_path)" >&2
  exit 1
fi
cd "$work"
env -i HOME="$HOME" PATH="$clean_path" "$work/venv/bin/python" -m pytest "$here/tests" -q -p no:cacheprovider
# The docs' commands for Beam Python (README.md, docs/beam-python.md), as written, in the venv.
repo="$(cd "$here/.." && pwd)"
rm -rf /tmp/weir-py
(cd "$repo" && env PATH="$work/venv/bin:$PATH" bash -euo pipefail -c "$(python3 tools/docs_blocks.py --marker wheel)")
python3 - "$repo/README.md" /tmp/weir-py <<'PY'
import collections, glob, re, sys
want = collections.Counter(re.findall(r"[^\W\d_]+", open(sys.argv[1]).read()))
for out in ("counts", "shared"):
    got = {}
    for f in glob.glob(f"{sys.argv[2]}/{out}-*"):
        for line in open(f):
            w, n = line.rstrip("\n").rsplit(": ", 1)
            got[w] = int(n)
    assert got == dict(want), (out, len(got), len(want))
print(f"the docs' Beam Python commands ran: {len(want)} words counted twice, as counted here")
PY
