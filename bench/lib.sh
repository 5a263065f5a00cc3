# shellcheck shell=bash
# Shared by the bench scripts; source it.

# need_wrk: installs wrk from Debian's packages when it is missing.
need_wrk() {
  if ! command -v wrk >/dev/null; then
    apt-get install -y wrk >/dev/null 2>&1 || sudo apt-get install -y wrk >/dev/null
  fi
}

# door_binary: prints $MURMUR_DOOR_BIN, or builds this tree's murmur-door and
# prints its path.
door_binary() {
  if [ -n "${MURMUR_DOOR_BIN:-}" ]; then
    echo "$MURMUR_DOOR_BIN"
  else
    cargo build --release --bin murmur-door >/dev/null 2>&1
    echo ./target/release/murmur-door
  fi
}

# start_door BINARY LOG ARGS...: starts `BINARY serve ARGS...` in the
# background with its stderr in LOG, waits for its url (10 s at most), and
# sets $door_pid and $door_url.
start_door() {
  local binary=$1 log=$2
  shift 2
  "$binary" serve "$@" 2>"$log" &
  # shellcheck disable=SC2034 # read by the script that sources this
  door_pid=$!
  door_url=
  for _ in $(seq 100); do
    door_url=$(grep -o 'url=http://[0-9.:]*' "$log" | cut -d= -f2 || true)
    [ -n "$door_url" ] && return 0
    sleep 0.1
  done
  cat "$log" >&2
  return 1
}

# send_task URL: sends "reply hi" and prints the task's id.
send_task() {
  curl -s -X POST "$1/" -H 'Content-Type: application/json' -H 'A2A-Version: 1.0' \
    -d '{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"messageId":"m","role":"ROLE_USER","parts":[{"text":"reply hi"}]}}}' \
    | grep -o 'tsk_[0-9a-f]*' | head -1
}

# rpc_lua FILE BODY: a wrk script posting one JSON-RPC request.
rpc_lua() {
  cat >"$1" <<LUA
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["A2A-Version"] = "1.0"
wrk.body = '$2'
LUA
}

# poll PID URL LUA [CONNECTIONS]: wrk's req/s on URL and the door's CPU a
# request, in µs (wrk shares the cores: the CPU moves less than req/s), as
# "rate cpu". Reads $seconds, $connections and $tmp.
poll() {
  local before after
  before=$(awk '{print $14 + $15}' "/proc/$1/stat")
  # shellcheck disable=SC2154 # set by the script that sources this
  wrk -t1 -c"${4:-$connections}" -d"${seconds}s" -s "$3" "$2" >"$tmp/wrk.txt"
  after=$(awk '{print $14 + $15}' "/proc/$1/stat")
  awk -v ticks=$((after - before)) -v hz="$(getconf CLK_TCK)" \
    '/Requests\/sec/ {rate = $2} /^ *[0-9]+ requests in/ {n = $1}
     END {printf "%d %.1f", rate, ticks / hz * 1e6 / n}' "$tmp/wrk.txt"
}
