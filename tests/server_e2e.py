#!/usr/bin/env python3
"""`sdnpu serve` end to end with real clients (run by ctest: tests/server.cmake).

On a tiny model written by the test suite: the `openai` package (completions
and chat, streaming and not, models, a wrong key), curl (health, metrics),
replies held to a JSON object and to a JSON Schema (response_format; the
schema's replies checked by the `jsonschema` package), tool calls on the
default model (forced and the model's own, streamed and not, a result read
back; arguments checked by `jsonschema`), hostile requests
(malformed JSON, wrong types, an unsupported response_format, a body past the limit, unknown
paths and methods, a URL, header fields and headers past their limits, a
client that sends half a body and stalls, one that goes away mid-stream),
1,000 requests from 16 concurrent clients with nothing lost and every reply
well-formed and equal to the serial one, the same beside 200 half-sent
requests held open from one address (with /health answering within 1 s
throughout), the request deadline (a client that trickles its headers is
cut), the per-address limit, a streaming client that stops reading (its
session comes back), a full queue answered with 503, and SIGTERM with a
request in flight.

Usage: server_e2e.py SDNPU MAKE_TINY_MODELS WORKDIR
"""
import contextlib
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

import jsonschema
import openai

SDNPU, MAKE_TINY, WORK = sys.argv[1:4]
KEY = "test-key-123"
# The load test's size: 1,000 requests over 20 prompts; a sanitizer build
# (ThreadSanitizer runs the model ten times slower) sets fewer.
N_REQUESTS = int(os.environ.get("SDNPU_E2E_REQUESTS", "1000"))
N_PROMPTS = 20 if N_REQUESTS >= 200 else 4


def fail(msg):
    print(f"server_e2e: FAIL: {msg}", file=sys.stderr)
    sys.exit(1)


def start(model, *flags):
    """Start a server on a free port; return (process, port)."""
    log = open(os.path.join(WORK, f"server-{time.monotonic_ns()}.log"), "w+")
    p = subprocess.Popen([SDNPU, "serve", "-m", model, "--port", "0", "-t", "1", *flags], stderr=log,
                         stdout=subprocess.DEVNULL)
    for _ in range(300):
        log.seek(0)
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", log.read())
        if m:
            return p, int(m.group(1)), log
        if p.poll() is not None:
            log.seek(0)
            fail(f"server exited: {log.read()}")
        time.sleep(0.05)
    fail("server did not start")


@contextlib.contextmanager
def serving(model, what, *flags):
    """A server started as start() does, its port while the block runs, then
    stopped with SIGTERM: it must exit 0."""
    p, port, log = start(model, *flags)
    try:
        yield port
    finally:
        p.send_signal(signal.SIGTERM)
        if p.wait(timeout=30) != 0:
            fail(f"the {what} test's server did not exit 0")


def request(port, method, path, body=None, headers=None, raw=None, timeout=60):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    h = {"Authorization": f"Bearer {KEY}"}
    h.update(headers or {})
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    if data is not None:
        h["Content-Type"] = "application/json"
    c.request(method, path, body=data, headers=h)
    r = c.getresponse()
    out = r.status, r.read()
    c.close()
    return out


def error_status(port, body, path="/v1/completions", **kw):
    st, data = request(port, "POST", path, body, **kw)
    try:
        msg = json.loads(data)["error"]["message"]
    except Exception:
        fail(f"{path} {body!r:.80}: status {st} without an OpenAI error body: {data[:200]!r}")
    return st, msg


def check_clients(port, name):
    cl = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=KEY)
    ids = [m.id for m in cl.models.list().data]
    if ids != [name]:
        fail(f"models: {ids}")
    prompt = "the cat sat on the mat. the cat sat on the mat. the"
    r = cl.completions.create(model=name, prompt=prompt, max_tokens=16, temperature=0)
    text = r.choices[0].text
    if r.usage.completion_tokens < 1 or r.choices[0].finish_reason not in ("stop", "length"):
        fail(f"completion: {r}")
    streamed = "".join(c.choices[0].text for c in
                       cl.completions.create(model=name, prompt=prompt, max_tokens=16, temperature=0, stream=True))
    if streamed != text:
        fail(f"streamed completion {streamed!r} != {text!r}")
    msgs = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello there"}]
    r = cl.chat.completions.create(model=name, messages=msgs, max_tokens=12, temperature=0)
    reply = r.choices[0].message.content
    if r.choices[0].message.role != "assistant" or reply is None:
        fail(f"chat: {r}")
    parts = list(cl.chat.completions.create(model=name, messages=msgs, max_tokens=12, temperature=0, stream=True))
    if "".join(c.choices[0].delta.content or "" for c in parts) != reply or parts[0].choices[0].delta.role != "assistant":
        fail("streamed chat differs from the chat reply")
    if parts[-1].choices[0].finish_reason not in ("stop", "length"):
        fail("the last chunk has no finish_reason")
    # Documents in a chat go before the last user message between tags, as
    # every surface gives them: the same reply and prompt as that message
    # written out by hand.
    docs = ["the cat sat", "on the mat"]
    r = cl.chat.completions.create(model=name, messages=msgs, max_tokens=8, temperature=0,
                                   extra_body={"sdnpu": {"documents": docs}})
    tagged = msgs[:1] + [{"role": "user", "content": "<document>\nthe cat sat\n</document>\n\n"
                                                      "<document>\non the mat\n</document>\n\nhello there"}]
    r2 = cl.chat.completions.create(model=name, messages=tagged, max_tokens=8, temperature=0)
    if (r.choices[0].message.content, r.usage.prompt_tokens) != (r2.choices[0].message.content, r2.usage.prompt_tokens):
        fail(f"chat documents: {r.choices[0].message.content!r} ({r.usage.prompt_tokens} prompt tokens) against "
             f"the tagged message's {r2.choices[0].message.content!r} ({r2.usage.prompt_tokens})")
    # sdnpu's extension fields pass through the client unchanged.
    r = cl.completions.create(model=name, prompt="TL;DR:", max_tokens=8, temperature=0,
                              extra_body={"sdnpu": {"spec": "pld", "documents": ["a b c d a b c d"],
                                                    "adaptive": False, "stop_on_repeat": True}})
    if r.model_extra["sdnpu"]["spec"] != "pld" or r.model_extra["sdnpu"]["adaptive"] is not False:
        fail(f"extension fields: {r.model_extra}")
    if r.model_extra["sdnpu"]["calib_records"] != 0:
        fail(f"calibration without +calib: {r.model_extra}")
    # In-context calibration per request: the same text, a calibrated store built.
    r2 = cl.completions.create(model=name, prompt="TL;DR:", max_tokens=8, temperature=0,
                               extra_body={"sdnpu": {"spec": "pld+calib", "documents": ["a b c d a b c d"],
                                                     "adaptive": False, "stop_on_repeat": True}})
    if r2.choices[0].text != r.choices[0].text or r2.model_extra["sdnpu"]["spec"] != "pld+calib":
        fail(f"pld+calib: {r2.choices[0].text!r} against {r.choices[0].text!r}, {r2.model_extra}")
    if r2.model_extra["sdnpu"]["calib_records"] <= 0:
        fail(f"pld+calib stored no calibrated sequence: {r2.model_extra}")
    # Graph switching per request, and the full method: the same text again.
    for spec in ("pld+switch", "sdnpu"):
        r3 = cl.completions.create(model=name, prompt="TL;DR:", max_tokens=8, temperature=0,
                                   extra_body={"sdnpu": {"spec": spec, "documents": ["a b c d a b c d"],
                                                         "adaptive": False, "stop_on_repeat": True}})
        if r3.choices[0].text != r.choices[0].text:
            fail(f"{spec}: {r3.choices[0].text!r} against {r.choices[0].text!r}, {r3.model_extra}")
    check_json_format(cl, name, msgs)
    check_json_schema(cl, name, msgs)
    bad = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="wrong", max_retries=0)
    try:
        bad.models.list()
        fail("a wrong key was accepted")
    except openai.AuthenticationError:
        pass
    return prompt, text


