#!/usr/bin/env bash
# Kafka benchmarks, side by side, against a broker started here on 127.0.0.1: Apache Kafka itself
# (KRaft mode; its jars as .ci/run fetches them) or, with KAFKA_BROKER=noida, noida-db (the
# Kafka-compatible broker of the loss test; see .ci/run for its install):
#   1. source: Weir reads a topic of EVENTS Nexmark events (PARTITIONS partitions) to its end,
#      against kcat consuming the same topic (records/s, rounds alternated);
#   2. end to end: Nexmark q5 streaming over the topic, against q5 over the same events in a
#      file, without a checkpoint and with one (a fresh --checkpoint-dir each run);
#   3. the most records/s an exactly-once copy from topic to topic sustains, then the time from
#      produce to committed copy (p50, p99) at half that rate.
# Usage: benchmarks/kafka/bench.sh [EVENTS] [ROUNDS] [PARTITIONS]    (defaults 1000000, 3, 12)
set -euo pipefail
cd "$(dirname "$0")/../.."
events="${1:-1000000}"
rounds="${2:-3}"
partitions="${3:-12}"
kind="${KAFKA_BROKER:-apache}"
cargo build -q --release -p weir-nexmark --features weir-nexmark/kafka --bin nexmark -p weir-kafka --example kafka_bench
N=target/release/nexmark
B=target/release/examples/kafka_bench
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
port=$(free_port)
broker="127.0.0.1:$port"
data=$(mktemp -d)
if [ "$kind" = noida ]; then
  noida="${WEIR_NOIDA_DB:-$HOME/.cache/weir-noida/bin/noida-db}"
  "$noida" start --only kafka --host 127.0.0.1 --kafka-port "$port" --data-dir "$data/broker" >/dev/null 2>&1 &
else
  lib="${WEIR_APACHE_KAFKA_LIB:-$HOME/.cache/weir-apache-kafka/lib}"
  controller=$(free_port)
  cat >"$data/server.properties" <<EOF
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$controller
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$controller
advertised.listeners=PLAINTEXT://127.0.0.1:$port
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
inter.broker.listener.name=PLAINTEXT
log.dirs=$data/broker
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
group.initial.rebalance.delay.ms=0
EOF
  java -cp "$lib/*" kafka.tools.StorageTool format -t q1Sh-9_ISia_zwGINzRvyQ -c "$data/server.properties" >/dev/null
  java -Xmx1g -cp "$lib/*" kafka.Kafka "$data/server.properties" >"$data/broker.log" 2>&1 &
fi
pid=$!
trap 'kill $pid 2>/dev/null; rm -rf "$data"' EXIT
until kcat -b "$broker" -L >/dev/null 2>&1; do sleep 0.2; done
echo "== broker: $kind on $broker"

echo "== $events events into topic events ($partitions partitions) and into a file"
$B topic "$broker" events "$partitions"
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

echo "== 2. Nexmark q5, streaming: over the topic, and over the file; without and with a checkpoint"
for r in $(seq 1 "$rounds"); do
  for src in "--events-kafka $broker/events" "--events-file $data/events.json"; do
    line=$($N --streaming --query 5 --num-events "$events" $src 2>/dev/null | grep -E "^ *0000 " | tail -1)
    echo "round $r: ${src%% *}: $line"
    rm -rf "$data/cp"
    line=$($N --streaming --query 5 --num-events "$events" $src --checkpoint-dir "$data/cp" 2>/dev/null | grep -E "^ *0000 " | tail -1)
    echo "round $r: ${src%% *} --checkpoint-dir: $line"
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
