#!/usr/bin/env bash
# Kafka benchmarks, side by side, against noida-db started here on 127.0.0.1 (the broker the
# Kafka tests use; see .ci/run for its install):
#   1. source: Weir reads a topic of EVENTS Nexmark events (3 partitions) to its end, against kcat
#      consuming the same topic (records/s, rounds alternated);
#   2. end to end: Nexmark q5 streaming over the topic, against q5 over the same events in a file;
#   3. the most records/s an exactly-once copy from topic to topic sustains, then the time from
#      produce to committed copy (p50, p99) at half that rate.
# Usage: benchmarks/kafka/bench.sh [EVENTS] [ROUNDS]    (defaults 1000000, 3)
set -euo pipefail
cd "$(dirname "$0")/../.."
events="${1:-1000000}"
rounds="${2:-3}"
noida="${WEIR_NOIDA_DB:-$HOME/.cache/weir-noida/bin/noida-db}"
cargo build -q --release -p weir-nexmark --bin nexmark -p weir-kafka --example kafka_bench
N=target/release/nexmark
B=target/release/examples/kafka_bench
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
broker="127.0.0.1:$port"
data=$(mktemp -d)
"$noida" start --only kafka --host 127.0.0.1 --kafka-port "$port" --data-dir "$data/broker" >/dev/null 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; rm -rf "$data"' EXIT
until (echo >"/dev/tcp/127.0.0.1/$port") 2>/dev/null; do sleep 0.1; done

echo "== $events events into topic events (3 partitions) and into a file"
$B topic "$broker" events 3
$N --num-events "$events" --export-events "kafka://$broker/events"
$N --num-events "$events" --export-events "$data/events.json"

timed() { local s e; s=$(date +%s.%N); "$@"; e=$(date +%s.%N); python3 -c "print('%.3f' % ($e - $s))"; }
echo "== 1. source: records/s reading the topic to its end"
for r in $(seq 1 "$rounds"); do
  # noida-db answers a fetch with everything it has, past kcat's default response size limit.
  secs=$(timed sh -c "kcat -b $broker -X receive.message.max.bytes=2000000000 -C -t events -e -q -o beginning -f '%o\n' | wc -l > $data/n")
  python3 -c "n = int(open('$data/n').read()); print('round $r: kcat read %d records in $secs s: %.0f records/s' % (n, n / $secs))"
  echo "round $r: $($B read "$broker" events --runner microbatch)"
done

echo "== 2. Nexmark q5, streaming: over the topic, and over the file"
for r in $(seq 1 "$rounds"); do
  for src in "--events-kafka $broker/events" "--events-file $data/events.json"; do
    line=$($N --streaming --query 5 --num-events "$events" $src 2>/dev/null | grep -E "^ *0000 " | tail -1)
    echo "round $r: ${src%% *}: $line"
  done
done

echo "== 3. exactly-once copy: most records/s, then latency at half of it"
best=0
for r in $(seq 1 "$rounds"); do
  out=$($B copy "$broker" events --runner microbatch)
  echo "round $r: $out"
  rate=$(echo "$out" | sed -E 's/.*: ([0-9]+) records\/s/\1/')
  [ "$rate" -gt "$best" ] && best=$rate
done
half=$((best / 2))
for r in $(seq 1 "$rounds"); do
  echo "round $r: $($B latency "$broker" "$half" 10 --runner microbatch)"
done