def json_prefix_ok(text, finish):
    """A json_object reply: one JSON object where the model ended it, else
    (cut by max_tokens) text that starts one."""
    if finish == "stop":
        try:
            return isinstance(json.loads(text), dict) and text.startswith("{") and text.rstrip() == text
        except ValueError:
            return False
    return text.startswith("{") or text == ""


def check_json_format(cl, name, msgs):
    # response_format json_object: the tiny model's random weights write
    # what the grammar leaves them; streamed and not, greedy and sampled,
    # plain and speculative, the reply is (the start of) one JSON object,
    # the same text for the same request.
    fmt = {"type": "json_object"}
    seen = {}
    for spec in ("none", "sam-tree"):
        for temp in (0, 0.9):
            kw = dict(model=name, messages=msgs, max_tokens=40, temperature=temp, seed=5, response_format=fmt,
                      extra_body={"sdnpu": {"spec": spec}})
            r = cl.chat.completions.create(**kw)
            text, finish = r.choices[0].message.content, r.choices[0].finish_reason
            if not json_prefix_ok(text, finish):
                fail(f"json_object ({spec}, temperature {temp}): {finish} {text!r}")
            parts = list(cl.chat.completions.create(stream=True, **kw))
            if "".join(c.choices[0].delta.content or "" for c in parts) != text:
                fail(f"json_object ({spec}, temperature {temp}): the streamed reply differs from {text!r}")
            seen.setdefault(temp, set()).add(text)
    if len(seen[0]) != 1:
        fail(f"json_object greedy replies differ between plain and speculative decoding: {seen[0]}")
    r = cl.completions.create(model=name, prompt="x", max_tokens=40, temperature=0,
                              extra_body={"response_format": fmt})
    if not json_prefix_ok(r.choices[0].text, r.choices[0].finish_reason):
        fail(f"json_object completion: {r.choices[0].finish_reason} {r.choices[0].text!r}")


UI_SCHEMA = {
    "type": "object",
    "properties": {
        "action": {"enum": ["open", "close", "reply", 7, None]},
        "done": {"type": "boolean"},
        "count": {"type": "integer"},
        "tags": {"type": "array", "items": {"enum": ["ui", "mail"]}, "maxItems": 2},
    },
    "required": ["action", "done"],
    "additionalProperties": False,
}


def schema_reply_ok(text, finish, where):
    """Where the model ended the reply: an object that the jsonschema
    package (an independent validator) accepts; else the start of one."""
    if finish != "stop":
        if not text.startswith("{"):
            fail(f"json_schema ({where}): {finish} {text!r}")
        return False
    try:
        jsonschema.validate(json.loads(text), UI_SCHEMA)
    except (ValueError, jsonschema.ValidationError) as e:
        fail(f"json_schema ({where}): {text!r}: {e}")
    return True


def schema_replies(cl, name, msgs, max_tokens, temps):
    """The replies under UI_SCHEMA, plain and speculative, streamed and not
    (the same text): greedy ones equal. Returns how many ended."""
    fmt = {"type": "json_schema", "json_schema": {"name": "ui", "schema": UI_SCHEMA, "strict": True}}
    greedy, ended = set(), 0
    for spec in ("none", "sam-tree"):
        for temp in temps:
            kw = dict(model=name, messages=msgs, max_tokens=max_tokens, temperature=temp, seed=3,
                      response_format=fmt, extra_body={"sdnpu": {"spec": spec}})
            r = cl.chat.completions.create(**kw)
            text, finish = r.choices[0].message.content, r.choices[0].finish_reason
            ended += schema_reply_ok(text, finish, f"{spec}, temperature {temp}")
            parts = list(cl.chat.completions.create(stream=True, **kw))
            if "".join(c.choices[0].delta.content or "" for c in parts) != text:
                fail(f"json_schema ({spec}, temperature {temp}): the streamed reply differs from {text!r}")
            if temp == 0:
                greedy.add(text)
    if len(greedy) != 1:
        fail(f"json_schema greedy replies differ between plain and speculative decoding: {greedy}")
    return ended


