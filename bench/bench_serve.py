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
prompt is evaluated in full by both: llama-server's prompt cache is off
(cache_prompt false) and so is sdnpu's (--prompt-cache-mem 0; its live
context is still reused, but consecutive requests send different
documents, so only their first token is shared).

--repeated-docs measures prompt reuse instead: 8 documents of about 1,000
tokens (the same license texts, longer cuts), each asked --questions (4)
short questions as "DOC\n\nQuestion: Q\nAnswer:" completions (greedy,
max_tokens 32, streaming), sent question by question through the
documents by 16 concurrent clients, so a document comes back after the
others. sdnpu serve --parallel 2 -t 1 (prompt cache on: its default 256
MiB a session; requests routed to the session holding their document)
against llama-server -np 2 -t 2 with its prompt cache on (cache_prompt
true, its default), each started afresh per round, in --rounds (2) rounds
taking turns. Per server and round: requests/s, time to the first token
(p50), request latency (p50), the prompt tokens each reused (sdnpu's
"prompt_reused", llama-server's timings.cache_n) and the time its
requests spent in prefill, summed (sdnpu's "prefill_ms", llama-server's
timings.prompt_ms; concurrent requests overlap). sdnpu's replies are
checked equal across its rounds (reuse must not change the output).

--idle-connections N instead measures what N idle half-open connections
(each sent the start of a POST's headers, then nothing; from 127.0.0.2
upwards, 50 an address) take from 4 clients' requests/s: rounds without and
with them, taking turns, on sdnpu serve (sam-tree, its request deadline set
past the run so the connections stay held) and on llama-server -np 1.
Usage: .venv-test/bin/python bench/bench_serve.py [--requests-per-client 2] [--out bench/results/serve.json]
       .venv-test/bin/python bench/bench_serve.py --idle-connections 1000 [--rounds 2]
       .venv-test/bin/python bench/bench_serve.py --repeated-docs [--rounds 2] [--questions 4] [--parallel 2]
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


def stream_completion(port, body, timeout=900):
    """POST one streaming completion; return what the client saw: ttft_s,
    latency_s, tokens (generated), text, prompt_tokens, reused (prompt tokens
    the server did not prefill: sdnpu's "prompt_reused", llama-server's
    timings.cache_n) and prefill_ms (sdnpu's "prefill_ms", llama-server's
    timings.prompt_ms); None where the reply does not say."""
    body = dict(body, stream=True, stream_options={"include_usage": True})
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    t0 = time.monotonic()
    c.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        raise RuntimeError(f"status {r.status}: {r.read()[:300]!r}")
    out = {"ttft_s": None, "text": "", "tokens": None, "prompt_tokens": None, "reused": None, "prefill_ms": None}
    chunks = 0
    for line in r:
        line = line.strip()
        if not line.startswith(b"data: ") or line == b"data: [DONE]":
            continue
        d = json.loads(line[6:])
        if d.get("usage"):
            out["tokens"] = d["usage"].get("completion_tokens")
            out["prompt_tokens"] = d["usage"].get("prompt_tokens")
        if d.get("sdnpu"):
            out["reused"] = d["sdnpu"].get("prompt_reused")
            out["prefill_ms"] = d["sdnpu"].get("prefill_ms")
        if d.get("timings") and "cache_n" in d["timings"]:
            out["reused"] = d["timings"]["cache_n"]
            out["prefill_ms"] = d["timings"].get("prompt_ms")
        if d.get("choices") and d["choices"][0].get("text"):
            chunks += 1
            out["text"] += d["choices"][0]["text"]
            if out["ttft_s"] is None:
                out["ttft_s"] = time.monotonic() - t0
    t1 = time.monotonic()
    c.close()
    out["latency_s"] = t1 - t0
    if out["ttft_s"] is None:
        out["ttft_s"] = out["latency_s"]
    if out["tokens"] is None:
        out["tokens"] = chunks
    return out


def run_clients(worker, clients):
    """Run worker on `clients` threads at once; the wall time until all end."""
    t0 = time.monotonic()
    ths = [threading.Thread(target=worker) for _ in range(clients)]
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    return time.monotonic() - t0


def one_request(port, prompt, n_gen, timeout=900):
    """Stream one completion; return (ttft_s, latency_s, tokens)."""
    # cache_prompt: llama-server would otherwise keep a repeated prompt's
    # cache and skip its prefill; here both evaluate every prompt (sdnpu
    # ignores the field, and its sessions hold nothing of these prompts'
    # neighbours past their first tokens: --repeated-docs measures reuse).
    r = stream_completion(port, {"prompt": prompt, "max_tokens": n_gen, "temperature": 0, "cache_prompt": False},
                          timeout)
    return r["ttft_s"], r["latency_s"], r["tokens"]


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
    wall = run_clients(worker, clients)
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
                                               str(2 * n + 64), "--request-timeout", "3600",
                                               "--prompt-cache-mem", "0")),
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


