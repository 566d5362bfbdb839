"""The documentation keeps up with the code: every CLI command is documented, every link resolves.

Convention (docs/cli.md): each command has a heading of its own, ``### qvc <path>``, with the
command path exactly (``### qvc log``, ``### qvc remote add``; sub-groups such as ``qvc remote``
too), and the section under it (up to the next heading of level 1-3) names every option of
that command (``--max-count`` or, for short-only options, ``-D``). Headings of that form name
only commands that exist. The root command's own options appear anywhere in docs/cli.md.

Links: every relative Markdown link ``[text](target)`` in README.md, docs/*.md and
benchmarks/README.md (outside code blocks and code spans) points to an existing file or
directory, and an ``#anchor`` on a link to a Markdown file (or on the page itself) names one of
that page's headings, slugged the way GitHub slugs them. docs/README.md links to every page.
"""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

import click
import pytest

from qvc.cli import cli

ROOT = Path(__file__).resolve().parents[2]
CLI_DOC = ROOT / "docs" / "cli.md"
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "benchmarks" / "README.md"]

HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
FENCE = re.compile(r"^\s*(```|~~~)")
LINK = re.compile(r"!?\[(?:[^\]\\]|\\.)*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")


# -- the command tree ---------------------------------------------------------------------------


def walk(command: click.Command, path: tuple[str, ...]):
    """Every (path, command) under ``command``, sub-groups included, in ``--help`` order."""
    yield path, command
    if isinstance(command, click.Group):
        ctx = click.Context(command, info_name=path[-1])
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            if sub is not None and not sub.hidden:
                yield from walk(sub, (*path, name))


COMMANDS = {" ".join(path): command for path, command in walk(cli, ("qvc",))}


def option_names(command: click.Command) -> list[str]:
    """One name per visible option: its longest long name, else its short one (``-D``)."""
    names = []
    for param in command.params:
        if not isinstance(param, click.Option) or param.hidden:
            continue
        opts = [*param.opts, *param.secondary_opts]
        longs = [o for o in opts if o.startswith("--")]
        names.append(max(longs, key=len) if longs else opts[0])
    return names


def mentions(text: str, option: str) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", text) is not None


# -- Markdown -----------------------------------------------------------------------------------


def prose_lines(text: str):
    """(line number, line) outside fenced code blocks."""
    fenced = False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield number, line


def headings(text: str) -> list[tuple[int, str, int]]:
    """(level, text, line number) of every ATX heading outside code blocks."""
    found = []
    for number, line in prose_lines(text):
        m = HEADING.match(line)
        if m:
            found.append((len(m.group(1)), m.group(2), number))
    return found


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: inline markup dropped, lower case, punctuation removed,
    spaces to hyphens."""
    text = re.sub(r"`([^`]*)`", r"\1", heading)
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"<[^>]+>", "", text).strip().lower()
    kept = "".join(c for c in text if c in " -_" or unicodedata.category(c)[0] in "LN")
    return kept.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for _, text, _ in headings(path.read_text(encoding="utf-8")):
        base = slug(text)
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def links(path: Path) -> list[tuple[int, str]]:
    found = []
    for number, line in prose_lines(path.read_text(encoding="utf-8")):
        for m in LINK.finditer(CODE_SPAN.sub("", line)):
            found.append((number, m.group(1)))
    return found


def sections(text: str) -> dict[str, str]:
    """Heading text -> the text under it, up to the next heading of level 1 to 3."""
    lines = text.splitlines()
    marks = [(level, title, number) for level, title, number in headings(text) if level <= 3]
    out = {}
    for i, (_, title, number) in enumerate(marks):
        end = marks[i + 1][2] - 1 if i + 1 < len(marks) else len(lines)
        out.setdefault(title, "\n".join(lines[number:end]))
    return out


# -- tests --------------------------------------------------------------------------------------


def test_the_command_tree_is_walked():
    assert "qvc log" in COMMANDS and "qvc remote" in COMMANDS and "qvc remote add" in COMMANDS
    assert len(COMMANDS) > 20


@pytest.mark.parametrize("name", sorted(n for n in COMMANDS if n != "qvc"))
def test_every_command_has_its_heading_in_cli_md(name):
    text = CLI_DOC.read_text(encoding="utf-8")
    titles = [title for level, title, _ in headings(text) if level == 3]
    assert name in titles, f"docs/cli.md has no '### {name}' heading"
    body = sections(text)[name]
    missing = [o for o in option_names(COMMANDS[name]) if not mentions(body, o)]
    assert not missing, f"docs/cli.md, section '### {name}', does not mention {', '.join(missing)}"


def test_global_options_are_documented():
    text = CLI_DOC.read_text(encoding="utf-8")
    missing = [o for o in option_names(cli) if not mentions(text, o)]
    assert not missing, f"docs/cli.md does not mention the global options {', '.join(missing)}"


def test_command_headings_name_real_commands():
    text = CLI_DOC.read_text(encoding="utf-8")
    stale = [title for _, title, _ in headings(text) if title.startswith("qvc ") and title not in COMMANDS]
    assert not stale, f"docs/cli.md documents commands that do not exist: {stale}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page):
    broken = []
    for number, target in links(page):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I) or target.startswith("//"):
            continue  # http:, https:, mailto:, ...
        file_part, _, anchor = target.partition("#")
        dest = (page.parent / file_part).resolve() if file_part else page
        where = f"{page.relative_to(ROOT)}:{number}: {target}"
        if not dest.exists():
            broken.append(f"{where} (no such file)")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{where} (no heading with anchor #{anchor})")
    assert not broken, "broken links:\n" + "\n".join(broken)


def test_every_docs_page_is_linked_from_the_index():
    index = {(ROOT / "docs" / target.partition("#")[0]).resolve() for _, target in links(ROOT / "docs" / "README.md")}
    orphans = [p.name for p in (ROOT / "docs").glob("*.md") if p.name != "README.md" and p.resolve() not in index]
    assert not orphans, f"docs/README.md does not link to {orphans}"
