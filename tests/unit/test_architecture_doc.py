"""docs/architecture.md quotes the trainer's run and step from hpcbench/train/loop.py as the entry
point for a reader: the quotes must be the source as it is."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def quoted_blocks(page: Path) -> list[str]:
    """The ``text`` blocks of the page's Training section."""
    section = page.read_text().split("## Training: `hpcbench/train/`", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```text\n(.*?)```", section, flags=re.S)


def test_the_loop_quoted_in_the_architecture_page_is_the_source() -> None:
    source = (REPO / "hpcbench/train/loop.py").read_text()
    quotes = [b for b in quoted_blocks(REPO / "docs/architecture.md") if "hooks" in b]
    assert len(quotes) == 2, "the run and the step are quoted"
    for quote in quotes:
        assert quote in source, f"docs/architecture.md quotes loop.py as it is not:\n{quote}"
    assert source.index(quotes[0]) < source.index("def train_steps") < source.index(quotes[1])
