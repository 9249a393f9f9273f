"""Earlier measurements of a report section, from the report's own git history.

A section of ``docs/paper-reproduction.md`` whose experiment has no point in the current result
store is never dropped in silence (:mod:`~dkmsks.bench.paper_report`): it is either copied from
the newest commit whose report measured it, with that commit and its dates printed above it and
its plots restored from the same commit, or the report fails. This module finds that commit.
Nothing here measures; it reads ``git log`` and ``git show``.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

#: Text that marks a section as not measured by its report: the placeholder reports wrote before
#: sections were carried over, and the banner of a carried-over copy (whose original is older).
PLACEHOLDERS = ("Not regenerated in this run", "<!-- older:")
_HEADING = re.compile(r"^## (.+)$", re.M)
_IMAGE = re.compile(r"!\[([^\]]*)\]\(([^)\s]+\.png)\)")
_GENERATED_ON = re.compile(r"\bon (\d{4}-\d\d-\d\d \d\d:\d\d UTC)")
_MEASURED = re.compile(r"\(measured at commit (.+?)\); do not edit")


@dataclass(frozen=True)
class Older:
    """A section as an earlier commit's report had it."""

    commit: str
    committed: str  # the commit's date (ISO)
    generated: str  # when that report was generated, from its title line ("" when it does not say)
    measured: str  # that report's "measured at commit ..." clause ("" when it does not say)
    title: str
    body: str  # the section without its heading


def _git(repo: Path, *args: str) -> str | None:
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=False)
    return done.stdout if done.returncode == 0 else None


def sections(text: str) -> dict[str, str]:
    """The ``## `` sections of a markdown report: heading text -> body (without the heading)."""
    heads = list(_HEADING.finditer(text))
    return {m.group(1).strip(): text[m.end():heads[i + 1].start() if i + 1 < len(heads) else len(text)].strip("\n")
            for i, m in enumerate(heads)}


def section_key(title: str) -> str:
    """What identifies a section across wordings: its title up to the colon (``Figure 8``,
    ``Table 2``, ``Spark pipeline (workers = Spark tasks)``)."""
    return title.split(":", 1)[0].strip()


class History:
    """The committed versions of one report file, newest first (its repository found from its
    path; an empty history outside a repository or for an uncommitted file)."""

    def __init__(self, docs: Path) -> None:
        self.docs = docs.resolve()
        top = _git(self.docs.parent, "rev-parse", "--show-toplevel")
        self.repo = Path(top.strip()) if top else None
        self.rel = str(self.docs.relative_to(self.repo)) if self.repo and self.docs.is_relative_to(self.repo) else None
        self._texts: dict[str, str | None] = {}

    def commits(self) -> Iterator[tuple[str, str]]:
        """(commit, ISO date) of every commit that changed the report, newest first."""
        if self.repo is None or self.rel is None:
            return
        out = _git(self.repo, "log", "--format=%H%x09%cI", "--", self.rel) or ""
        for line in out.splitlines():
            commit, _, date = line.partition("\t")
            yield commit, date

    def text(self, commit: str) -> str | None:
        """The report as ``commit`` had it."""
        if commit not in self._texts:
            self._texts[commit] = _git(self.repo, "show", f"{commit}:{self.rel}") if self.repo else None
        return self._texts[commit]

    def _section(self, commit: str, key: str) -> tuple[str, str] | None:
        for head, body in sections(self.text(commit) or "").items():
            if section_key(head) == key:
                return head, body
        return None

    def find(self, title: str) -> Older | None:
        """The newest version of the section titled like ``title`` (same :func:`section_key`)
        that its report measured, named by the oldest commit that has it word for word (the
        commit that wrote it, not a later one that changed the report elsewhere), or ``None``."""
        key = section_key(title)
        found: tuple[str, str, str, str] | None = None  # commit, date, heading, body
        for commit, date in self.commits():
            got = self._section(commit, key)
            if found is not None:
                if got is None or got[1] != found[3]:
                    break
                found = (commit, date, *got)
            elif got is not None and not any(p in got[1] for p in PLACEHOLDERS):
                found = (commit, date, *got)
        if found is None:
            return None
        commit, date, head, body = found
        first = (self.text(commit) or "").split("\n## ", 1)[0]
        generated = _GENERATED_ON.search(first)
        measured = _MEASURED.search(first)
        return Older(commit=commit, committed=date, generated=generated.group(1) if generated else "",
                     measured=measured.group(1) if measured else "", title=head, body=body)

    def restore_images(self, older: Older, img: Path, docs: Path) -> str:
        """``older.body`` with each plot it shows restored from its commit into ``img/older``
        and the link pointing there; a plot the commit does not hold keeps its link text and
        says so."""
        assert self.repo is not None and self.rel is not None
        src_dir = Path(self.rel).parent
        out_dir = img / "older"

        def restore(m: re.Match[str]) -> str:
            alt, link = m.group(1), m.group(2)
            path = (src_dir / link).as_posix()
            blob = subprocess.run(["git", "-C", str(self.repo), "show", f"{older.commit}:{path}"],
                                  capture_output=True, check=False)
            if blob.returncode != 0:
                return f"{alt} (plot `{link}` not in commit `{older.commit[:10]}`)"
            out_dir.mkdir(parents=True, exist_ok=True)
            target = out_dir / f"{older.commit[:10]}-{Path(link).name}"
            target.write_bytes(blob.stdout)
            try:
                shown = target.resolve().relative_to(docs.parent.resolve()).as_posix()
            except ValueError:
                shown = str(target)
            return f"![{alt}]({shown})"

        return _IMAGE.sub(restore, older.body)
