"""Results tables, the one way every launcher writes them: a Markdown table (for the terminal
and docs) and a CSV file of the same rows (for scripts), written atomically side by side."""
from __future__ import annotations

import csv
import io
import os
from typing import Any, Iterable, Sequence

from agents.files import atomic_write_text


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[Any]], numbers: bool = False) -> list[str]:
    """The lines of a Markdown table: ``header``, then one line per row (cells as ``str``);
    with ``numbers``, every column but the first is aligned right."""
    lines = ["| " + " | ".join(header) + " |", "| --- |" + (" ---: |" if numbers else " --- |") * (len(header) - 1)]
    return lines + ["| " + " | ".join(map(str, row)) + " |" for row in rows]


def csv_text(fields: Sequence[str], rows: Iterable[dict[str, Any]]) -> str:
    """CSV text: a header of ``fields``, then each row's values of them (others left out)."""
    text = io.StringIO()
    writer = csv.DictWriter(text, fields, extrasaction="ignore")
    writer.writeheader()
    writer.writerows(rows)
    return text.getvalue()


def write_results(directory: str, stem: str, *, rows: list[dict[str, Any]], fields: Sequence[str],
                  markdown: str) -> tuple[str, str]:
    """``directory/stem.csv`` (``rows`` by ``fields``) and ``directory/stem.md`` (``markdown``);
    prints the Markdown and where both went, and returns their paths."""
    csv_path, md_path = (os.path.join(directory, f"{stem}.{ext}") for ext in ("csv", "md"))
    atomic_write_text(csv_path, csv_text(fields, rows))
    atomic_write_text(md_path, markdown.rstrip("\n") + "\n")
    print(markdown, flush=True)
    print(f"wrote {csv_path} and {md_path}", flush=True)
    return csv_path, md_path
