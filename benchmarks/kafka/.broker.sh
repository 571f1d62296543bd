set -euo pipefail
cd /work/main
free_port() { python3 -c "import socket; s = socket.socket(); s.bind((\"127.0.0.1\", 0)); print(s.getsockname()[1])"; }
N=target/release/nexmark
B=target/release/examples/kafka_bench
events=1000000
rounds=3
partitions=12
kind="${KAFKA_BROKER:-apache}"
true
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

until kcat -b "$broker" -L >/dev/null 2>&1; do sleep 0.2; done
echo "== broker: $kind on $broker"

echo "== $events events into topic events ($partitions partitions) and into a file"
$B topic "$broker" events "$partitions"
$N --num-events "$events" --export-events "kafka://$broker/events"
$N --num-events "$events" --export-events "$data/events.json"

timed() { local s e; s=$(date +%s.%N); "$@"; e=$(date +%s.%N); python3 -c "print('%.3f' % ($e - $s))"; }
$B topic "$broker" small "$partitions"
$N --num-events 12000 --export-events "kafka://$broker/small"
echo "BROKER=$broker PID=$pid"
