#!/usr/bin/env python3
"""Build the tokenizer conformance corpus, tests/data/tok_corpus.jsonl.

Each line is {"kind": ..., "text": ...}. The strings come from documents on a
Debian system (license texts, package copyright files, man pages, Python and
C sources) cut at random places, plus generated strings for what those
documents lack: other scripts, emoji sequences, combining marks, whitespace
runs, numbers, special-token text. The random choices use a fixed seed, and
files are visited in sorted order, so the same machine gives the same corpus;
the committed file is the reference, this script says how it was made.

    python3 tests/conformance/make_corpus.py [-o tests/data/tok_corpus.jsonl]
"""
import argparse
import glob
import gzip
import json
import os
import random

SEED = 20240611
MAX_BYTES = 900_000

# Sample sentences in scripts the local documents lack (public-domain style
# phrases written for this corpus).
SCRIPTS = {
    "cjk": [
        "日本語のテキストを正しく分割できるか確認します。",
        "東京は日本の首都であり、人口は約一千四百万人です。",
        "我们正在测试分词器对中文文本的处理能力。",
        "這是一段繁體中文的句子，包含標點符號。",
        "한국어 문장도 포함되어 있습니다. 토크나이저 테스트입니다.",
        "カタカナとひらがなが混ざった文章：コンピューターはとても便利です。",
        "数学公式：面积等于长乘以宽，即 S = a × b。",
    ],
    "arabic": [
        "هذه جملة باللغة العربية لاختبار المقسم.",
        "السلام عليكم ورحمة الله وبركاته",
        "يبلغ عدد سكان القاهرة أكثر من عشرين مليون نسمة.",
        "النص العربي يكتب من اليمين إلى اليسار ١٢٣٤٥.",
    ],
    "devanagari": [
        "यह हिंदी में एक वाक्य है जो टोकनाइज़र का परीक्षण करता है।",
        "भारत की राजधानी नई दिल्ली है।",
        "संस्कृतम् एका प्राचीना भाषा अस्ति। १२३४५",
        "क्षत्रिय, ज्ञान, श्री, द्वार — संयुक्ताक्षर।",
    ],
    "cyrillic": [
        "Это предложение на русском языке для проверки токенизатора.",
        "Москва — столица России, население около тринадцати миллионов.",
        "Українська мова також використовує кирилицю: ґ, є, і, ї.",
        "Съешь же ещё этих мягких французских булок, да выпей чаю.",
    ],
    "greek_hebrew_thai": [
        "Η γρήγορη καφέ αλεπού πηδάει πάνω από τον τεμπέλη σκύλο.",
        "זהו משפט בעברית לבדיקת המפרק.",
        "ภาษาไทยไม่มีช่องว่างระหว่างคำ ทดสอบการตัดคำ",
        "Tiếng Việt có nhiều dấu: ă, â, ê, ô, ơ, ư, đ.",
    ],
    "emoji": [
        "👨‍👩‍👧‍👦 family", "🏳️‍🌈 flag", "👩🏽‍💻 coder", "❤️‍🔥", "🧑‍🤝‍🧑", "😀😃😄😁😆",
        "🇩🇪🇫🇷🇯🇵", "👍🏻👍🏼👍🏽👍🏾👍🏿", "1️⃣ 2️⃣ #️⃣", "🤷‍♀️ ok 🙆‍♂️",
    ],
    "combining": [
        "e\u0301 a\u0300 o\u0302 u\u0308", "Z\u0351\u036b\u0343a\u0352l\u0354g\u0334o\u0315",
        "n\u0303o\u0308\u0301", "\u0915\u094d\u0937", "a\u20dd b\u20de", "Å vs A\u030a (NFC vs NFD)",
        "\u1100\u1161\u11a8 (jamo)", "ﬁ ﬂ ﬀ ligatures", "x\u200by\u200cz\u200d", "\ufeffBOM at start",
    ],
}

SPECIALS = [
    "<start_of_turn>", "<end_of_turn>", "<bos>", "<eos>", "<pad>", "<unk>", "<mask>", "[multimodal]",
    "<unused0>", "<unused17>", "<unused6241>", "<start_of_image>", "<end_of_image>", "<table>", "</td>",
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|fim_prefix|>", "<tool_call>", "</tool_call>",
    "<|begin_of_text|>", "<|eot_id|>", "<s>", "</s>",
    # near misses
    "<start_of_turn", "end_of_turn>", "<<bos>>", "<|im_start|", "<bos><bos>", "< bos >", "<BOS>",
]

WS = [" ", "  ", "   ", "\t", "\t\t", "\n", "\n\n", "\r\n", "\u00a0", "\u3000", "\u2003", "\u000b", "\u000c", "\u0085"]


def read_text(path):
    try:
        if path.endswith(".gz"):
            with gzip.open(path, "rb") as f:
                data = f.read(200_000)
        else:
            with open(path, "rb") as f:
                data = f.read(200_000)
    except OSError:
        return ""
    return data.decode("utf-8", errors="ignore")


def windows(rng, text, n, lo, hi):
    out = []
    if len(text) < lo:
        return out
    for _ in range(n):
        size = rng.randint(lo, min(hi, len(text)))
        start = rng.randint(0, len(text) - size)
        out.append(text[start:start + size])
    return out


def pick_files(rng, pattern, k):
    files = sorted(glob.glob(pattern, recursive=True))
    if len(files) > k:
        files = sorted(rng.sample(files, k))
    return files