def check_json_schema(cl, name, msgs):
    # The tiny model's random weights pad with all the whitespace the
    # grammar allows, so its replies seldom end: the start of an object.
    schema_replies(cl, name, msgs, 60, (0, 0.9))


def check_json_schema_default():
    # The default model (where set up, and not in the sanitizer builds'
    # short runs) ends its replies: each one valid.
    model = os.environ.get("SDNPU_MODEL") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                                          "models", "default.gguf")
    if not os.path.exists(model) or N_REQUESTS < 200:
        print("server_e2e: json_schema on the default model skipped (no model, or a short run)")
        return
    msgs = [{"role": "user", "content": "Mail from Bob: 'The build on main is broken, can you look today?' "
                                        "Choose the assistant's action."}]
    with serving(model, "json_schema", "-c", "1024", "--parallel", "1") as port:
        cl = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", max_retries=0)
        if schema_replies(cl, "default", msgs, 120, (0, 0.7)) != 4:
            fail("json_schema: the default model did not end every reply within 120 tokens")


TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "The current weather in a city",
                                      "parameters": {"type": "object", "properties": {
                                          "city": {"type": "string"}, "unit": {"enum": ["c", "f"]}},
                                                     "required": ["city"]}}},
    {"type": "function", "function": {"name": "click", "description": "Click a point on the screen",
                                      "parameters": {"type": "object", "properties": {
                                          "x": {"type": "integer"}, "y": {"type": "integer"}},
                                                     "required": ["x", "y"]}}},
]


def calls_ok(m, where):
    """The message's tool calls: each names a tool and its arguments (a
    string of JSON) satisfy its parameters (the jsonschema package)."""
    params = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
    out = []
    for c in m.tool_calls or []:
        if c.type != "function" or c.function.name not in params or not c.id:
            fail(f"tools ({where}): a call {c!r}")
        try:
            jsonschema.validate(json.loads(c.function.arguments), params[c.function.name])
        except (ValueError, jsonschema.ValidationError) as e:
            fail(f"tools ({where}): arguments {c.function.arguments!r}: {e}")
        out.append((c.function.name, json.loads(c.function.arguments)))
    return out


def streamed(cl, **kw):
    """A streamed reply put together: (content, [(name, arguments)], finish_reason)."""
    content, calls, finish = "", {}, None
    for ch in cl.chat.completions.create(stream=True, **kw):
        d = ch.choices[0].delta if ch.choices else None
        content += (d.content or "") if d else ""
        for tc in (d.tool_calls or []) if d else []:
            calls.setdefault(tc.index, [tc.function.name, ""])[1] += tc.function.arguments or ""
        finish = (ch.choices[0].finish_reason if ch.choices else None) or finish
    return content, [(n, json.loads(a)) for _, (n, a) in sorted(calls.items())], finish


def check_tools_default():
    """OpenAI tool calls on the default model (where set up, and not in the
    sanitizer builds' short runs): forced calls well formed by
    construction, the model's own choice read back, streamed as not."""
    model = os.environ.get("SDNPU_MODEL") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                                          "models", "default.gguf")
    if not os.path.exists(model) or N_REQUESTS < 200:
        print("server_e2e: tools on the default model skipped (no model, or a short run)")
        return
    weather = [{"role": "user", "content": "What's the weather in Paris right now?"}]
    hello = [{"role": "user", "content": "Say hello in French, one word."}]
    with serving(model, "tools", "-c", "2048", "--parallel", "1") as port:
        cl = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", max_retries=0)
        for choice, msgs, want in (("required", weather, "get_weather"),
                                   ({"type": "function", "function": {"name": "click"}}, weather, "click"),
                                   ("auto", weather, "get_weather"), ("auto", hello, None)):
            kw = dict(model="default", messages=msgs, tools=TOOLS, tool_choice=choice, temperature=0, max_tokens=120)
            r = cl.chat.completions.create(**kw)
            m, finish = r.choices[0].message, r.choices[0].finish_reason
            calls = calls_ok(m, f"{choice}")
            if want and ([n for n, _ in calls] != [want] or finish != "tool_calls" or m.content):
                fail(f"tools ({choice}): {finish} {m.content!r} {calls}")
            if not want and (calls or finish != "stop" or not m.content):
                fail(f"tools ({choice}, no call wanted): {finish} {m.content!r} {calls}")
            if streamed(cl, **kw) != (m.content or "", calls, finish):
                fail(f"tools ({choice}): the streamed reply differs from {m.content!r} {calls}")
        # The conversation goes on: the call and its result read back as
        # the template writes them.
        m = cl.chat.completions.create(model="default", messages=weather, tools=TOOLS, tool_choice="required",
                                       temperature=0, max_tokens=120).choices[0].message
        follow = weather + [{"role": "assistant", "content": None, "tool_calls": [c.model_dump() for c in m.tool_calls]},
                            {"role": "tool", "tool_call_id": m.tool_calls[0].id, "content": "{\"sky\": \"sunny\"}"}]
        r = cl.chat.completions.create(model="default", messages=follow, tools=TOOLS, temperature=0, max_tokens=60)
        calls_ok(r.choices[0].message, "after a result")
        if r.usage.prompt_tokens <= 100:
            fail(f"tools: the follow-up's prompt of {r.usage.prompt_tokens} tokens lacks the tools or the result")


