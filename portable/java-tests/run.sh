#!/usr/bin/env bash
# Beam Java's ValidatesRunner suite against weir-job-server.
#
#   portable/java-tests/run.sh [--runner microbatch|timely] [--environment loopback|process] [--fast]
#                              [--test 'Class#method,...'] [--debug]
#
# Builds weir-job-server, starts it on a free port of 127.0.0.1 with the runner given (timely
# runs 2 workers), and runs the ValidatesRunner tests of beam-sdks-java-core's tests jar with
# Beam's TestUniversalRunner and LOOPBACK harnesses. Then prints a table of passed, failed and
# skipped tests per class, every test that did not pass with its reason, and the totals; it
# fails when a test fails or none ran.
#   --environment  where the Java harnesses run: LOOPBACK (in the test's JVM, the default) or
#            PROCESS (started by weir-job-server with Beam's Java boot, which this builds with Go
#            from Beam's module on the Go module proxy, and which fetches the staged jars from
#            the job server);
#   --fast   the subset CI runs (a few classes covering every category);
#   --test   surefire's -Dtest selection instead of the whole suite;
#   --forks  how many JVMs run tests at once (2: a test spends most of its time in Beam's
#            client, which polls the job's state every 3 s).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
runner=microbatch
test=""
profile=release
forks=2
environment=loopback
while [ $# -gt 0 ]; do
  case "$1" in
    --runner) runner="$2"; shift 2 ;;
    --runner=*) runner="${1#--runner=}"; shift ;;
    --test) test="$2"; shift 2 ;;
    --test=*) test="${1#--test=}"; shift ;;
    --fast) test="$(grep -v '^#' "$here/fast-tests.txt" | paste -sd, -)"; shift ;;
    --forks) forks="$2"; shift 2 ;;
    --environment) environment="$2"; shift 2 ;;
    --environment=*) environment="${1#--environment=}"; shift ;;
    --debug) profile=debug; shift ;;
    *) echo "run.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
case "$runner" in
  microbatch) weir_flags=(--runner microbatch) ;;
  timely) weir_flags=(--runner timely --workers 2) ;;
  *) echo "run.sh: --runner is microbatch or timely, not $runner" >&2; exit 2 ;;
esac

cd "$repo"
if [ "$profile" = release ]; then
  cargo build -q --release -p weir-portable --bin weir-job-server
else
  cargo build -q -p weir-portable --bin weir-job-server
fi
server="$repo/target/$profile/weir-job-server"

work="$(mktemp -d)"
# The jars Beam stages with every job stay in one store across runs (content-addressed).
artifacts="${WEIR_JAVA_ARTIFACTS:-$HOME/.cache/weir-java-artifacts}"
"$server" --job-port 0 --artifact-dir "$artifacts" "${weir_flags[@]}" >"$work/server.out" 2>"$work/server.log" &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; [ -n "${WEIR_KEEP_LOGS:-}" ] && cp "$work/server.log" "$WEIR_KEEP_LOGS"; rm -rf "$work"' EXIT
for _ in $(seq 1 100); do
  port=$(sed -n 's/.*listens on .*:\([0-9]*\)$/\1/p' "$work/server.out")
  [ -n "$port" ] && break
  sleep 0.1
done
[ -n "${port:-}" ] || { echo "weir-job-server did not start:"; cat "$work/server.log"; exit 1; }
echo "== weir-job-server ($runner) on 127.0.0.1:$port"

case "$environment" in
  loopback)
    options="[\"--runner=TestUniversalRunner\",\"--jobEndpoint=127.0.0.1:$port\",\"--defaultEnvironmentType=LOOPBACK\",\"--experiments=beam_fn_api\"]" ;;
  process)
    boot="$("$here/boot.sh")"
    # Beam's boot looks for the harness and logging jars in its container's /opt/apache/beam/jars
    # unless told they are among the staged jars (they are: the test's classpath is staged).
    experiments="beam_fn_api,use_staged_dataflow_worker_jar,use_custom_logging_libraries,disable_jamm_agent"
    options="[\"--runner=TestUniversalRunner\",\"--jobEndpoint=127.0.0.1:$port\",\"--defaultEnvironmentType=PROCESS\",\"--defaultEnvironmentConfig={\\\"command\\\":\\\"$boot\\\"}\",\"--experiments=$experiments\"]" ;;
  *) echo "run.sh: --environment is loopback or process, not $environment" >&2; exit 2 ;;
esac
mvn_args=(-B -q -f "$here/pom.xml" test -Dweir.options="$options" -Dsurefire.failIfNoSpecifiedTests=false -DtrimStackTrace=false -Dweir.forks="$forks")
[ -n "$test" ] && mvn_args+=(-Dweir.test="$test")
rm -rf "$here/target/surefire-reports"
set +e
mvn "${mvn_args[@]}" >"$work/mvn.log" 2>&1
status=$?
set -e
python3 "$here/report.py" "$here/target/surefire-reports" "$runner" || status=1
if [ $status -ne 0 ]; then
  tail -40 "$work/mvn.log" | grep -v '^\s*at ' || true
  echo "== the job server's last log lines"
  tail -20 "$work/server.log"
fi
exit $status
