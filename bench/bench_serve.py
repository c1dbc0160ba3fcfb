#!/usr/bin/env python3
"""`sdnpu serve` under load, beside llama.cpp's llama-server, in one run.

The same documents as bench_spec.py (Debian's license texts cut to about
600 tokens, then "TL;DR:"), sent as streaming POST /v1/completions (greedy,
max_tokens 64) by 1, 4 and 16 concurrent clients to:

  sdnpu serve, --parallel 1 -t 2, spec none and sam-tree (the default)
  llama-server (bench/peer_native.sh builds it), -np 1 plain and --spec-type
      ngram-simple (its best type in bench_spec), and -np 4 plain (its
      continuous batching over four slots)

Per server and concurrency: requests/s, generated tokens/s, time to the first
token (p50), request latency (p50, p99). Prints a table, writes JSON. Every
prompt is evaluated in full by both (llama-server's prompt cache is off:
sdnpu keeps no cache between requests, and the prompts repeat).

--idle-connections N instead measures what N idle half-open connections
(each sent the start of a POST's headers, then nothing; from 127.0.0.2
upwards, 50 an address) take from 4 clients' requests/s: rounds without and
with them, taking turns, on sdnpu serve (sam-tree, its request deadline set
past the run so the connections stay held) and on llama-server -np 1.
Usage: .venv-test/bin/python bench/bench_serve.py [--requests-per-client 2] [--out bench/results/serve.json]
       .venv-test/bin/python bench/bench_serve.py --idle-connections 1000 [--rounds 2]
"""
import argparse
import http.client
import json
import os
import re
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_native  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Sdnpu:
    def __init__(self, exe, model, spec, threads, parallel, *flags):
        self.cmd = [exe, "serve", "-m", model, "--port", "0", "-t", str(threads), "--parallel", str(parallel),
                    "--queue", "64", "--spec", spec, "-c", "4096", *flags]
        self.log = tempfile.NamedTemporaryFile("w+", prefix="sdnpu-serve-", suffix=".log", delete=False)

    def __enter__(self):
        print("$ " + " ".join(self.cmd), file=sys.stderr)
        self.proc = subprocess.Popen(self.cmd, stdout=subprocess.DEVNULL, stderr=self.log)
        for _ in range(600):
            self.log.seek(0)
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", self.log.read())
            if m:
                self.port = int(m.group(1))
                return self
            if self.proc.poll() is not None:
                break
            time.sleep(0.1)
        self.log.seek(0)
        raise RuntimeError(f"sdnpu serve did not start: {self.log.read()[-2000:]}")

    def __exit__(self, *exc):
        self.proc.terminate()
        self.proc.wait(timeout=60)
        self.log.close()
        os.unlink(self.log.name)
        return False


class Llama(bench_native.Server):
    def __init__(self, bindir, model, threads, spec, slots):
        super().__init__(bindir, model, threads, spec, ctx=4096 * slots)
        self.cmd[self.cmd.index("-np") + 1] = str(slots)


def one_request(port, prompt, n_gen, timeout=900):
    """Stream one completion; return (ttft_s, latency_s, tokens)."""
    # cache_prompt: llama-server would otherwise keep a repeated prompt's
    # cache and skip its prefill; sdnpu keeps none between requests, so both
    # evaluate every prompt (sdnpu ignores the field).
    body = json.dumps({"prompt": prompt, "max_tokens": n_gen, "temperature": 0, "stream": True,
                       "stream_options": {"include_usage": True}, "cache_prompt": False})
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    t0 = time.monotonic()
    c.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        raise RuntimeError(f"status {r.status}: {r.read()[:300]!r}")
    ttft, chunks, usage = None, 0, None
    for line in r:
        line = line.strip()
        if not line.startswith(b"data: ") or line == b"data: [DONE]":
            continue
        d = json.loads(line[6:])
        if d.get("usage"):
            usage = d["usage"].get("completion_tokens")
        if d.get("choices") and d["choices"][0].get("text"):
            chunks += 1
            if ttft is None:
                ttft = time.monotonic() - t0
    t1 = time.monotonic()
    c.close()
    return ttft if ttft is not None else t1 - t0, t1 - t0, usage if usage is not None else chunks