def check_hostile(port):
    cases = [
        ({"prompt": "x", "max_tokens": "many"}, 400, "max_tokens"),
        ({"prompt": "x", "max_tokens": 10 ** 9}, 400, "at most"),
        ({"prompt": "x", "temperature": 5}, 400, "temperature"),
        ({"prompt": "x", "stop": ["a", "b", "c", "d", "e"]}, 400, "stop"),
        ({"prompt": "x", "n": 2}, 400, "'n'"),
        ({"prompt": 17}, 400, "prompt"),
        ({"prompt": "x", "sdnpu": {"spec": "bogus"}}, 400, "bogus"),
        ([1, 2], 400, "object"),
        ({"prompt": "x", "response_format": "json"}, 400, "response_format"),
        ({"prompt": "x", "response_format": {"type": "json_schema", "json_schema": {}}}, 400, "schema"),
        ({"prompt": "x", "response_format": {"type": "json_schema", "json_schema": {"schema": {
            "type": "object", "properties": {"n": {"type": "string", "pattern": "a+"}}}}}}, 400,
         "at '/properties/n': 'pattern' is not supported"),
        ({"prompt": "x", "response_format": {"type": "json_schema", "json_schema": {"schema": {
            "type": "array"}}}}, 400, "the root schema must allow one"),
        ({"prompt": "x", "response_format": {"type": "yaml"}}, 400, "yaml"),
    ]
    for body, want, word in cases:
        st, msg = error_status(port, body)
        if st != want or word not in msg:
            fail(f"{body}: {st} {msg!r}")
    st, msg = error_status(port, {"messages": []}, "/v1/chat/completions")
    if st != 400:
        fail(f"empty messages: {st}")
    st, msg = error_status(port, {"messages": [{"role": "robot", "content": "x"}]}, "/v1/chat/completions")
    if st != 400 or "role" not in msg:
        fail(f"bad role: {st} {msg}")
    # Tools: malformed ones, and any on a model whose template calls none.
    user = [{"role": "user", "content": "x"}]
    for body, word in (({"messages": user, "tools": {}}, "'tools' must be an array"),
                       ({"messages": user, "tools": TOOLS, "tool_choice": {"type": "function", "function": {
                           "name": "nope"}}}, "'tool_choice' names \"nope\""),
                       ({"messages": user, "tools": TOOLS}, "calls no tools"),
                       ({"messages": user + [{"role": "tool", "content": "21"}]}, "calls no tools"),
                       ({"messages": [{"role": "assistant", "tool_calls": [{"function": {"name": "a",
                                                                                        "arguments": "[1"}}]}]},
                        "arguments must be a JSON object")):
        st, msg = error_status(port, body, "/v1/chat/completions")
        if st != 400 or word not in msg:
            fail(f"tools {body!r:.120}: {st} {msg!r}")
    for raw in (b"{bad json", b"", b"\xff\xfe\x00", b'{"prompt": "a", "prompt": "b"}'):
        st, msg = error_status(port, None, raw=raw)
        if st != 400:
            fail(f"raw body {raw!r}: {st} {msg}")
    st, msg = error_status(port, None, raw=b'{"prompt": "' + b"a" * (2 << 20) + b'"}')
    if st != 413:
        fail(f"a 2 MiB body: {st}")
    st, msg = error_status(port, {"prompt": "x " * 5000, "max_tokens": 4})
    if st != 400 or "context" not in msg.lower() and "fit" not in msg:
        fail(f"a prompt past the context: {st} {msg}")
    if request(port, "GET", "/v1/nothing")[0] != 404 or request(port, "GET", "/v1/completions")[0] != 405:
        fail("unknown path or method")
    if request(port, "GET", "/v1/models", headers={"Authorization": "Bearer nope"})[0] != 401:
        fail("wrong key on /v1/models")
    # A slow client: half a body, then silence; another client is served meanwhile.
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + KEY.encode() +
              b"\r\nContent-Length: 100\r\n\r\n{\"prompt\": ")
    st, _ = request(port, "POST", "/v1/completions", {"prompt": "hello", "max_tokens": 4, "temperature": 0})
    s.close()
    if st != 200:
        fail(f"served {st} beside a stalled client")
    st, data = request(port, "GET", "/health")
    if st != 200 or json.loads(data)["status"] != "ok":
        fail("health")


def metrics(port):
    """/metrics as {name or name{labels}: value}."""
    st, data = request(port, "GET", "/metrics")
    if st != 200:
        fail(f"/metrics: {st}")
    out = {}
    for line in data.decode().splitlines():
        if line and not line.startswith("#"):
            k, v = line.rsplit(" ", 1)
            out[k] = float(v)
    return out


def rejected(port, reason):
    return metrics(port)[f'sdnpu_rejected_total{{reason="{reason}"}}']


def raw_status(port, data):
    """Send raw bytes; return the reply's status (None if the server closed
    without one) and body."""
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    try:
        s.sendall(data)
    except OSError:
        pass  # the server may answer and close before it reads everything
    got = b""
    try:
        while True:
            b = s.recv(65536)
            if not b:
                break
            got += b
    except OSError:
        pass
    s.close()
    m = re.match(rb"HTTP/1\.[01] (\d+)", got)
    return (int(m.group(1)) if m else None), got.partition(b"\r\n\r\n")[2]


def check_limits(port):
    """A URL, too many header fields, header fields too large: 414 / 431
    with an error body, counted by reason; a header past libmicrohttpd's own
    memory: refused by it, counted as malformed; the server unharmed."""
    auth = b"Authorization: Bearer " + KEY.encode() + b"\r\n"
    before = metrics(port)
    cases = [
        (b"GET /v1/models?q=" + b"a" * 9000 + b" HTTP/1.1\r\nHost: x\r\n" + auth + b"\r\n", 414, "url_length"),
        (b"GET /v1/models HTTP/1.1\r\nHost: x\r\n" + auth + b"".join(b"X-F%d: v\r\n" % i for i in range(120)) +
         b"\r\n", 431, "header_count"),
        (b"GET /v1/models HTTP/1.1\r\nHost: x\r\n" + auth + b"X-Big: " + b"b" * 17000 + b"\r\n\r\n", 431,
         "header_bytes"),
    ]
    for data, want, reason in cases:
        st, body = raw_status(port, data)
        if st != want or b'"error"' not in body:
            fail(f"{reason}: status {st}, body {body[:200]!r}")
    st, _ = raw_status(port, b"GET /health HTTP/1.1\r\nHost: x\r\nX-Huge: " + b"h" * (400 << 10) + b"\r\n\r\n")
    if st is not None and not 400 <= st < 500:
        fail(f"a 400 KiB header: status {st}")
    after = metrics(port)
    for _, _, reason in cases + [(0, 0, "malformed")]:
        k = f'sdnpu_rejected_total{{reason="{reason}"}}'
        if after[k] != before[k] + 1:
            fail(f"/metrics {k}: {before[k]} -> {after[k]}")
    st, data = request(port, "GET", "/health")
    if st != 200:
        fail(f"health after the limits: {st}")


