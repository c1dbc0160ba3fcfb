#!/usr/bin/env python3
"""tests/tools/check_api_docs.py - keep docs/api*.md in step with include/sdnpu.h.

Usage: check_api_docs.py HEADER DOCS...

The manual is split over several pages; they are checked as one document.

Fails (exit 1, naming each problem) when
  - a function declared SDNPU_API in the header has no heading in the docs;
  - a struct, enum or typedef of the header has no heading in the docs;
  - a field of a public struct is not named in its struct's section (as
    `field` in backticks, or in a code block there), or an enum constant
    is not named anywhere in the docs;
  - a heading of the docs names an sdnpu_ function the header does not
    declare (a stale entry).
Standard library only.
"""
import re
import sys


def strip_comments(src):
    src = re.sub(r"/\*.*?\*/", " ", src, flags=re.S)
    return re.sub(r"//[^\n]*", " ", src)


def parse_header(src):
    code = strip_comments(src)
    funcs = re.findall(r"\bSDNPU_API\b[^;{(]*?\b(sdnpu_\w+)\s*\(", code)
    structs = {}
    for name, body in re.findall(r"\bstruct\s+(sdnpu_\w+)\s*\{(.*?)\}\s*;", code, flags=re.S):
        fields = []
        for decl in body.split(";"):
            decl = decl.strip()
            if not decl:
                continue
            # A function pointer field: void *(*malloc_fn)(...)
            m = re.search(r"\(\s*\*\s*(\w+)\s*\)\s*\(", decl)
            if not m:
                m = re.search(r"(\w+)\s*(\[[^\]]*\])?\s*$", decl)
            if m:
                fields.append(m.group(1))
        structs[name] = fields
    opaque = set(re.findall(r"\bstruct\s+(sdnpu_\w+)\s*;", code)) - set(structs)
    enums = {}
    for name, body in re.findall(r"\benum\s+(sdnpu_\w+)\s*\{(.*?)\}\s*;", code, flags=re.S):
        enums[name] = re.findall(r"\b(SDNPU_\w+)\s*(?:=|,|$)", body.strip())
    typedefs = re.findall(r"\btypedef\b[^;]*?\(\s*\*\s*(sdnpu_\w+)\s*\)", code)
    typedefs += re.findall(r"\btypedef\b[^;(]*?\b(sdnpu_\w+)\s*;", code)
    macros = re.findall(r"#\s*define\s+(SDNPU_VERSION_\w+)", src)
    return funcs, structs, opaque, enums, typedefs, macros


def sections(doc):
    """(level, heading text, body) for each markdown heading outside code blocks."""
    out, cur, in_code = [], None, False
    for line in doc.splitlines():
        if line.startswith("```"):
            in_code = not in_code
        m = None if in_code else re.match(r"^(#{1,6})\s+(.*)$", line)
        if m:
            cur = [len(m.group(1)), m.group(2), []]
            out.append(cur)
        elif cur is not None:
            cur[2].append(line)
    return [(lvl, head, "\n".join(body)) for lvl, head, body in out]


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    with open(sys.argv[1], encoding="utf-8") as f:
        header = f.read()
    pages = []
    for path in sys.argv[2:]:
        with open(path, encoding="utf-8") as f:
            pages.append(f.read())
    doc = "\n".join(pages)
    funcs, structs, opaque, enums, typedefs, macros = parse_header(header)
    secs = sections(doc)
    problems = []

    def heading_for(name, kind=None):
        pat = re.compile(r"(^|[^\w])" + ((kind + r"\s+") if kind else "") + re.escape(name) + r"($|[^\w])")
        return [s for s in secs if pat.search(s[1].replace("`", ""))]

    if not funcs:
        problems.append("no SDNPU_API function found in the header (is the parser broken?)")
    for fn in funcs:
        if not heading_for(fn):
            problems.append(f"function {fn}: no heading in the docs")
    for name, fields in structs.items():
        found = heading_for(name, "struct")
        if not found:
            problems.append(f"struct {name}: no heading in the docs")
            continue
        body = "\n".join(s[2] for s in found)
        for field in fields:
            code = "\n".join(re.findall(r"```[a-z]*\n(.*?)```", body, flags=re.S))
            if f"`{field}`" not in body and not re.search(r"\b" + re.escape(field) + r"\b", code):
                problems.append(f"struct {name}: field '{field}' is not described in its section")
    for name in sorted(opaque):
        if not heading_for(name, "struct"):
            problems.append(f"struct {name} (opaque handle): no heading in the docs")
    for name, consts in enums.items():
        if not heading_for(name, "enum"):
            problems.append(f"enum {name}: no heading in the docs")
        for c in consts:
            if not re.search(r"\b" + re.escape(c) + r"\b", doc):
                problems.append(f"enum {name}: constant {c} is not named in the docs")
    for name in typedefs:
        if not heading_for(name):
            problems.append(f"typedef {name}: no heading in the docs")
    for name in macros:
        if not re.search(r"\b" + re.escape(name) + r"\b", doc):
            problems.append(f"macro {name} is not named in the docs")
    # Stale entries: headings naming a function the header lacks.
    declared = set(funcs) | set(structs) | opaque | set(enums) | set(typedefs)
    for _, head, _ in secs:
        for name in re.findall(r"\bsdnpu_\w+", head.replace("`", "")):
            if name not in declared:
                problems.append(f"heading '{head}' names {name}, which the header does not declare")

    if problems:
        print(f"{', '.join(sys.argv[2:])} out of step with {sys.argv[1]}:")
        for p in problems:
            print("  " + p)
        return 1
    n_fields = sum(len(v) for v in structs.values())
    n_consts = sum(len(v) for v in enums.values())
    print(f"api docs ok: {len(funcs)} functions, {len(structs) + len(opaque)} structs ({n_fields} fields), "
          f"{len(enums)} enums ({n_consts} constants), {len(typedefs)} typedefs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
