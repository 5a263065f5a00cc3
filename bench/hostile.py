#!/usr/bin/env python3
"""Hostile clients at full size, against the release binary: what each makes
the host hold (RSS), and how promptly a well-behaved client is answered
meanwhile. `tests/hostile.rs` runs the same clients scaled down.

    cargo build --release && python3 bench/hostile.py [SCENARIO...]

MURMUR_DOOR_BIN runs another build, to compare two.

Scenarios: slow-bodies, stalled-connections, unread-streams, replay,
one-credential, lowered-pool, unread-answers, behind-a-proxy, burst,
half-close, forged-forwarded, caller-commands, exported-state, link-swap,
fifo-swap (all
when none is named). Standard library only; the swaps use renameat2
through ctypes (Linux).
"""

import ctypes
import json
import os
import resource
import socket
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BINARY = os.environ.get("MURMUR_DOOR_BIN") or os.path.join(ROOT, "target", "release", "murmur-door")

AUTHENTICATED = """name: hostile
version: 0.1.0
lifecycle: {task_acceptance: queue}
network:
  authentication:
    scheme: bearer
    credentials:
      watcher: {scopes: [GetTask, ListTasks, murmur.WatchSession]}
"""
PUBLIC = "name: hostile\nversion: 0.1.0\nlifecycle: {task_acceptance: queue}\n"


class Door:
    def __init__(self, manifest, flags=(), open_files=None, files=()):
        self.dir = tempfile.mkdtemp(prefix="murmur-hostile-")
        for name, data in files:
            os.makedirs(os.path.dirname(os.path.join(self.dir, name)), exist_ok=True)
            with open(os.path.join(self.dir, name), "wb") as f:
                f.write(data)
        path = os.path.join(self.dir, "murmur.yaml")
        with open(path, "w") as f:
            f.write(manifest)

        def limit():
            if open_files:
                resource.setrlimit(resource.RLIMIT_NOFILE, (open_files, open_files))

        self.log = open(os.path.join(self.dir, "log"), "w+")
        self.process = subprocess.Popen(
            [BINARY, "serve", path, "--listen", "127.0.0.1:0", "--state", os.path.join(self.dir, "state"), *flags],
            stderr=self.log, stdout=subprocess.DEVNULL, preexec_fn=limit,
        )
        deadline = time.time() + 30
        while time.time() < deadline:
            self.log.seek(0)
            for line in self.log:
                if "url=http://" in line:
                    self.addr = line.split("url=http://")[1].strip()
                    host, port = self.addr.split(":")
                    self.host, self.port = host, int(port)
                    with open(os.path.join(self.dir, "state", "tokens.json")) as f:
                        self.tokens = json.load(f)
                    return
            time.sleep(0.05)
        raise RuntimeError("the door did not start")

    def rss_mb(self):
        with open(f"/proc/{self.process.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        return 0

    def connect(self):
        s = socket.create_connection((self.host, self.port))
        s.settimeout(30)
        return s

    def request(self, method, path, headers=(), body=b""):
        s = self.connect()
        head = f"{method} {path} HTTP/1.1\r\nhost: {self.addr}\r\nconnection: close\r\n"
        for name, value in headers:
            head += f"{name}: {value}\r\n"
        if body or method == "POST":
            head += f"content-length: {len(body)}\r\n"
        s.sendall(head.encode() + b"\r\n" + body)
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
        s.close()
        head, _, body = data.partition(b"\r\n\r\n")
        if not head:
            return 0, b""  # the connection closed with no answer
        return int(head.split()[1]), body

    def rpc(self, body, token=None, extra=()):
        headers = [("content-type", "application/json"), ("a2a-version", "1.0"), *extra]
        if token:
            headers.append(("authorization", f"Bearer {token}"))
        return self.request("POST", "/", headers, json.dumps(body).encode())

    def well_behaved(self, token=None):
        """Milliseconds for the card and a GetTask, each."""
        started = time.time()
        card, _ = self.request("GET", "/.well-known/agent-card.json")
        card_ms = (time.time() - started) * 1000
        started = time.time()
        get, _ = self.rpc({"jsonrpc": "2.0", "id": 1, "method": "GetTask",
                           "params": {"id": "tsk_00000000000000000000000000000000"}}, token)
        return card, round(card_ms, 1), get, round((time.time() - started) * 1000, 1)

    def stop(self):
        self.process.kill()
        self.process.wait()


def post_head(door, length, token=None):
    auth = f"authorization: Bearer {token}\r\n" if token else ""
    return (f"POST / HTTP/1.1\r\nhost: {door.addr}\r\ncontent-type: application/json\r\n"
            f"A2A-Version: 1.0\r\n{auth}content-length: {length}\r\n\r\n").encode()


def send(text, immediately=False):
    return {"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
            "params": {"configuration": {"returnImmediately": immediately},
                       "message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": text}]}}}


