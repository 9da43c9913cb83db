#!/usr/bin/env python3
"""Fails when a Markdown file links to a file that does not exist or to an anchor that no heading
makes.

Checks README.md, docs/ and every other Markdown file git tracks (never target/ or node_modules/),
or the files named on the command line. For each relative link, inline (`[text](path#anchor)`,
`![alt](path)`) or by reference (`[name]: path`): the path, relative to the file (or to the
repository root when it starts with `/`), must exist; an `#anchor`, on the same page or on another
Markdown page, must be the slug of one of that page's headings as GitHub makes them (lowercase;
punctuation dropped; each space a hyphen; `-1`, `-2` … for repeats) or an explicit
`<a id="…">`/`<a name="…">`. Links with a scheme (`https:`, `mailto:` …) are not checked.
Code (fenced blocks and `inline spans`) is skipped.

Prints each broken link as `file:line: broken link TARGET (why)` and exits 1 when there is any.
`--self-test` plants a missing file and a missing anchor in a temporary folder and exits 1 unless
both are caught and the good links pass.
"""
import re
import subprocess
import sys
import tempfile
import unicodedata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SKIPPED_DIRS = {"target", "node_modules", ".git"}

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
ATX = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")
# [text](target) and ![alt](target); the target may be <in angle brackets> and have a "title".
INLINE = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*(<[^>]*>|[^)\s]+)(?:\s+[\"'(][^)]*)?\s*\)")
REFERENCE = re.compile(r"^ {0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)")
HTML_ANCHOR = re.compile(r"<a\s[^>]*\b(?:id|name)\s*=\s*[\"']([^\"']+)[\"']", re.I)
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's text (github-slugger): the rendered text, lowercased, with
    everything but letters, marks, digits, `_`, `-` and spaces dropped, and each space a hyphen."""
    text = CODE_SPAN.sub(lambda m: m.group(2), heading)
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link's text
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML
    out = []
    for ch in text.strip().lower():
        cat = unicodedata.category(ch)
        if ch in " -_" or cat[0] in "LMN":
            out.append("-" if ch == " " else ch)
    return "".join(out)


def scan(path: Path):
    """The anchors a page makes, and its links as (line number, target)."""
    anchors, links = set(), []
    counts = {}
    fence = None
    previous = ""
    lines = path.read_text(encoding="utf-8").splitlines()

    def add_heading(text):
        base = slug(text)
        n = counts.get(base, 0)
        counts[base] = n + 1
        anchors.add(base if n == 0 else f"{base}-{n}")

    for number, line in enumerate(lines, 1):
        opened = FENCE.match(line)
        if fence:
            if opened and opened.group(1)[0] == fence[0] and len(opened.group(1)) >= len(fence):
                fence = None
            previous = ""
            continue
        if opened:
            fence = opened.group(1)
            previous = ""
            continue
        heading = ATX.match(line)
        if heading:
            add_heading(heading.group(2) or "")
        elif SETEXT.match(line) and previous.strip() and not previous.lstrip().startswith(("|", "-", "*", ">")):
            add_heading(previous.strip())
        anchors.update(HTML_ANCHOR.findall(line))
        text = CODE_SPAN.sub("", line)
        for match in INLINE.finditer(text):
            links.append((number, match.group(1)))
        ref = REFERENCE.match(text)
        if ref:
            links.append((number, ref.group(1)))
        previous = line
    return anchors, links


def check(files, root: Path):
    """Every broken link of `files` (paths under `root`), as `file:line: broken link …` lines."""
    pages = {}

    def page(path: Path):
        key = path.resolve()
        if key not in pages:
            pages[key] = scan(key)
        return pages[key]

    problems = []
    for path in files:
        _, links = page(path)
        shown = path.relative_to(root) if path.is_relative_to(root) else path
        for number, raw in links:
            target = raw[1:-1] if raw.startswith("<") else raw
            if SCHEME.match(target):
                continue
            file_part, _, anchor = target.partition("#")
            file_part = file_part.split("?", 1)[0]
            if file_part:
                dest = (root / file_part.lstrip("/")) if file_part.startswith("/") else (path.parent / file_part)
                if not dest.exists():
                    problems.append(f"{shown}:{number}: broken link {raw} (no such file)")
                    continue
            else:
                dest = path
            if anchor and dest.is_file() and dest.suffix.lower() == ".md":
                anchors, _ = page(dest)
                if anchor not in anchors:
                    problems.append(f"{shown}:{number}: broken link {raw} (no heading #{anchor})")
    return problems


def tracked_markdown(root: Path):
    """README.md, docs/ and the other Markdown files of the repository."""
    try:
        out = subprocess.run(
            ["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.md"],
            cwd=root, capture_output=True, text=True, check=True,
        ).stdout.split()
        found = [root / p for p in out]
    except (OSError, subprocess.CalledProcessError):
        found = list(root.rglob("*.md"))
    return sorted(
        p for p in found
        if p.is_file() and not SKIPPED_DIRS.intersection(p.relative_to(root).parts)
    )


def self_test() -> int:
    """Plants a missing file and a missing anchor; both must be caught, the good links not."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "docs").mkdir()
        (root / "README.md").write_text(
            "# Top\n\n"
            "[ok](docs/page.md#the-heading-10) [ok](#top) [ok](docs/) [web](https://example.com/x)\n"
            "[gone](docs/missing.md)\n"
            "`[in code](nowhere.md)`\n"
            "```\n[in a fence](nowhere.md)\n# not a heading\n```\n"
            "[bad anchor](docs/page.md#no-such-heading)\n"
            "[fence heading](#not-a-heading)\n"
        )
        (root / "docs" / "page.md").write_text(
            "# The heading (10)!\n\n## `code` and more\n\n## Again\n\n## Again\n\n"
            "[ok](../README.md#top) [ok](#code-and-more) [ok](#again-1) [bad](#again-2)\n"
        )
        got = check([root / "README.md", root / "docs" / "page.md"], root)
    want = [
        "README.md:4: broken link docs/missing.md (no such file)",
        "README.md:10: broken link docs/page.md#no-such-heading (no heading #no-such-heading)",
        "README.md:11: broken link #not-a-heading (no heading #not-a-heading)",
        "docs/page.md:9: broken link #again-2 (no heading #again-2)",
    ]
    slugs = {
        "Admission (Layer 1)": "admission-layer-1",
        "On a host with a GPU: scripts/gpu-smoke.sh": "on-a-host-with-a-gpu-scriptsgpu-smokesh",
        "`gpuq doctor`": "gpuq-doctor",
        "Burst throughput against dockerd's own floor": "burst-throughput-against-dockerds-own-floor",
        "VRAM truth: declared vs observed": "vram-truth-declared-vs-observed",
        "Logs from any node: forwarded, not shipped": "logs-from-any-node-forwarded-not-shipped",
    }
    bad_slugs = [f"{h!r} -> {slug(h)!r}, want {s!r}" for h, s in slugs.items() if slug(h) != s]
    if got != want or bad_slugs:
        print("check-links self-test failed", file=sys.stderr)
        print("caught:\n  " + "\n  ".join(got), file=sys.stderr)
        print("expected:\n  " + "\n  ".join(want), file=sys.stderr)
        for line in bad_slugs:
            print("slug: " + line, file=sys.stderr)
        return 1
    print(f"check-links self-test: the {len(want)} planted broken links caught, the good ones pass")
    return 0


def main(argv) -> int:
    if argv == ["--self-test"]:
        return self_test()
    if any(a.startswith("-") for a in argv):
        print("usage: check-links.py [--self-test | FILE.md …]", file=sys.stderr)
        return 2
    files = [Path(a).resolve() for a in argv] or tracked_markdown(ROOT)
    problems = check(files, ROOT)
    for line in problems:
        print(line)
    if problems:
        sys.stdout.flush()
        print(f"{len(problems)} broken link(s) in {len(files)} Markdown files", file=sys.stderr)
        return 1
    print(f"links: {len(files)} Markdown files, every relative link and anchor resolves")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
