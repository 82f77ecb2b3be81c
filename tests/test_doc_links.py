"""Every relative link in the README and the docs leads somewhere: the file exists, and an
anchor (`file.md#heading`) names a heading of that file, as GitHub makes a heading's anchor.
The docs cite each other by section hundreds of times; a renamed heading would otherwise
break them silently."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FENCE = re.compile(r"^(```|~~~).*?^\1", flags=re.M | re.S)
LINK = re.compile(r"\]\(([^)\s]+)\)")


def markdown_files(root: Path) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").glob("*.md")),
            *sorted((root / "minieagle").rglob("*.md"))]  # fmt: skip


def heading_anchors(path: Path) -> set[str]:
    """The anchors of a Markdown file's headings, as GitHub writes them: the heading's text
    (code and link markup dropped) lower-cased, every character but letters, digits, `_`, `-`
    and spaces removed, spaces turned to `-`; a repeated anchor gains -1, -2, ..."""
    anchors, seen = set(), {}
    for line in FENCE.sub("", path.read_text(encoding="utf-8")).splitlines():
        match = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not match:
            continue
        text = re.sub(r"`([^`]*)`", r"\1", match.group(1))
        text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
        slug = re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        anchors.add(slug if count == 0 else f"{slug}-{count}")
    return anchors


def broken_links(path: Path) -> list[str]:
    """The relative links of `path` (outside code blocks) whose file is missing, or whose
    anchor names no heading of the Markdown file it points to."""
    broken = []
    for target in LINK.findall(FENCE.sub("", path.read_text(encoding="utf-8"))):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto: ...
            continue
        file, _, anchor = target.partition("#")
        resolved = (path.parent / file).resolve() if file else path.resolve()
        if not resolved.exists():
            broken.append(f"{target} (no such file)")
        elif anchor and resolved.suffix == ".md" and anchor not in heading_anchors(resolved):
            broken.append(f"{target} (no such heading)")
    return broken


def test_every_relative_link_in_the_docs_leads_somewhere():
    files = markdown_files(ROOT)
    assert len(files) > 10
    broken = {str(f.relative_to(ROOT)): b for f in files if (b := broken_links(f))}
    assert not broken, broken


def test_the_link_check_catches_a_missing_file_and_a_missing_heading(tmp_path):
    (tmp_path / "other.md").write_text("# Title\n\n## Step 18's head (2026-12-05, morning)\n\n"
                                       "## Title\n")  # fmt: skip
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](other.md#step-18s-head-2026-12-05-morning) [ok](other.md#title-1) [ok](#here)\n"
        "[ok](https://example.com/x) [bad](missing.md) [bad](other.md#step-18)\n"
        "# Here\n```\n[not a link](nowhere.md)\n```\n"
    )
    assert broken_links(page) == ["missing.md (no such file)", "other.md#step-18 (no such heading)"]
    assert heading_anchors(tmp_path / "other.md") == {"title", "step-18s-head-2026-12-05-morning",
                                                      "title-1"}  # fmt: skip