def slow_bodies():
    """50 tokenless connections declaring 16 MB bodies, a byte every 2 ms for 5 s."""
    door = Door(AUTHENTICATED)
    before = door.rss_mb()
    socks = []
    for _ in range(50):
        s = door.connect()
        s.sendall(post_head(door, 16_000_000))
        socks.append(s)
    peak, answered = before, 0
    end = time.time() + 5
    while time.time() < end:
        for s in socks:
            try:
                s.send(b" ")
            except OSError:
                pass
        peak = max(peak, door.rss_mb())
        time.sleep(0.002)
    for s in socks:
        try:
            s.settimeout(1)
            if s.recv(64).startswith(b"HTTP/1.1 401"):
                answered += 1
        except OSError:
            pass
        s.close()
    time.sleep(0.5)
    print(f"slow-bodies: 50 tokenless 16 MB bodies, 5 s: {answered} answered 401; "
          f"RSS {before:.0f} -> peak {peak:.0f} -> {door.rss_mb():.0f} MB after they left")
    door.stop()


def stalled_connections():
    """1,074 connections sending a head and `{`, with ulimit -n 1024."""
    door = Door(AUTHENTICATED, open_files=1024)
    socks = []
    for _ in range(1074):
        try:
            s = door.connect()
            s.sendall(post_head(door, 1000) + b"{")
            socks.append(s)
        except OSError:
            pass
    time.sleep(0.5)
    times = [door.well_behaved(door.tokens["operator"]) for _ in range(10)]
    worst_card = max(t[1] for t in times)
    worst_get = max(t[3] for t in times)
    print(f"stalled-connections: {len(socks)} hostile connections open: card {set(t[0] for t in times)} "
          f"within {worst_card} ms, GetTask {set(t[2] for t in times)} within {worst_get} ms; RSS {door.rss_mb():.0f} MB")
    for s in socks:
        s.close()
    door.log.seek(0)
    warnings = sum("accept failed" in line for line in door.log)
    print(f"stalled-connections: {warnings} 'accept failed' lines logged")
    door.stop()


def open_watch(door, token=None, last_event_id=None):
    body = json.dumps({"jsonrpc": "2.0", "id": "w", "method": "murmur.WatchSession", "params": {}}).encode()
    s = door.connect()
    head = post_head(door, len(body), token)
    if last_event_id is not None:
        head = head[:-2] + f"Last-Event-ID: {last_event_id}\r\n\r\n".encode()
    s.sendall(head + body)
    return s


def open_counted(door, count, token=None):
    """`count` WatchSession streams with `token`: how many got each status,
    and their sockets."""
    outcomes, socks = {}, []
    for _ in range(count):
        s = open_watch(door, token)
        s.settimeout(5)
        try:
            status = s.recv(64).split()[1].decode()
        except (OSError, IndexError):
            status = "none"
        outcomes[status] = outcomes.get(status, 0) + 1
        socks.append(s)
    return outcomes, socks


