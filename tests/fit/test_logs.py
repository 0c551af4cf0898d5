"""Reading profiler logs: the format written here (the H200's in the repository) and the TX2's,
and errors that name the file and the line."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest
from repository_data import ZOO

from perf4sight.device.definitions import LATENCY, MEMORY
from perf4sight.device.logs import read_journal, write_gt
from perf4sight.device.test_config import ProfileTest
from perf4sight.errors import DataNotFoundError, LogFormatError
from perf4sight.fit import find_logs, read_gt_log, read_logs


def _copy(folder: Path, kind: str, name: str, dest: Path) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    return Path(shutil.copy(folder / kind / f"{name}-gt.csv", dest))


def _check_read(memory_log: Path, latency_log: Path) -> None:
    memory = read_gt_log(memory_log, [MEMORY])
    assert memory["passed"].dtype == bool and memory["bs"].dtype.kind == "i"
    assert memory["passed"].any() and not memory["passed"].all()
    assert (memory.loc[memory["passed"], "mem_used_mib"] > 0).all()
    latency = read_gt_log(latency_log, [LATENCY])
    assert "mem_used" not in memory.columns  # the log column, read under its name with unit
    assert "mem_used_mib" not in latency.columns
    # failed rows carry "None" latencies, read as NaN; passed rows have numbers
    assert latency.loc[~latency["passed"], "latency_ms"].isna().all()
    assert latency.loc[latency["passed"], "latency_ms"].notna().all()


def _out_of_memory_at_the_end(path: Path, column: str) -> None:
    """Append a failed row as the profiler writes one: its first row at twice the largest
    batch size, `False`, the measurement `None`."""
    lines = path.read_text().splitlines()
    header, fields = lines[0].split("|"), lines[1].split("|")
    fields[header.index("passed")], fields[header.index(column)] = "False", "None"
    fields[header.index("bs")] = str(2 * max(int(line.split("|")[header.index("bs")]) for line in lines[1:]))
    path.write_text("\n".join([*lines, "|".join(fields)]) + "\n")


def test_reads_memory_and_latency_logs(h200_dir, tmp_path):
    memory = _copy(h200_dir, "memory", "googlenet_0", tmp_path / "memory")
    latency = _copy(h200_dir, "latency", "googlenet_0", tmp_path / "latency")
    _out_of_memory_at_the_end(memory, MEMORY.column)
    _out_of_memory_at_the_end(latency, LATENCY.column)
    _check_read(memory, latency)


def test_reads_tx2_memory_and_latency_logs(tx2_dir):
    _check_read(tx2_dir / "memory" / "googlenet_0-gt.csv", tx2_dir / "latency" / "googlenet_0-gt.csv")


def test_latency_log_lacks_the_memory_target(h200_dir):
    path = h200_dir / "latency" / "resnet18_0-gt.csv"
    with pytest.raises(LogFormatError, match=rf"{path}: line 1: missing column 'mem_used'"):
        read_gt_log(path, [MEMORY])


def test_missing_column_names_file_and_line(h200_dir, tmp_path):
    path = _copy(h200_dir, "memory", "resnet18_0", tmp_path)
    lines = path.read_text().splitlines()
    # drop the `bs` column (the 9th) from every line
    path.write_text("\n".join("|".join(f for i, f in enumerate(line.split("|")) if i != 8) for line in lines) + "\n")
    with pytest.raises(LogFormatError, match=rf"{path}: line 1: missing column 'bs'"):
        read_gt_log(path, [MEMORY])


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [(0, "maybe", "passed='maybe'"), (3, "lots", "mem_used='lots'"), (8, "-4", "bs='-4'"), (8, "0x10", "bs='0x10'"),
     (3, "None", "mem_used='None'")],
)
def test_malformed_row_names_file_and_line(h200_dir, tmp_path, field, value, message):
    path = _copy(h200_dir, "memory", "resnet18_0", tmp_path)
    lines = path.read_text().splitlines()
    fields = lines[4].split("|")
    assert fields[0] == "True"
    fields[field] = value
    lines[4] = "|".join(fields)
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(LogFormatError, match=rf"{path}: line 5: {message}"):
        read_gt_log(path, [MEMORY])


def test_short_row_names_file_and_line(h200_dir, tmp_path):
    path = _copy(h200_dir, "latency", "squeezenet_30", tmp_path)
    lines = path.read_text().splitlines()
    lines[2] = lines[2].rsplit("|", 1)[0]
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(LogFormatError, match=rf"{path}: line 3: 10 fields, the header has 11"):
        read_gt_log(path, [LATENCY])


def test_levels_that_match_nothing_list_the_paths_searched(h200_dir, tmp_path):
    with pytest.raises(DataNotFoundError) as info:
        find_logs(["resnet18"], [1, 2], [h200_dir / "memory", tmp_path])
    message = str(info.value)
    for searched in (h200_dir / "memory" / "resnet18_1-gt.csv", tmp_path / "resnet18_2-gt.csv"):
        assert str(searched) in message


def test_a_network_without_logs_is_named_with_those_there(h200_dir):
    with pytest.raises(DataNotFoundError, match=r"no profiling logs of 'resnt18' at levels \[0, 30\] in .*memory; "
                                                r"the logs there are of: alexnet, googlenet, mnasnet, mobilenetv2, "
                                                r"resnet18, resnet50, squeezenet, vgg11$"):
        find_logs(["squeezenet", "resnt18"], [0, 30], [h200_dir / "memory"])


def test_a_log_that_is_not_text_names_the_file(tmp_path):
    path = tmp_path / "squeezenet_0-gt.csv"
    path.write_bytes("passed|bs|model|latency\nTrue|2|squeezenet_0|1.0\n".encode("utf-16"))
    with pytest.raises(LogFormatError, match=rf"{path}: line 1: not UTF-8 text"):
        read_gt_log(path, [LATENCY])


def test_read_logs_keeps_the_levels_found_and_tags_the_net(h200_dir):
    logs = read_logs(["resnet18", "squeezenet"], [0, 30, 31], [h200_dir / "memory"], [MEMORY])
    assert set(logs["net"]) == {"resnet18", "squeezenet"}
    assert logs["log"].nunique() == 4
    assert set(logs["net_name"]) == {"resnet18", "squeezenet"}


def test_repeated_tests_are_used_once_with_a_warning_and_empty_logs_named(h200_dir, tmp_path, capsys):
    logs = tmp_path / "memory"
    logs.mkdir()
    for level in (0, 60, 90):
        shutil.copy(h200_dir / "memory" / f"squeezenet_{level}-gt.csv", logs)
    once = read_logs(["squeezenet"], [0, 60], [logs], [MEMORY])
    rows = (logs / "squeezenet_60-gt.csv").read_text().splitlines()
    (logs / "squeezenet_60-gt.csv").write_text("\n".join(rows + rows[1:]) + "\n")  # two campaigns' rows
    (logs / "squeezenet_90-gt.csv").write_text(rows[0] + "\n")  # a header only
    capsys.readouterr()
    twice = read_logs(["squeezenet"], [0, 60, 90], [logs], [MEMORY])
    err = " ".join(capsys.readouterr().err.split())
    assert f"{len(rows) - 1} log rows repeat a test" in err and "squeezenet_90-gt.csv: no test rows" in err
    pd.testing.assert_frame_equal(twice.drop(columns="log"), once.drop(columns="log"))


def test_a_folder_in_a_logs_place_is_an_error(tmp_path):
    (tmp_path / "squeezenet_0-gt.csv").mkdir()
    with pytest.raises(LogFormatError, match=r"squeezenet_0-gt\.csv: not a file; a profiling log is expected there"):
        find_logs(["squeezenet"], [0], [tmp_path])


@pytest.mark.parametrize("spelling", ["", "None", "none", "nan", "NaN", "null", "-1", " -1 "])
def test_the_journal_and_the_gt_log_read_every_missing_spelling_alike(tmp_path, spelling):
    """A failed row's missing value reads as missing from the device's journal (resuming) and
    from the -gt file written from it (fingerprinting); a passed row without one is refused
    by the host, naming the file and line."""
    params = ProfileTest("memory", 4, "cifar10", "tinynet", "training", "/models/tinynet_50.py").params()
    journal = tmp_path / "memory" / "tinynet_50.csv"
    journal.parent.mkdir()
    header = "passed|mem_alloc|mem_reserved|mem_used|mem_avail|free|capacity|mem_context|status|error|params"
    journal.write_text(f"{header}\nFalse|{spelling}|1.0|{spelling}|||||error|out of memory|{params!r}\n")
    assert read_journal(journal)[0]["mem_used"] is None
    gt = write_gt(journal, "memory")
    frame = read_gt_log(gt, [MEMORY])
    assert frame["mem_used_mib"].isna().all() and frame["mem_reserved"].tolist() == [1.0]
    # the -gt file as the original wrote it: the spelling itself in the field
    lines = gt.read_text().splitlines()
    fields = lines[1].split("|")
    fields[3] = spelling
    gt.write_text("\n".join([lines[0], "|".join(fields)]) + "\n")
    assert read_gt_log(gt, [MEMORY])["mem_used_mib"].isna().all()
    fields[0] = "True"
    gt.write_text("\n".join([lines[0], "|".join(fields)]) + "\n")
    with pytest.raises(LogFormatError, match=rf"{gt}: line 2: mem_used=.*expected a number"):
        read_gt_log(gt, [MEMORY])


def _zoo_log(tmp_path: Path, kind: str = "memory", name: str = "alexnet_45") -> Path:
    return Path(shutil.copy(ZOO / kind / f"{name}-gt.csv", tmp_path))


def _set_field(path: Path, column: str, value: str, line: int = 2) -> None:
    lines = path.read_text().splitlines()
    header = lines[0].split("|")
    fields = lines[line - 1].split("|")
    fields[header.index(column)] = value
    lines[line - 1] = "|".join(fields)
    path.write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize(("column", "value", "message"), [
    ("net_name", "resnet18", "net_name='resnet18', but the file holds the tests of net_name='alexnet'"),
    ("model", "benchmarks/data/cpu_zoo/models/vgg11_45.json", "model='.*vgg11_45.json', but the file holds the tests "
                                                               "of model='alexnet_45'"),
    ("model", "alexnet_90.json", "model='alexnet_90.json', but the file holds the tests of model='alexnet_45'"),
    ("test_var", "latency", "test_var='latency', but the file holds the tests of test_var='memory'"),
    ("stage", "Training", "stage='Training', expected one of training, inference"),
    ("stage", "train", "stage='train', expected one of training, inference"),
    ("mem_used", "0x10", "mem_used='0x10', expected a decimal number"),
    ("mem_used", "1_000", "mem_used='1_000', expected a decimal number"),
    ("mem_used", "1e300", "mem_used='1e300', more than any device"),
    ("mem_used", "20000000", "mem_used='20000000', more than any device"),
    ("mem_used", "inf", "mem_used='inf', expected a Python literal"),
    ("mem_used", "nan", "mem_used='nan', expected a number"),
    ("mem_used", "True", "mem_used='True', expected a decimal number"),
])
def test_a_row_that_disagrees_with_its_file_or_has_no_decimal_figure_is_refused(tmp_path, column, value, message):
    path = _zoo_log(tmp_path)
    _set_field(path, column, value, line=3)
    with pytest.raises(LogFormatError, match=rf"{path}: line 3: {message}"):
        read_logs(["alexnet"], [45], [tmp_path], [MEMORY])


@pytest.mark.parametrize(("value", "message"), [("0x1F", "expected a decimal number"),
                                                ("1e12", "more than any device"), ("-inf", "expected a Python literal")])
def test_a_latency_that_is_no_decimal_figure_within_a_day_is_refused(tmp_path, value, message):
    path = _zoo_log(tmp_path, "latency")
    _set_field(path, "latency", value)
    with pytest.raises(LogFormatError, match=rf"{path}: line 2: latency='{value}', {message}"):
        read_logs(["alexnet"], [45], [tmp_path], [LATENCY])


def test_every_log_kept_in_the_repository_agrees_with_its_file():
    for quantity in (MEMORY, LATENCY):
        for path in sorted((ZOO / quantity.kind).glob("*-gt.csv")):
            assert len(read_gt_log(path, [quantity], path.name[: -len("-gt.csv")].rpartition("_")[0]))


def test_a_header_naming_a_column_twice_is_one_line(tmp_path):
    path = _zoo_log(tmp_path)
    lines = path.read_text().splitlines()
    path.write_text("\n".join([lines[0].replace("mem_avail", "mem_used")] + lines[1:]) + "\n")
    with pytest.raises(LogFormatError, match=rf"{path}: line 1: column 'mem_used' named twice"):
        read_logs(["alexnet"], [45], [tmp_path], [MEMORY])


def test_a_log_found_twice_by_any_path_is_read_once_with_one_warning(tmp_path, capsys):
    folder = tmp_path / "memory"
    folder.mkdir()
    _zoo_log(folder, name="alexnet_0"), _zoo_log(folder, name="alexnet_45")
    (tmp_path / "link").symlink_to(folder)
    once = read_logs(["alexnet"], [0, 45], [folder], [MEMORY])
    assert "found again" not in capsys.readouterr().err
    for dirs in ([folder, folder], [folder, tmp_path / "link"], [folder, tmp_path / "memory" / ".." / "memory"]):
        again = read_logs(["alexnet"], [0, 45], dirs, [MEMORY])
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1, err
        assert "2 logs found again by another path" in " ".join(err.split()) and "each is read once" in err
        pd.testing.assert_frame_equal(again, once)


def test_a_level_listed_without_a_log_is_named_in_one_warning(tmp_path, capsys):
    _zoo_log(tmp_path, name="alexnet_0"), _zoo_log(tmp_path, name="vgg11_45")
    logs = read_logs(["alexnet", "vgg11"], [0, 45, 60], [tmp_path], [MEMORY])
    err = " ".join(capsys.readouterr().err.split())
    assert "no log at alexnet levels [45, 60]; vgg11 levels [0, 60] in" in err and "only the levels found are used" in err
    assert set(logs["model"].map(lambda m: Path(m).stem)) == {"alexnet_0", "vgg11_45"}
    find_logs(["alexnet", "vgg11"], [0, 45, 60], [tmp_path], warn=False)
    assert capsys.readouterr().err == ""
