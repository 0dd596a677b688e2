"""The `py-in-browser` command line: clear refusals before anything starts."""

from __future__ import annotations

import socket

import pytest

from server.cli import main


def test_port_in_use_is_a_clear_error() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(SystemExit) as failure:
            main(["serve", "--port", str(port)])
    message = str(failure.value)
    assert f"port {port}" in message and "already in use" in message and "--port" in message


def test_port_out_of_range_is_refused() -> None:
    with pytest.raises(SystemExit, match="between 1 and 65535"):
        main(["serve", "--port", "70000"])


def test_unknown_command_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["launch"])
    assert "invalid choice" in capsys.readouterr().err