QUESTIONS = ["What is this license called?", "Who may copy the work?", "What must a copy keep?",
             "Is there a warranty?", "Who wrote it?", "May the work be sold?", "What happens on a breach?",
             "Which law applies?"]


def repeated_prompts(docs, n_questions):
    """(document index, question index, prompt), question by question
    through the documents: every document comes back after all the others."""
    qs = [QUESTIONS[i % len(QUESTIONS)] + ("" if i < len(QUESTIONS) else f" ({i // len(QUESTIONS) + 1})")
          for i in range(n_questions)]
    return [(d, q, f"{doc}\n\nQuestion: {qs[q]}\nAnswer:") for q in range(n_questions) for d, doc in enumerate(docs)]


def repeated_load(port, jobs, clients, n_gen, timeout=900):
    """jobs from clients threads, each with cache_prompt (llama-server's
    prompt cache; sdnpu ignores the field)."""
    it = iter(range(len(jobs)))
    lock = threading.Lock()
    res, errors = {}, []

    def worker():
        while True:
            with lock:
                i = next(it, None)
            if i is None:
                return
            try:
                res[i] = stream_completion(port, {"prompt": jobs[i][2], "max_tokens": n_gen, "temperature": 0,
                                                  "cache_prompt": True}, timeout)
            except Exception as e:  # a failed request is reported, not hidden
                errors.append(repr(e))
    wall = run_clients(worker, clients)
    ok = list(res.values())
    known = [r["reused"] for r in ok if r["reused"] is not None]
    prompt = sum(r["prompt_tokens"] or 0 for r in ok)
    return {"clients": clients, "requests": len(jobs), "ok": len(ok), "errors": errors[:3], "wall_s": wall,
            "requests_per_s": len(ok) / wall, "tokens_per_s": sum(r["tokens"] for r in ok) / wall,
            "ttft_p50_ms": 1e3 * statistics.median(r["ttft_s"] for r in ok) if ok else None,
            "latency_p50_ms": 1e3 * statistics.median(r["latency_s"] for r in ok) if ok else None,
            "prompt_tokens": prompt, "reused_tokens": sum(known) if known else None,
            "prefill_s": sum(r["prefill_ms"] or 0 for r in ok) / 1e3,
            "texts": {f"{jobs[i][0]}/{jobs[i][1]}": r["text"] for i, r in res.items()}}


def warm_up(port, n):
    """n concurrent short requests on a text unlike the documents: each
    session (slot) prepares its graphs, and no document is cached yet."""
    ths = [threading.Thread(target=stream_completion, args=(port, {
        "prompt": "Count: one two three four", "max_tokens": 4, "temperature": 0, "cache_prompt": False}))
        for _ in range(n)]
    for t in ths:
        t.start()
    for t in ths:
        t.join()