def half_open(port, src):
    """A connection from address src that sends the start of a POST's headers
    and then nothing."""
    s = socket.socket()
    s.bind((src, 0))
    s.connect(("127.0.0.1", port))
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")
    return s


def is_closed(s):
    """Whether the server has closed s (without waiting)."""
    s.setblocking(False)
    try:
        return s.recv(4096) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True
    finally:
        s.setblocking(True)


def closed_within(s, seconds):
    s.settimeout(seconds)
    try:
        while s.recv(4096):
            pass
        return True
    except socket.timeout:
        return False
    except OSError:
        return True


def check_half_open(port, name):
    """200 half-sent requests held open from one address while 16 clients send
    64 requests: every one answered as when served alone, and /health answers
    within 1 s throughout."""
    held = [half_open(port, "127.0.0.2") for _ in range(200)]
    for _ in range(100):
        if metrics(port)["sdnpu_connections"] >= 200:
            break
        time.sleep(0.05)
    else:
        fail(f"200 half-open connections are not all held: {metrics(port)['sdnpu_connections']}")
    stop, slow = threading.Event(), []

    def health():
        while not stop.is_set():
            try:
                st, _ = request(port, "GET", "/health", timeout=1)
                if st != 200:
                    slow.append(st)
            except Exception as e:
                slow.append(repr(e))
            time.sleep(0.05)
    th = threading.Thread(target=health)
    th.start()
    try:
        check_load(port, name, 64)
    finally:
        stop.set()
        th.join()
    if slow:
        fail(f"/health beside 200 half-open connections: {slow[:3]}")
    if sum(is_closed(s) for s in held):
        fail("half-open connections were closed before their deadline")
    for s in held:
        s.close()
    print("server_e2e: 64 requests from 16 clients beside 200 half-open connections, /health within 1 s throughout")


SERIAL = {}


def check_load(port, name, n_requests=N_REQUESTS):
    """n_requests (1,000) requests from 16 threads: every reply well-formed,
    none lost, and each equal to the same request served alone."""
    prompts = [f"item {i}: the cat sat on the mat and the dog sat on the log {i % 7}" for i in range(N_PROMPTS)]
    bodies = []
    for i in range(n_requests):
        p = prompts[i % N_PROMPTS]
        if i % 3 == 0:
            bodies.append(("/v1/chat/completions", {"model": name, "messages": [{"role": "user", "content": p}],
                                                    "max_tokens": 8, "temperature": 0}))
        else:
            bodies.append(("/v1/completions", {"model": name, "prompt": p, "max_tokens": 8, "temperature": 0,
                                               "sdnpu": {"spec": ["none", "sam", "sam-tree"][i % 3]}}))

    def text_of(path, data):
        d = json.loads(data)
        c = d["choices"][0]
        if d["usage"]["completion_tokens"] < 0 or "sdnpu" not in d:
            raise ValueError("usage or sdnpu missing")
        return c["message"]["content"] if path.endswith("chat/completions") else c["text"]

    serial = SERIAL  # greedy replies on the main server, kept from an earlier call
    for k in {(p, json.dumps(b["messages"] if "messages" in b else b["prompt"])) for p, b in bodies} - set(serial):
        path, b = next((p, b) for p, b in bodies
                       if (p, json.dumps(b["messages"] if "messages" in b else b["prompt"])) == k)
        st, data = request(port, "POST", path, b)
        serial[k] = text_of(path, data)
    results = [None] * len(bodies)
    nxt = iter(range(len(bodies)))
    lock = threading.Lock()

    def worker():
        while True:
            with lock:
                i = next(nxt, None)
            if i is None:
                return
            path, b = bodies[i]
            try:
                # Patient: 16 clients share 2 sessions, and a sanitizer build on a busy machine is slow; the
                # test is that nothing is lost or wrong, not how long a request waits.
                st, data = request(port, "POST", path, b, timeout=600)
                results[i] = (st, text_of(path, data) if st == 200 else data)
            except Exception as e:
                results[i] = (-1, repr(e))
    t0 = time.monotonic()
    ths = [threading.Thread(target=worker) for _ in range(16)]
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    dt = time.monotonic() - t0
    for i, (path, b) in enumerate(bodies):
        st, got = results[i]
        if st != 200:
            fail(f"request {i}: {st} {got!r:.200}")
        k = (path, json.dumps(b["messages"] if "messages" in b else b["prompt"]))
        if got != serial[k]:
            fail(f"request {i}: {got!r} differs from the serial reply {serial[k]!r}")
    print(f"server_e2e: {n_requests} requests from 16 clients in {dt:.1f} s, all well-formed and equal to serial "
          "replies")


