"""The data rule of ``conftest.load_rows``, and the small copies it falls back to."""

from __future__ import annotations

import gzip
from pathlib import Path

import conftest
import pytest
from conftest import FIXTURES, load_rows

COPIED = {"taubench_airline_dev": 40, "openhands_example": 3}


def test_only_the_mit_data_sets_are_copied_and_they_stay_small() -> None:
    copies = {p.name for p in FIXTURES.glob("*.jsonl.gz")}
    assert copies == {f"{name}.jsonl.gz" for name in COPIED}
    assert sum(p.stat().st_size for p in FIXTURES.iterdir()) < 400_000
    for name, rows in COPIED.items():
        with gzip.open(FIXTURES / f"{name}.jsonl.gz", "rt", encoding="utf-8") as fh:
            assert sum(1 for _ in fh) == rows


@pytest.mark.parametrize("name", sorted(COPIED))
def test_a_copy_is_the_first_lines_of_the_shared_file(name: str) -> None:
    shared = conftest.DATA / f"{name}.jsonl"
    if not shared.exists():
        pytest.skip(f"{shared} is not here to compare with")
    copy = gzip.decompress((FIXTURES / f"{name}.jsonl.gz").read_bytes()).splitlines()
    with shared.open("rb") as fh:
        assert [next(fh).rstrip(b"\n") for _ in copy] == copy


@pytest.fixture
def no_shared_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(conftest, "DATA", tmp_path)
    monkeypatch.delenv("CI", raising=False)


@pytest.mark.usefixtures("no_shared_data")
def test_without_shared_data_the_copies_are_read() -> None:
    rows = load_rows("taubench_airline_dev", limit=40)
    assert len(rows) == 40
    assert load_rows("taubench_airline_dev") == rows
    assert load_rows("openhands_example", limit=2) == load_rows("openhands_example")[:2]


@pytest.mark.usefixtures("no_shared_data")
def test_without_shared_data_a_missing_set_or_too_few_rows_skip() -> None:
    with pytest.raises(pytest.skip.Exception, match="CONTEXTFOLD_DATA"):
        load_rows("locomo_dev", limit=1)
    with pytest.raises(pytest.skip.Exception, match="holds 40 rows"):
        load_rows("taubench_airline_dev", limit=41)


@pytest.mark.usefixtures("no_shared_data")
def test_under_ci_a_missing_set_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="locomo_dev"):
        load_rows("locomo_dev")
    assert len(load_rows("openhands_example")) == 3


def test_shared_data_wins_over_the_copies(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "openhands_example.jsonl").write_text('{"id": "mine"}\n', encoding="utf-8")
    monkeypatch.setattr(conftest, "DATA", tmp_path)
    assert load_rows("openhands_example") == [{"id": "mine"}]
