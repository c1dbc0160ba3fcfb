#!/usr/bin/env python3
"""The speed peer: llama.cpp's own programs (llama-bench, llama-server) built
from the pinned llama-cpp-python 0.3.36 sdist by bench/peer_native.sh, on the
same GGUF and thread count as sdnpu. Python standard library only.

  a) llama-bench -m MODEL -t T -p 1,8,32,1024,4096 -n 64 -o json: prefill (ppN)
     and decode (tg64) tokens/s.
  b) llama-server on 127.0.0.1 once per speculative type (plain, ngram-simple,
     ngram-mod, ngram-map-k, ngram-cache; llama.cpp's defaults for each), then
     one greedy POST /completion per document (the documents of
     bench/bench_spec.py: license texts cut to 600 tokens, "\\n\\nTL;DR:"):
     timings.predicted_per_second (decode, prefill excluded), predicted_n,
     draft_n, draft_n_accepted.

Prints a table and writes JSON. Usage:
  python3 bench/bench_native.py [--model models/default.gguf] [--threads 2] [--n-docs 10] [--n-gen 128]
                                [--skip-server] [--skip-bench] [--out bench/results/native.json]
From another script: from bench_native import run_native; run_native(model, threads, n_docs, n_gen)
"""
import argparse, glob, json, os, platform, signal, socket, subprocess, sys, tempfile, time
import urllib.error, urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SPEC_TYPES = ["plain", "ngram-simple", "ngram-mod", "ngram-map-k", "ngram-cache"]
HOST = "127.0.0.1"
DOC_TOKENS, DOC_MIN_TOKENS = 600, 500          # see license_documents()


def peer_bin(build=True):
    """The bin dir of the native build (bench/peer_native.sh builds it once, then answers at once)."""
    res = subprocess.run(["bash", os.path.join(ROOT, "bench", "peer_native.sh")], stdout=subprocess.PIPE,
                         text=True, timeout=7200 if build else 60)
    if res.returncode != 0:
        raise RuntimeError("bench/peer_native.sh failed")
    return res.stdout.strip().splitlines()[-1]


def _env(bindir):
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = bindir + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    return env


# ---------------------------------------------------------------- llama-bench

def run_llama_bench(bindir, model, threads, prompts=(1, 8, 32, 1024, 4096), n_gen=64, reps=5, timeout=3600):
    cmd = [os.path.join(bindir, "llama-bench"), "-m", model, "-t", str(threads),
           "-p", ",".join(map(str, prompts)), "-n", str(n_gen), "-r", str(reps), "-o", "json"]
    print("$ " + " ".join(cmd), file=sys.stderr)
    res = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=timeout,
                         env=_env(bindir))
    if res.returncode != 0:
        raise RuntimeError(f"llama-bench failed: {res.stderr[-2000:]}")
    rows = json.loads(res.stdout)
    tests = {}
    for r in rows:
        name = f"pp{r['n_prompt']}" if r["n_prompt"] else f"tg{r['n_gen']}"
        tests[name] = {"tok_s": r["avg_ts"], "stddev": r["stddev_ts"], "n_prompt": r["n_prompt"],
                       "n_gen": r["n_gen"]}
    info = {k: rows[0].get(k) for k in ("build_commit", "build_number", "cpu_info", "model_type", "model_size",
                                        "n_threads", "type_k", "n_batch", "n_ubatch")} if rows else {}
    return {"command": cmd, "tests": tests, "info": info, "raw": rows}


# ---------------------------------------------------------------- llama-server

def _free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def _http(port, path, body=None, timeout=30):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(f"http://{HOST}:{port}{path}", data=data,
                                 headers={"Content-Type": "application/json"} if data else {})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        raw = r.read()
    return raw.decode("utf-8", "replace")


def model_path(name, who):
    """An installed model by name (models/NAME.gguf) or a path to a GGUF, resolved; exits, naming who asked,
    where there is none."""
    p = name if os.sep in name else os.path.join(ROOT, "models", name if name.endswith(".gguf") else name + ".gguf")
    if not os.path.exists(p):
        raise SystemExit(f"{who}: no model {p} (scripts/setup --model NAME)")
    return os.path.realpath(p)


def cpu_name():
    """The CPU's model name (/proc/cpuinfo), else the machine's architecture."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.machine()


def file_fresh(path):
    """The GGUF dropped from the page cache and read whole, so that the page
    cache holds it in large folios and llama.cpp's mapping of it can take
    2 MiB pages, as sdnpu's weight cache does (graphs/wcache.c) and as
    `sdnpu bench graphs` does for llama-bench: a file left in 4 KiB folios
    decodes 15-36% slower (docs/benchmarks.md, "The weight cache's pages in
    the page cache")."""
    try:
        with open(path, "rb", buffering=0) as f:
            os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
            os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_SEQUENTIAL)
            while f.read(1 << 21):
                pass
    except (OSError, AttributeError):
        pass