def load(port, prompts, clients, per_client, n_gen, timeout=900):
    jobs = [prompts[i % len(prompts)] for i in range(clients * per_client)]
    it = iter(jobs)
    lock = threading.Lock()
    res, errors = [], []

    def worker():
        while True:
            with lock:
                p = next(it, None)
            if p is None:
                return
            try:
                res.append(one_request(port, p, n_gen, timeout))
            except Exception as e:  # a failed request is reported, not hidden
                errors.append(repr(e))
    t0 = time.monotonic()
    ths = [threading.Thread(target=worker) for _ in range(clients)]
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    wall = time.monotonic() - t0
    lat = sorted(r[1] for r in res)
    return {"clients": clients, "requests": len(jobs), "ok": len(res), "errors": errors[:3],
            "requests_per_s": len(res) / wall, "tokens_per_s": sum(r[2] for r in res) / wall,
            "ttft_p50_ms": 1e3 * statistics.median(r[0] for r in res) if res else None,
            "latency_p50_ms": 1e3 * statistics.median(lat) if lat else None,
            "latency_p99_ms": 1e3 * lat[min(len(lat) - 1, int(0.99 * len(lat)))] if lat else None}


class IdleConnections:
    """n connections that send the start of a POST's headers and then
    nothing, from 127.0.0.2 upwards, per_address from each address."""

    def __init__(self, port, n, per_address=50):
        self.port, self.n, self.per_address = port, n, per_address

    def __enter__(self):
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        want = self.n + 256
        if soft < want:
            resource.setrlimit(resource.RLIMIT_NOFILE, (min(want, hard), hard))
        self.socks = []
        for i in range(self.n):
            s = socket.socket()
            s.bind((f"127.0.0.{2 + i // self.per_address}", 0))
            s.connect(("127.0.0.1", self.port))
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n")
            self.socks.append(s)
        return self

    def held(self):
        """How many the server has not closed."""
        k = 0
        for s in self.socks:
            s.setblocking(False)
            try:
                k += s.recv(1) != b""
            except BlockingIOError:
                k += 1
            except OSError:
                pass
        return k

    def __exit__(self, *exc):
        for s in self.socks:
            s.close()
        return False


