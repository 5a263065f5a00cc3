#!/usr/bin/env python3
"""A soak: the release binary under a realistic mix for MINUTES, and whether
its memory and descriptors stay flat.

    cargo build --release && python3 bench/soak.py [MINUTES] [--sample SECONDS] [--door FILE]
                                                   [--swap-every SECONDS] [--binary FILE]

The mix, all at once: five WatchSession streams that read for 0.5-3 s and
reconnect; held SendMessages (`sleep 20`); polls (SendMessage with
returnImmediately, then GetTask until the task ends); bad clients (a body
that stalls, a head declaring 16 MB, JSON that does not parse, a stream that
is never read and closed after 5 s, an unknown method); and, every 10 s
(--swap-every, 0 for none), a swap to FILE (default: the door the tests
build, target/wasm/...) or a rollback, in turn.

Every SECONDS (default 60) it prints the RSS (largest seen in the period),
descriptors (the median of one reading a second, and the most that were
not sockets: files, pipes, event descriptors), door instances in flight
(the control surface's inFlight), and the well-behaved requests' count, p99
and failures. The first period is a warm-up. Exits 1 unless no later
period's RSS or descriptors other than sockets (sockets come and go with
the connections open at the moment of reading, bounded by
--max-connections) is more than 10% above the second period's, no
well-behaved request failed, and every swap was taken. Standard library only.
"""

import json
import os
import random
import socket
import statistics
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOOR = os.path.join(ROOT, "target", "wasm", "wasm32-wasip2", "wasm", "murmur_door_guest.wasm")
MANIFEST = "name: soak\nversion: 0.1.0\nlifecycle: {task_acceptance: queue}\n"


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hostile  # noqa: E402  (its Door: launch, requests, RSS)


class Door(hostile.Door):
    """hostile.py's door, with its control surface, descriptors, and
    nothing compiled kept on disk (every swap compiles)."""

    def __init__(self):
        super().__init__(MANIFEST, flags=("--no-compile-cache",))
        with open(os.path.join(self.dir, "state", "control-token")) as f:
            self.control = f.read().strip()

    def connect(self, timeout=10):
        s = super().connect()
        s.settimeout(timeout)
        return s

    def rpc(self, method, params):
        body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).encode()
        status, answer = self.request(
            "POST", "/", [("content-type", "application/json"), ("a2a-version", "1.0")], body)
        return status, json.loads(answer) if status == 200 else None

    def control_call(self, method, path, body=b"", content_type=None):
        headers = [("authorization", f"Bearer {self.control}")]
        if content_type:
            headers.append(("content-type", content_type))
        return self.request(method, "/.well-known/murmur/control" + path, headers, body)

    def descriptors(self):
        """Open descriptors, and those of them that are not sockets."""
        fd = f"/proc/{self.process.pid}/fd"
        links = []
        for name in os.listdir(fd):
            try:
                links.append(os.readlink(os.path.join(fd, name)))
            except OSError:
                pass
        return len(links), sum(not link.startswith("socket:") for link in links)


def message(text, immediately=False):
    return {"configuration": {"returnImmediately": immediately},
            "message": {"messageId": f"m{random.getrandbits(48)}", "role": "ROLE_USER",
                        "parts": [{"text": text}]}}


class Tally:
    """The well-behaved requests of the current period."""

    def __init__(self):
        self.lock = threading.Lock()
        self.times, self.failed, self.why = [], 0, []

    def timed(self, ask):
        started = time.time()
        try:
            ok = ask()
        except (OSError, ValueError, KeyError, IndexError, TypeError) as e:
            ok = False
            with self.lock:
                self.why.append(repr(e))
        with self.lock:
            self.times.append((time.time() - started) * 1000)
            if not ok:
                self.failed += 1

    def take(self):
        with self.lock:
            taken = (self.times, self.failed, self.why)
            self.times, self.failed, self.why = [], 0, []
        return taken


def streams(door, stop):
    """A WatchSession stream read for 0.5-3 s, then closed; again."""
    body = json.dumps({"jsonrpc": "2.0", "id": "w", "method": "murmur.WatchSession",
                       "params": {}}).encode()
    while not stop.is_set():
        try:
            s = door.connect(timeout=1)
            s.sendall((f"POST / HTTP/1.1\r\nhost: {door.addr}\r\ncontent-type: application/json\r\n"
                       f"a2a-version: 1.0\r\ncontent-length: {len(body)}\r\n\r\n").encode() + body)
            until = time.time() + random.uniform(0.5, 3)
            while time.time() < until and not stop.is_set():
                try:
                    if not s.recv(65536):
                        break
                except socket.timeout:
                    pass
            s.close()
        except OSError:
            time.sleep(0.1)


