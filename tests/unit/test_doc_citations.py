"""The repository stands alone: code, tests, manifests and docs cite only the project's own
documents, and every citation resolves.

- No reference to a document the repository does not hold: a product specification ("SPEC §n",
  SPEC.md), upstream notes, an issue tracker ("issue 12"), a sibling directory of the checkout.
- Every `docs/<page>.md#<section>` (and `bench/<page>.md#<section>`) names a page that exists and a
  heading on it (anchors as GitHub makes them), and so does every relative link between the pages
  of docs/. A section is cited by its anchor, not by its quoted title (`docs/operations.md, "Security"`
  breaks silently when the heading changes).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("app", "tests", "bench", "docs", "manifests", "charts", "scripts", "examples", "README.md",
           "CHANGELOG.md", "Dockerfile", "pyproject.toml")
TEXT_SUFFIXES = {".py", ".md", ".yaml", ".yml", ".sh", ".toml", ".txt", ".tpl", ".cfg", ".ini", ""}

FORBIDDEN = {
    r"\bSPEC\b": "the product specification is not part of the repository: cite docs/<page>.md#<section>",
    r"\bNOTES\b|NOTES-upstream": "upstream notes are not part of the repository: state the fact in docs/ and cite it",
    r"(?i)\bissues?\s*#?\s*\d+|\(issue:": "issue numbers point at a tracker outside the repository: say what, not where",
    r"\.\./shared/|/work/shared|model-deployment-configuration": "a document outside the checkout",
    r"(?i)\bthe (user's )?description('s)?\b(?! of)": "the user's description is not part of the repository: cite docs/",
}
# Outside references that are inputs, not documents: each with why.
ALLOWED = {
    "../shared/third_party": "Metacontroller's release tarball, a build input of the e2e control plane",
}
# A `docs/...md` path that is not one of ours: each with why.
UPSTREAM_PATHS = {
    "docs/features/mooncake_connector_usage.md": "a page of vLLM's repository, cited as a research source",
}
CITATION = re.compile(r"(?<![\w/.-])((?:docs|bench)/[\w./-]+\.md)(?:#([\w-]+))?")
QUOTED_SECTION = re.compile(r"(?<![\w/.-])(?:docs|bench)/[\w./-]+\.md,? \"")
RELATIVE_LINK = re.compile(r"\]\(([\w./-]*\.md)?(?:#([\w-]+))?\)")
THIS = Path(__file__).resolve()


def scanned_files() -> list[Path]:
    out = []
    for entry in SCANNED:
        path = ROOT / entry
        candidates = [path] if path.is_file() else sorted(path.rglob("*")) if path.is_dir() else []
        for candidate in candidates:
            if candidate.is_file() and candidate.suffix in TEXT_SUFFIXES and candidate.resolve() != THIS \
                    and "__pycache__" not in candidate.parts and candidate.name != "Chart.lock":
                out.append(candidate)
    return out


def lines(path: Path) -> list[str]:
    try:
        return path.read_text().splitlines()
    except UnicodeDecodeError:
        return []


def anchor(heading: str) -> str:
    """GitHub's anchor of a Markdown heading: markup and punctuation dropped, lower case, spaces to dashes."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip())
    text = re.sub(r"[^\w\- ]", "", text.lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    fenced = False
    for line in lines(page):
        if line.startswith("```"):
            fenced = not fenced
        if fenced:
            continue
        match = re.match(r"#{1,6}\s+(.*)", line)
        if not match:
            continue
        base = anchor(match.group(1))
        count = seen.get(base, 0)
        seen[base] = count + 1
        out.add(base if count == 0 else f"{base}-{count}")
    return out


def test_anchor_matches_github() -> None:
    assert anchor("Settings (environment of the service)") == "settings-environment-of-the-service"
    assert anchor("The queues (`manifests/kueue/`)") == "the-queues-manifestskueue"
    assert anchor("What the operator renders on vLLM (`app/engines/vllm.py`)") == \
        "what-the-operator-renders-on-vllm-appenginesvllmpy"
    assert anchor("The render's tenant guard") == "the-renders-tenant-guard"


def test_no_reference_to_a_document_outside_the_repository() -> None:
    found = []
    for path in scanned_files():
        for number, line in enumerate(lines(path), 1):
            text = line
            for allowed in ALLOWED:
                text = text.replace(allowed, "")
            for pattern, why in FORBIDDEN.items():
                if re.search(pattern, text):
                    found.append(f"{path.relative_to(ROOT)}:{number}: {why}: {line.strip()[:120]}")
    assert not found, "\n".join(found)


def _check(page: str, section: str | None, where: str, problems: list[str]) -> None:
    target = ROOT / page
    if not target.is_file():
        problems.append(f"{where}: {page} does not exist")
    elif section and section not in anchors(target):
        problems.append(f"{where}: {page} has no section #{section}")


def test_every_docs_citation_resolves() -> None:
    problems: list[str] = []
    for path in scanned_files():
        for number, line in enumerate(lines(path), 1):
            where = f"{path.relative_to(ROOT)}:{number}"
            for match in CITATION.finditer(line):
                if match.group(1) in UPSTREAM_PATHS:
                    continue
                _check(match.group(1), match.group(2), where, problems)
            if QUOTED_SECTION.search(line):
                problems.append(f"{where}: cite the section as <page>.md#<anchor>, not by its quoted title: "
                                f"{line.strip()[:120]}")
    assert not problems, "\n".join(problems)


def test_links_between_docs_pages_resolve() -> None:
    problems: list[str] = []
    for path in sorted((ROOT / "docs").rglob("*.md")):
        for number, line in enumerate(lines(path), 1):
            for match in RELATIVE_LINK.finditer(line):
                page, section = match.group(1), match.group(2)
                if not page and not section:
                    continue
                target = (path.parent / page).resolve() if page else path
                where = f"{path.relative_to(ROOT)}:{number}"
                if not target.is_file():
                    problems.append(f"{where}: {page} does not exist")
                elif section and section not in anchors(target):
                    problems.append(f"{where}: {target.relative_to(ROOT)} has no section #{section}")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("citation", ["docs/no-such-page.md#x", "docs/kueue.md#no-such-section",
                                      "bench/results.md#no-such-section"])
def test_a_broken_citation_is_caught(citation: str) -> None:
    match = CITATION.search(f"see {citation}")
    assert match is not None
    problems: list[str] = []
    _check(match.group(1), match.group(2), "here", problems)
    assert problems
