"""Files perf4sight writes and reads: written whole or not at all; a missing, malformed or non-UTF-8 file is an error naming it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from perf4sight.errors import DataNotFoundError, NetworkError
from perf4sight.files import remove_stale_temporaries, replaced, write_text
from perf4sight.networks.spec import read_spec


def test_non_utf8_spec_is_the_invalid_json_error(tmp_path: Path) -> None:
    path = tmp_path / "tinynet_0.json"
    path.write_bytes(json.dumps({"name": "r\u00e9seau"}, ensure_ascii=False).encode("latin-1"))
    with pytest.raises(NetworkError) as info:
        read_spec(path)
    assert str(info.value) == f"{path}: not valid JSON: not UTF-8 text (invalid continuation byte at byte 11)"


def test_missing_and_malformed_files_name_the_file(tmp_path: Path) -> None:
    path = tmp_path / "spec.json"
    with pytest.raises(DataNotFoundError, match=rf"^architecture spec not found: {re.escape(str(path))}$"):
        read_spec(path)
    path.write_text("{")
    with pytest.raises(NetworkError, match=rf"^{re.escape(str(path))}: not valid JSON: "):
        read_spec(path)


def test_a_write_that_fails_leaves_the_old_file(tmp_path: Path) -> None:
    path = tmp_path / "spec.json"
    write_text(path, '{"name": "old"}\n')
    with pytest.raises(RuntimeError), replaced(path) as temporary:
        temporary.write_text('{"name": "ha')  # stopped part-way
        raise RuntimeError("stopped")
    assert path.read_text() == '{"name": "old"}\n' and [p.name for p in tmp_path.iterdir()] == ["spec.json"]
    write_text(path, '{"name": "new"}\n')
    assert path.read_text() == '{"name": "new"}\n'


def test_temporaries_of_ended_writers_are_removed_and_a_live_ones_kept(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    ended = int(subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                               text=True, check=True).stdout)
    stale = tmp_path / f".spec.json.{ended}.tmp"
    other = tmp_path / f".other.csv.{ended}.tmp"
    live = tmp_path / f".spec.json.{os.getppid()}.tmp"  # a running process's write in progress
    for path in (stale, other, live):
        path.write_text("half")
    write_text(tmp_path / "spec.json", "{}\n")  # a write of spec.json clears its own leftovers
    assert not stale.exists() and other.exists() and live.exists()
    assert remove_stale_temporaries(tmp_path) == [other]  # a whole folder's
    assert live.exists() and (tmp_path / "spec.json").read_text() == "{}\n"
