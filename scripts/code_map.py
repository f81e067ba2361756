#!/usr/bin/env python3
"""The code map of docs/architecture.md, made from the modules' own `//!` notes.

Each crate section of the map ("### `folder/` (`crate`)") keeps its prose; the list of
modules under it is generated: one line per source file, its path and the first sentence
of its `//!` note, children indented under their parent. Test-only files (tests.rs,
fakes.rs, anything under tests/ or benches/) are left out.

    scripts/code_map.py           exit 1 and show the difference when the map is stale
    scripts/code_map.py --write   rewrite the map in place
"""

import difflib
import os
import re
import sys
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOC = os.path.join(ROOT, "docs", "architecture.md")
WIDTH = 96
SKIP = {"tests.rs", "fakes.rs"}
HEADING = re.compile(r"^### `([^`]+)/` \(`([^`]+)`\)$")


def first_sentence(path):
    lines = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith("//!"):
                text = line[3:].strip()
                if not text:
                    if lines:
                        break
                    continue
                lines.append(text)
            elif lines or line.strip():
                break
    text = " ".join(lines)
    # The first sentence: up to a period, question or exclamation mark followed by a space
    # (or the end), not inside backticks.
    depth = 0
    for i, ch in enumerate(text):
        if ch == "`":
            depth ^= 1
        elif ch in ".!?" and depth == 0 and (i + 1 == len(text) or text[i + 1] == " "):
            return text[: i + 1]
    return text + ("." if text and not text.endswith(".") else "")


def strip_links(text):
    # Rustdoc links read as plain code in Markdown: [`X`](path) and [`X`] become `X`.
    text = re.sub(r"\[(`[^`]+`)\]\([^)]*\)", r"\1", text)
    return re.sub(r"\[(`[^`]+`)\]", r"\1", text)


def wrap(prefix, text, indent):
    return textwrap.wrap(prefix + text, WIDTH, subsequent_indent=indent,
                         break_long_words=False, break_on_hyphens=False)


def modules(folder):
    src = os.path.join(ROOT, folder, "src")
    entries = []
    for dirpath, dirnames, filenames in os.walk(src):
        dirnames.sort()
        for name in sorted(filenames):
            if not name.endswith(".rs") or name in SKIP:
                continue
            rel = os.path.relpath(os.path.join(dirpath, name), src)
            entries.append(rel)
    def module_of(rel):
        parts = rel[:-3].split(os.sep)
        if parts[-1] == "mod":
            parts = parts[:-1]
        return parts
    # lib.rs is the crate itself: its note is the section's prose.
    items = [(module_of(rel), rel) for rel in entries if rel != "lib.rs"]
    items.sort(key=lambda x: x[0])
    lines = []
    for parts, rel in items:
        depth = max(len(parts) - 1, 0)
        note = strip_links(first_sentence(os.path.join(src, rel)))
        prefix = "  " * depth + "- "
        lines.extend(wrap(prefix + f"`{rel}`: ", note, "  " * (depth + 1)))
    return lines


def render(doc):
    out, lines, i = [], doc.split("\n"), 0
    while i < len(lines):
        line = lines[i]
        out.append(line)
        m = HEADING.match(line)
        i += 1
        if not m:
            continue
        # Keep the prose up to the first list item, then replace the list. A crate of lib.rs
        # alone has no list: its prose ends at the next section.
        while i < len(lines) and not lines[i].startswith("- ") and not HEADING.match(lines[i]):
            out.append(lines[i])
            i += 1
        while i < len(lines) and (lines[i].startswith("- ") or lines[i].startswith("  ")):
            i += 1
        listed = modules(m.group(1))
        if listed and i < len(lines) and HEADING.match(lines[i]):
            # The prose ran to the next section, with the blank line before it: the list
            # goes between the two.
            while out and out[-1] == "":
                out.pop()
            listed = [""] + listed + [""]
        out.extend(listed)
    return "\n".join(out)


def main():
    with open(DOC, encoding="utf-8") as f:
        doc = f.read()
    new = render(doc)
    if "--write" in sys.argv[1:]:
        with open(DOC, "w", encoding="utf-8") as f:
            f.write(new)
        return 0
    if new != doc:
        diff = difflib.unified_diff(doc.split("\n"), new.split("\n"), "docs/architecture.md",
                                    "generated", lineterm="", n=1)
        print("\n".join(list(diff)[:80]))
        print("code map: docs/architecture.md is stale; run scripts/code_map.py --write")
        return 1
    print("code map: current")
    return 0


if __name__ == "__main__":
    sys.exit(main())
