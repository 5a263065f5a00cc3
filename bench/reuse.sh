#!/usr/bin/env bash
# What kept answers give and cost: GetTask polls with the answers the door
# declares reusable kept (the default) and with none kept (--reuse-bytes 0),
# over loopback with wrk. Two loads on one completed task:
#   repeat   the same GetTask again and again (ids aside): kept, each poll
#            after the first is sent again without a door instance;
#   all new  every GetTask a request not seen before (its historyLength
#            counts up): none is ever found, and the memo fills with answers
#            never asked again, the most a poll can cost when its answer is
#            never found.
# and, on a task waiting for input, over one connection:
#   changing a GetTask, then a message continuing the task (returnImmediately:
#            the task works and waits for input again), and so on: the task
#            changes between every two polls. req/s counts both.
# A poll that finds nothing must cost no more than one without kept answers.
#
# Both doors run side by side, and the six loads alternate, round after
# round, so a drift of the machine falls on all of them alike; the report
# gives each round and the median.
#
# Usage: bench/reuse.sh [seconds] [connections] [rounds]
#   (default 3 s a load, 16 connections, 5 rounds)
#   MURMUR_DOOR_BIN=path runs that murmur-door instead of building this tree's
#   BEFORE_BIN=path runs the `none` door from that build, one from before
#   kept answers (without --reuse-bytes): "today", as a change is measured
#   KEPT_ARGS="--reuse-bytes 65536" gives the `kept` door more flags
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib.sh
source bench/lib.sh
seconds=${1:-3}
connections=${2:-16}
rounds=${3:-5}
need_wrk
bin=$(door_binary)
tmp=$(mktemp -d)
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; rm -rf "$tmp"' EXIT
printf 'name: bench\nversion: 0.1.0\nlifecycle: {task_acceptance: queue}\n' >"$tmp/bench.yaml"

declare -A url pid
for setting in kept none; do
  # shellcheck disable=SC2206
  args=(${KEPT_ARGS:-})
  binary=$bin
  if [ "$setting" = none ]; then
    args=(--reuse-bytes 0)
    [ -n "${BEFORE_BIN:-}" ] && binary=$BEFORE_BIN && args=()
  fi
  start_door "$binary" "$tmp/door-$setting.log" "$tmp/bench.yaml" --listen 127.0.0.1:0 \
    --state "$tmp/state-$setting" ${args[@]+"${args[@]}"}
  pids+=("$door_pid")
  url[$setting]=$door_url
  pid[$setting]=$door_pid
  task=$(send_task "$door_url")
  # A task waiting for input, which each message of `changing` continues
  # (after the completed one: under queue acceptance it would wait behind).
  asking=$(curl -s -X POST "$door_url/" -H 'Content-Type: application/json' -H 'A2A-Version: 1.0' \
    -d '{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"messageId":"m0","role":"ROLE_USER","parts":[{"text":"ask go?"}]}}}' |
    grep -o 'tsk_[0-9a-f]*' | head -1)
  cat >"$tmp/changing-$setting.lua" <<LUA
local n = 0
request = function()
  n = n + 1
  local headers = {["Content-Type"] = "application/json", ["A2A-Version"] = "1.0"}
  if n % 2 == 1 then
    return wrk.format("POST", "/", headers, '{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":"$asking"}}')
  end
  local body = '{"jsonrpc":"2.0","id":2,"method":"SendMessage","params":{"message":{"messageId":"m' .. n .. '","taskId":"$asking","role":"ROLE_USER","parts":[{"text":"ask again?"}]},"configuration":{"returnImmediately":true}}}'
  return wrk.format("POST", "/", headers, body)
end
LUA
  rpc_lua "$tmp/repeat-$setting.lua" '{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":"'"$task"'"}}'
  cat >"$tmp/new-$setting.lua" <<LUA
local n = 0
request = function()
  n = n + 1
  local body = '{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":"$task","historyLength":' .. n .. '}}'
  return wrk.format("POST", "/", {["Content-Type"] = "application/json", ["A2A-Version"] = "1.0"}, body)
end
LUA
done

echo "# GetTask polls with and without kept answers: ${seconds} s a load, ${connections} connections, ${rounds} rounds"
echo
echo "req/s and the door's CPU a request (µs), each round, then the median."
echo
echo "| Round | repeat, kept | repeat, none | all new, kept | all new, none | changing, kept | changing, none |"
echo "| --- | --- | --- | --- | --- | --- | --- |"
loads=("repeat kept" "repeat none" "new kept" "new none" "changing kept" "changing none")
for round in $(seq "$rounds"); do
  row=()
  # Every other round runs the loads in the other order.
  order=(0 1 2 3 4 5)
  [ $((round % 2)) = 0 ] && order=(1 0 3 2 5 4)
  for i in "${order[@]}"; do
    read -r load setting <<<"${loads[$i]}"
    over=$connections
    [ "$load" = changing ] && over=1
    result=$(poll "${pid[$setting]}" "${url[$setting]}/" "$tmp/$load-$setting.lua" "$over")
    echo "$result" >>"$tmp/results-$i"
    row[i]=$result
  done
  printf '| %s |' "$round"
  for i in 0 1 2 3 4 5; do
    read -r rate cpu <<<"${row[$i]}"
    printf " %'d req/s, %.1f µs |" "$rate" "$cpu"
  done
  echo
done
printf '| median |'
for i in 0 1 2 3 4 5; do
  rate=$(cut -d' ' -f1 "$tmp/results-$i" | sort -n | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}')
  cpu=$(cut -d' ' -f2 "$tmp/results-$i" | sort -n | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}')
  printf " %'d req/s, %.1f µs |" "$rate" "$cpu"
done
echo
