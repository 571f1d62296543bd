#!/bin/bash
# Side by side: Nexmark q5 streaming without the page; with the page and no client; with the page,
# a client polling it as an open page does (queries, progress, metrics, plan every second) and four
# clients that ask for an answer and never read it.
cd "$(dirname "$0")/.."
N=target/release/nexmark  # cargo build --release -p weir-nexmark
ARGS="--query 5 --streaming --num-events 10000000 --trigger processing-time --trigger-interval-ms 100"
run() { $N $ARGS "$@" 2>/dev/null | grep -E "^ *0000 " | tail -1; }
for round in 1 2 3; do
  echo "no page          r$round: $(run)"
  echo "page, no client  r$round: $(run --ui-port $((4200 + round)))"
  port=$((4100 + round))
  ( for i in $(seq 1 60); do
      for p in /api/queries "/api/progress?id=nexmark-hot-items-0" "/api/metrics?id=nexmark-hot-items-0" "/api/plan?id=nexmark-hot-items-0"; do
        curl -s "127.0.0.1:$port$p" >/dev/null; done; sleep 1
    done ) & poller=$!
  python3 - "$port" <<'PY' & stuck=$!
import socket, sys, time
port = int(sys.argv[1]); held = []
deadline = time.time() + 60
while time.time() < deadline and len(held) < 4:
    try:
        s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)
        s.connect(("127.0.0.1", port)); s.sendall(b"GET /api/progress?id=nexmark-hot-items-0 HTTP/1.1\r\nHost: x\r\n\r\n"); held.append(s)
    except OSError: time.sleep(0.05)
time.sleep(120)
PY
  echo "page, clients    r$round: $(run --ui-port $port)"
  kill $poller $stuck 2>/dev/null; wait 2>/dev/null
done
