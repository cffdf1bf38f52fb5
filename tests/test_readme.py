"""The README's Python examples run as written (those that need no API key)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)


def test_the_first_example_is_ten_lines_or_so() -> None:
    assert len(BLOCKS[0].strip().splitlines()) <= 12


@pytest.mark.parametrize("block", [b for b in BLOCKS if "openai:" not in b])
def test_readme_example_runs(block: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {}
    exec(compile(block, "README.md", "exec"), namespace)
    prompt = namespace["prompt"]
    assert isinstance(prompt, list) and prompt[0]["role"] == "system"
    assert list(tmp_path.glob("*.db"))
