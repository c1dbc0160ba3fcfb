#!/usr/bin/env python3
"""tests/tools/check_floors.py - every #include in the tree goes down a floor,
to a face.

The floors are the sd_floor() calls of cmake/floors.cmake, lowest first; the
build compiles each folder with only its own folder and the faces of the
floors it uses on its include path, so most violations fail to compile. This
check says the same of every file in words, including headers no .c file
happens to include yet, and also checks the rules the compiler cannot:
  - a folder includes its own headers, the faces of the floors it uses
    (closed over their USES), and the public include/sdnpu.h, nothing else;
  - a face includes only faces (else a folder above could not compile it);
  - a floor uses only floors declared before it (lower ones);
  - cli/ (the command) may use every floor's faces, examples/ only sdnpu.h;
  - no file of a floor, cli/ or examples/ is longer than the house's 800
    lines (STYLE.md: a longer file holds several ideas; tests/ are exempt).
Exit status 1 with one line per violation, 0 when the tree is clean.

usage: check_floors.py [--max-lines N] [REPO_ROOT]
"""
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
CALL = re.compile(r'^sd_floor\((.*?)\)\s*$', re.M | re.S)
KEYWORDS = {"SOURCES", "FACES", "USES"}


def parse_floors(path):
    """[(name, faces, uses, app)] in declaration order."""
    text = re.sub(r'#.*', '', open(path, encoding="utf-8").read())
    floors = []
    for m in CALL.finditer(text):
        words = m.group(1).split()
        name, lists, key, app = words[0], {k: [] for k in KEYWORDS}, None, False
        for w in words[1:]:
            if w in KEYWORDS:
                key = w
            elif w == "APP":
                app = True
            elif key:
                lists[key].append(w)
        floors.append((name, lists["FACES"], lists["USES"], app))
    return floors


def closure(floors):
    """name -> set of floors it may include (itself excluded)."""
    seen = {}
    errors = []
    for name, _faces, uses, _app in floors:
        allowed = set()
        for u in uses:
            if u not in seen:
                errors.append(f"cmake/floors.cmake: {name} uses {u}, which is not a floor below it")
                continue
            allowed |= {u} | seen[u]
        seen[name] = allowed
    return seen, errors


def sources(root, folder):
    for dirpath, _dirs, files in os.walk(os.path.join(root, folder)):
        for f in sorted(files):
            if f.endswith((".c", ".h")):
                yield os.path.join(dirpath, f)


MAX_LINES = 800


def check(root, max_lines=MAX_LINES):
    floors = parse_floors(os.path.join(root, "cmake", "floors.cmake"))
    if not floors:
        return ["cmake/floors.cmake: no sd_floor() calls found"]
    may, errors = closure(floors)
    faces = {name: {f"{name}/{f}" for f in fs} for name, fs, _u, _a in floors}
    all_floors = {name for name, *_ in floors}
    may["cli"] = all_floors
    may["examples"] = set()
    faces.setdefault("cli", set())
    faces.setdefault("examples", set())
    for folder in list(may):
        for path in sources(root, folder):
            rel = os.path.relpath(path, root)
            is_face = rel in faces.get(folder, set())
            text = open(path, encoding="utf-8", errors="replace").read()
            n_lines = text.count("\n")
            if n_lines > max_lines:
                errors.append(f"{rel}: {n_lines} lines, over the house's {max_lines}: split it by idea")
            for inc in INCLUDE.findall(text):
                top = inc.split("/")[0] if "/" in inc else None
                if inc == "sdnpu.h":
                    continue
                if top is None:
                    # Relative to the file: a header of its own directory.
                    if not os.path.exists(os.path.join(os.path.dirname(path), inc)):
                        errors.append(f'{rel}: includes "{inc}", which is not beside it')
                    elif is_face:
                        errors.append(f'{rel}: a face includes "{inc}" by a relative name; faces name faces "floor/x.h"')
                    continue
                if folder == "examples":
                    errors.append(f'{rel}: an example includes "{inc}"; examples use include/sdnpu.h alone')
                elif top == folder:
                    if is_face and inc not in faces[folder]:
                        errors.append(f'{rel}: a face includes "{inc}", a private header of its own floor')
                elif top not in all_floors:
                    errors.append(f'{rel}: includes "{inc}" of {top}/, which is not a floor it may use')
                elif top not in may[folder]:
                    errors.append(f'{rel}: includes "{inc}": {top}/ is not a floor below {folder}/ that it uses')
                elif inc not in faces[top]:
                    errors.append(f'{rel}: includes "{inc}", a private header of {top}/ (its faces: '
                                  f'{", ".join(sorted(faces[top]))})')
    for name, fs, _u, _a in floors:
        for f in fs:
            if not os.path.exists(os.path.join(root, name, f)):
                errors.append(f"cmake/floors.cmake: face {name}/{f} does not exist")
    return errors


def main():
    args = sys.argv[1:]
    max_lines = MAX_LINES
    if args[:1] == ["--max-lines"] and len(args) >= 2:
        max_lines, args = int(args[1]), args[2:]
    root = args[0] if args else os.path.join(os.path.dirname(__file__), "..", "..")
    errors = check(os.path.abspath(root), max_lines)
    for e in errors:
        print(e)
    if errors:
        print(f"{len(errors)} file(s) or include(s) break the floors (DESIGN.md, docs/floors.md)")
        return 1
    print(f"floors: every include goes down a floor, to a face; no file over {max_lines} lines")
    return 0


if __name__ == "__main__":
    sys.exit(main())