def check_guard(model):
    """The request deadline, the per-address limit, and a streaming client
    that stops reading, on a server with short limits."""
    p, port, log = start(model, "--parallel", "1", "--request-timeout", "2", "--send-timeout", "2",
                         "--max-connections-per-ip", "4")
    try:
        # Six from one address: four held, two shut at once.
        conns = [half_open(port, "127.0.0.3") for _ in range(6)]
        time.sleep(0.5)
        if sum(is_closed(s) for s in conns) != 2 or rejected(port, "per_address") != 2:
            fail(f"per-address limit of 4: {sum(is_closed(s) for s in conns)} of 6 closed, "
                 f"{rejected(port, 'per_address')} counted")
        # The held ones are cut at their deadline.
        if not all(closed_within(s, 10) for s in conns):
            fail("a half-open connection outlived the request deadline")
        # A client that trickles its headers a byte at a time is cut too: a
        # deadline, not an inactivity timer.
        s = half_open(port, "127.0.0.4")
        cut = False
        for _ in range(40):
            time.sleep(0.25)
            try:
                s.sendall(b"X")
            except OSError:
                cut = True
                break
            if is_closed(s):
                cut = True
                break
        s.close()
        if not cut or rejected(port, "request_timeout") < 5:
            fail(f"a trickling client: cut {cut}, request_timeout {rejected(port, 'request_timeout')}")
        # A streaming client that stops reading: dropped at the send
        # deadline, its generation cancelled, the session free again.
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.connect(("127.0.0.1", port))
        body = json.dumps({"prompt": "a b c d e f g", "max_tokens": 2000, "temperature": 0, "stream": True,
                           "sdnpu": {"spec": "none"}}).encode()
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n" % len(body) + body)
        for _ in range(300):
            if rejected(port, "send_timeout") >= 1:
                break
            time.sleep(0.1)
        else:
            fail("a client that stopped reading its stream was not dropped")
        st, _ = request(port, "POST", "/v1/completions", {"prompt": "x", "max_tokens": 4, "temperature": 0})
        if st != 200:
            fail(f"the request after a dropped stream: {st}")
        s.close()
        # A client that reads, but slower than the model writes (8 KiB every
        # 0.1 s), is never cut: the send deadline is about a client that
        # takes nothing. (A sanitizer build writes slower than that anyway:
        # a shorter stream there.)
        if N_REQUESTS < 200:
            body = body.replace(b'"max_tokens": 2000', b'"max_tokens": 300')
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16384)
        s.connect(("127.0.0.1", port))
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Connection: close\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        got = b""
        s.settimeout(60)
        while True:
            time.sleep(0.1)
            b = s.recv(8192)
            if not b:
                break
            got += b
        s.close()
        if b"data: [DONE]" not in got or rejected(port, "send_timeout") != 1:
            fail(f"a slow reader was cut: {len(got)} bytes, ends {got[-80:]!r}, "
                 f"send_timeout {rejected(port, 'send_timeout')}")
        print(f"server_e2e: deadline, per-address limit and send deadline hold "
              f"(cancelled {metrics(port)['sdnpu_cancelled_total']:.0f})")
    finally:
        p.send_signal(signal.SIGTERM)
        if p.wait(timeout=30) != 0:
            fail("the guard test's server did not exit 0")


def check_cancel_and_busy(model):
    p, port, log = start(model, "--parallel", "1", "--queue", "1", "--drain", "20")
    try:
        long = {"prompt": "a b c d e f g", "max_tokens": 2000, "temperature": 0.8, "stream": True,
                "sdnpu": {"spec": "none"}}
        # A client that goes away mid-stream cancels its generation.
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        c.request("POST", "/v1/completions", json.dumps(long), {"Content-Type": "application/json"})
        r = c.getresponse()
        r.read1(64) if hasattr(r, "read1") else r.read(64)
        c.close()
        for _ in range(100):
            st, data = request(port, "GET", "/metrics")
            if re.search(rb"sdnpu_cancelled_total [1-9]", data):
                break
            time.sleep(0.1)
        else:
            fail("a client that went away did not cancel its generation")
        # Memory: the sessions' one shared copy of the weights (the tiny
        # model packs some of its types), and the process's peak.
        mx = metrics(port)
        if not mx["sdnpu_shared_weight_bytes"] > 0 or not mx["sdnpu_peak_rss_bytes"] > mx["sdnpu_shared_weight_bytes"]:
            fail(f"/metrics memory: {mx['sdnpu_shared_weight_bytes']} shared, {mx['sdnpu_peak_rss_bytes']} peak")
        # One running, one waiting, the rest refused with 503, none lost.
        out = []

        def one():
            out.append(request(port, "POST", "/v1/completions",
                               {"prompt": "x y z", "max_tokens": 200, "temperature": 0.8, "sdnpu": {"spec": "none"}}))
        ths = [threading.Thread(target=one) for _ in range(8)]
        for t in ths:
            t.start()
        for t in ths:
            t.join()
        codes = sorted(st for st, _ in out)
        if len(out) != 8 or 503 not in codes or 200 not in codes or set(codes) - {200, 503}:
            fail(f"a full queue: {codes}")
        for st, data in out:
            json.loads(data)
        # SIGTERM with a request in flight: it finishes, then the server exits 0.
        done = []
        th = threading.Thread(target=lambda: done.append(request(port, "POST", "/v1/completions", {
            "prompt": "x y z", "max_tokens": 64, "temperature": 0.8, "sdnpu": {"spec": "none"}})))
        th.start()
        time.sleep(0.3)
        p.send_signal(signal.SIGTERM)
        th.join()
        if not done or done[0][0] != 200:
            fail(f"the request in flight at SIGTERM: {done}")
        if p.wait(timeout=30) != 0:
            fail("the server did not exit 0 after SIGTERM")
    finally:
        if p.poll() is None:
            p.kill()


def reuse_requests(name):
    """A document of about 60 tokens asked two questions, as completions and
    as chats, each sent twice, then the first again after the others (from
    the prompt cache, the live context holding the last chat by then); and
    one sampled request. (Short: a sanitizer build prefills slowly.)"""
    doc = "the quick brown fox jumps over the lazy dog near the river bank while the old miller watches."
    comp = lambda q, **kw: ("/v1/completions", {"model": name, "prompt": f"{doc}\n\nquestion: {q}\nanswer:",
                                                "max_tokens": 12, "temperature": 0, **kw})
    chat = lambda q: ("/v1/chat/completions", {"model": name, "max_tokens": 12, "temperature": 0, "messages": [
        {"role": "system", "content": "answer from the notes"}, {"role": "user", "content": f"{doc}\n\n{q}"}]})
    a, b = comp("who watches"), comp("what do the carts bring")
    c, d = chat("who watches"), chat("what do the carts bring")
    sampled = comp("who watches", temperature=0.9, seed=7)
    return [a, a, b, b, c, c, d, a, sampled, sampled]