def unread_streams(streams=50, mib=8):
    """`streams` WatchSession streams that never read (4 KiB receive
    buffers), then two tasks each writing a `progress` of `mib` MiB: four
    events of that size (a working status and a text frame each). What the
    streams add is the RSS grown, less what the same tasks add with no
    stream open (run first, in a door of its own)."""
    text = "x" * ((mib << 20) - 4096)

    def grown(count):
        door = Door(PUBLIC)
        before = door.rss_mb()
        socks = []
        for _ in range(count):
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.connect((door.host, door.port))
            body = json.dumps({"jsonrpc": "2.0", "id": "w", "method": "murmur.WatchSession",
                               "params": {}}).encode()
            s.sendall(post_head(door, len(body)) + body)
            socks.append(s)
        time.sleep(0.5)
        for _ in range(2):
            door.rpc(send(f"progress {text}"))
        time.sleep(3)
        held = door.rss_mb()
        well = door.well_behaved()
        for s in socks:
            s.close()
        door.stop()
        return held - before, well

    none, _ = grown(0)
    one, _ = grown(1)
    many, well = grown(streams)
    print(f"unread-streams: four {mib} MiB events: RSS +{none:.0f} MB with no stream, "
          f"+{one:.0f} MB with 1 unread stream, +{many:.0f} MB with {streams}: "
          f"{(many - one) / (streams - 1):.2f} MB for each stream beyond the first; "
          f"meanwhile card {well[0]} in {well[1]} ms, GetTask {well[2]} in {well[3]} ms")


def replay():
    """40 echo tasks of 4 MiB, then one WatchSession replaying from the start."""
    door = Door(PUBLIC)
    before = door.rss_mb()
    text = "x" * (4 << 20)
    for _ in range(40):
        door.rpc(send(text))
    after = door.rss_mb()
    s = open_watch(door, last_event_id=0)
    received, started = 0, time.time()
    s.settimeout(2)
    try:
        while True:
            chunk = s.recv(1 << 20)
            if not chunk:
                break
            received += len(chunk)
    except OSError:
        pass
    print(f"replay: 40 tasks of 4 MiB: RSS {before:.0f} -> {after:.0f} MB; "
          f"a WatchSession from 0 replayed {received / 1048576:.0f} MiB")
    door.stop()


def one_credential():
    """The watcher's token opens 2,000 WatchSession streams."""
    door = Door(AUTHENTICATED)
    watcher = door.tokens["watcher"]
    outcomes, socks = open_counted(door, 2000, watcher)
    card, card_ms, get, get_ms = door.well_behaved(door.tokens["operator"])
    print(f"one-credential: 2,000 streams with one token: {outcomes}; meanwhile card {card} in {card_ms} ms, "
          f"operator GetTask {get} in {get_ms} ms")
    for s in socks:
        s.close()
    started = time.time()
    while time.time() - started < 10:
        s = open_watch(door, watcher)
        s.settimeout(5)
        ok = s.recv(64).startswith(b"HTTP/1.1 200")
        s.close()
        if ok:
            break
        time.sleep(0.05)
    print(f"one-credential: instances free again {time.time() - started:.2f} s after the client left")
    door.log.seek(0)
    errors = sum(" ERROR " in line or "WARN" in line for line in door.log)
    print(f"one-credential: {errors} warning and error lines logged")
    door.stop()


def lowered_pool():
    """--max-instances 200: the watcher's token opens 300 streams; the
    operator's GetTask meanwhile."""
    door = Door(AUTHENTICATED, flags=("--max-instances", "200"))
    outcomes, socks = open_counted(door, 300, door.tokens["watcher"])
    times = [door.well_behaved(door.tokens["operator"]) for _ in range(10)]
    print(f"lowered-pool: --max-instances 200, 300 streams with one token: {outcomes}; operator GetTask "
          f"{set(t[2] for t in times)} within {max(t[3] for t in times)} ms")
    for s in socks:
        s.close()
    door.stop()