def from_files(rng, kind, pattern, n_files, per_file, lo, hi):
    items = []
    for path in pick_files(rng, pattern, n_files):
        text = read_text(path)
        for w in windows(rng, text, per_file, lo, hi):
            if w.strip():
                items.append((kind, w))
    return items


def generated(rng):
    items = []
    all_script = [s for v in SCRIPTS.values() for s in v]
    for kind, sents in SCRIPTS.items():
        for s in sents:
            items.append((kind, s))
        for _ in range(30):
            k = rng.randint(1, 4)
            parts = [rng.choice(sents) for _ in range(k)]
            items.append((kind, rng.choice([" ", "\n", "", " — "]).join(parts)))
    for _ in range(120):  # mixed scripts with English and code
        parts = [rng.choice(all_script), rng.choice(["The quick brown fox", "x = f(y) + 3;", "2024-06-11",
                                                     "hello, world", "'s it's we're they'll I'd"])]
        rng.shuffle(parts)
        items.append(("mixed", rng.choice([" ", "", "\n", "\t"]).join(parts)))
    for _ in range(160):  # whitespace
        parts = []
        for _ in range(rng.randint(1, 8)):
            r = rng.random()
            if r < 0.4:
                parts.append(rng.choice(WS) * rng.randint(1, 40))
            elif r < 0.7:
                parts.append(rng.choice(["word", "x", "def", "if", "A", "é", "中", "1", "!"]))
            else:
                parts.append(rng.choice(WS))
        items.append(("whitespace", "".join(parts)))
    items.append(("whitespace", " " * 100))
    items.append(("whitespace", "\n" * 70))
    items.append(("whitespace", "\t" * 35 + "x"))
    items.append(("whitespace", " \n \n  \n\t\n"))
    for _ in range(160):  # numbers
        r = rng.random()
        if r < 0.3:
            s = str(rng.randint(0, 10 ** rng.randint(1, 40)))
        elif r < 0.5:
            s = f"{rng.uniform(-1e6, 1e6):.{rng.randint(0, 9)}f}"
        elif r < 0.7:
            s = " ".join(str(rng.randint(0, 99999)) for _ in range(rng.randint(2, 10)))
        elif r < 0.85:
            s = f"v{rng.randint(0, 9)}.{rng.randint(0, 99)}.{rng.randint(0, 999)} at 0x{rng.getrandbits(32):08x}"
        else:
            s = rng.choice(["١٢٣٤٥", "१२३", "一二三", "①②③", "½ ¾ ⅓", "Ⅻ", "٣.١٤"]) + str(rng.randint(0, 999))
        items.append(("numbers", s))
    for _ in range(180):  # special-token text
        parts = []
        for _ in range(rng.randint(1, 6)):
            r = rng.random()
            if r < 0.5:
                parts.append(rng.choice(SPECIALS))
            elif r < 0.8:
                parts.append(rng.choice(["user", "model", "Hello!", "\n", " ", "How are you?", "中文", "  "]))
            else:
                parts.append(rng.choice(WS))
        items.append(("special", "".join(parts)))
    for s in SPECIALS:
        items.append(("special", s))
    for _ in range(120):  # random code points, all planes, assigned or not
        cps = []
        for _ in range(rng.randint(1, 20)):
            r = rng.random()
            if r < 0.3:
                cp = rng.randint(0x20, 0x7E)
            elif r < 0.6:
                cp = rng.randint(0xA0, 0x2FFF)
            elif r < 0.8:
                cp = rng.randint(0x3000, 0xFFFD)
            else:
                cp = rng.randint(0x10000, 0x10FFFF)
            if 0xD800 <= cp <= 0xDFFF:
                cp = 0xFFFD
            cps.append(chr(cp))
        items.append(("random", "".join(cps)))
    items.append(("edge", ""))
    items.append(("edge", " "))
    items.append(("edge", "a"))
    items.append(("edge", "'s 'S 'll 'LL 'Re it's DON'T"))
    items.append(("edge", "\u2581 lower one eighth block \u2581\u2581"))
    return items


def main():
    ap = argparse.ArgumentParser()
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("-o", "--out", default=os.path.join(here, "..", "data", "tok_corpus.jsonl"))
    args = ap.parse_args()
    rng = random.Random(SEED)
    items = []
    items += from_files(rng, "license", "/usr/share/common-licenses/*", 40, 25, 20, 700)
    items += from_files(rng, "copyright", "/usr/share/doc/*/copyright", 120, 5, 20, 500)
    items += from_files(rng, "man", "/usr/share/man/man1/*.gz", 60, 4, 20, 600)
    items += from_files(rng, "python", "/usr/lib/python3*/**/*.py", 80, 5, 20, 600)
    items += from_files(rng, "c", "/usr/include/*.h", 40, 4, 20, 700)
    items += generated(rng)
    for _ in range(4):  # a few long ones
        items.append(("long", "".join(t for _, t in rng.sample(items, 30))))
    out, size = [], 0
    for kind, text in items:
        line = json.dumps({"kind": kind, "text": text}, ensure_ascii=False)
        if size + len(line.encode()) + 1 > MAX_BYTES:
            break
        out.append(line)
        size += len(line.encode()) + 1
    with open(args.out, "w", encoding="utf-8") as f:
        f.write("\n".join(out) + "\n")
    kinds = {}
    for kind, _ in items[: len(out)]:
        kinds[kind] = kinds.get(kind, 0) + 1
    print(f"{len(out)} strings, {size} bytes -> {args.out}")
    print(" ".join(f"{k}:{v}" for k, v in sorted(kinds.items())))


if __name__ == "__main__":
    main()
