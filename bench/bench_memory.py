#!/usr/bin/env python3
"""Peak memory and start to first token: sdnpu against llama-server, on the
same GGUF, context, prompt and threads, interleaved in one run.

For each model, --reps times in turn:
  sdnpu run -c CTX -n N_GEN --temp 0 --spec none -f PROMPT, in four configurations:
    cold     shared weights, the weight cache emptied first (packs and writes it)
    warm     shared weights, the cache written by cold (reads it, packs nothing)
    nocache  shared weights, --no-weight-cache (packs at start)
    private  --weights private --no-weight-cache (each graph its own copy: the old default)
  llama-server -c CTX -np 1 (the peer built by bench/peer_native.sh), one
    streamed greedy POST /completion of the same prompt and N_GEN tokens.
Peak RSS: the process's own high-water mark (wait4's ru_maxrss for sdnpu,
/proc/PID/status VmHWM for llama-server before it is stopped). Start to
first token: from the process's start to the first generated text on its
output (sdnpu's stdout; the server's first streamed token), so model load,
graph preparation and the prompt's prefill are all in it. The prompt is the
sample document under a plain "TL;DR:" cue (no chat template: both engines
see the same text). The median of the reps is reported.

Prints a table and writes JSON. Usage:
  python3 bench/bench_memory.py [--models default,qwen2.5-coder-1.5b-instruct,gemma3-270m] [--ctx 4096]
                                [--n-gen 64] [--threads 2] [--reps 3] [--out bench/results/memory.json]
"""
import argparse, json, os, platform, resource, shutil, statistics, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_native  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SDNPU = os.path.join(ROOT, "build", "sdnpu")
CONFIGS = ["cold", "warm", "nocache", "private"]


def prompt_text():
    with open(os.path.join(ROOT, "examples", "data", "sample.txt"), encoding="utf-8") as f:
        return f.read().strip() + "\n\nTL;DR:"


def run_sdnpu(model, prompt_file, ctx, n_gen, threads, config, cache_dir):
    cmd = [SDNPU, "run", "-m", model, "-c", str(ctx), "-n", str(n_gen), "--temp", "0", "-t", str(threads),
           "-f", prompt_file, "--no-stats", "--spec", "none"]  # plain decoding, as llama-server's
    if config == "private":
        cmd += ["--weights", "private", "--no-weight-cache"]
    elif config == "nocache":
        cmd += ["--no-weight-cache"]
    else:
        if config == "cold":
            shutil.rmtree(cache_dir, ignore_errors=True)
        cmd += ["--weight-cache", cache_dir]
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    first = proc.stdout.read(1)
    ttft = time.monotonic() - t0 if first else None
    out = first + proc.stdout.read()
    err = proc.stderr.read()
    _, status, ru = os.wait4(proc.pid, 0)
    if status != 0:
        raise RuntimeError(f"sdnpu {config} failed ({status}): {err.decode(errors='replace')[-1500:]}")
    return {"peak_rss_mib": ru.ru_maxrss / 1024.0, "start_to_first_token_s": ttft,
            "wall_s": time.monotonic() - t0, "text": out.decode("utf-8", "replace")}


def vm_hwm_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


def run_llama(bindir, model, prompt, ctx, n_gen, threads):
    t0 = time.monotonic()
    with bench_native.Server(bindir, model, threads, "plain", ctx=ctx) as srv:
        ready = time.monotonic() - t0
        import urllib.request
        body = json.dumps({"prompt": prompt, "n_predict": n_gen, "temperature": 0, "top_k": 1, "stream": True,
                           "cache_prompt": False}).encode()
        req = urllib.request.Request(f"http://{bench_native.HOST}:{srv.port}/completion", data=body,
                                     headers={"Content-Type": "application/json"})
        ttft, text = None, []
        with urllib.request.urlopen(req, timeout=900) as r:
            for raw in r:
                line = raw.decode("utf-8", "replace").strip()
                if not line.startswith("data:"):
                    continue
                ev = json.loads(line[5:])
                if ev.get("content") and ttft is None:
                    ttft = time.monotonic() - t0
                text.append(ev.get("content", ""))
                if ev.get("stop"):
                    break
        rss = vm_hwm_kib(srv.proc.pid) / 1024.0
    return {"peak_rss_mib": rss, "start_to_first_token_s": ttft, "ready_s": ready, "text": "".join(text)}


