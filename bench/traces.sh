#!/usr/bin/env bash
# What traces cost a request: the card, GetTask and a held SendMessage
# ('reply hi') over loopback with wrk, against doors run side by side:
#   before  BEFORE_BIN, a build from before traces (left out when unset)
#   off     this tree, no OpenTelemetry variable set
#   on      this tree, every trace kept (the default sampler, ratio 1.0)
#   0.01    this tree, one new trace in a hundred kept
#           (OTEL_TRACES_SAMPLER=parentbased_traceidratio, ARG 0.01)
# The traced doors send to a local sink that takes every export and answers
# 200 without reading the spans (a collector's cost is not the door's).
# The loads alternate, round after round, so a drift of the machine falls on
# all of them alike; the report gives each round and the median.
#
# Usage: bench/traces.sh [seconds] [connections] [rounds]
#   (default 3 s a load, 16 connections, 3 rounds)
#   MURMUR_DOOR_BIN=path runs that murmur-door instead of building this tree's
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib.sh
source bench/lib.sh
seconds=${1:-3}
connections=${2:-16}
rounds=${3:-3}
need_wrk
bin=$(door_binary)
tmp=$(mktemp -d)
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; rm -rf "$tmp"' EXIT
printf 'name: bench\nversion: 0.1.0\nlifecycle: {task_acceptance: queue}\n' >"$tmp/bench.yaml"

# The sink: every POST answered 200, its body read and dropped.
python3 -c '
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
class Sink(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()
    def log_message(self, *args):
        pass
server = ThreadingHTTPServer(("127.0.0.1", 0), Sink)
print(server.server_address[1], flush=True)
server.serve_forever()
' >"$tmp/sink.port" &
pids+=($!)
for _ in $(seq 50); do
  [ -s "$tmp/sink.port" ] && break
  sleep 0.1
done
sink="http://127.0.0.1:$(cat "$tmp/sink.port")"

settings=(off on 0.01)
[ -n "${BEFORE_BIN:-}" ] && settings=(before "${settings[@]}")
declare -A url pid
for setting in "${settings[@]}"; do
  binary=$bin
  env=()
  case $setting in
    before) binary=$BEFORE_BIN ;;
    on) env=(OTEL_EXPORTER_OTLP_ENDPOINT="$sink") ;;
    0.01) env=(OTEL_EXPORTER_OTLP_ENDPOINT="$sink" OTEL_TRACES_SAMPLER=parentbased_traceidratio
      OTEL_TRACES_SAMPLER_ARG=0.01) ;;
  esac
  env ${env[@]+"${env[@]}"} "$binary" serve "$tmp/bench.yaml" --listen 127.0.0.1:0 \
    --state "$tmp/state-$setting" 2>"$tmp/door-$setting.log" &
  pids+=($!)
  pid[$setting]=$!
  for _ in $(seq 100); do
    url[$setting]=$(grep -o 'url=http://[0-9.:]*' "$tmp/door-$setting.log" | cut -d= -f2 || true)
    [ -n "${url[$setting]}" ] && break
    sleep 0.1
  done
  task=$(send_task "${url[$setting]}")
  rpc_lua "$tmp/gettask-$setting.lua" '{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":"'"$task"'"}}'
done
rpc_lua "$tmp/send.lua" '{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"messageId":"m","role":"ROLE_USER","parts":[{"text":"reply hi"}]}}}'
printf 'wrk.method = "GET"\n' >"$tmp/card.lua"

echo "# What traces cost a request: ${seconds} s a load, ${connections} connections, ${rounds} rounds"
echo
echo "req/s and the door's CPU a request (µs), each round, then the median."
echo
header="| Round | Request |"
rule="| --- | --- |"
for setting in "${settings[@]}"; do
  header+=" $setting |"
  rule+=" --- |"
done
echo "$header"
echo "$rule"
for round in $(seq "$rounds"); do
  for load in card gettask send; do
    row="| $round | $load |"
    order=("${settings[@]}")
    # Every other round runs the doors in the other order.
    if [ $((round % 2)) = 0 ]; then
      mapfile -t order < <(printf '%s\n' "${settings[@]}" | tac)
    fi
    declare -A result=()
    for setting in "${order[@]}"; do
      script=$tmp/$load.lua
      [ "$load" = gettask ] && script=$tmp/gettask-$setting.lua
      path=/
      [ "$load" = card ] && path=/.well-known/agent-card.json
      result[$setting]=$(poll "${pid[$setting]}" "${url[$setting]}$path" "$script")
      echo "${result[$setting]}" >>"$tmp/results-$load-$setting"
    done
    for setting in "${settings[@]}"; do
      read -r rate cpu <<<"${result[$setting]}"
      row+=" $(printf "%'d req/s, %.1f µs" "$rate" "$cpu") |"
    done
    echo "$row"
  done
done
for load in card gettask send; do
  row="| median | $load |"
  for setting in "${settings[@]}"; do
    rate=$(cut -d' ' -f1 "$tmp/results-$load-$setting" | sort -n | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}')
    cpu=$(cut -d' ' -f2 "$tmp/results-$load-$setting" | sort -n | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}')
    row+=" $(printf "%'d req/s, %.1f µs" "$rate" "$cpu") |"
  done
  echo "$row"
done