def reply_of(port, path, body):
    st, data = request(port, "POST", path, body)
    if st != 200:
        fail(f"{path}: {st} {data[:200]!r}")
    d = json.loads(data)
    c = d["choices"][0]
    return (c["message"]["content"] if "message" in c else c["text"]), d["usage"]["prompt_tokens"], d["sdnpu"]


def check_prompt_reuse(model):
    """Replies with prefix reuse and the prompt cache equal a fresh server's,
    the reuse shows in the replies' stats and in /metrics; the same with
    --prompt-cache-mem 0 (the live context alone is reused). On the tiny
    qwen2 model, whose replies differ with the question (the gemma3 one's
    are the same for most prompts): a wrong prefix would show."""
    name = os.path.basename(model)
    reqs = reuse_requests(name)
    fresh = {}
    for path, body in reqs:  # one server per distinct request: nothing to reuse
        k = json.dumps(body, sort_keys=True)
        if k in fresh:
            continue
        p, port, log = start(model, "-c", "512")
        try:
            fresh[k] = reply_of(port, path, body)
        finally:
            p.send_signal(signal.SIGTERM)
            p.wait(timeout=30)
    # A sanitizer build (fewer requests) checks the cache on only: its run
    # exercises the live context too, and each prefill costs seconds there.
    # One session, so that the chats replace the document in its context.
    for flags in ((), ("--prompt-cache-mem", "0"))[:2 if N_REQUESTS >= 200 else 1]:
        p, port, log = start(model, "-c", "512", "--parallel", "1", *flags)
        try:
            reused, n_prompts = [], []
            for i, (path, body) in enumerate(reqs):
                text, n_prompt, x = reply_of(port, path, body)
                n_prompts.append(n_prompt)
                want = fresh[json.dumps(body, sort_keys=True)]
                if (text, n_prompt) != want[:2]:
                    fail(f"prompt reuse {flags}: request {i}: {text!r} ({n_prompt} prompt tokens) against a fresh "
                         f"server's {want[0]!r} ({want[1]})")
                reused.append(x["prompt_reused"])
            # Sent again (1, 5, 9), or the same document with another question (2, 3, 6): mostly not prefilled.
            if not all(reused[i] > 0 for i in (1, 2, 3, 5, 6, 9)) or reused[1] < 0.9 * n_prompts[1]:
                fail(f"prompt reuse {flags}: prompt_reused per request {reused}")
            mx = metrics(port)
            if mx["sdnpu_prompt_cache_reused_tokens_total"] != sum(reused):
                fail(f"/metrics reused tokens {mx['sdnpu_prompt_cache_reused_tokens_total']} != {sum(reused)}")
            if flags:
                if mx["sdnpu_prompt_cache_capacity_bytes"] != 0 or mx["sdnpu_prompt_cache_bytes"] != 0:
                    fail(f"--prompt-cache-mem 0: {mx}")
            else:
                # The first prompt came back (7) after three others (the chats replaced the document): its
                # document, at least, from a snapshot.
                if not (mx["sdnpu_prompt_cache_hits_total"] > 0 and reused[7] >= reused[2] and
                        0 < mx["sdnpu_prompt_cache_bytes"] <= mx["sdnpu_prompt_cache_capacity_bytes"] and
                        mx["sdnpu_prompt_cache_entries"] > 0 and
                        mx["sdnpu_prompt_cache_capacity_bytes"] == 256 << 20):
                    fail(f"prompt cache /metrics: { {k: v for k, v in mx.items() if 'prompt_cache' in k} }, "
                         f"reused {reused}")
            print(f"server_e2e: prompt reuse {' '.join(flags) or '(cache on)'}: {len(reqs)} replies equal a fresh "
                  f"server's, prompt tokens reused {reused}, cache hits {mx['sdnpu_prompt_cache_hits_total']:.0f}")
        finally:
            p.send_signal(signal.SIGTERM)
            if p.wait(timeout=30) != 0:
                fail("the prompt reuse test's server did not exit 0")


def check_context_growth(model):
    """A request that does not fit a session's context (-c 64) grows it, up
    to --ctx-max (the model's own by default): its reply is a large-context
    server's, and so is the next request's on the grown session. The
    session stays grown after the long request and returns to -c after the
    short one (/metrics' sdnpu_context_tokens). With --ctx-max at -c's size
    it is refused with 400 naming the context."""
    name = os.path.basename(model)
    doc = " ".join(["the quick brown fox jumps over the lazy dog near the river bank."] * 3)
    long_req = {"model": name, "prompt": f"{doc}\n\nwho jumps?", "max_tokens": 12, "temperature": 0}
    short_req = {"model": name, "prompt": "the old miller", "max_tokens": 12, "temperature": 0}
    with serving(model, "large context", "-c", "1024", "--parallel", "1", "--prompt-cache-mem", "0") as port:
        want = {k: reply_of(port, "/v1/completions", b) for k, b in (("long", long_req), ("short", short_req))}
    if want["long"][1] + 12 <= 64:
        fail(f"the long prompt has {want['long'][1]} tokens: it fits -c 64")
    with serving(model, "context growth", "-c", "64", "--parallel", "1") as port:
        if metrics(port).get("sdnpu_context_tokens") != 64:
            fail(f"a 64-token session's context in /metrics: {metrics(port).get('sdnpu_context_tokens')}")
        for k, b in (("long", long_req), ("short", short_req), ("long", long_req), ("short", short_req)):
            got = reply_of(port, "/v1/completions", b)
            if got[:2] != want[k][:2]:
                fail(f"a grown session's {k} reply {got[:2]!r} against a large context's {want[k][:2]!r}")
            held = metrics(port).get("sdnpu_context_tokens")
            if (k == "long") != (held is not None and held > 64):
                fail(f"after the {k} request the session's context is {held} tokens (-c 64)")
    with serving(model, "--ctx-max", "-c", "64", "--ctx-max", "64", "--parallel", "1") as port:
        st, msg = error_status(port, long_req)
        if st != 400 or "at most 64" not in msg:
            fail(f"a prompt past --ctx-max: {st} {msg}")
        if reply_of(port, "/v1/completions", short_req)[:2] != want["short"][:2]:
            fail("the short request after a refused one")
    print(f"server_e2e: a {want['long'][1]}-token prompt grew a 64-token session; refused with --ctx-max 64")


