"""pytest plugin, registered through the `pytest11` entry point when the wheel is installed.

Fixtures:
- `orderly_server` (session): one server for the whole run, in memory, with `--clock manual`,
  on a free port; stopped when the session ends. Under pytest-xdist each worker has its own.
- `orderly` (function): that server, reset before the test. By default everything goes
  (queues, topics, subscriptions: `POST /_orderly/reset?all=true`), so each test starts from
  nothing whatever ran before it; `orderly_reset = messages` keeps queues and topics (for
  servers set up by `--init`), `none` resets nothing. The clock is never moved back.
- `orderly_settings` (session): `{}`; override it to give `orderly_server.start()` keyword
  settings from code.

Settings: the ini option `orderly_args` (flags, shell-quoted) and `--orderly-args` on the
command line (the same, added to the ini's; a flag given there replaces the ini's), both ahead
of `orderly_settings`; `orderly_binary`/`--orderly-binary`; `orderly_reset`/`--orderly-reset`;
`orderly_start_timeout` (seconds). A failing test that used `orderly` gets the server's log
lines from its run in its report.
"""

from __future__ import annotations

import shlex
from typing import Any, Iterator

import pytest

from ._server import OrderlyServer, drop_flags, flags_in

_RESETS = ("all", "messages", "none")
_LOG_SHOWN = 64 * 1024
# Where the `orderly` fixture notes the server and its log size when the test began.
_LOG_MARK = pytest.StashKey[tuple]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("orderly", "Orderly SQS/SNS server (orderly-server)")
    group.addoption(
        "--orderly-args",
        action="append",
        default=[],
        metavar="FLAGS",
        help="flags for the orderly server, shell-quoted (repeatable); they replace the same flags in orderly_args",
    )
    group.addoption("--orderly-binary", default=None, metavar="PATH", help="the orderly binary to run")
    group.addoption(
        "--orderly-reset", default=None, choices=_RESETS, help="what the orderly fixture resets before each test"
    )
    parser.addini("orderly_args", type="args", default=[], help="flags for the orderly server")
    parser.addini("orderly_binary", default="", help="the orderly binary to run (default: the one installed)")
    parser.addini(
        "orderly_reset",
        default="all",
        help="what the orderly fixture resets before each test: all (default), messages or none",
    )
    parser.addini("orderly_start_timeout", default="30", help="seconds to wait for the server to listen")


@pytest.fixture(scope="session")
def orderly_settings() -> dict[str, Any]:
    """Keyword settings for `orderly_server.start()` (`{"region": "eu-west-1"}`); override it."""
    return {}


@pytest.fixture(scope="session")
def orderly_server(pytestconfig: pytest.Config, orderly_settings: dict[str, Any]) -> Iterator[OrderlyServer]:
    """One in-memory Orderly with a manual clock for the session."""
    ini_args = list(pytestconfig.getini("orderly_args"))
    cli_args = [arg for given in pytestconfig.getoption("orderly_args") for arg in shlex.split(given)]
    args = drop_flags(ini_args, flags_in(cli_args)) + cli_args
    given = flags_in(args)
    settings = {
        name: value
        for name, value in {"clock": "manual", **orderly_settings}.items()
        if "--" + name.replace("_", "-") not in given
    }
    binary = pytestconfig.getoption("orderly_binary") or pytestconfig.getini("orderly_binary") or None
    timeout = float(pytestconfig.getini("orderly_start_timeout"))
    server = OrderlyServer(binary=binary, args=args, start_timeout=timeout, **settings)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def orderly(orderly_server: OrderlyServer, pytestconfig: pytest.Config, request: pytest.FixtureRequest) -> OrderlyServer:
    """The session's server, reset before this test (see `orderly_reset`)."""
    scope = pytestconfig.getoption("orderly_reset") or pytestconfig.getini("orderly_reset")
    if scope not in _RESETS:
        raise pytest.UsageError(f"orderly_reset is {scope!r}: give one of {', '.join(_RESETS)}")
    if scope != "none":
        orderly_server.reset(messages_only=scope == "messages")
    request.node.stash[_LOG_MARK] = (orderly_server, orderly_server.log_size())
    return orderly_server


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    mark = item.stash.get(_LOG_MARK, None)
    if mark is None or report.when != "call" or not report.failed:
        return
    server, since = mark
    text = server.logs(since)[-_LOG_SHOWN:]
    if text:
        report.sections.append(("Captured orderly log", text))
