"""The prose of the generated reports, kept in templates and filled with computed numbers.

``templates/<report>.md`` (a script's: ``bench/templates/<script>.md``) holds named blocks, each
starting at a line ``<!-- block: NAME -->``. A block is a :class:`string.Template`: ``$name``
placeholders, ``$$`` for a dollar sign. The report code computes the numbers, formats them as
strings and chooses the blocks: a statement that holds only for some runs (a trend that grows,
a target met) has a block of its own, picked by a condition computed from the data. Tables of
numbers are laid out by the code; every sentence is in a template.

A paragraph, a bullet or a table row may be wrapped over several lines in a template (a
continuation line must not start like a markdown element: ``| ``, ``#``, ``- ``, ``![``); it is
joined into one line, as in the rest of the generated docs.
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources
from pathlib import Path
from string import Template

_BLOCK = re.compile(r"^<!-- block: ([\w.]+) -->$", re.M)
#: Lines that start a markdown element of their own (a table row, a heading, a bullet, an
#: image) rather than continue a paragraph.
_STARTS_ELEMENT = ("| ", "|-", "#", "- ", "![", "<!--")


def _unwrap(text: str) -> str:
    """Join each wrapped paragraph, bullet or table row into one line (blank lines separate)."""
    lines: list[str] = []
    for raw in text.strip("\n").splitlines():
        line = raw.strip()
        if lines and lines[-1] and line and not line.startswith(_STARTS_ELEMENT):
            lines[-1] += " " + line
        else:
            lines.append(line)
    return "\n".join(lines)


class Prose:
    """The blocks of one template file; ``prose(name, **values)`` fills a block."""

    def __init__(self, text: str) -> None:
        parts = _BLOCK.split(text)
        self.blocks = {name: Template(_unwrap(body)) for name, body in zip(parts[1::2], parts[2::2], strict=True)}

    @classmethod
    @cache
    def load(cls, report: str) -> Prose:
        """The blocks of ``templates/<report>.md``."""
        return cls((resources.files("dkmsks.bench") / "templates" / f"{report}.md").read_text(encoding="utf-8"))

    @classmethod
    def read(cls, path: Path) -> Prose:
        """The blocks of a template outside the package (a script's, in ``bench/templates``)."""
        return cls(path.read_text(encoding="utf-8"))

    def __call__(self, block: str, **values: object) -> str:
        """The text of template block ``block`` with ``values`` substituted (every placeholder must get one)."""
        try:
            template = self.blocks[block]
        except KeyError:
            raise KeyError(f"template block {block!r} is missing") from None
        return template.substitute({k: str(v) for k, v in values.items()})

    def status(self, ok: bool) -> str:
        """Whether a target is met, in the template's words: its block ``status.met`` or ``status.not_met``."""
        return self("status.met" if ok else "status.not_met")