def unread_answers():
    """50 clients each ask a GetTask of a 7 MiB task and never read it."""
    door = Door(PUBLIC)
    text = "x" * (7 << 20)
    status, body = door.rpc(send(text))
    task = json.loads(body)["result"]["task"]["id"]
    before = door.rss_mb()
    get = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": task}}).encode()
    socks = []
    for _ in range(50):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.connect((door.host, door.port))
        s.sendall(post_head(door, len(get)) + get)
        socks.append(s)
    time.sleep(2)
    held = door.rss_mb()
    well = door.well_behaved()
    time.sleep(30)
    closed = 0
    for s in socks:
        s.settimeout(0.2)
        try:
            while s.recv(1 << 20):
                pass
            closed += 1
        except OSError as e:
            closed += not isinstance(e, socket.timeout)
        s.close()
    print(f"unread-answers: 50 unread GetTasks of a 7 MiB task: RSS {before:.0f} -> {held:.0f} MB held; "
          f"after 32 s {closed} of 50 connections dropped (--write-timeout-ms), RSS {door.rss_mb():.0f} MB; "
          f"meanwhile card {well[0]} in {well[1]} ms, GetTask {well[2]} in {well[3]} ms")
    door.stop()


def behind_a_proxy():
    """Behind a proxy at 127.0.0.1, three clients named by X-Forwarded-For:
    the first opens 600 streams; the others then open one each."""
    body = json.dumps({"jsonrpc": "2.0", "id": "w", "method": "murmur.WatchSession", "params": {}}).encode()

    def opened(door, client):
        s = door.connect()
        head = post_head(door, len(body))[:-2] + f"X-Forwarded-For: {client}\r\n\r\n".encode()
        s.sendall(head + body)
        s.settimeout(5)
        try:
            return s, s.recv(64).split()[1].decode()
        except (OSError, IndexError):
            return s, "none"

    for flags, label in ((("--trusted-proxy", "127.0.0.1"), "trusted"), ((), "not trusted")):
        door = Door(PUBLIC, flags=flags)
        socks, first = [], {}
        for _ in range(600):
            s, status = opened(door, "203.0.113.1")
            first[status] = first.get(status, 0) + 1
            socks.append(s)
        others = []
        for client in ("203.0.113.2", "203.0.113.3"):
            s, status = opened(door, client)
            others.append(status)
            socks.append(s)
        print(f"behind-a-proxy ({label}): the first client's 600 streams {first}; the other two {others}")
        for s in socks:
            s.close()
        door.stop()


def burst():
    """1,000 WatchSession streams at once, then gone: what their instances leave."""
    door = Door(PUBLIC, flags=("--max-instances-per-caller", "1024"))
    before = door.rss_mb()
    streams = [open_watch(door) for _ in range(1000)]
    opened = sum(s.recv(64).startswith(b"HTTP/1.1 200") for s in streams)
    held = door.rss_mb()
    for s in streams:
        s.close()
    # Idle workers give back what the instances freed, at most once a second.
    time.sleep(1)
    for _ in range(200):
        door.well_behaved()
    time.sleep(1)
    after = door.rss_mb()
    print(f"burst: {opened} streams open: RSS {before:.0f} -> {held:.0f} MB; after they left and 200 "
          f"requests: {after:.0f} MB (+{(after - before) * 1024 / 1000:.0f} KiB for each instance the burst ran)")
    door.stop()


def half_close():
    """30 SendMessage and 20 card requests, each followed by shutdown(SHUT_WR)."""
    door = Door(PUBLIC)
    answered = {"send": 0, "card": 0}
    for kind, count in (("send", 30), ("card", 20)):
        for _ in range(count):
            s = door.connect()
            if kind == "send":
                body = json.dumps(send("reply done")).encode()
                s.sendall(post_head(door, len(body)) + body)
            else:
                s.sendall(f"GET /.well-known/agent-card.json HTTP/1.1\r\nhost: {door.addr}\r\n\r\n".encode())
            s.shutdown(socket.SHUT_WR)
            try:
                if s.recv(64).startswith(b"HTTP/1.1 200"):
                    answered[kind] += 1
            except OSError:
                pass
            s.close()
    print(f"half-close: {answered['send']}/30 SendMessage and {answered['card']}/20 card requests answered")
    door.stop()