def med(rows, key):
    vals = [r[key] for r in rows if r.get(key) is not None]
    return statistics.median(vals) if vals else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="default,qwen2.5-coder-1.5b-instruct,gemma3-270m")
    ap.add_argument("--ctx", type=int, default=4096)
    ap.add_argument("--n-gen", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--no-peer", action="store_true")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "memory.json"))
    a = ap.parse_args()
    bindir = None if a.no_peer else bench_native.peer_bin()
    prompt = prompt_text()
    pf = tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False)
    pf.write(prompt)
    pf.close()
    cache_dir = tempfile.mkdtemp(prefix="sdnpu-bench-wcache-")
    res = {"machine": platform.processor() or platform.machine(), "cpu": bench_native.cpu_name(), "ctx": a.ctx,
           "n_gen": a.n_gen, "threads": a.threads, "reps": a.reps, "models": {}}
    try:
        for name in a.models.split(","):
            model = bench_native.model_path(name, "bench_memory")
            runs = {c: [] for c in CONFIGS + ["llama-server"]}
            for rep in range(a.reps):
                for c in CONFIGS:
                    runs[c].append(run_sdnpu(model, pf.name, a.ctx, a.n_gen, a.threads, c, cache_dir))
                    print(f"{name} rep {rep + 1} {c}: {runs[c][-1]['peak_rss_mib']:.0f} MiB, "
                          f"{runs[c][-1]['start_to_first_token_s']:.2f} s", file=sys.stderr)
                if bindir:
                    runs["llama-server"].append(run_llama(bindir, model, prompt, a.ctx, a.n_gen, a.threads))
            texts = {runs[c][0]["text"] for c in CONFIGS}
            res["models"][name] = {
                "file_mib": os.path.getsize(model) / 1048576.0,
                "sdnpu_outputs_identical": len(texts) == 1,
                "runs": {c: [{k: v for k, v in r.items() if k != "text"} for r in rs] for c, rs in runs.items()},
                "median": {c: {"peak_rss_mib": med(rs, "peak_rss_mib"),
                               "start_to_first_token_s": med(rs, "start_to_first_token_s")}
                           for c, rs in runs.items() if rs}}
    finally:
        os.unlink(pf.name)
        shutil.rmtree(cache_dir, ignore_errors=True)
    report(res)
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1)
    print(f"wrote {a.out}", file=sys.stderr)


def report(res):
    print(f"\nPeak RSS (MiB) and start to first token (s): {res['cpu']}, {res['threads']} threads, "
          f"context {res['ctx']}, {res['n_gen']} tokens, median of {res['reps']}")
    print(f"{'model':<30} {'file':>6} | " + " | ".join(f"{c:>15}" for c in CONFIGS + ["llama-server"]) +
          " | warm/llama RSS | warm/llama TTFT | cold/llama TTFT")
    for name, m in res["models"].items():
        md = m["median"]
        cells = []
        for c in CONFIGS + ["llama-server"]:
            v = md.get(c)
            cells.append(f"{v['peak_rss_mib']:6.0f} {v['start_to_first_token_s']:6.2f}s" if v else f"{'-':>15}")
        peer = md.get("llama-server")

        def ratio(c, k):
            return f"{md[c][k] / peer[k]:.2f}x" if peer and peer.get(k) else "-"
        print(f"{name:<30} {m['file_mib']:6.0f} | " + " | ".join(f"{c:>15}" for c in cells) +
              f" | {ratio('warm', 'peak_rss_mib'):>14} | {ratio('warm', 'start_to_first_token_s'):>15}"
              f" | {ratio('cold', 'start_to_first_token_s'):>15}")
        if not m["sdnpu_outputs_identical"]:
            print(f"  WARNING: {name}: sdnpu's configurations wrote different text")


if __name__ == "__main__":
    main()
