#!/usr/bin/env python3
"""Many capsules in one process: `murmur-door host` with N capsules added one
by one through its control surface, then measured.

Reports:
- adding a capsule until it answers its card (p50, p99);
- RSS, address space and descriptors per idle capsule beyond the first;
- GET card and GetTask p50/p99 on random capsules of the N-capsule host,
  against the same on a one-capsule host running beside it, from four
  concurrent clients that ask both hosts in turn (after each capsule has
  answered once; a capsule's first requests are reported apart), each
  request on a connection of its own;
- GET card over one keep-alive connection (wrk, when installed) on a
  capsule of the N-capsule host and on the one-capsule host, in turn;
- a host-wide swap of every capsule (compile, or load from the compile
  cache, once) while a client keeps asking random capsules for their card:
  requests served and failed.

Usage: python3 bench/capsules.py [N] [requests]   (default 100, 2000)
CAPSULES_ASKED=K asks only the first K capsules of the N-capsule host (all
by default): with K=1, the N-capsule host's cost per request apart from a
capsule's own state being cold.

python3 bench/capsules.py --one-port [N] [requests] [rounds]  (default 1000,
4000, 3) compares two hosts of N capsules running side by side: one with a
port per capsule, one with every capsule on one shared port, reached by
host name. Four clients ask a random capsule of each in turn, card and
GetTask, each request on a connection of its own (after each capsule has
answered once), `rounds` times; the report gives each round's p50 and p99
and the shared port's difference.
Builds the release binary first."""
import json
import os
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BINARY = os.path.join(ROOT, "target", "release", "murmur-door")
MANIFEST = "name: bench\nversion: 0.1.0\nlifecycle: {task_acceptance: queue}\n"


def request(addr, method, path, body=b"", headers=()):
    """One request on a fresh connection: (status, body). `addr` is
    "host:port", or ("host:port", host name) for a capsule on a shared port."""
    addr, name = addr if isinstance(addr, tuple) else (addr, addr)
    host, port = addr.split(":")
    with socket.create_connection((host, int(port)), timeout=30) as s:
        head = f"{method} {path} HTTP/1.1\r\nhost: {name}\r\nconnection: close\r\ncontent-length: {len(body)}\r\n"
        for name, value in headers:
            head += f"{name}: {value}\r\n"
        s.sendall(head.encode() + b"\r\n" + body)
        raw = b""
        while chunk := s.recv(65536):
            raw += chunk
    head, _, payload = raw.partition(b"\r\n\r\n")
    return int(head.split(b" ")[1]), payload


def proc(pid):
    """RSS and address space in KiB, and open descriptors."""
    status = open(f"/proc/{pid}/status").read().splitlines()
    field = lambda name: int(next(l for l in status if l.startswith(name)).split()[1])
    return field("VmRSS:"), field("VmSize:"), len(os.listdir(f"/proc/{pid}/fd"))


def percentiles(samples):
    samples = sorted(samples)
    return samples[len(samples) // 2], samples[min(len(samples) - 1, int(len(samples) * 0.99))]


class Host:
    """A host of capsules; with `shared`, each reached on its one shared port
    by the host name NAME.bench."""

    def __init__(self, dir, shared=False):
        self.dir = dir
        self.shared = None
        with open(os.path.join(dir, "bench.yaml"), "w") as f:
            f.write(MANIFEST)
        with open(os.path.join(dir, "capsules.yaml"), "w") as f:
            listen = "listen: 127.0.0.1:0\n" if shared else ""
            f.write(f"control: {{listen: 127.0.0.1:0}}\n{listen}capsules: []\n")
        self.process = subprocess.Popen(
            [BINARY, "host", os.path.join(dir, "capsules.yaml"), "--max-instances", "256", "--no-compile-cache"],
            stderr=subprocess.PIPE, text=True, env=dict(os.environ, RUST_LOG="warn,murmur_door=info"))
        for line in self.process.stderr:
            if "host listening" in line:
                self.control = line.split("url=http://")[1].strip()
                break
        threading.Thread(target=lambda: [None for _ in self.process.stderr], daemon=True).start()
        self.token = open(os.path.join(dir, "host-control-token")).read().strip()
        self.urls = {}
        if shared:
            status, body = self.control_request("GET", "/capsules")
            self.shared = json.loads(body)["listen"].removeprefix("http://")

    def control_request(self, method, path, body=b""):
        return request(self.control, method, path, body, [("authorization", f"Bearer {self.token}")])

    def add(self, name):
        reach = {"hostnames": [f"{name}.bench"]} if self.shared else {"listen": "127.0.0.1:0"}
        entry = json.dumps({"name": name, "manifest": "bench.yaml", "state": f"states/{name}", **reach})
        started = time.perf_counter()
        status, body = self.control_request("POST", "/capsules", entry.encode())
        assert status == 201, body
        url = json.loads(body)["url"].removeprefix("http://")
        if self.shared:
            url = (self.shared, url)
        status, _ = request(url, "GET", "/.well-known/agent-card.json")
        assert status == 200
        self.urls[name] = url
        return (time.perf_counter() - started) * 1000

    def close(self):
        self.process.terminate()
        self.process.wait()


GET_TASK = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "tsk_none"}}).encode()
RPC = [("content-type", "application/json"), ("a2a-version", "1.0")]


