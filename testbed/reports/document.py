"""A report as a list of blocks, written once and rendered as Markdown and as HTML.

Blocks are headings, paragraphs (with Markdown's inline ``code`` and ``**bold**``) and
:class:`~testbed.reports.claim.Table` objects. Rendering is deterministic: the same
blocks give the same bytes, so a report regenerated from the same cells is identical.
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence
from dataclasses import dataclass

from testbed.reports import html_page
from testbed.reports.claim import Table


@dataclass(frozen=True)
class Heading:
    """A section heading (``level`` 1 is the title)."""

    text: str
    level: int = 2


@dataclass(frozen=True)
class Paragraph:
    """A paragraph; ``note`` marks a warning the HTML page highlights."""

    text: str
    note: bool = False


Block = Heading | Paragraph | Table


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _md_table(table: Table) -> list[str]:
    lines = [f"**{table.title}**", ""] if table.title else []
    lines += ["| " + " | ".join(_md_cell(c) for c in table.columns) + " |",
              "|" + "---|" * len(table.columns)]
    lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in table.rows]
    if table.note:
        lines += ["", table.note]
    return lines


def markdown(blocks: Sequence[Block]) -> str:
    """The blocks as one Markdown document."""
    parts: list[str] = []
    for block in blocks:
        if isinstance(block, Heading):
            parts.append("#" * block.level + " " + block.text)
        elif isinstance(block, Paragraph):
            parts.append(f"> {block.text}" if block.note else block.text)
        else:
            parts.append("\n".join(_md_table(block)))
    return "\n\n".join(parts) + "\n"


_CODE = re.compile(r"`([^`]+)`")
_BOLD = re.compile(r"\*\*([^*]+)\*\*")


def inline_html(text: str) -> str:
    """Markdown's inline ``code`` and ``**bold**`` as HTML, everything else escaped."""
    out = html.escape(text)
    out = _CODE.sub(lambda m: f"<code>{m.group(1)}</code>", out)
    return _BOLD.sub(lambda m: f"<strong>{m.group(1)}</strong>", out)


def page(blocks: Sequence[Block]) -> str:
    """The blocks as a self-contained HTML page (its title is the first level-1
    heading)."""
    title = next((b.text for b in blocks if isinstance(b, Heading) and b.level == 1),
                 "report")
    body: list[str] = []
    for block in blocks:
        if isinstance(block, Heading):
            if block.level > 1:
                body.append(f"<h{block.level}>{inline_html(block.text)}</h{block.level}>")
        elif isinstance(block, Paragraph):
            cls = ' class="note"' if block.note else ""
            body.append(f"<p{cls}>{inline_html(block.text)}</p>")
        else:
            if block.title:
                body.append(f"<p><strong>{html.escape(block.title)}</strong></p>")
            body.append(html_page.table(block.columns, block.rows))
            body += [f"<p>{inline_html(para)}</p>" for para in block.note.split("\n\n")
                     if para.strip()]
    return html_page.document(title, body)
