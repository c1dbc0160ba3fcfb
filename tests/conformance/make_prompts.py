#!/usr/bin/env python3
"""Build tests/data/conformance_prompts.json: the prompts of the forward-pass
conformance test (prose, code, chat-formatted, long documents), taken from
freely licensed text found on a Debian machine plus a few written here.
Deterministic; the output is committed so every machine tests the same text."""
import glob, json, os, random, sys

random.seed(1234)
out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "data", "conformance_prompts.json")

def read(path, limit):
    try:
        with open(path, encoding="utf-8", errors="strict") as f:
            return f.read()[:limit]
    except (OSError, UnicodeDecodeError):
        return None

prompts = []
prose = [
    "The history of the printing press begins in the fifteenth century, when",
    "Summarize: The city council met on Tuesday to discuss the new bicycle lanes. Residents raised concerns about parking, while shop owners argued that more cyclists would bring more customers. After three hours of debate, the council voted to run a six-month trial on two streets.",
    "Photosynthesis is the process by which green plants",
    "Dear Maria,\n\nThank you for your letter. I wanted to reply sooner, but",
    "Q: What is the capital of France?\nA:",
    "Once upon a time, in a small village by the sea, there lived an old fisherman who",
    "The three laws of thermodynamics can be stated as follows:",
    "Reply to this message: \"Hey, are we still on for lunch tomorrow at noon? I can book a table.\"",
]
for p in prose:
    prompts.append({"kind": "prose", "text": p})

code = [
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "#include <stdio.h>\n\nint main(int argc, char **argv) {\n    for (int i = 0; i < argc; i++)\n",
    "SELECT name, COUNT(*) AS n\nFROM orders\nJOIN customers ON orders.customer_id = customers.id\n",
    "function debounce(fn, ms) {\n  let timer;\n  return (...args) => {\n",
]
for p in code:
    prompts.append({"kind": "code", "text": p})

chats = [
    "<start_of_turn>user\nWrite a haiku about autumn leaves.<end_of_turn>\n<start_of_turn>model\n",
    "<start_of_turn>user\nExplain what a hash table is in two sentences.<end_of_turn>\n<start_of_turn>model\n",
    "<start_of_turn>user\nSummarize the following text in one sentence.\n\nThe committee reviewed the budget and found that spending on maintenance had doubled over five years, mostly because of ageing equipment that the department had postponed replacing.<end_of_turn>\n<start_of_turn>model\n",
    "<start_of_turn>user\nTranslate to French: Good morning, how are you?<end_of_turn>\n<start_of_turn>model\n",
    "<start_of_turn>user\nGive me three tips for writing clear emails.<end_of_turn>\n<start_of_turn>model\n",
]
for p in chats:
    prompts.append({"kind": "chat", "text": p})

# Real documents: license texts, Python sources, docs on this machine.
docs = sorted(glob.glob("/usr/share/common-licenses/*"))
pysrc = sorted(glob.glob("/usr/lib/python3*/json/*.py") + glob.glob("/usr/lib/python3*/textwrap.py")
               + glob.glob("/root/.pyenv/versions/*/lib/python3*/textwrap.py"))
seen = set()
for path in docs:
    t = read(path, 20000)
    if not t or t[:200] in seen:
        continue
    seen.add(t[:200])
    start = random.randrange(0, max(1, len(t) - 6000))
    prompts.append({"kind": "document", "source": path, "text": t[start:start + 800]})
    if len([p for p in prompts if p["kind"] == "long"]) < 4 and len(t) > 6000:
        prompts.append({"kind": "long", "source": path, "text": t[start:start + 5500]})
for path in pysrc[:4]:
    t = read(path, 20000)
    if t and t[:200] not in seen:
        seen.add(t[:200])
        prompts.append({"kind": "code", "source": path, "text": t[:1200]})

with open(out, "w", encoding="utf-8") as f:
    json.dump(prompts, f, ensure_ascii=False, indent=0)
kinds = {}
for p in prompts:
    kinds[p["kind"]] = kinds.get(p["kind"], 0) + 1
print(f"{len(prompts)} prompts: {kinds}", file=sys.stderr)