def check_routing(model):
    """Requests go to the session that holds their document. Two sessions
    (cache off, so only their live contexts count), requests one at a time:
    A1 B1 B2 A2 are served B2 by B1's session and A2 by A1's. Then a session
    that finishes takes the queued request it holds most of, but passes over
    an older one at most 4 times: one session, busy with a stream on
    document A while B1, A1 ... A5 queue up in that order; the stream's
    client leaves: they are served A1 A2 A3 A4 (each reusing A), then B1
    (passed over 4 times), then A5."""
    docs = {"A": "the old miller watches from his door and counts the sacks of grain on the carts.",
            "B": "a red kite circles over the hill while the shepherd walks his flock down to the fold."}
    body = lambda d, q, **kw: dict({"prompt": f"{docs[d]}\n\nquestion: {q}\nanswer:", "max_tokens": 4,
                                    "temperature": 0}, **kw)
    with serving(model, "routing", "-c", "512", "--parallel", "2", "--prompt-cache-mem", "0") as port:
        reused = [reply_of(port, "/v1/completions", body(d, q))[2]["prompt_reused"]
                  for d, q in (("A", "q1"), ("B", "q1"), ("B", "q2"), ("A", "q2"))]
        if reused[1] > 1 or min(reused[2], reused[3]) < 40:
            fail(f"routing: A1 B1 B2 A2 on two sessions reused {reused} prompt tokens")
    # The stream holds the session while the queue fills: the whole context
    # (the model's 2,048 tokens) on the L2-row graph, seconds even in a
    # release build; it stops as soon as its client leaves.
    p, port, log = start(model, "-c", "2048", "--parallel", "1", "--prompt-cache-mem", "0")
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        c.request("POST", "/v1/completions", json.dumps(body("A", "q0", max_tokens=2000, stream=True,
                                                             sdnpu={"spec": "npu-vanilla"})),
                  {"Content-Type": "application/json", "Authorization": f"Bearer {KEY}"})
        r = c.getresponse()
        r.read1(64) if hasattr(r, "read1") else r.read(64)
        order, lock, ths = [], threading.Lock(), []

        def one(name, b):
            st, data = request(port, "POST", "/v1/completions", b, timeout=600)
            x = json.loads(data).get("sdnpu", {})
            with lock:  # served one at a time, but the replies' threads may wake in another order
                order.append((x.get("order", 0), name, st, x.get("prompt_reused")))
        for k, (name, d, q) in enumerate([("B1", "B", "q1")] + [(f"A{i}", "A", f"q{i}") for i in range(1, 6)]):
            ths.append(threading.Thread(target=one, args=(name, body(d, q))))
            ths[-1].start()
            for _ in range(600):  # queued in this order
                if metrics(port)["sdnpu_queue_depth"] == k + 1:
                    break
                time.sleep(0.05)
            else:
                fail(f"routing: request {name} was not queued")
        c.close()  # the stream's client leaves: its generation stops, the queue runs
        for t in ths:
            t.join()
        order = [o[1:] for o in sorted(order)]
        names = [n for n, _, _ in order]
        if names != ["A1", "A2", "A3", "A4", "B1", "A5"] or any(st != 200 for _, st, _ in order):
            fail(f"routing: served {order}")
        if not all(ru > 40 for n, _, ru in order[:4]):
            fail(f"routing: the A requests after the stream on A did not reuse it: {order}")
        print(f"server_e2e: routing: A1 B1 B2 A2 on two sessions reused {reused} prompt tokens; queued B1 A1..A5 "
              f"served as {' '.join(names)}, reusing {[ru for _, _, ru in order]}")
    finally:
        p.send_signal(signal.SIGTERM)
        if p.wait(timeout=30) != 0:
            fail("the routing test's server did not exit 0")


def main():
    shutil.rmtree(WORK, ignore_errors=True)
    os.makedirs(WORK)
    subprocess.run([MAKE_TINY, WORK], check=True, stdout=subprocess.DEVNULL)
    model = os.path.join(WORK, "tiny-gemma3.gguf")
    p, port, log = start(model, "--parallel", "2", "--queue", "64", "--api-key", KEY, "--max-body", "1M", "-c", "512",
                         "--max-connections-per-ip", "256", "--request-timeout", "900")
    try:
        check_clients(port, "tiny-gemma3.gguf")
        check_hostile(port)
        check_limits(port)
        check_load(port, "tiny-gemma3.gguf")
        check_half_open(port, "tiny-gemma3.gguf")
        curl = shutil.which("curl")
        if curl:
            out = subprocess.run([curl, "-s", f"http://127.0.0.1:{port}/metrics", "-H", f"Authorization: Bearer {KEY}"],
                                 capture_output=True, text=True).stdout
            if "sdnpu_requests_total{class=\"2xx\"}" not in out or "sdnpu_acceptance_ratio" not in out:
                fail(f"curl /metrics: {out[:300]}")
        if p.poll() is not None:
            fail("the server died")
    finally:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            fail("the server did not stop on SIGTERM")
    check_json_schema_default()
    check_tools_default()
    check_guard(model)
    check_cancel_and_busy(model)
    check_prompt_reuse(os.path.join(WORK, "tiny-qwen2.gguf"))
    check_routing(os.path.join(WORK, "tiny-qwen2.gguf"))
    check_context_growth(os.path.join(WORK, "tiny-qwen2.gguf"))
    print("server_e2e: ok")


if __name__ == "__main__":
    main()