def repeated_rounds(args, bindir, docs):
    jobs = repeated_prompts(docs, args.questions)
    servers = [
        (f"sdnpu serve --parallel {args.parallel} -t {max(1, args.threads // args.parallel)}",
         lambda: Sdnpu(args.exe, args.model, args.spec, max(1, args.threads // args.parallel), args.parallel)),
        (f"llama-server -np {args.parallel} -t {args.threads}, prompt cache on",
         lambda: Llama(bindir, args.model, args.threads, "plain", args.parallel)),
    ]
    out = {name: [] for name, _ in servers}
    for r in range(args.rounds):
        for name, make in servers:
            with make() as srv:
                warm_up(srv.port, args.parallel)
                res = repeated_load(srv.port, jobs, args.clients_repeated, args.n_gen_repeated)
            res["round"] = r + 1
            out[name].append(res)
            print(f"{name} round {r + 1}: {res['requests_per_s']:.3f} req/s, reused {res['reused_tokens']} of "
                  f"{res['prompt_tokens']} prompt tokens", file=sys.stderr)
    # Reuse must not change what sdnpu answers: every round the same replies.
    sd = out[servers[0][0]]
    same = all(r["texts"] == sd[0]["texts"] for r in sd[1:])
    print(f"\n{len(docs)} documents of ~{bench_native.DOC_TOKENS} tokens x {args.questions} questions = {len(jobs)} "
          f"completions, {args.clients_repeated} clients, {args.n_gen_repeated} greedy tokens, streaming, "
          f"{args.threads} threads per server; sdnpu spec {args.spec}")
    print("| server | round | requests/s | first token p50 (ms) | latency p50 (ms) | prompt tokens | reused | "
          "reused share | prefill (s, all requests) | errors |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, rows in out.items():
        for r in rows:
            ru = r["reused_tokens"]
            print(f"| {name} | {r['round']} | {r['requests_per_s']:.3f} | {r['ttft_p50_ms']:.0f} | "
                  f"{r['latency_p50_ms']:.0f} | {r['prompt_tokens']} | {ru if ru is not None else '?'} | "
                  f"{100 * ru / r['prompt_tokens'] if ru is not None and r['prompt_tokens'] else 0:.0f}% | "
                  f"{r['prefill_s']:.1f} | {r['requests'] - r['ok']} |")
    names = list(out)
    a = statistics.mean(r["requests_per_s"] for r in out[names[0]])
    b = statistics.mean(r["requests_per_s"] for r in out[names[1]])
    print(f"sdnpu / llama-server requests/s (mean over rounds): {a / b if b else 0:.2f}x; sdnpu's replies "
          f"{'equal' if same else 'DIFFER'} across rounds")
    return {"results": out, "ratio": a / b if b else None, "sdnpu_replies_equal_across_rounds": same}


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
    ap.add_argument("--repeated-docs", action="store_true", help="measure prompt reuse (see above)")
    ap.add_argument("--questions", type=int, default=4, help="with --repeated-docs: questions per document")
    ap.add_argument("--parallel", type=int, default=2,
                    help="with --repeated-docs: sdnpu's sessions and llama-server's slots (threads split among "
                         "sdnpu's sessions; llama-server batches its slots on all of them)")
    ap.add_argument("--clients-repeated", type=int, default=16, help="with --repeated-docs: concurrent clients")
    ap.add_argument("--n-gen-repeated", type=int, default=32, help="with --repeated-docs: max_tokens")
    ap.add_argument("--spec", default="sam-tree", help="with --repeated-docs: sdnpu's method")
    args = ap.parse_args()
    bindir = bench_native.peer_bin()
    levels = [int(c) for c in args.clients.split(",")]
    if args.repeated_docs:
        bench_native.DOC_TOKENS, bench_native.DOC_MIN_TOKENS = 1000, 900  # longer cuts of the same texts
        with Llama(bindir, args.model, args.threads, "plain", 1) as srv:
            docs = [d for _, d in bench_native.documents(args.n_docs, srv)]
        res = repeated_rounds(args, bindir, docs)
        out = args.out or os.path.join(ROOT, "bench", "results", "serve_repeated.json")
        os.makedirs(os.path.dirname(out), exist_ok=True)
        json.dump(dict(res, n_gen=args.n_gen_repeated, threads=args.threads, parallel=args.parallel,
                       docs=len(docs), questions=args.questions, clients=args.clients_repeated, spec=args.spec),
                  open(out, "w"), indent=1)
        print(f"wrote {out}")
        return
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
        ("sdnpu serve none", lambda: Sdnpu(args.exe, args.model, "none", args.threads, 1, "--prompt-cache-mem", "0")),
        ("sdnpu serve sam-tree", lambda: Sdnpu(args.exe, args.model, "sam-tree", args.threads, 1,
                                               "--prompt-cache-mem", "0")),
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