def forged_forwarded(rounds=20):
    """Issue 47, item 5: behind a proxy at 127.0.0.1 that appends
    X-Forwarded-For, an attacker sends its own `Forwarded: for=VICTIM` with
    30 failed handle redeems a round, each round a new victim: who is
    limited? (Before, the victims were, and the attacker never.)"""
    door = Door(PUBLIC + "exports:\n  peer_files: [shared/**]\n", flags=["--trusted-proxy", "127.0.0.1"])
    tally = {"victims limited": 0, "attacker limited": 0}
    for n in range(rounds):
        victim = f"198.51.100.{n + 1}"
        for _ in range(31):
            status, _ = door.request("GET", "/resources/peer/not-a-handle", [
                ("x-murmur-audience", "beta"), ("forwarded", f"for={victim}"),
                ("x-forwarded-for", "203.0.113.66")])
        for who, address in (("victims", victim), ("attacker", "203.0.113.66")):
            status, _ = door.request("GET", "/resources/peer/not-a-handle", [
                ("x-murmur-audience", "beta"), ("x-forwarded-for", address)])
            tally[f"{who} limited"] += status == 429
    print(f"forged-forwarded: {rounds} rounds of 31 failed redeems naming a victim in Forwarded: {tally}")
    door.stop()


def caller_commands():
    """Issue 47, item 1: a caller of a public door with default flags sends
    `detach` in every spelling; nothing may run."""
    door = Door(PUBLIC)
    marks = tempfile.mkdtemp(prefix="murmur-marks-")
    spellings = ["touch {m}", "sh -c 'touch {m}'", "/usr/bin/touch {m}", "id > {m}",
                 "bash -c 'touch {m}'", "$(touch {m})", "env touch {m}"]
    for round_ in range(50):
        for n, spelling in enumerate(spellings):
            mark = os.path.join(marks, f"{round_}-{n}")
            door.rpc({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {
                "message": {"messageId": f"m-{round_}-{n}", "role": "ROLE_USER",
                            "parts": [{"text": "detach " + spelling.format(m=mark)}]}}})
    time.sleep(1)
    ran = os.listdir(marks)
    print(f"caller-commands: {50 * len(spellings)} detach sends, {len(ran)} commands ran")
    door.stop()


def exported_state():
    """Issue 47, item 2: `exports.files: ["*"]` with the state inside the
    workdir; the door's tokens and lock must answer as missing files."""
    paths = ["state/control-token", "state/tokens.json", "state/session.db", "state/lock", "state/"]
    for exports in ['["*"]', '["**"]', '["state/**"]']:
        door = Door(PUBLIC + f"exports:\n  files: {exports}\n")
        answers = [door.request("GET", "/resources/files/" + p)[0] for p in paths]
        _, listing = door.request("GET", "/resources/files/")
        listed = "state" in [e["name"] for e in json.loads(listing)["entries"]]
        print(f"exported-state {exports}: {dict(zip(paths, answers))}, state listed: {listed}")
        door.stop()


LIBC = ctypes.CDLL(None, use_errno=True)
RENAME_EXCHANGE = 2


def swapping(a, b, seconds):
    """Exchanges a and b atomically in a loop for `seconds`, in a thread."""
    stop = time.time() + seconds
    count = [0]

    def run():
        while time.time() < stop:
            if LIBC.renameat2(-100, a.encode(), -100, b.encode(), RENAME_EXCHANGE) != 0:
                raise OSError(ctypes.get_errno(), "renameat2")
            count[0] += 1

    thread = threading.Thread(target=run)
    thread.start()
    return thread, count


