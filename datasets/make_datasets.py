#!/usr/bin/env python3
"""datasets/make_datasets.py - build the four evaluation sets of `sdnpu eval`.

    python3 datasets/make_datasets.py [--out DIR]     (default: this folder)

Writes summary.jsonl, rag.jsonl, ui.jsonl, tweet.jsonl and sources.md (one
line per sample: where its text came from and under which licence).

* summary: README files of Debian packages (/usr/share/doc/PKG/README*),
  cut at a paragraph boundary to 1,300-4,600 characters (about 300-1,100
  tokens of Gemma 3).
* rag: rendered manual pages (`man -P cat`, 80 columns, C locale). Each
  question asks what one command-line option does; its passage is a block
  of that page's OPTIONS section, beside the page's DESCRIPTION and a block
  of another command's page as a distractor. The reference answer is the
  option's own description.
* ui and tweet have no public source on this machine: their samples are
  written for this project (the tables below) and marked so.

Only the Python standard library is used; the same machine gives the same
files (the random choices are seeded).
"""
import argparse
import gzip
import json
import os
import random
import re
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))
WRITTEN = "written for the sdnpu project"
WRITTEN_LICENSE = "CC0-1.0 (written for the sdnpu project)"

# ----------------------------------------------------------------- helpers


def read_text(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    text = data.decode("utf-8", errors="replace")
    return text.replace("\r\n", "\n").replace("\t", "    ")


def package_license(pkg):
    """The licence a package's copyright file names for its files (DEP-5
    'License:' of the first stanza), else a guess from its text."""
    path = "/usr/share/doc/%s/copyright" % pkg
    if not os.path.exists(path):
        return "unknown (no %s)" % path
    text = read_text(path)
    m = re.search(r"^License:\s*(\S.*)$", text, re.M)
    if m:
        return m.group(1).strip()
    low = text.lower()
    for pat, name in [
        (r"general public license.{0,80}version 3", "GPL-3+"),
        (r"general public license.{0,80}version 2", "GPL-2+"),
        (r"lesser general public license", "LGPL"),
        (r"general public license", "GPL"),
        (r"apache license", "Apache-2.0"),
        (r"bsd", "BSD"),
        (r"permission is hereby granted, free of charge", "MIT"),
    ]:
        if re.search(pat, low, re.S):
            return name + " (from %s)" % path
    return "see %s" % path


def clean(text):
    lines = [l.rstrip() for l in text.split("\n")]
    out, blank = [], 0
    for l in lines:
        if not l.strip():
            blank += 1
            if blank > 1:
                continue
        else:
            blank = 0
        out.append(l)
    return "\n".join(out).strip()


def cut(text, lo, hi):
    """At most hi characters, cut at the last paragraph end past lo."""
    if len(text) <= hi:
        return text
    head = text[:hi]
    k = head.rfind("\n\n")
    if k >= lo:
        return head[:k].rstrip()
    k = head.rfind("\n")
    return head[: k if k >= lo else hi].rstrip()


# ----------------------------------------------------------------- summary

SUMMARY_PACKAGES = [
    "grep", "tmux", "wget", "ed", "findutils", "jq", "mawk", "bc", "patch", "gettext",
    "valgrind", "base-files", "base-passwd", "zlib1g-dev", "libgmp-dev", "net-tools", "psmisc",
    "git", "openssh-client", "bash", "groff-base", "libfreetype6", "libmpfr6", "libxml2",
    "libjsoncpp25", "pocl-opencl-icd", "libcbor0.8", "libidn2-0", "libutf8proc2", "bats",
    "googletest", "at-spi2-core", "libnghttp2-14", "postgresql-common", "libalgorithm-diff-perl",
    "libdconf1", "libpthread-stubs0-dev", "libtasn1-6", "libglib2.0-0", "python3-httplib2",
    "libnettle8", "gettext", "libipt2", "tk8.6", "fonts-dejavu-core", "polkitd", "psmisc",
    "python3-yaml", "libpam0g", "libksba8", "libjansson4", "opencl-c-headers", "libpango-1.0-0",
    "libgdk-pixbuf-2.0-0", "python3-jwt", "sgml-base", "dbus", "xml-core", "vim-common",
]
README_NAMES = ["README", "README.md", "README.txt", "README.rst", "README.gz", "README.md.gz",
                "README.rst.gz", "README.txt.gz"]


def make_summary(n_want=34):
    samples, seen = [], set()
    for pkg in SUMMARY_PACKAGES:
        for name in README_NAMES:
            path = "/usr/share/doc/%s/%s" % (pkg, name)
            if os.path.exists(path):
                break
        else:
            continue
        text = clean(read_text(path))
        if len(text) < 1300:
            continue
        text = cut(text, 1300, 4600)
        key = text[:400]
        if key in seen or len(text) < 1300:
            continue
        seen.add(key)
        samples.append({
            "id": "summary-%03d" % (len(samples) + 1),
            "task": "summary",
            "instruction": "Summarize the following document in a few sentences.",
            "context": [text],
            "source": path,
            "license": package_license(pkg),
        })
        if len(samples) == n_want:
            break
    return samples


# --------------------------------------------------------------------- rag

RAG_COMMANDS = [
    "grep", "sed", "sort", "uniq", "cut", "tar", "gzip", "find", "xargs", "ls", "cp", "mv", "rm",
    "mkdir", "head", "tail", "wc", "tr", "du", "df", "ps", "diff", "patch", "curl", "wget", "make",
    "git", "ssh", "less", "date", "touch", "ln", "chmod", "split", "paste", "join", "nl", "tee",
    "comm", "base64", "md5sum", "stat", "env", "timeout", "install",
]


def man_page(cmd):
    env = dict(os.environ, MANWIDTH="80", LC_ALL="C", MANPAGER="cat", PAGER="cat")
    env.pop("MAN_KEEP_FORMATTING", None)
    try:
        r = subprocess.run(["man", "-P", "cat", cmd], env=env, capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None, None
    if r.returncode != 0:
        return None, None
    text = r.stdout.decode("utf-8", errors="replace")
    text = re.sub(r".\x08", "", text)  # overstrike bold/underline
    src = subprocess.run(["man", "-w", cmd], env=env, capture_output=True).stdout.decode().strip()
    return text, src


def unjustify(s):
    return re.sub(r"(?<=\S) {2,}(?=\S)", " ", s)


def sections(text):
    """{NAME: [lines]} of a rendered page."""
    out, cur = {}, None
    for line in text.split("\n"):
        if re.match(r"^[A-Z][A-Z0-9 ]+$", line):
            cur = line.strip()
            out[cur] = []
        elif cur:
            out[cur].append(line)
    return out


def parse_options(lines):
    """[(header, description)] from the OPTIONS-like lines of a page."""
    opts, i = [], 0
    while i < len(lines):
        m = re.match(r"^ {7}(-[^ ].*)$", lines[i])
        if not m:
            i += 1
            continue
        header = m.group(1).rstrip()
        desc = []
        m2 = re.match(r"^(-\S+(?:, -\S+)*)\s{2,}(\S.*)$", header)
        if m2:  # a short option with its text on the same line
            header, desc = m2.group(1), [m2.group(2)]
        elif re.match(r"^(--?[\w-]+) (\S.*)$", header) and len(header) > 30:
            parts = header.split(" ", 1)
            header, desc = parts[0], [parts[1]]
        i += 1
        while i < len(lines) and (lines[i].startswith(" " * 14) or not lines[i].strip()):
            if not lines[i].strip():
                if i + 1 < len(lines) and lines[i + 1].startswith(" " * 14):
                    desc.append("")
                    i += 1
                    continue
                break
            desc.append(lines[i].strip())
            i += 1
        text = unjustify(" ".join(d if d else "\n" for d in desc)).replace(" \n ", "\n").strip()
        if text:
            opts.append((unjustify(header), text))
    return opts


def block_of(opts, k, width=4):
    lo = max(0, min(k - width // 2, len(opts) - width))
    chunk = opts[lo: lo + width]
    return "\n".join("%s\n    %s" % (h, d.replace("\n", "\n    ")) for h, d in chunk)


def cut_sentences(s, hi):
    """At most hi characters, cut after a sentence where one ends."""
    if len(s) <= hi:
        return s
    head = s[:hi]
    k = max(head.rfind(". "), head.rfind(".\n"))
    return head[: k + 1] if k > hi // 3 else head.rstrip() + "..."


def first_sentence(s):
    m = re.match(r"(.+?[.!?])(\s|$)", s.replace("\n", " "))
    return m.group(1) if m else s


def make_rag(rng, n_want=34):
    pages = []
    for cmd in RAG_COMMANDS:
        text, src = man_page(cmd)
        if not text:
            continue
        sec = sections(text)
        opts = []
        for name in ("OPTIONS", "DESCRIPTION"):
            opts += parse_options(sec.get(name, []))
        good = [i for i, (h, d) in enumerate(opts) if 40 <= len(d) <= 400 and h.startswith("-")]
        desc = [l for l in sec.get("DESCRIPTION", [])]
        para = unjustify(" ".join(l.strip() for l in "\n".join(desc).strip().split("\n\n")[0].split("\n")))
        if len(good) < 1 or len(para) < 30:
            continue
        name_line = unjustify(" ".join(l.strip() for l in sec.get("NAME", []))).strip()
        para = cut_sentences(para, 600)
        pkg = subprocess.run(["dpkg", "-S", os.path.realpath(src)], capture_output=True).stdout.decode()
        pkg = pkg.split(":")[0].strip() if pkg else ""
        opts = [(h, cut_sentences(d, 400)) for h, d in opts]
        order = rng.sample(good, min(3, len(good)))
        pages.append({"cmd": cmd, "opts": opts, "good": good, "order": order, "desc": para, "name": name_line,
                      "src": src, "pkg": pkg})
    samples = []
    for rnd in range(3):
        for pi, p in enumerate(pages):
            if len(samples) == n_want:
                break
            if rnd >= len(p["order"]):
                continue
            k = p["order"][rnd]
            h, d = p["opts"][k]
            other = pages[(pi + 1 + rng.randrange(len(pages) - 1)) % len(pages)]
            ok = rng.choice(other["good"])
            passages = [
                "From the manual page of %s (%s):\n%s" % (p["cmd"], p["name"], p["desc"]),
                "From the manual page of %s, options:\n%s" % (p["cmd"], block_of(p["opts"], k)),
                "From the manual page of %s, options:\n%s" % (other["cmd"], block_of(other["opts"], ok)),
            ]
            rng.shuffle(passages)
            opt = h.split(",")[-1].strip().split("=")[0].split("[")[0].split(" ")[0]
            samples.append({
                "id": "rag-%03d" % (len(samples) + 1),
                "task": "rag",
                "instruction": "What does the %s option of %s do?" % (opt, p["cmd"]),
                "context": passages,
                "reference": first_sentence(d),
                "source": "%s; distractor %s" % (p["src"], other["src"]),
                "license": "%s (package %s); distractor: %s (package %s)" % (
                    package_license(p["pkg"]) if p["pkg"] else "unknown", p["pkg"] or "?",
                    package_license(other["pkg"]) if other["pkg"] else "unknown", other["pkg"] or "?"),
            })
    return samples


# ---------------------------------------------------------------------- ui
# Written for the project: tasks on a phone, each a goal and its steps. A
# step is (screen, action): the screen as the accessibility tree lists it,
# the action the one a user (or an agent) takes next. Each step is one
# sample; the task's earlier actions are its history.

UI_TASKS = [
    ("Settings", "Turn on Wi-Fi and connect to the network HomeNet", [
        (["[1] text 'Settings'", "[2] button 'Network & internet'", "[3] button 'Connected devices'",
          "[4] button 'Apps'", "[5] button 'Battery'", "[6] button 'Display'"], "tap(2, 'Network & internet')"),
        (["[1] button 'Back'", "[2] text 'Network & internet'", "[3] switch 'Wi-Fi' off", "[4] button 'Mobile network'",
          "[5] button 'Airplane mode'", "[6] button 'Hotspot & tethering'"], "tap(3, 'Wi-Fi')"),
        (["[1] button 'Back'", "[2] text 'Wi-Fi'", "[3] switch 'Use Wi-Fi' on", "[4] button 'HomeNet'",
          "[5] button 'CoffeeShop_Guest'", "[6] button 'Add network'"], "tap(4, 'HomeNet')"),
        (["[1] text 'HomeNet'", "[2] edit 'Password'", "[3] checkbox 'Show password'", "[4] button 'Cancel'",
          "[5] button 'Connect'"], "type(2, 'Password', 'sunflower42')"),
        (["[1] text 'HomeNet'", "[2] edit 'Password' '•••••••••••'", "[3] checkbox 'Show password'",
          "[4] button 'Cancel'", "[5] button 'Connect'"], "tap(5, 'Connect')"),
    ]),
    ("Clock", "Set an alarm for 6:30 AM on weekdays", [
        (["[1] tab 'Alarm'", "[2] tab 'Clock'", "[3] tab 'Timer'", "[4] tab 'Stopwatch'", "[5] text '7:00 AM Sat, Sun'",
          "[6] button 'Add alarm'"], "tap(6, 'Add alarm')"),
        (["[1] text 'Select time'", "[2] edit 'Hour' '7'", "[3] edit 'Minute' '00'", "[4] button 'AM'",
          "[5] button 'PM'", "[6] button 'Cancel'", "[7] button 'OK'"], "type(2, 'Hour', '6')"),
        (["[1] text 'Select time'", "[2] edit 'Hour' '6'", "[3] edit 'Minute' '00'", "[4] button 'AM'",
          "[5] button 'PM'", "[6] button 'Cancel'", "[7] button 'OK'"], "type(3, 'Minute', '30')"),
        (["[1] text 'Select time'", "[2] edit 'Hour' '6'", "[3] edit 'Minute' '30'", "[4] button 'AM'",
          "[5] button 'PM'", "[6] button 'Cancel'", "[7] button 'OK'"], "tap(7, 'OK')"),
        (["[1] text '6:30 AM'", "[2] checkbox 'Repeat'", "[3] button 'M'", "[4] button 'T'", "[5] button 'W'",
          "[6] button 'T'", "[7] button 'F'", "[8] button 'S'", "[9] button 'S'"], "tap(2, 'Repeat')"),
    ]),
    ("Messages", "Send 'Running 10 minutes late' to Alex", [
        (["[1] text 'Messages'", "[2] button 'Search'", "[3] item 'Mom: See you Sunday!'",
          "[4] item 'Alex: Lunch at noon?'", "[5] item 'Bank: Your code is 4821'", "[6] button 'Start chat'"],
         "tap(4, 'Alex: Lunch at noon?')"),
        (["[1] button 'Back'", "[2] text 'Alex'", "[3] text 'Lunch at noon?'", "[4] edit 'Text message'",
          "[5] button 'Attach'", "[6] button 'Send'"], "type(4, 'Text message', 'Running 10 minutes late')"),
        (["[1] button 'Back'", "[2] text 'Alex'", "[3] text 'Lunch at noon?'",
          "[4] edit 'Text message' 'Running 10 minutes late'", "[5] button 'Attach'", "[6] button 'Send'"],
         "tap(6, 'Send')"),
    ]),
    ("Mail", "Reply to the email from Priya saying the report is attached", [
        (["[1] text 'Inbox'", "[2] button 'Search mail'", "[3] item 'Priya Shah: Q3 report draft'",
          "[4] item 'Newsletter: This week in tech'", "[5] item 'Sam: Team offsite'", "[6] button 'Compose'"],
         "tap(3, 'Priya Shah: Q3 report draft')"),
        (["[1] button 'Back'", "[2] text 'Q3 report draft'", "[3] text 'Priya Shah'",
          "[4] text 'Could you send me the latest version?'", "[5] button 'Reply'", "[6] button 'Forward'"],
         "tap(5, 'Reply')"),
        (["[1] button 'Close'", "[2] edit 'To' 'Priya Shah'", "[3] edit 'Subject' 'Re: Q3 report draft'",
          "[4] edit 'Compose email'", "[5] button 'Attach'", "[6] button 'Send'"],
         "type(4, 'Compose email', 'Hi Priya, the report is attached.')"),
        (["[1] button 'Close'", "[2] edit 'To' 'Priya Shah'", "[3] edit 'Subject' 'Re: Q3 report draft'",
          "[4] edit 'Compose email' 'Hi Priya, the report is attached.'", "[5] button 'Attach'", "[6] button 'Send'"],
         "tap(5, 'Attach')"),
        (["[1] text 'Choose a file'", "[2] item 'Q3_report_v4.pdf'", "[3] item 'budget.xlsx'", "[4] item 'photo.jpg'",
          "[5] button 'Cancel'"], "tap(2, 'Q3_report_v4.pdf')"),
    ]),
    ("Browser", "Search the web for the weather in Lisbon", [
        (["[1] edit 'Search or type web address'", "[2] button 'Tabs'", "[3] button 'Menu'",
          "[4] item 'news.example.com'", "[5] item 'mail.example.com'"],
         "type(1, 'Search or type web address', 'weather in Lisbon')"),
        (["[1] edit 'Search or type web address' 'weather in Lisbon'", "[2] item 'weather in lisbon'",
          "[3] item 'weather in lisbon tomorrow'", "[4] item 'weather in lisbon in may'", "[5] button 'Go'"],
         "tap(5, 'Go')"),
    ]),
    ("Music", "Play the playlist Morning Run on shuffle", [
        (["[1] tab 'Home'", "[2] tab 'Search'", "[3] tab 'Library'", "[4] item 'Recently played'",
          "[5] item 'Made for you'"], "tap(3, 'Library')"),
        (["[1] text 'Library'", "[2] item 'Playlists'", "[3] item 'Artists'", "[4] item 'Albums'",
          "[5] item 'Songs'"], "tap(2, 'Playlists')"),
        (["[1] button 'Back'", "[2] text 'Playlists'", "[3] item 'Focus'", "[4] item 'Morning Run'",
          "[5] item 'Road Trip'", "[6] button 'New playlist'"], "tap(4, 'Morning Run')"),
        (["[1] button 'Back'", "[2] text 'Morning Run'", "[3] text '24 songs'", "[4] button 'Play'",
          "[5] button 'Shuffle'", "[6] item 'Song 1'"], "tap(5, 'Shuffle')"),
    ]),
    ("Calendar", "Add an event 'Dentist' on Friday at 3 PM", [
        (["[1] text 'June'", "[2] button 'Today'", "[3] item 'Mon 10'", "[4] item 'Fri 14'", "[5] button 'New event'"],
         "tap(5, 'New event')"),
        (["[1] button 'Close'", "[2] edit 'Title'", "[3] edit 'Date' 'Mon 10'", "[4] edit 'Time' '9:00 AM'",
          "[5] switch 'All day' off", "[6] button 'Save'"], "type(2, 'Title', 'Dentist')"),
        (["[1] button 'Close'", "[2] edit 'Title' 'Dentist'", "[3] edit 'Date' 'Mon 10'", "[4] edit 'Time' '9:00 AM'",
          "[5] switch 'All day' off", "[6] button 'Save'"], "type(3, 'Date', 'Fri 14')"),
        (["[1] button 'Close'", "[2] edit 'Title' 'Dentist'", "[3] edit 'Date' 'Fri 14'", "[4] edit 'Time' '9:00 AM'",
          "[5] switch 'All day' off", "[6] button 'Save'"], "type(4, 'Time', '3:00 PM')"),
        (["[1] button 'Close'", "[2] edit 'Title' 'Dentist'", "[3] edit 'Date' 'Fri 14'", "[4] edit 'Time' '3:00 PM'",
          "[5] switch 'All day' off", "[6] button 'Save'"], "tap(6, 'Save')"),
    ]),
    ("Notes", "Create a note titled 'Groceries' listing milk and eggs", [
        (["[1] text 'Notes'", "[2] button 'Search'", "[3] item 'Ideas'", "[4] item 'Packing list'",
          "[5] button 'New note'"], "tap(5, 'New note')"),
        (["[1] button 'Back'", "[2] edit 'Title'", "[3] edit 'Note'", "[4] button 'Checklist'", "[5] button 'Done'"],
         "type(2, 'Title', 'Groceries')"),
        (["[1] button 'Back'", "[2] edit 'Title' 'Groceries'", "[3] edit 'Note'", "[4] button 'Checklist'",
          "[5] button 'Done'"], "type(3, 'Note', 'milk, eggs')"),
        (["[1] button 'Back'", "[2] edit 'Title' 'Groceries'", "[3] edit 'Note' 'milk, eggs'", "[4] button 'Checklist'",
          "[5] button 'Done'"], "tap(5, 'Done')"),
    ]),
    ("Maps", "Get walking directions to the Central Library", [
        (["[1] edit 'Search here'", "[2] button 'Restaurants'", "[3] button 'Gas'", "[4] button 'Directions'",
          "[5] button 'Your location'"], "type(1, 'Search here', 'Central Library')"),
        (["[1] edit 'Search here' 'Central Library'", "[2] item 'Central Library, 12 Main St'",
          "[3] item 'Central Library Cafe'", "[4] item 'Central Park'"], "tap(2, 'Central Library, 12 Main St')"),
        (["[1] button 'Back'", "[2] text 'Central Library'", "[3] text 'Open until 8 PM'", "[4] button 'Directions'",
          "[5] button 'Call'", "[6] button 'Save'"], "tap(4, 'Directions')"),
        (["[1] button 'Back'", "[2] tab 'Drive'", "[3] tab 'Transit'", "[4] tab 'Walk'", "[5] tab 'Bike'",
          "[6] text '8 min (3.1 km)'", "[7] button 'Start'"], "tap(4, 'Walk')"),
    ]),
    ("Camera", "Switch to the front camera and take a photo", [
        (["[1] button 'Settings'", "[2] button 'Flash off'", "[3] tab 'Video'", "[4] tab 'Photo'",
          "[5] button 'Switch camera'", "[6] button 'Shutter'", "[7] button 'Gallery'"], "tap(5, 'Switch camera')"),
        (["[1] button 'Settings'", "[2] button 'Flash off'", "[3] tab 'Video'", "[4] tab 'Photo'",
          "[5] button 'Switch camera'", "[6] button 'Shutter'", "[7] button 'Gallery'", "[8] text 'Front camera'"],
         "tap(6, 'Shutter')"),
    ]),
]

# -------------------------------------------------------------------- tweet
# Written for the project: mentions of @mira_dev, who maintains a small
# open-source Markdown editor ("inkpad"), and the reply she wrote. Each
# sample's history is her replies to the threads before it (at most five),
# as a reply assistant would have stored them.

TWEETS = [
    (["@jonas_k: @mira_dev inkpad 2.3 crashes when I open a file with emoji in the name. macOS 14."],
     "Thanks for the report! Could you open an issue with the file name and the crash log? I'll look at it this week."),
    (["@lea_writes: just switched my whole blog workflow to inkpad, the live preview is so smooth",
      "@mira_dev: that makes my day!", "@lea_writes: any plans for footnote support?"],
     "Yes! Footnotes are planned for 2.4. If you want to follow along, there is an issue for it on GitHub."),
    (["@devpatel: @mira_dev is there a way to change the preview font?"],
     "Yes: Settings > Preview > Font. You can also drop a custom CSS file into the themes folder."),
    (["@ossweekly: This week's featured project: inkpad by @mira_dev, a fast Markdown editor that runs everywhere."],
     "Thank you so much for the feature! It means a lot to the whole inkpad community."),
    (["@tomasz_b: @mira_dev the Linux AppImage doesn't start on Fedora 40, says libfuse.so.2 missing"],
     "Thanks for the report! Installing fuse-libs should fix it. Could you open an issue if it still fails? I'll look at it this week."),
    (["@anna_codes: @mira_dev would you accept a PR that adds a word counter to the status bar?"],
     "Yes, I'd love that! Please open an issue first so we can agree on the design, then send the PR."),
    (["@kwame_o: inkpad ate my unsaved notes after an update :( @mira_dev"],
     "I'm so sorry! Check the recovery folder under Settings > Files, autosave keeps the last ten versions. If they are not there, please open an issue."),
    (["@rustacean_rae: @mira_dev any chance of a Vim mode?", "@mira_dev: it's the most requested feature!",
      "@rustacean_rae: so... is that a yes?"],
     "It's a yes, but not before 3.0. If you want to help, there is an issue for it on GitHub."),
    (["@sofia_m: @mira_dev how do I export to PDF with page numbers?"],
     "Yes: File > Export > PDF, then tick 'Page numbers' in the options. You can also set margins there."),
    (["@benji: @mira_dev the dark theme makes links almost invisible"],
     "Thanks for the report! Could you share a screenshot in an issue? I'll look at it this week."),
    (["@nora_tech: Giving a talk on open-source note-taking tools next month, featuring inkpad! cc @mira_dev"],
     "Thank you so much! Let me know if you need screenshots or a demo build. It means a lot to the whole inkpad community."),
    (["@li_wei: @mira_dev is inkpad going to stay free?"],
     "Yes, inkpad is and will stay free and open source under the MIT licence."),
    (["@pedro_s: @mira_dev tables are painful to write, any tips?"],
     "Yes: type | and press Tab, inkpad aligns the columns for you. You can also paste a table from a spreadsheet."),
    (["@hannah_j: @mira_dev search and replace doesn't support regex?"],
     "It does! Click the .* button in the search bar. If something doesn't match as expected, please open an issue."),
    (["@marco_dev: @mira_dev sync with Dropbox keeps creating conflicted copies"],
     "Thanks for the report! Could you open an issue with the inkpad version and your Dropbox settings? I'll look at it this week."),
    (["@ines_r: @mira_dev love the app! Is there a mobile version?"],
     "Thank you so much! A mobile version is planned, but not before 3.0. If you want to follow along, there is an issue for it on GitHub."),
    (["@dmitri: @mira_dev spell check only knows English, can I add German?"],
     "Yes: Settings > Editor > Languages, then add German. You can also drop a custom dictionary into the dictionaries folder."),
    (["@chloe_b: @mira_dev 2.3.1 fixed my crash, thank you!!"],
     "Thank you so much for letting me know! It means a lot to the whole inkpad community."),
    (["@femi_a: @mira_dev would you accept a PR that adds Mermaid diagrams?"],
     "Yes, I'd love that! Please open an issue first so we can agree on the design, then send the PR."),
    (["@yuki_t: @mira_dev the Windows installer is flagged by my antivirus"],
     "Thanks for the report! The installer is signed, so it is most likely a false positive. Could you open an issue with the antivirus name? I'll look at it this week."),
    (["@sam_r: @mira_dev how do I change the keyboard shortcut for bold?"],
     "Yes: Settings > Keyboard, then search for 'bold'. You can also export your shortcuts to a file."),
    (["@olga_p: @mira_dev inkpad uses 2 GB of RAM with a big file open", "@olga_p: the file is 40 MB of logs"],
     "Thanks for the report! Large files are a known issue, 2.4 will load them lazily. Could you open an issue with the file size? I'll look at it this week."),
    (["@arjun_k: Just hit 1000 stars on GitHub for inkpad! Congrats @mira_dev"],
     "Thank you so much! It means a lot to the whole inkpad community."),
    (["@grace_h: @mira_dev any chance of a Vim mode? I know, I know..."],
     "It's a yes, but not before 3.0. If you want to help, there is an issue for it on GitHub."),
    (["@bruno_l: @mira_dev does inkpad support LaTeX math?"],
     "Yes: wrap it in $ for inline math or $$ for a block. You can also switch the renderer in Settings > Preview."),
    (["@zara_k: @mira_dev would you accept a PR that translates the UI to Spanish?"],
     "Yes, I'd love that! Please open an issue first so we can agree on the approach, then send the PR."),
    (["@victor_m: @mira_dev images pasted from the clipboard are saved in the wrong folder"],
     "Thanks for the report! You can set the folder in Settings > Files > Images. If it still goes wrong, please open an issue and I'll look at it this week."),
    (["@emma_w: @mira_dev is there a way to sync settings across machines?"],
     "Yes: Settings > General > Export settings, then import the file on the other machine. Built-in sync is planned for 2.5."),
    (["@kenji: @mira_dev the focus mode is exactly what I needed, thank you"],
     "Thank you so much! It means a lot to the whole inkpad community."),
    (["@paula_d: @mira_dev how do I print without the dark background?"],
     "Yes: File > Print, then pick the 'Light' theme in the options. You can also export to PDF first."),
    (["@ravi_s: @mira_dev autosave makes my git diffs noisy"],
     "Thanks for the report! You can raise the autosave interval in Settings > Files. If that doesn't help, please open an issue and I'll look at it this week."),
    (["@lucia_f: @mira_dev would you accept a PR that adds a table of contents sidebar?"],
     "Yes, I'd love that! Please open an issue first so we can agree on the design, then send the PR."),
]


def make_ui():
    samples = []
    for app, goal, steps in UI_TASKS:
        for k, (screen, action) in enumerate(steps):
            samples.append({
                "id": "ui-%03d" % (len(samples) + 1),
                "task": "ui",
                "instruction": goal,
                "context": ["App: %s" % app] + screen,
                "history": [a for _, a in steps[:k]],
                "reference": action,
                "source": WRITTEN,
                "license": WRITTEN_LICENSE,
            })
    return samples


def make_tweet():
    samples = []
    for i, (thread, reply) in enumerate(TWEETS):
        samples.append({
            "id": "tweet-%03d" % (i + 1),
            "task": "tweet",
            "instruction": "Write @mira_dev's reply to this thread.",
            "context": thread,
            "history": [r for _, r in TWEETS[max(0, i - 5): i]],
            "reference": reply,
            "source": WRITTEN,
            "license": WRITTEN_LICENSE,
        })
    return samples


def write_jsonl(path, samples):
    with open(path, "w", encoding="utf-8") as f:
        for s in samples:
            f.write(json.dumps(s, ensure_ascii=False) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=HERE)
    args = ap.parse_args()
    rng = random.Random(20250601)
    sets = {
        "summary": make_summary(),
        "rag": make_rag(rng),
        "ui": make_ui(),
        "tweet": make_tweet(),
    }
    lines = ["# Sources of each sample (written by make_datasets.py)", ""]
    for name, samples in sets.items():
        write_jsonl(os.path.join(args.out, name + ".jsonl"), samples)
        print("%s: %d samples" % (name, len(samples)))
        lines.append("## %s" % name)
        lines.append("")
        lines.append("| id | source | licence |")
        lines.append("|----|--------|---------|")
        for s in samples:
            lines.append("| %s | %s | %s |" % (s["id"], s["source"], s["license"]))
        lines.append("")
    with open(os.path.join(args.out, "sources.md"), "w", encoding="utf-8") as f:
        f.write("\n".join(lines))


if __name__ == "__main__":
    main()