def held_sends(door, tally, stop):
    def ask():
        status, answer = door.rpc("SendMessage", message("sleep 20"))
        return status == 200 and answer["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    while not stop.is_set():
        tally.timed(ask)


def polls(door, tally, stop):
    while not stop.is_set():
        status, answer = door.rpc("SendMessage", message("sleep 10", immediately=True))
        if status != 200:
            tally.timed(lambda: False)
            continue
        task = answer["result"]["task"]["id"]
        for _ in range(100):
            state = {}

            def ask():
                status, answer = door.rpc("GetTask", {"id": task})
                if status == 200 and "result" in answer:
                    state["now"] = answer["result"]["status"]["state"]
                    return True
                return False
            tally.timed(ask)
            if state.get("now") == "TASK_STATE_COMPLETED":
                break
            time.sleep(0.02)


def bad_clients(door, stop):
    """One misbehaving client after another."""
    def post_head(length):
        return (f"POST / HTTP/1.1\r\nhost: {door.addr}\r\ncontent-type: application/json\r\n"
                f"a2a-version: 1.0\r\ncontent-length: {length}\r\n\r\n").encode()
    unread = []
    while not stop.is_set():
        kind = random.choice(["stall", "huge", "garbage", "unread", "unknown"])
        try:
            s = door.connect(timeout=2)
            if kind == "stall":
                s.sendall(post_head(1000) + b'{"jsonrpc":')
                time.sleep(0.3)
                s.close()
            elif kind == "huge":
                s.sendall(post_head(16_000_000))
                s.recv(256)
                s.close()
            elif kind == "garbage":
                s.sendall(post_head(9) + b"{not json")
                s.recv(256)
                s.close()
            elif kind == "unread":
                body = json.dumps({"jsonrpc": "2.0", "id": "u", "method": "murmur.WatchSession",
                                   "params": {}}).encode()
                s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                s.sendall(post_head(len(body)) + body)
                unread.append((time.time() + 5, s))
            else:
                body = b'{"jsonrpc":"2.0","id":1,"method":"Bogus","params":{}}'
                s.sendall(post_head(len(body)) + body)
                s.recv(256)
                s.close()
        except OSError:
            pass
        now = time.time()
        for at, s in [u for u in unread if u[0] <= now]:
            s.close()
        unread = [u for u in unread if u[0] > now]
        time.sleep(0.05)
    for _, s in unread:
        s.close()


def swaps(door, component, every, stop, outcomes):
    swap = True
    while every and not stop.wait(every):
        if swap:
            status, _ = door.control_call("POST", "/swap", json.dumps({"path": component}).encode(),
                                          "application/json")
        else:
            status, _ = door.control_call("POST", "/rollback")
        outcomes.append(status)
        swap = not swap


def main():
    args = sys.argv[1:]
    minutes = float(args[0]) if args and not args[0].startswith("--") else 10
    sample = int(args[args.index("--sample") + 1]) if "--sample" in args else 60
    component = args[args.index("--door") + 1] if "--door" in args else DOOR
    swap_every = int(args[args.index("--swap-every") + 1]) if "--swap-every" in args else 10
    if "--binary" in args:
        hostile.BINARY = args[args.index("--binary") + 1]
    if not os.path.exists(component):
        sys.exit(f"no door component at {component}: build the tests first, or pass --door FILE")
    door = Door()
    tally, stop, swapped = Tally(), threading.Event(), []
    workers = [threading.Thread(target=streams, args=(door, stop)) for _ in range(5)]
    workers += [threading.Thread(target=held_sends, args=(door, tally, stop)) for _ in range(2)]
    workers += [threading.Thread(target=polls, args=(door, tally, stop)) for _ in range(2)]
    workers += [threading.Thread(target=bad_clients, args=(door, stop)),
                threading.Thread(target=swaps, args=(door, component, swap_every, stop, swapped))]
    for w in workers:
        w.daemon = True
        w.start()
    periods = []
    print(f"{'period':>6} {'RSS MB':>8} {'fds':>5} {'files':>6} {'in flight':>9} {'requests':>9} "
          f"{'p99 ms':>8} {'failed':>6}")
    end = time.time() + minutes * 60
    while time.time() < end - 0.5:
        rss, fds, files, flight = [], [], [], []
        period_end = min(end, time.time() + sample)
        while time.time() < period_end:
            rss.append(door.rss_mb())
            total, not_sockets = door.descriptors()
            fds.append(total)
            files.append(not_sockets)
            status, body = door.control_call("GET", "")
            if status == 200:
                flight.append(json.loads(body)["live"]["inFlight"])
            time.sleep(1)
        times, failed, why = tally.take()
        p99 = statistics.quantiles(times, n=100)[98] if len(times) >= 2 else 0.0
        periods.append((max(rss), max(files), failed))
        print(f"{len(periods):>6} {max(rss):>8.1f} {statistics.median(fds):>5.0f} {max(files):>6} "
              f"{max(flight or [0]):>9} {len(times):>9} {p99:>8.1f} {failed:>6}", flush=True)
        for reason in why[:3]:
            print(f"       failed: {reason}")
    stop.set()
    for w in workers:
        w.join(timeout=5)
    door.stop()
    # The first period warms up (the pool's slots, the allocator, the
    # store's caches): the next is what the rest must stay within 10% of.
    first_rss, first_fds, _ = periods[min(1, len(periods) - 1)]
    later = periods[2:] or periods[-1:]
    rss_ok = all(r <= first_rss * 1.1 for r, _, _ in later)
    fds_ok = all(f <= first_fds * 1.1 for _, f, _ in later)
    failed = sum(f for _, _, f in periods)
    print(f"swaps and rollbacks: {swapped.count(200)} of {len(swapped)} answered 200")
    print(f"after the warm-up: RSS {'flat' if rss_ok else 'GREW'} "
          f"({first_rss:.1f} -> {max(r for r, _, _ in later):.1f} MB at most), descriptors "
          f"other than sockets {'flat' if fds_ok else 'GREW'} ({first_fds:.0f} -> "
          f"{min(f for _, f, _ in later):.0f}..{max(f for _, f, _ in later):.0f}); "
          f"{failed} well-behaved requests failed")
    sys.exit(0 if rss_ok and fds_ok and failed == 0 and all(s == 200 for s in swapped) else 1)


if __name__ == "__main__":
    main()
