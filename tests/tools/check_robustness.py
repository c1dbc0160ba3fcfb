#!/usr/bin/env python3
"""docs/robustness.md names, for each class of bad input, the tests that
prove the answer: 'tests/FILE (func, func)'. Fail when a named test file
does not exist or a named function (test_* or check_*) is not defined in it.
Usage: check_robustness.py DOC ROOT"""
import os
import re
import sys

doc, root = sys.argv[1], sys.argv[2]
bad = 0
rows = 0
for line in open(doc, encoding="utf-8"):
    if not line.startswith("| ") or line.startswith("| input") or line.startswith("| ---"):
        continue
    rows += 1
    proof = line.rstrip().rstrip("|").split("|")[-1]
    for m in re.finditer(r"(tests/[\w./-]+)(?: \(([^)]*)\))?", proof):
        path = os.path.join(root, m.group(1))
        if not os.path.isfile(path):
            print(f"robustness doc: {m.group(1)} does not exist")
            bad += 1
            continue
        text = open(path, encoding="utf-8", errors="replace").read()
        for name in (m.group(2) or "").split(","):
            name = name.strip()
            if re.fullmatch(r"(test|check)_\w+", name) and not re.search(rf"\b{name}\s*\(", text):
                print(f"robustness doc: {m.group(1)} has no {name}")
                bad += 1
if rows < 10:
    print(f"robustness doc: only {rows} rows")
    bad += 1
print(f"robustness doc: {rows} rows checked" if not bad else f"robustness doc: {bad} problems")
sys.exit(1 if bad else 0)
