#!/usr/bin/env python3
"""Chat-template conformance: sdnpu's rendering against the template's own.

sdnpu never executes a GGUF's chat template (Jinja source): it recognizes
the family's format and renders it itself (engine/chat.c). This checks
that rendering against the template executed as llama-cpp-python executes
it (its Jinja2ChatFormatter, the formatter it uses for a GGUF that carries
a template), on every model given that has a template, for conversations
with and without a system message, several turns, an empty message, and
text that looks like markup, with the assistant's turn opened and not.
sdnpu's text comes from tests/tools/chatdump (sdnpu_chat_format). The BOS
token's text, where a template writes it, is left out of the comparison:
sdnpu's tokenizer adds BOS. With --sdnpu, the system turn `sdnpu info`
reports for the template is checked too: a conversation without a system
message must render as one that opens with that text as its system message.

    chat_conformance.py --chatdump BUILD/tests/chatdump [--sdnpu BUILD/sdnpu] MODEL.gguf [MODEL.gguf ...]

Exits 1 on any difference, showing both texts; a model without a template
or a file that is not there is skipped and said so.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

SYSTEM = {"role": "system", "content": "You answer in one sentence."}
USER = {"role": "user", "content": "What does the --inodes option of df do?"}
REPLY = {"role": "assistant", "content": "It lists inode information instead of block usage."}
FOLLOW = {"role": "user", "content": "And -h?"}
MARKUP = {"role": "user", "content": "<document>\nline one\n  {{ not jinja }} {% raw %}\n</document>\n\n\"Quotes\" and 'these' \\n ünïcödé ✓"}

# Tools (OpenAI's objects) and a conversation that calls them: the
# template's tools branch, a call, results (two in a row share a turn).
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "The weather in a city, now.",
                                      "parameters": {"type": "object", "properties": {
                                          "city": {"type": "string", "description": "e.g. Paris, \u00eele-de-France"},
                                          "unit": {"enum": ["c", "f"]}}, "required": ["city"]}}},
    {"type": "function", "function": {"name": "click", "parameters": {"type": "object", "properties": {
        "x": {"type": "integer"}, "y": {"type": "integer"}}, "required": ["x", "y"]}}},
]
CALLS = [("get_weather", {"city": "Paris"}), ("click", {"x": 120, "y": 40})]
WEATHER = {"role": "user", "content": "Weather in Paris? Then press OK."}


def call_text(calls):
    """An assistant turn's calls as sdnpu serve writes them into its content."""
    return "\n".join('<tool_call>\n{"name": "%s", "arguments": %s}\n</tool_call>' % (name, json.dumps(args))
                     for name, args in calls)


def calling(content, calls):
    """An assistant message with calls: for the template (tool_calls) and for sdnpu (content)."""
    jinja = {"role": "assistant", "content": content,
             "tool_calls": [{"type": "function", "function": {"name": n, "arguments": a}} for n, a in calls]}
    text = (content + "\n" if content else "") + call_text(calls)
    return jinja, {"role": "assistant", "content": text}


TOOL_CONVERSATIONS = [  # (messages for the template, messages for sdnpu)
    ([WEATHER], [WEATHER]),
    ([SYSTEM, WEATHER], [SYSTEM, WEATHER]),
    ([WEATHER, calling("", CALLS)[0], {"role": "tool", "content": "{\"temp\": 21}"},
      {"role": "tool", "content": "ok"}],
     [WEATHER, calling("", CALLS)[1], {"role": "tool", "content": "{\"temp\": 21}"},
      {"role": "tool", "content": "ok"}]),
    ([SYSTEM, WEATHER, calling("Let me look.", CALLS[:1])[0], {"role": "tool", "content": "sunny"}, REPLY, FOLLOW],
     [SYSTEM, WEATHER, calling("Let me look.", CALLS[:1])[1], {"role": "tool", "content": "sunny"}, REPLY,
      FOLLOW]),
]

CONVERSATIONS = [
    [USER],
    [SYSTEM, USER],
    [USER, REPLY, FOLLOW],
    [SYSTEM, USER, REPLY, FOLLOW],
    [{"role": "system", "content": ""}, USER],
    [{"role": "user", "content": ""}],
    [MARKUP],
    [SYSTEM, MARKUP],
    [USER, SYSTEM, FOLLOW],
    [USER, REPLY],
]


def template_of(path):
    """The chat template and the BOS and EOS tokens' text, by llama.cpp's reading of the file."""
    import llama_cpp

    m = llama_cpp.Llama(path, vocab_only=True, verbose=False)
    tmpl = m.metadata.get("tokenizer.chat_template")
    bos = m.detokenize([m.token_bos()], special=True).decode("utf-8", "replace")
    eos = m.detokenize([m.token_eos()], special=True).decode("utf-8", "replace")
    return tmpl, bos, eos


def peer_texts(tmpl, bos, eos):
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    out = []
    for open_turn in (True, False):
        fmt = Jinja2ChatFormatter(template=tmpl, eos_token=eos, bos_token=bos, add_generation_prompt=open_turn)
        for conv in CONVERSATIONS:
            text = fmt(messages=conv).prompt
            out.append(text[len(bos):] if bos and text.startswith(bos) else text)
    return out