def idle_rounds(args, bindir, prompts):
    """4 clients' requests/s without and with args.idle_connections held,
    in turns, per server."""
    n = args.idle_connections
    servers = [
        ("sdnpu serve sam-tree", lambda: Sdnpu(args.exe, args.model, "sam-tree", args.threads, 1, "--max-connections",
                                               str(2 * n + 64), "--request-timeout", "3600")),
        ("llama-server plain -np 1", lambda: Llama(bindir, args.model, args.threads, "plain", 1)),
    ]
    out = {}
    for name, make in servers:
        rows = []
        with make() as srv:
            one_request(srv.port, prompts[0], 4)
            for r in range(args.rounds):
                base = load(srv.port, prompts, 4, args.requests_per_client, args.n_gen, timeout=args.idle_timeout)
                with IdleConnections(srv.port, n) as idle:
                    time.sleep(1)
                    held_before = idle.held()
                    busy = load(srv.port, prompts, 4, args.requests_per_client, args.n_gen,
                                timeout=args.idle_timeout)
                    held_after = idle.held()
                rows.append({"round": r + 1, "without": base, "with": busy, "held_before": held_before,
                             "held_after": held_after})
                print(f"{name} round {r + 1}: {base['requests_per_s']:.3f} vs {busy['requests_per_s']:.3f} req/s, "
                      f"{held_before}/{held_after} held", file=sys.stderr)
        out[name] = rows
    print(f"\n4 clients, {args.requests_per_client} requests each, {len(prompts)} documents of ~600 tokens + TL;DR, "
          f"{args.n_gen} greedy tokens, streaming, {args.threads} threads; {n} idle half-open connections held "
          f"(50 an address); a request given up after {args.idle_timeout} s is an error")
    print("| server | round | requests/s without | requests/s with | ratio | held (start / end) | errors without / with |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, rows in out.items():
        for r in rows:
            a, b = r["without"]["requests_per_s"], r["with"]["requests_per_s"]
            print(f"| {name} | {r['round']} | {a:.3f} | {b:.3f} | {b / a if a else 0:.2f}x | "
                  f"{r['held_before']} / {r['held_after']} | {r['without']['requests'] - r['without']['ok']} / "
                  f"{r['with']['requests'] - r['with']['ok']} |")
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "default.gguf"))
    ap.add_argument("--exe", default=os.path.join(ROOT, "build", "sdnpu"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--n-gen", type=int, default=64)
    ap.add_argument("--n-docs", type=int, default=8)
    ap.add_argument("--requests-per-client", type=int, default=2)
    ap.add_argument("--clients", default="1,4,16")
    ap.add_argument("--out", default=None, help="JSON (default bench/results/serve.json, or serve_idle.json)")
    ap.add_argument("--idle-connections", type=int, default=0, metavar="N")
    ap.add_argument("--rounds", type=int, default=2, help="with --idle-connections: rounds of without/with")
    ap.add_argument("--idle-timeout", type=int, default=120,
                    help="with --idle-connections: seconds before a request is given up (an error)")
    args = ap.parse_args()
    bindir = bench_native.peer_bin()
    levels = [int(c) for c in args.clients.split(",")]
    with Llama(bindir, args.model, args.threads, "plain", 1) as srv:
        prompts = [bench_native.prompt_for(d) for _, d in bench_native.documents(args.n_docs, srv)]
    if args.idle_connections:
        out = args.out or os.path.join(ROOT, "bench", "results", "serve_idle.json")
        res = idle_rounds(args, bindir, prompts)
        os.makedirs(os.path.dirname(out), exist_ok=True)
        json.dump({"idle": res, "idle_connections": args.idle_connections, "n_gen": args.n_gen,
                   "threads": args.threads, "docs": len(prompts)}, open(out, "w"), indent=1)
        print(f"wrote {out}")
        return
    args.out = args.out or os.path.join(ROOT, "bench", "results", "serve.json")
    servers = [
        ("sdnpu serve none", lambda: Sdnpu(args.exe, args.model, "none", args.threads, 1)),
        ("sdnpu serve sam-tree", lambda: Sdnpu(args.exe, args.model, "sam-tree", args.threads, 1)),
        ("llama-server plain -np 1", lambda: Llama(bindir, args.model, args.threads, "plain", 1)),
        ("llama-server ngram-simple -np 1", lambda: Llama(bindir, args.model, args.threads, "ngram-simple", 1)),
        ("llama-server plain -np 4", lambda: Llama(bindir, args.model, args.threads, "plain", 4)),
    ]
    results = {}
    for name, make in servers:
        with make() as s:
            one_request(s.port, prompts[0], 4)  # warm-up: first-use preparation is not load
            results[name] = [load(s.port, prompts, c, args.requests_per_client, args.n_gen) for c in levels]
        print(f"{name}: done", file=sys.stderr)
    print(f"\n{len(prompts)} documents of ~600 tokens + TL;DR, {args.n_gen} greedy tokens, streaming, "
          f"{args.threads} threads per server, {args.requests_per_client} requests per client")
    print("| server | clients | requests/s | tokens/s | first token p50 (ms) | latency p50 (ms) | latency p99 (ms) | errors |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, rows in results.items():
        for r in rows:
            print(f"| {name} | {r['clients']} | {r['requests_per_s']:.2f} | {r['tokens_per_s']:.1f} | "
                  f"{r['ttft_p50_ms']:.0f} | {r['latency_p50_ms']:.0f} | {r['latency_p99_ms']:.0f} | "
                  f"{r['requests'] - r['ok']} |")
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    json.dump({"results": results, "n_gen": args.n_gen, "threads": args.threads, "docs": len(prompts)},
              open(args.out, "w"), indent=1)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