def link_swap(seconds=10):
    """Issue 47, item 3: a writer exchanges an exported directory with a
    link to the workdir while its file is asked for: count what is served."""
    door = Door(PUBLIC + "exports:\n  files: [out/**, report.md]\n", flags=["--reuse-bytes", "0"],
                files=[("out/d/x", b"exported\n"), ("x", b"SECRET\n"), ("report.md", b"r\n")])
    os.symlink("..", os.path.join(door.dir, "out/e"))
    thread, swaps = swapping(os.path.join(door.dir, "out/d"), os.path.join(door.dir, "out/e"), seconds)
    tally = {"exported": 0, "outside": 0, "404": 0, "no answer": 0}
    while thread.is_alive():
        status, body = door.request("GET", "/resources/files/out/d/x")
        key = ("404" if status == 404 else "no answer" if status == 0
               else "exported" if body == b"exported\n" else "outside")
        tally[key] += 1
    thread.join()
    print(f"link-swap: {swaps[0]} swaps in {seconds} s; answers {tally}")
    door.stop()


def answered_within(door, path, seconds):
    """Milliseconds until a GET of `path` was answered whole; None when no
    byte came for `seconds`."""
    started = time.time()
    try:
        s = door.connect()
        s.settimeout(seconds)
        s.sendall(f"GET {path} HTTP/1.1\r\nhost: {door.addr}\r\nconnection: close\r\n\r\n".encode())
        while s.recv(65536):
            pass
        s.close()
    except socket.timeout:
        return None
    return (time.time() - started) * 1000


def fifo_swap(seconds=10, clients=6):
    """Issue 47, item 4: a writer exchanges an exported file with a FIFO
    while six clients ask for it: count hung requests and time the card."""
    door = Door(PUBLIC + "exports:\n  files: [out/**]\n", flags=["--reuse-bytes", "0"],
                files=[("out/f", b"regular\n")])
    os.mkfifo(os.path.join(door.dir, "out/fifo"))
    thread, swaps = swapping(os.path.join(door.dir, "out/f"), os.path.join(door.dir, "out/fifo"), seconds)
    results = {"answered": 0, "hung": 0, "slowest_ms": 0.0}
    lock = threading.Lock()

    def client():
        while thread.is_alive():
            took = answered_within(door, "/resources/files/out/f", 3)
            with lock:
                if took is None:
                    results["hung"] += 1
                else:
                    results["answered"] += 1
                    results["slowest_ms"] = max(results["slowest_ms"], took)

    threads = [threading.Thread(target=client) for _ in range(clients)]
    for t in threads:
        t.start()
    time.sleep(seconds / 2)
    took = answered_within(door, "/.well-known/agent-card.json", 3)
    card = "no answer within 3 s" if took is None else f"{took:.1f} ms"
    for t in threads:
        t.join()
    results["slowest_ms"] = round(results["slowest_ms"], 1)
    print(f"fifo-swap: {swaps[0]} swaps in {seconds} s; {results}; card during the race: {card}")
    door.stop()


SCENARIOS = {
    "slow-bodies": slow_bodies,
    "stalled-connections": stalled_connections,
    "unread-streams": unread_streams,
    "replay": replay,
    "one-credential": one_credential,
    "lowered-pool": lowered_pool,
    "unread-answers": unread_answers,
    "behind-a-proxy": behind_a_proxy,
    "burst": burst,
    "half-close": half_close,
    "forged-forwarded": forged_forwarded,
    "caller-commands": caller_commands,
    "exported-state": exported_state,
    "link-swap": link_swap,
    "fifo-swap": fifo_swap,
}

if __name__ == "__main__":
    resource.setrlimit(resource.RLIMIT_NOFILE, (8192, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
    for name in sys.argv[1:] or SCENARIOS:
        SCENARIOS[name]()