def tool_peer_texts(tmpl, bos, eos):
    """The tool conversations as transformers' apply_chat_template executes
    the template (trim_blocks, lstrip_blocks, and its tojson: json.dumps
    with the keys in their order and UTF-8 as it is); llama-cpp-python's
    formatter takes jinja2's own tojson, which sorts keys and escapes
    markup, and so does not write the tools as the model was tuned on."""
    import jinja2.sandbox

    env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.filters["tojson"] = lambda x, **kw: json.dumps(x, ensure_ascii=False)
    t = env.from_string(tmpl)
    out = []
    for open_turn in (True, False):
        for conv, _ in TOOL_CONVERSATIONS:
            text = t.render(messages=conv, tools=TOOLS, add_generation_prompt=open_turn, bos_token=bos,
                            eos_token=eos)
            out.append(text[len(bos):] if bos and text.startswith(bos) else text)
    return out


def sdnpu_texts(chatdump, path, workdir, tools=False):
    cases = os.path.join(workdir, "conversations.jsonl")
    with open(cases, "w", encoding="utf-8") as f:
        for open_turn in (True, False):
            for conv in ([c for _, c in TOOL_CONVERSATIONS] if tools else CONVERSATIONS):
                line = {"messages": conv, "open": open_turn}
                if tools:
                    line["tools"] = TOOLS
                f.write(json.dumps(line, ensure_ascii=False) + "\n")
    r = subprocess.run([chatdump, path, cases], capture_output=True, text=True, encoding="utf-8")
    if r.returncode:
        sys.exit(f"chatdump failed ({r.returncode}): {r.stderr.strip()}")
    return [json.loads(line).get("text", "ERROR " + line) for line in r.stdout.splitlines()]


def info_system_turn(sdnpu, path):
    """The system turn `sdnpu info` reports for the model's template, or None."""
    r = subprocess.run([sdnpu, "info", path], capture_output=True, text=True, encoding="utf-8")
    if r.returncode:
        sys.exit(f"sdnpu info failed ({r.returncode}): {r.stderr.strip()}")
    for line in r.stdout.splitlines():
        if line.startswith("system turn "):
            return line[len("system turn "):].strip()[1:-1]
    return None


def check_info(sdnpu, path, tmpl, bos, eos):
    """Whether the template renders a conversation without a system message
    as it renders one opened by the system text `sdnpu info` names."""
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    name = os.path.basename(path)
    turn = info_system_turn(sdnpu, path)
    if turn is None:
        print(f"{name}: sdnpu info reports no system turn of the template's own")
        return True
    fmt = Jinja2ChatFormatter(template=tmpl, eos_token=eos, bos_token=bos, add_generation_prompt=True)
    want = fmt(messages=[USER]).prompt
    got = fmt(messages=[{"role": "system", "content": turn}, USER]).prompt
    print(f"{name}: sdnpu info's system turn {'is' if want == got else 'is NOT'} the template's own: {turn!r}")
    return want == got


def check(chatdump, path, workdir, sdnpu=None):
    name = os.path.basename(path)
    if not os.path.exists(path):
        print(f"{name}: not found, skipped")
        return True, False
    tmpl, bos, eos = template_of(path)
    if not tmpl:
        print(f"{name}: no chat template (a base model), skipped")
        return True, False
    want = peer_texts(tmpl, bos, eos)
    got = sdnpu_texts(chatdump, path, workdir)
    bad = [i for i, (w, g) in enumerate(zip(want, got)) if w != g] + list(range(min(len(want), len(got)), len(want)))
    print(f"{name}: {len(want) - len(bad)}/{len(want)} conversations rendered as the template renders them")
    for i in bad[:3]:
        conv = CONVERSATIONS[i % len(CONVERSATIONS)]
        print(f"  roles {[m['role'] for m in conv]}, assistant's turn {'open' if i < len(CONVERSATIONS) else 'closed'}:")
        print(f"    template: {want[i]!r}")
        print(f"    sdnpu:    {got[i] if i < len(got) else None!r}")
    info_ok = check_info(sdnpu, path, tmpl, bos, eos) if sdnpu else True
    return not bad and info_ok and check_tools(chatdump, path, workdir, tmpl, bos, eos), True


def check_tools(chatdump, path, workdir, tmpl, bos, eos):
    """Where the template calls tools: the tool conversations as transformers renders them."""
    name = os.path.basename(path)
    if "<tool_call>" not in tmpl:
        print(f"{name}: the template calls no tools")
        return True
    want = tool_peer_texts(tmpl, bos, eos)
    got = sdnpu_texts(chatdump, path, workdir, tools=True)
    bad = [i for i, (w, g) in enumerate(zip(want, got)) if w != g] + list(range(min(len(want), len(got)), len(want)))
    print(f"{name}: {len(want) - len(bad)}/{len(want)} conversations with tools rendered as the template renders them")
    for i in bad[:3]:
        print(f"    template: {want[i]!r}")
        print(f"    sdnpu:    {got[i] if i < len(got) else None!r}")
    return not bad


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--chatdump", required=True)
    ap.add_argument("--sdnpu", help="the sdnpu command, to check the system turn its info reports")
    ap.add_argument("models", nargs="+")
    args = ap.parse_args()
    ok, checked = True, 0
    with tempfile.TemporaryDirectory(prefix="sdnpu-chatconf-") as workdir:
        for path in args.models:
            good, ran = check(args.chatdump, path, workdir, args.sdnpu)
            ok &= good
            checked += ran
    if not checked:
        print("no model with a chat template to check")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