class Server:
    """llama-server on 127.0.0.1 (its GGUF read fresh first, file_fresh); killed on exit from the
    with-block, whatever happened."""

    def __init__(self, bindir, model, threads, spec, ctx=8192, start_timeout=180):
        self.port = _free_port()
        self.cmd = [os.path.join(bindir, "llama-server"), "-m", model, "-t", str(threads), "-c", str(ctx),
                    "-np", "1", "--host", HOST, "--port", str(self.port)]
        if spec.startswith("draft="):
            # llama.cpp's usual speculative decoding: a small model drafts
            # (its default draft lengths), on the same threads. -md alone
            # loads the draft model and leaves it unused (the type stays
            # "none" unless the GGUF names one): draft-simple turns it on.
            self.cmd += ["-md", spec[len("draft="):], "-td", str(threads), "--spec-type", "draft-simple"]
            spec = "draft-model"
        elif spec != "plain":
            self.cmd += ["--spec-type", spec]
        self.bindir, self.start_timeout, self.proc = bindir, start_timeout, None
        self.log = tempfile.NamedTemporaryFile("w+", prefix=f"llama-server-{spec}-", suffix=".log", delete=False)

    def log_tail(self, n=3000):
        try:
            with open(self.log.name, errors="replace") as f:
                return f.read()[-n:]
        except OSError:
            return ""

    def __enter__(self):
        for i, a in enumerate(self.cmd[:-1]):
            if a in ("-m", "-md"):
                file_fresh(self.cmd[i + 1])
        print("$ " + " ".join(self.cmd), file=sys.stderr)
        self.proc = subprocess.Popen(self.cmd, stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT,
                                     env=_env(self.bindir), start_new_session=True)
        try:
            deadline = time.monotonic() + self.start_timeout
            while True:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"llama-server exited ({self.proc.returncode}):\n{self.log_tail()}")
                try:
                    if json.loads(_http(self.port, "/health", timeout=5)).get("status") == "ok":
                        return self
                except (urllib.error.URLError, ConnectionError, OSError, ValueError):
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError(f"llama-server not healthy after {self.start_timeout}s:\n{self.log_tail()}")
                time.sleep(0.25)
        except BaseException:
            self.stop()
            raise

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self.log.close()

    def __exit__(self, *exc):
        self.stop()
        try:
            os.unlink(self.log.name)
        except OSError:
            pass
        return False

    def post(self, path, body, timeout=60):
        return json.loads(_http(self.port, path, body, timeout=timeout))


def license_documents(n, tokenize, join):
    """The benchmark documents, whoever tokenizes them: the license texts of the
    machine, sorted, duplicates by their first 300 characters dropped, texts of
    fewer than DOC_MIN_TOKENS tokens skipped, each cut to its first DOC_TOKENS.
    tokenize(text) -> tokens; join(tokens) -> text. bench_spec.py uses this too."""
    docs = []
    for path in sorted(glob.glob("/usr/share/common-licenses/*")):
        try:
            text = open(path, encoding="utf-8").read()
        except (OSError, UnicodeDecodeError):
            continue
        if any(text[:300] == d[1][:300] for d in docs):
            continue
        toks = tokenize(text)
        if len(toks) < DOC_MIN_TOKENS:
            continue
        docs.append((os.path.basename(path), join(toks[:DOC_TOKENS])))
        if len(docs) == n:
            break
    return docs


def documents(n, server):
    """license_documents cut by the server's tokenizer (POST /tokenize, no BOS,
    no special-token parsing; pieces joined as bytes), so no llama_cpp module is needed."""
    def tokenize(text):
        return server.post("/tokenize", {"content": text, "add_special": False, "parse_special": False,
                                         "with_pieces": True})["tokens"]

    def join(toks):
        return b"".join(t["piece"].encode() if isinstance(t["piece"], str) else bytes(t["piece"])
                        for t in toks).decode("utf-8", "ignore")
    return license_documents(n, tokenize, join)


def prompt_for(doc):
    return doc + "\n\nTL;DR:"


