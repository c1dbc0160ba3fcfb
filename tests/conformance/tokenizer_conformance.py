#!/usr/bin/env python3
"""Tokenizer conformance: sdnpu's token ids against llama.cpp's.

For every string of the corpus (tests/data/tok_corpus.jsonl) and every
combination of add_special and parse_special, the ids that tests/tools/tokdump
prints must equal those of llama.cpp (through llama-cpp-python, the test
virtual environment's oracle), and decoding them must give the text back.

Vocabularies:
  qwen      the default model, Qwen2.5-Coder-0.5B-Instruct (byte-level BPE,
            151,936 tokens with ChatML's and FIM's special tokens, pre =
            "qwen2"), if the file exists;
  gemma     Gemma 3 270M (SentencePiece BPE), if the file exists;
  qwen2     a byte-level BPE vocabulary trained here over the corpus
            (a few thousand merges) and written as a vocab-only GGUF with
            tokenizer.ggml.pre = "qwen2";
  llama3    the same merges with pre = "llama-bpe" (ignore_merges, add_bos);
  gpt2      the same with pre = "gpt-2";
  default   the same with pre = "default" (PCRE2 expressions in sdnpu).

    tokenizer_conformance.py --tokdump BUILD/tokdump [--qwen GGUF] [--gemma GGUF] [--corpus FILE]
                             [--workdir DIR] [--vocab NAME ...]

Prints "N/M strings matched" per vocabulary and mode; exits 1 on any
mismatch, showing the first few.
"""
import argparse
import collections
import json
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))

# ------------------------------------------------------------ the BPE vocab


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


# An approximation of the Qwen2 pre-tokenizer with Python's re module; it only
# shapes which merges get learned, not what is being tested.
PRE_RE = re.compile(r"""'(?:[sS]|[tT]|[rR][eE]|[vV][eE]|[mM]|[lL][lL]|[dD])|[^\r\n\w]?[^\W\d_]+|\d| ?[^\s\w]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""")


def train_bpe(texts, n_merges):
    """Deterministic byte-level BPE: most frequent pair first, ties by the
    pair's text. Returns the merges as (left, right) strings."""
    import heapq

    b2u = bytes_to_unicode()
    counts = collections.Counter()
    for t in texts:
        for w in PRE_RE.findall(t):
            counts["".join(b2u[b] for b in w.encode("utf-8"))] += 1
    words = [list(w) for w in sorted(counts)]
    freq = [counts["".join(w)] for w in words]
    pairs = collections.Counter()
    where = collections.defaultdict(set)
    for i, w in enumerate(words):
        for a, b in zip(w, w[1:]):
            pairs[(a, b)] += freq[i]
            where[(a, b)].add(i)
    # A max-heap of (count, pair) with stale entries skipped on pop.
    heap = [(-c, p) for p, c in pairs.items()]
    heapq.heapify(heap)
    merges = []
    while heap and len(merges) < n_merges:
        negc, best = heapq.heappop(heap)
        if pairs.get(best, 0) != -negc:
            continue
        if -negc < 2:
            break
        merges.append(best)
        a, b = best
        ab = a + b
        touched = set()
        for i in sorted(where.pop(best, ())):
            w = words[i]
            if len(w) < 2:
                continue
            f = freq[i]
            for x, y in zip(w, w[1:]):
                pairs[(x, y)] -= f
                touched.add((x, y))
            nw, j = [], 0
            while j < len(w):
                if j + 1 < len(w) and w[j] == a and w[j + 1] == b:
                    nw.append(ab)
                    j += 2
                else:
                    nw.append(w[j])
                    j += 1
            words[i] = nw
            for x, y in zip(nw, nw[1:]):
                pairs[(x, y)] += f
                where[(x, y)].add(i)
                touched.add((x, y))
        for p in sorted(touched):
            c = pairs.get(p, 0)
            if c > 0:
                heapq.heappush(heap, (-c, p))
            else:
                pairs.pop(p, None)
    return merges


