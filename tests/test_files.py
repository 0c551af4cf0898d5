"""Files perf4sight writes and reads: written whole or not at all; a missing, malformed or non-UTF-8 file is an error naming it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from perf4sight.errors import DataNotFoundError, NetworkError
from perf4sight.files import current_file, remove_stale_temporaries, replaced, write_text, write_together
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


# Writes sets of three files, each holding its set's number many times over, until killed.
SET_WRITER = """
import sys
from pathlib import Path
from perf4sight.files import write_together
folder = Path(sys.argv[1])
number = int(sys.argv[2])
while True:
    number += 1
    write_together({folder / name: (str(number) + "\\n").encode() * 200_000 for name in ("a.skops", "a.json", "b.skops")})
"""


def _set_read(folder: Path) -> set[bytes]:
    """The numbers the set's files hold, as a reader finds them."""
    return {current_file(folder / name).read_bytes().split(b"\n", 1)[0] for name in ("a.skops", "a.json", "b.skops")}


@pytest.mark.slow
def test_a_set_of_files_killed_at_any_moment_reads_as_one_set(tmp_path: Path) -> None:
    import os
    import random
    import signal
    import subprocess
    import sys
    import time

    write_together({tmp_path / name: b"0\n" for name in ("a.skops", "a.json", "b.skops")})
    seen = set()
    for kill in range(12):
        writer = subprocess.Popen([sys.executable, "-c", SET_WRITER, str(tmp_path), str(1000 * kill)])
        time.sleep(1.0 + random.random() * 0.5)  # the interpreter's start, then a few sets
        os.kill(writer.pid, signal.SIGKILL)
        writer.wait()
        found = _set_read(tmp_path)
        assert len(found) == 1, f"kill {kill}: a mix of sets {found}"
        seen.add(found.pop())
    assert len(seen) == 12  # each kill left a set of its own run
    write_together({tmp_path / name: b"last\n" for name in ("a.skops", "a.json", "b.skops")})
    assert _set_read(tmp_path) == {b"last"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json", "a.skops", "b.skops"]


def test_a_set_listed_but_not_yet_in_place_reads_as_the_new_one_and_is_finished_by_the_next_write(
        tmp_path: Path) -> None:
    write_together({tmp_path / "a.skops": b"old", tmp_path / "a.json": b"old"})
    # as a writer killed between its list and its renames leaves the folder
    (tmp_path / ".a.skops.staged").write_bytes(b"new")
    (tmp_path / "a.json").write_bytes(b"new")  # renamed before the kill
    (tmp_path / ".replacing.json").write_text('["a.skops", "a.json"]')
    assert current_file(tmp_path / "a.skops").read_bytes() == current_file(tmp_path / "a.json").read_bytes() == b"new"
    # a writer killed before its list: its staged files are no set of the folder's
    (tmp_path / ".b.skops.staged").write_bytes(b"half")
    write_together({tmp_path / "c.skops": b"c"})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json", "a.skops", "c.skops"]
    assert (tmp_path / "a.skops").read_bytes() == b"new"


def test_a_set_list_cannot_move_files_out_of_its_folder(tmp_path: Path) -> None:
    folder = tmp_path / "models"
    folder.mkdir()
    (folder / "..staged").write_bytes(b"x")
    (folder / ".replacing.json").write_text('["../outside", "..", "sub/a.skops", 5]')
    write_together({folder / "a.skops": b"a"})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["models"]
    assert sorted(p.name for p in folder.iterdir()) == ["a.skops"]