def complete(server, prompt, n_gen, timeout=900):
    r = server.post("/completion", {"prompt": prompt, "n_predict": n_gen, "temperature": 0, "top_k": 1,
                                    "cache_prompt": False}, timeout=timeout)
    t = r["timings"]
    out = {"prompt_n": t.get("prompt_n"), "prompt_per_second": t.get("prompt_per_second"),
           "predicted_n": t["predicted_n"], "predicted_ms": t["predicted_ms"],
           "predicted_per_second": t["predicted_per_second"],
           "draft_n": t.get("draft_n", 0), "draft_n_accepted": t.get("draft_n_accepted", 0),
           "stop_type": r.get("stop_type")}
    # every target call (the one that ends the prompt included) yields one token plus the drafts it accepts
    out["target_calls"] = out["predicted_n"] - out["draft_n_accepted"]
    return out


def run_server(bindir, model, threads, n_docs, n_gen, spec_types=SPEC_TYPES, ctx=8192):
    docs, per_doc, commands = None, {}, {}
    for spec in spec_types:
        with Server(bindir, model, threads, spec, ctx=ctx) as srv:
            commands[spec] = srv.cmd
            if docs is None:
                docs = documents(n_docs, srv)
            rows = []
            for name, doc in docs:
                rows.append(dict(complete(srv, prompt_for(doc), n_gen), doc=name))
            per_doc[spec] = rows
        print(f"llama-server {spec}: done", file=sys.stderr)
    summary = {}
    for spec, rows in per_doc.items():
        gen = sum(r["predicted_n"] for r in rows)
        sec = sum(r["predicted_ms"] for r in rows) / 1e3
        dn = sum(r["draft_n"] for r in rows)
        da = sum(r["draft_n_accepted"] for r in rows)
        calls = sum(r["target_calls"] for r in rows)
        summary[spec] = {"docs": len(rows), "generated": gen, "decode_tok_s": gen / sec if sec else 0.0,
                         "mean_doc_tok_s": sum(r["predicted_per_second"] for r in rows) / len(rows) if rows else 0.0,
                         "draft_n": dn, "draft_n_accepted": da, "target_calls": calls,
                         "tokens_per_call": gen / calls if calls else None,
                         "draft_acceptance": da / dn if dn else None}
    return {"commands": commands, "docs": [d[0] for d in docs or []], "summary": summary, "per_doc": per_doc}


def run_native(model, threads=2, n_docs=10, n_gen=128, bench=True, server=True, reps=5):
    """Everything, as a dict: {"bin", "model", "threads", "n_gen", "llama_bench", "server"}."""
    bindir = peer_bin()
    out = {"bin": bindir, "model": os.path.abspath(model), "threads": threads, "n_gen": n_gen,
           "peer": "llama.cpp from llama-cpp-python 0.3.36 sdist (vendor/llama.cpp)"}
    if bench:
        out["llama_bench"] = run_llama_bench(bindir, model, threads, reps=reps)
    if server:
        out["server"] = run_server(bindir, model, threads, n_docs, n_gen)
    return out


def print_report(res):
    print(f"\nllama.cpp native (0.3.36), {res['threads']} threads, {os.path.basename(res['model'])}")
    if "llama_bench" in res:
        print("\n| llama-bench test | tok/s |\n|---|---|")
        for k, v in res["llama_bench"]["tests"].items():
            print(f"| {k} | {v['tok_s']:.1f} ± {v['stddev']:.1f} |")
    if "server" in res:
        s = res["server"]["summary"]
        print(f"\nllama-server: {len(res['server']['docs'])} documents, {res['n_gen']} greedy tokens each")
        print("| method | decode tok/s | x plain | tokens/call | draft acceptance |\n|---|---|---|---|---|")
        base = s.get("plain", {}).get("decode_tok_s")
        for k, v in s.items():
            x = f"{v['decode_tok_s'] / base:.2f}" if base else "-"
            tpc = f"{v['tokens_per_call']:.2f}" if v["tokens_per_call"] else "-"
            acc = f"{100 * v['draft_acceptance']:.0f}% ({v['draft_n_accepted']}/{v['draft_n']})" \
                if v["draft_acceptance"] is not None else "-"
            print(f"| {k} | {v['decode_tok_s']:.1f} | {x} | {tpc} | {acc} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "default.gguf"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--n-docs", type=int, default=10)
    ap.add_argument("--n-gen", type=int, default=128)
    ap.add_argument("--reps", type=int, default=5, help="llama-bench repetitions")
    ap.add_argument("--skip-server", action="store_true")
    ap.add_argument("--skip-bench", action="store_true")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "native.json"))
    args = ap.parse_args()
    if not os.path.exists(args.model):
        sys.exit(f"no model at {args.model}")
    # SIGTERM/SIGHUP unwind like Ctrl-C, so the server is always killed
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda s, f: sys.exit(128 + s))
    res = run_native(args.model, args.threads, args.n_docs, args.n_gen, bench=not args.skip_bench,
                     server=not args.skip_server, reps=args.reps)
    print_report(res)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(res, f, indent=1)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
