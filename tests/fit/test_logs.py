"""Reading profiler logs: the TX2 format, and errors that name the file and the line."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from perf4sight.errors import DataNotFoundError, LogFormatError
from perf4sight.fit import find_logs, read_gt_log, read_logs


def _copy(tx2_dir: Path, kind: str, name: str, dest: Path) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    return Path(shutil.copy(tx2_dir / kind / f"{name}-gt.csv", dest))


def test_reads_tx2_memory_and_latency_logs(tx2_dir):
    memory = read_gt_log(tx2_dir / "memory" / "googlenet_0-gt.csv", ["mem_used"])
    assert memory["passed"].dtype == bool and memory["bs"].dtype.kind == "i"
    assert memory["passed"].any() and not memory["passed"].all()
    assert (memory.loc[memory["passed"], "mem_used"] > 0).all()
    latency = read_gt_log(tx2_dir / "latency" / "googlenet_0-gt.csv", ["latency"])
    assert "mem_used" not in latency.columns
    # failed rows carry "None" latencies, read as NaN; passed rows have numbers
    assert latency.loc[~latency["passed"], "latency"].isna().all()
    assert latency.loc[latency["passed"], "latency"].notna().all()


def test_latency_log_lacks_the_memory_target(tx2_dir):
    path = tx2_dir / "latency" / "resnet18_0-gt.csv"
    with pytest.raises(LogFormatError, match=rf"{path}: line 1: missing column 'mem_used'"):
        read_gt_log(path, ["mem_used"])


def test_missing_column_names_file_and_line(tx2_dir, tmp_path):
    path = _copy(tx2_dir, "memory", "resnet18_0", tmp_path)
    lines = path.read_text().splitlines()
    # drop the `bs` column (the 9th) from every line
    path.write_text("\n".join("|".join(f for i, f in enumerate(line.split("|")) if i != 8) for line in lines) + "\n")
    with pytest.raises(LogFormatError, match=rf"{path}: line 1: missing column 'bs'"):
        read_gt_log(path, ["mem_used"])


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [(0, "maybe", "passed='maybe'"), (3, "lots", "mem_used='lots'"), (8, "-4", "bs='-4'"), (3, "None", "mem_used='None'")],
)
def test_malformed_row_names_file_and_line(tx2_dir, tmp_path, field, value, message):
    path = _copy(tx2_dir, "memory", "resnet18_0", tmp_path)
    lines = path.read_text().splitlines()
    fields = lines[4].split("|")
    assert fields[0] == "True"
    fields[field] = value
    lines[4] = "|".join(fields)
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(LogFormatError, match=rf"{path}: line 5: {message}"):
        read_gt_log(path, ["mem_used"])


def test_short_row_names_file_and_line(tx2_dir, tmp_path):
    path = _copy(tx2_dir, "latency", "squeezenet_10", tmp_path)
    lines = path.read_text().splitlines()
    lines[2] = lines[2].rsplit("|", 1)[0]
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(LogFormatError, match=rf"{path}: line 3: 6 fields, the header has 7"):
        read_gt_log(path, ["latency"])


def test_levels_that_match_nothing_list_the_paths_searched(tx2_dir, tmp_path):
    with pytest.raises(DataNotFoundError) as info:
        find_logs(["resnet18"], [1, 2], [tx2_dir / "memory", tmp_path])
    message = str(info.value)
    for searched in (tx2_dir / "memory" / "resnet18_1-gt.csv", tmp_path / "resnet18_2-gt.csv"):
        assert str(searched) in message


def test_a_network_without_logs_is_named_with_those_there(tx2_dir):
    with pytest.raises(DataNotFoundError, match=r"no profiling logs of 'resnt18' at levels \[0, 50\] in .*memory; "
                                                r"the logs there are of: googlenet, mobilenetv2, resnet18, squeezenet"):
        find_logs(["squeezenet", "resnt18"], [0, 50], [tx2_dir / "memory"])


def test_a_log_that_is_not_text_names_the_file(tmp_path):
    path = tmp_path / "squeezenet_0-gt.csv"
    path.write_bytes("passed|bs|model|latency\nTrue|2|squeezenet_0|1.0\n".encode("utf-16"))
    with pytest.raises(LogFormatError, match=rf"{path}: not UTF-8 text"):
        read_gt_log(path, ["latency"])


def test_read_logs_keeps_the_levels_found_and_tags_the_net(tx2_dir):
    logs = read_logs(["resnet18", "squeezenet"], [0, 50, 51], [tx2_dir / "memory"], ["mem_used"])
    assert set(logs["net"]) == {"resnet18", "squeezenet"}
    assert logs["log"].nunique() == 4
    assert set(logs["net_name"]) == {"resnet18", "squeezenet"}
