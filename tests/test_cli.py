"""The command line's own errors: a mistyped option or command is one message, never a traceback."""

import pytest

from perf4sight.cli import main


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["profile", "--config", "config.ini"], "No such option: --config"),
        (["fingerprint"], "Missing option '--config'"),
        (["nope"], "No such command 'nope'"),
    ],
)
def test_usage_errors_exit_2_with_a_message(capsys, args, message):
    assert main(args) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
