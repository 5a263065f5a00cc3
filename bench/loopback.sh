#!/usr/bin/env bash
# Request latency over loopback, measured with wrk: GET the card, a JSON-RPC
# request the door refuses (GetExtendedAgentCard on a public door, -32004),
# SendMessage held until the script agent completes the task (queue
# acceptance, so concurrent messages wait their turn), GetTask, and GetTask
# with one worker thread and with one per core.
# Usage: bench/loopback.sh [seconds] [connections]
# MURMUR_DOOR_BIN=path runs that binary instead of building this tree's, to
# compare two builds run by run on a machine whose speed drifts.
# Installs wrk from Debian's packages when it is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-10}
connections=${2:-32}

if ! command -v wrk >/dev/null; then
  apt-get install -y wrk >/dev/null 2>&1 || sudo apt-get install -y wrk >/dev/null
fi
binary=${MURMUR_DOOR_BIN:-}
if [ -z "$binary" ]; then
  cargo build --release --bin murmur-door >/dev/null 2>&1
  binary=./target/release/murmur-door
fi

state=$(mktemp -d)
trap 'kill $door $tasks ${worker_door:-} 2>/dev/null || true; rm -rf "$state"' EXIT
"$binary" serve examples/my-agent.yaml --listen 127.0.0.1:0 --state "$state" 2>"$state/log" &
door=$!
for _ in $(seq 100); do
  url=$(grep -o 'url=http://[0-9.:]*' "$state/log" | cut -d= -f2 || true)
  [ -n "$url" ] && break
  sleep 0.1
done
[ -n "$url" ] || { cat "$state/log"; exit 1; }

cat >"$state/refused.lua" <<'LUA'
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["A2A-Version"] = "1.0"
wrk.body = '{"jsonrpc":"2.0","id":1,"method":"GetExtendedAgentCard"}'
LUA

echo "# murmur-door over loopback: wrk -t2 -c$connections -d${seconds}s, $(nproc) cores"
echo "## GET /.well-known/agent-card.json"
wrk -t2 -c"$connections" -d"${seconds}s" --latency "$url/.well-known/agent-card.json" | grep -E 'Latency|^ +50%|^ +99%|Requests/sec|Non-2xx'
echo "## POST / GetExtendedAgentCard on a public door (-32004)"
wrk -t2 -c"$connections" -d"${seconds}s" --latency -s "$state/refused.lua" "$url/" | grep -E 'Latency|^ +50%|^ +99%|Requests/sec|Non-2xx'
echo "## one connection (latency without queueing)"
wrk -t1 -c1 -d"${seconds}s" --latency "$url/.well-known/agent-card.json" | grep -E 'Latency|^ +50%|^ +99%|Requests/sec'
wrk -t1 -c1 -d"${seconds}s" --latency -s "$state/refused.lua" "$url/" | grep -E 'Latency|^ +50%|^ +99%|Requests/sec'

# A second door that takes tasks in a queue.
printf 'name: bench\nversion: 0.1.0\nlifecycle: {task_acceptance: queue}\n' >"$state/queue.yaml"
"$binary" serve "$state/queue.yaml" --listen 127.0.0.1:0 --state "$state/tasks" 2>"$state/tasks.log" &
tasks=$!
for _ in $(seq 100); do
  turl=$(grep -o 'url=http://[0-9.:]*' "$state/tasks.log" | cut -d= -f2 || true)
  [ -n "$turl" ] && break
  sleep 0.1
done
cat >"$state/send.lua" <<'LUA'
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["A2A-Version"] = "1.0"
wrk.body = '{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"messageId":"m","role":"ROLE_USER","parts":[{"text":"reply hi"}]}}}'
LUA
task=$(curl -s -X POST "$turl/" -H 'Content-Type: application/json' -H 'A2A-Version: 1.0' \
  -d '{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"messageId":"m","role":"ROLE_USER","parts":[{"text":"reply hi"}]}}}' \
  | grep -o 'tsk_[0-9a-f]*' | head -1)
cat >"$state/get.lua" <<LUA
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["A2A-Version"] = "1.0"
wrk.body = '{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":"$task"}}'
LUA
echo "## SendMessage held, script agent 'reply hi' (queue)"
wrk -t2 -c"$connections" -d"${seconds}s" --latency -s "$state/send.lua" "$turl/" | grep -E 'Latency|^ +50%|^ +99%|Requests/sec|Non-2xx'
echo "## GetTask"
wrk -t2 -c"$connections" -d"${seconds}s" --latency -s "$state/get.lua" "$turl/" | grep -E 'Latency|^ +50%|^ +99%|Requests/sec|Non-2xx'

# The same GetTask on doors with one worker thread and with one per core
# (--workers): what the second core adds. wrk runs on the same cores.
for workers in 1 "$(nproc)"; do
  "$binary" serve "$state/queue.yaml" --listen 127.0.0.1:0 --state "$state/w$workers" \
    --workers "$workers" 2>"$state/w$workers.log" &
  worker_door=$!
  for _ in $(seq 100); do
    wurl=$(grep -o 'url=http://[0-9.:]*' "$state/w$workers.log" | cut -d= -f2 || true)
    [ -n "$wurl" ] && break
    sleep 0.1
  done
  wtask=$(curl -s -X POST "$wurl/" -H 'Content-Type: application/json' -H 'A2A-Version: 1.0' \
    -d '{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"messageId":"m","role":"ROLE_USER","parts":[{"text":"reply hi"}]}}}' \
    | grep -o 'tsk_[0-9a-f]*' | head -1)
  sed "s/$task/$wtask/" "$state/get.lua" >"$state/wget.lua"
  echo "## GetTask, --workers $workers"
  wrk -t1 -c"$connections" -d"${seconds}s" --latency -s "$state/wget.lua" "$wurl/" | grep -E '^ +50%|^ +99%|Requests/sec|Non-2xx'
  kill "$worker_door"
  wait "$worker_door" 2>/dev/null || true
done