def write_bpe_gguf(path, merges, pre, arch):
    import gguf  # from the test venv

    b2u = bytes_to_unicode()
    tokens = [b2u[b] for b in range(256)]
    seen = set(tokens)
    for a, b in merges:
        if a + b not in seen:
            seen.add(a + b)
            tokens.append(a + b)
    types = [1] * len(tokens)
    # Special tokens as Qwen2 and Llama 3 have them: control ones, and
    # added tokens that are not special (user-defined).
    specials = [("<|endoftext|>", 3), ("<|im_start|>", 3), ("<|im_end|>", 3), ("<|fim_prefix|>", 3),
                ("<tool_call>", 4), ("</tool_call>", 4), ("<|begin_of_text|>", 3), ("<|eot_id|>", 3)]
    ids = {}
    for text, ty in specials:
        ids[text] = len(tokens)
        tokens.append(text)
        types.append(ty)
    w = gguf.GGUFWriter(path, arch)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges([f"{a} {b}" for a, b in merges])
    if pre == "llama-bpe":
        w.add_bos_token_id(ids["<|begin_of_text|>"])
        w.add_eos_token_id(ids["<|eot_id|>"])
    else:
        w.add_bos_token_id(ids["<|endoftext|>"])
        w.add_eos_token_id(ids["<|im_end|>"])
        w.add_add_bos_token(False)
    # The few hyper-parameters llama.cpp reads even for vocab_only.
    w.add_context_length(128)
    w.add_embedding_length(8)
    w.add_block_count(1)
    w.add_feed_forward_length(8)
    w.add_head_count(1)
    w.add_head_count_kv(1)
    w.add_layer_norm_rms_eps(1e-6)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


BPE_VARIANTS = {  # name: (tokenizer.ggml.pre, general.architecture)
    "qwen2": ("qwen2", "qwen2"),
    "llama3": ("llama-bpe", "llama"),
    "gpt2": ("gpt-2", "qwen2"),
    "default": ("default", "qwen2"),
}

# ------------------------------------------------------------ the runs

MODES = [(False, False), (True, False), (False, True), (True, True)]


def mode_name(add, parse):
    return f"add_special={int(add)} parse_special={int(parse)}"


def run_tokdump(tokdump, model, corpus, add, parse):
    cmd = [tokdump, "-m", model, corpus]
    if add:
        cmd.append("--add-special")
    if parse:
        cmd.append("--parse-special")
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"tokdump failed ({p.returncode}): {p.stderr.strip()}")
    return [json.loads(l) for l in p.stdout.splitlines()]


def check_vocab(name, model, tokdump, texts, show):
    import llama_cpp

    quiet_llama_cpp(llama_cpp)
    llm = llama_cpp.Llama(model_path=model, vocab_only=True, verbose=False)
    ok_all = check_pieces(name, model, tokdump, llm, show)
    for add, parse in MODES:
        t0 = time.time()
        ours = run_tokdump(tokdump, model, CORPUS, add, parse)
        t1 = time.time()
        if len(ours) != len(texts):
            sys.exit(f"{name}: tokdump printed {len(ours)} lines for {len(texts)} strings")
        matched, rt_bad, diffs = 0, [], []
        for i, (text, o) in enumerate(zip(texts, ours)):
            ref = llm.tokenize(text.encode("utf-8"), add_bos=add, special=parse)
            got = o.get("ids")
            if got == ref:
                matched += 1
            else:
                diffs.append((i, text, ref, got if got is not None else o))
            # U+2581 decodes to a space in SentencePiece vocabularies, so
            # such text cannot come back unchanged (llama.cpp has the same).
            if got is not None and not o.get("rt") and not (name == "gemma" and "\u2581" in text):
                rt_bad.append(i)
        t2 = time.time()
        status = "ok" if matched == len(texts) and not rt_bad else "FAIL"
        print(f"{name:8s} {mode_name(add, parse)}: {matched}/{len(texts)} strings matched"
              f"{'' if not rt_bad else f', {len(rt_bad)} round trips failed'}"
              f"  [{status}; sdnpu {t1 - t0:.2f}s, llama.cpp {t2 - t1:.2f}s]")
        for i, text, ref, got in diffs[:show]:
            print(f"  string {i}: {text[:120]!r}")
            print(f"    llama.cpp: {ref[:40]}")
            print(f"    sdnpu:     {got if isinstance(got, dict) else got[:40]}")
            if isinstance(got, list):
                k = next((j for j, (a, b) in enumerate(zip(ref, got)) if a != b), min(len(ref), len(got)))
                tail_ref = [llm.detokenize([t], special=True) for t in ref[k:k + 5]]
                tail_got = [llm.detokenize([t], special=True) for t in got[k:k + 5]]
                print(f"    first difference at token {k}: llama.cpp {ref[k:k + 5]} {tail_ref}, sdnpu {got[k:k + 5]} {tail_got}")
        for i in rt_bad[:show]:
            print(f"  round trip failed for string {i}: {texts[i][:120]!r}")
        ok_all = ok_all and status == "ok"
    return ok_all


