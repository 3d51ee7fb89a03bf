"""The README is a short manual whose links resolve, and nothing in the repository points outside it.

Rules: README.md has at most ``README_MAX_LINES`` lines; every relative link in README.md and docs/
resolves to a file or directory of the repository; no tracked file refers to the development
machine's working notes (``/work/shared``, ``nki.md``, ``design.md``): facts the code relies on are
written into docs/ and cite public sources; result pages carry no development history (commit
hashes, "this round").
"""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README_MAX_LINES = 350
#: [text](target) not preceded by "!" is a link; images are links too for this purpose
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
OUTSIDE = re.compile(r"/work/shared|\bnki\.md\b|\bdesign\.md\b")


def _markdown_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def relative_links(text: str) -> list[str]:
    """Targets of the relative links of a markdown text (anchors and query strings dropped; code
    blocks and inline code are not markdown)."""
    text = re.sub(r"`[^`\n]*`", "", re.sub(r"```.*?```", "", text, flags=re.S))
    out = []
    for target in LINK.findall(text):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue  # http:, https:, mailto: ... and in-page anchors
        out.append(target.split("#", 1)[0].split("?", 1)[0])
    return [t for t in out if t]


def test_readme_is_short():
    n = len((ROOT / "README.md").read_text().splitlines())
    assert n <= README_MAX_LINES, f"README.md has {n} lines (at most {README_MAX_LINES}): move details to docs/"


@pytest.mark.parametrize("doc", _markdown_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(doc):
    missing = [t for t in relative_links(doc.read_text()) if not (doc.parent / t).exists()]
    assert not missing, f"{doc.relative_to(ROOT)}: links to missing files {missing}"


def test_link_finder_sees_relative_links_and_skips_urls():
    text = ("[a](docs/x.md) [b](https://e.org/y.md) [c](#anchor) [d](../z.md#sec) ![i](img.png) "
            "`k[n](args)`\n```\n[e](code.md)\n```")
    assert relative_links(text) == ["docs/x.md", "../z.md", "img.png"]


def _tracked_files() -> list[Path]:
    try:
        out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
        return [ROOT / p for p in out.splitlines()]
    except (OSError, subprocess.CalledProcessError):  # not a git checkout: every file but caches
        return [p for p in ROOT.rglob("*") if p.is_file() and not any(
            part.startswith(".") or part in ("__pycache__", "node_modules") for part in p.relative_to(ROOT).parts)]


def test_no_file_refers_to_notes_outside_the_repository():
    me = Path(__file__).resolve()
    bad = []
    for path in _tracked_files():
        if path.resolve() == me or not path.is_file():
            continue
        try:
            text = path.read_text()
        except (UnicodeDecodeError, OSError):
            continue
        bad += [f"{path.relative_to(ROOT)}:{i}" for i, line in enumerate(text.splitlines(), 1) if OUTSIDE.search(line)]
    assert not bad, f"references to working notes outside the repository: {bad}"


def test_result_pages_carry_no_development_history():
    history = re.compile(r"\bcommit `?[0-9a-f]{7,40}\b|`[0-9a-f]{7,40}`|\bthis round\b|\bbranch `", re.I)
    bad = [f"{p.relative_to(ROOT)}:{i}: {line.strip()[:80]}"
           for p in sorted((ROOT / "docs" / "results").glob("*.md"))
           for i, line in enumerate(p.read_text().splitlines(), 1) if history.search(line)]
    assert not bad, bad