def timed(url, method, path, body=b"", headers=()):
    started = time.perf_counter()
    assert request(url, method, path, body, headers)[0] == 200
    return (time.perf_counter() - started) * 1000


def card(url):
    return timed(url, "GET", "/.well-known/agent-card.json")


def get_task(url):
    return timed(url, "POST", "/", GET_TASK, RPC)


def first_requests(urls):
    """Each capsule's first card and first GetTask: what a capsule's first
    request costs beyond the rest (its store's statements are prepared then)."""
    cards, tasks = [], []
    for url in urls:
        cards.append(card(url))
        tasks.append(get_task(url))
    return percentiles(cards), percentiles(tasks)


def compare(many, one, count, clients=4):
    """Card and GetTask latencies on random capsules of the many-capsule host
    and on the one-capsule host, under load from `clients` concurrent clients,
    each request to one host followed by the same to the other in a random
    order: both hosts are measured on the same machine at the same moments."""
    return compare_hosts({"many": many, "one": [one]}, count, clients)


def compare_hosts(targets, count, clients=4):
    """As `compare`, for two hosts named in `targets`, each with the
    capsules to pick from at random."""
    samples = {(host, kind): [] for host in targets for kind in ("card", "task")}

    def client():
        for _ in range(count // clients):
            pair = [(host, random.choice(urls)) for host, urls in targets.items()]
            random.shuffle(pair)
            for host, url in pair:
                samples[(host, "card")].append(card(url))
            random.shuffle(pair)
            for host, url in pair:
                samples[(host, "task")].append(get_task(url))

    threads = [threading.Thread(target=client) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return {key: percentiles(values) for key, values in samples.items()}


def wrk(url, seconds=3):
    """GET card over one keep-alive connection for `seconds`: (req/s, p50 µs)."""
    out = subprocess.run(["wrk", "-t1", "-c1", f"-d{seconds}s", "--latency",
                          f"http://{url}/.well-known/agent-card.json"],
                         capture_output=True, text=True, check=True).stdout.splitlines()
    rps = float(next(l for l in out if "Requests/sec" in l).split()[1])
    p50 = next(l for l in out if l.strip().startswith("50%")).split()[1]
    p50 = float(p50[:-2]) * (1000 if p50.endswith("ms") else 1)
    return rps, p50


def one_port(args):
    """N capsules on one port by host name against N on a port each."""
    n = int(args[0]) if len(args) > 0 else 1000
    count = int(args[1]) if len(args) > 1 else 4000
    rounds = int(args[2]) if len(args) > 2 else 3
    dir = tempfile.mkdtemp(prefix="capsules-")
    hosts = {}
    try:
        for label, shared in (("ports", False), ("one port", True)):
            os.makedirs(os.path.join(dir, label))
            hosts[label] = Host(os.path.join(dir, label), shared=shared)
            for i in range(n):
                hosts[label].add(f"c{i}")
            first_requests(list(hosts[label].urls.values()))
        print(f"# {n} capsules on one port by host name, against a port each; {os.cpu_count()} cores")
        print(f"# {count} requests of each kind a round, four clients, fresh connections, random capsules")
        print("| Round | Request | a port each p50 / p99 (ms) | one port p50 / p99 (ms) | difference p50 / p99 |")
        print("| --- | --- | --- | --- | --- |")
        for round in range(1, rounds + 1):
            latency = compare_hosts({label: list(h.urls.values()) for label, h in hosts.items()}, count)
            for kind, name in (("card", "GET card"), ("task", "GetTask")):
                (p50, p99), (s50, s99) = latency[("ports", kind)], latency[("one port", kind)]
                print(f"| {round} | {name} | {p50:.2f} / {p99:.2f} | {s50:.2f} / {s99:.2f} | {s50 / p50 - 1:+.0%} / {s99 / p99 - 1:+.0%} |")
    finally:
        for h in hosts.values():
            h.close()
        shutil.rmtree(dir, ignore_errors=True)


def main():
    subprocess.run(["cargo", "build", "--release", "--bin", "murmur-door"], cwd=ROOT, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    if sys.argv[1:2] == ["--one-port"]:
        return one_port(sys.argv[2:])
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 100
    count = int(sys.argv[2]) if len(sys.argv) > 2 else 2000
    dir = tempfile.mkdtemp(prefix="capsules-")
    try:
        os.makedirs(os.path.join(dir, "one"))
        single = Host(os.path.join(dir, "one"))
        single.add("only")

        os.makedirs(os.path.join(dir, "many"))
        host = Host(os.path.join(dir, "many"))
        adds = [host.add("c0")]
        first = proc(host.process.pid)
        adds += [host.add(f"c{i}") for i in range(1, n)]
        time.sleep(1)
        last = proc(host.process.pid)
        per = [(b - a) / (n - 1) for a, b in zip(first, last)]
        cold_card, cold_task = first_requests(list(host.urls.values()))
        first_requests(list(single.urls.values()))
        asked = list(host.urls.values())[: int(os.environ.get("CAPSULES_ASKED", n))]
        latency = compare(asked, single.urls["only"], count)
        # One capsule of each over a keep-alive connection, in turn.
        kept = {"many": [], "one": []}
        if shutil.which("wrk"):
            for _ in range(2):
                kept["one"].append(wrk(single.urls["only"]))
                kept["many"].append(wrk(random.choice(list(host.urls.values()))))
        single.close()

        # A host-wide swap under load: the door compiled once (no compile cache).
        wasm = os.path.join(ROOT, "target", "wasm", "wasm32-wasip2", "wasm", "murmur_door_guest.wasm")
        served, failed, stop = [0], [0], threading.Event()

        def load():
            urls = list(host.urls.values())
            while not stop.is_set():
                try:
                    ok = request(random.choice(urls), "GET", "/.well-known/agent-card.json")[0] == 200
                except OSError:
                    ok = False
                served[0] += ok
                failed[0] += not ok

        loaders = [threading.Thread(target=load) for _ in range(4)]
        for t in loaders:
            t.start()
        time.sleep(0.5)
        with open(wasm, "rb") as f:
            status, body = host.control_request("POST", "/swap", f.read())
        assert status == 200, body
        swap = json.loads(body)
        time.sleep(0.5)
        stop.set()
        for t in loaders:
            t.join()
        host.close()

        print(f"# murmur-door host, {n} capsules, {os.cpu_count()} cores")
        p50, p99 = percentiles(adds)
        print(f"add a capsule until its card answers   p50 {p50:6.2f} ms   p99 {p99:6.2f} ms")
        print(f"per idle capsule beyond the first      RSS {per[0]:7.0f} KiB   address space {per[1] / 1024:7.1f} MiB   descriptors {per[2]:.1f}")
        print(f"host RSS with {n} capsules              {last[0] / 1024:7.1f} MiB (one capsule: {first[0] / 1024:.1f} MiB)")
        for kind, name in (("card", "GET card"), ("task", "GetTask")):
            (p50, p99), (one50, one99) = latency[("many", kind)], latency[("one", kind)]
            print(f"{name + ', random capsule, under load':38} p50 {p50:6.2f} ms   p99 {p99:6.2f} ms   "
                  f"(one-capsule host: p50 {one50:.2f}, p99 {one99:.2f}; {p50 / one50 - 1:+.0%}, {p99 / one99 - 1:+.0%})")
        if kept["one"]:
            show = lambda runs: ", ".join(f"{rps:,.0f} req/s p50 {p50:.0f} us" for rps, p50 in runs)
            print(f"GET card, one keep-alive connection     a capsule of {n}: {show(kept['many'])}; one-capsule host: {show(kept['one'])}")
        print(f"a capsule's first card, first GetTask  p50 {cold_card[0]:.2f} / {cold_task[0]:.2f} ms   p99 {cold_card[1]:.2f} / {cold_task[1]:.2f} ms")
        print(f"host-wide swap under load              {len(swap['swapped'])} swapped, {len(swap['refused'])} refused, compile {swap['compileMs']:.0f} ms, took {swap['tookMs']:.0f} ms; requests served {served[0]}, failed {failed[0]}")
    finally:
        shutil.rmtree(dir, ignore_errors=True)


if __name__ == "__main__":
    main()