CORPUS = None
_LOG_CB = None


def check_pieces(name, model, tokdump, llm, show):
    """Every token's piece (special tokens rendered or not) and its
    end-of-generation mark, against llama.cpp's."""
    import ctypes
    import llama_cpp

    p = subprocess.run([tokdump, "-m", model, "--pieces"], capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"tokdump --pieces failed ({p.returncode}): {p.stderr.strip()}")
    vocab = llm._model.vocab
    buf = ctypes.create_string_buffer(4096)
    bad = []
    lines = p.stdout.splitlines()
    for line in lines:
        sid, p0, p1, eog = line.split()
        tid = int(sid)
        want = []
        for special in (False, True):
            n = llama_cpp.llama_token_to_piece(vocab, tid, buf, len(buf), 0, special)
            want.append(buf.raw[:n].hex() or "-")
        want_eog = "1" if llama_cpp.llama_vocab_is_eog(vocab, tid) else "0"
        if [p0, p1, eog] != want + [want_eog]:
            bad.append((tid, [p0, p1, eog], want + [want_eog]))
    n_vocab = llama_cpp.llama_vocab_n_tokens(vocab)
    ok = not bad and len(lines) == n_vocab
    print(f"{name:8s} pieces and EOG marks: {len(lines) - len(bad)}/{n_vocab} tokens matched  [{'ok' if ok else 'FAIL'}]")
    for tid, got, want in bad[:show]:
        print(f"  token {tid}: sdnpu {got}, llama.cpp {want}")
    return ok


def quiet_llama_cpp(llama_cpp):
    """llama.cpp logs a warning for every doubled BOS; keep the report readable."""
    global _LOG_CB
    if _LOG_CB is None:
        import ctypes

        @llama_cpp.llama_log_callback
        def _noop(level, text, user_data):
            pass

        _LOG_CB = _noop
        llama_cpp.llama_log_set(_LOG_CB, ctypes.c_void_p())


def main():
    global CORPUS
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokdump", required=True)
    ap.add_argument("--qwen", default=os.path.join(ROOT, "models", "default.gguf"))
    ap.add_argument("--gemma", default=os.path.join(ROOT, "models", "gemma3-270m.gguf"))
    ap.add_argument("--corpus", default=os.path.join(ROOT, "tests", "data", "tok_corpus.jsonl"))
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--merges", type=int, default=4000)
    ap.add_argument("--vocab", action="append", help="only these (qwen, gemma, qwen2, llama3, gpt2, default)")
    ap.add_argument("--show", type=int, default=5)
    args = ap.parse_args()
    CORPUS = args.corpus
    with open(args.corpus, encoding="utf-8") as f:
        texts = [json.loads(l)["text"] for l in f if l.strip()]
    wanted = args.vocab or ["qwen", "gemma"] + list(BPE_VARIANTS)
    workdir = args.workdir or tempfile.mkdtemp(prefix="sdnpu-tokconf-")
    os.makedirs(workdir, exist_ok=True)

    ok = True
    checked = 0
    for name, path in (("qwen", args.qwen), ("gemma", args.gemma)):
        if name not in wanted:
            continue
        if os.path.exists(path):
            ok &= check_vocab(name, path, args.tokdump, texts, args.show)
            checked += 1
        else:
            print(f"{name}: {path} not found, skipped")
    bpe = [v for v in wanted if v in BPE_VARIANTS]
    if bpe:
        t0 = time.time()
        merges = train_bpe(texts, args.merges)
        print(f"trained {len(merges)} byte-level BPE merges over the corpus in {time.time() - t0:.1f}s")
        for name in bpe:
            pre, arch = BPE_VARIANTS[name]
            path = os.path.join(workdir, f"tok-{name}.gguf")
            write_bpe_gguf(path, merges, pre, arch)
            ok &= check_vocab(name, path, args.tokdump, texts, args.show)
            checked += 1
    if not checked:
        sys.exit("no vocabulary checked")
    print("conformance: " + ("PASS" if ok else "FAIL"))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
