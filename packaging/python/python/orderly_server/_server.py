"""Starting and stopping one `orderly` process, and the developer endpoints tests use.

`start(**settings)` launches the binary on a free port (`--bind 127.0.0.1:0`), in memory
(`--ephemeral`), and returns once the server's first stdout line says where it listens. The
object it returns moves the manual clock, resets, peeks and makes boto3 clients; used as a
context manager it stops the server on exit. Only the standard library is used, so the
package has no dependencies; boto3 is imported only by `client()`.
"""

from __future__ import annotations

import collections
import datetime
import json
import os
import re
import shutil
import subprocess
import sysconfig
import tempfile
import threading
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Union

# The server's first stdout line (README, "Settings": `--bind`).
_LISTENING = re.compile(r"orderly listening on (\S+)")
# The binary's own defaults, for the helpers that must know the home namespace.
_DEFAULT_REGION = "us-east-1"
_DEFAULT_ACCOUNT = "000000000000"
# Credentials for boto3: any are accepted; these are not 12 digits, so they act in the home
# account (README, "Regions and accounts").
_DUMMY_KEY = "test"
# How much of the server's log an error message or a failed test's report shows.
_LOG_TAIL = 64 * 1024

Duration = Union[str, int, float, datetime.timedelta]


class OrderlyError(RuntimeError):
    """The server could not be started, or a developer endpoint refused a request."""


class Peek(List[Dict[str, Any]]):
    """A queue's messages as a peek returns them: a list of dicts, with `truncated` true when
    the peek's 8 MiB bound left later messages out (`limit` alone never sets it)."""

    truncated: bool

    def __init__(self, messages: Iterable[dict[str, Any]] = (), truncated: bool = False) -> None:
        super().__init__(messages)
        self.truncated = truncated


class StartError(OrderlyError):
    """The server exited or stayed silent before printing its listening line."""

    def __init__(self, message: str, logs: str) -> None:
        super().__init__(f"{message}\n--- orderly log ---\n{logs}" if logs else message)
        self.logs = logs


def find_binary() -> str:
    """The `orderly` executable: `$ORDERLY_BINARY`, else the one this package's wheel
    installed into the environment's scripts directory, else the first on PATH."""
    given = os.environ.get("ORDERLY_BINARY")
    if given:
        return given
    name = "orderly.exe" if os.name == "nt" else "orderly"
    schemes = [None, f"{os.name}_user"]
    for scheme in schemes:
        try:
            scripts = sysconfig.get_path("scripts", scheme) if scheme else sysconfig.get_path("scripts")
        except KeyError:
            continue
        candidate = os.path.join(scripts, name)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    found = shutil.which(name)
    if found:
        return found
    raise OrderlyError("no orderly binary: install orderly-server, or set ORDERLY_BINARY to its path")


def settings_to_args(settings: Mapping[str, Any]) -> list[str]:
    """`clock="manual"` -> `--clock manual`; `True` -> the bare flag; `False`/`None` -> nothing;
    a list -> its items joined by commas (`cors_allow=["a", "b"]`)."""
    args: list[str] = []
    for name, value in settings.items():
        flag = "--" + name.replace("_", "-")
        if value is None or value is False:
            continue
        if value is True:
            args.append(flag)
            continue
        if isinstance(value, (list, tuple, set, frozenset)):
            value = ",".join(str(item) for item in value)
        args += [flag, os.fspath(value) if isinstance(value, os.PathLike) else str(value)]
    return args


def flags_in(args: Sequence[str]) -> set[str]:
    """The `--flags` an argument list gives (`--region x` and `--region=x` alike)."""
    return {arg.split("=", 1)[0] for arg in args if arg.startswith("--")}


def drop_flags(args: Sequence[str], flags: Iterable[str]) -> list[str]:
    """`args` without the given flags and their values (a value is the next argument unless it
    is a flag itself: no Orderly flag takes a value starting with `--`)."""
    flags = set(flags)
    kept: list[str] = []
    index = 0
    while index < len(args):
        arg = args[index]
        index += 1
        name = arg.split("=", 1)[0]
        if arg.startswith("--") and name in flags:
            if "=" not in arg and index < len(args) and not args[index].startswith("--"):
                index += 1
            continue
        kept.append(arg)
    return kept


def _flag_value(args: Sequence[str], flag: str) -> Optional[str]:
    value = None
    for index, arg in enumerate(args):
        if arg == flag and index + 1 < len(args):
            value = args[index + 1]
        elif arg.startswith(flag + "="):
            value = arg.split("=", 1)[1]
    return value


def _duration(duration: Duration) -> str:
    """A duration as `/_orderly/clock` reads it: text as given ("5m", "500ms", "1h 30m"),
    numbers as seconds."""
    if isinstance(duration, str):
        return duration
    if isinstance(duration, datetime.timedelta):
        seconds = duration.total_seconds()
    elif isinstance(duration, (int, float)) and not isinstance(duration, bool):
        seconds = float(duration)
    else:
        raise TypeError(f"a duration is text ('5m') or seconds, not {duration!r}")
    if seconds < 0:
        raise ValueError("the clock never moves backwards")
    return f"{round(seconds * 1000)}ms"


class OrderlyServer:
    """One running `orderly` process. Made by `start()`; see its documentation."""

    def __init__(
        self,
        binary: Optional[str] = None,
        args: Sequence[str] = (),
        env: Optional[Mapping[str, str]] = None,
        start_timeout: float = 30.0,
        stop_timeout: float = 10.0,
        **settings: Any,
    ) -> None:
        args = list(args)
        given = flags_in(args) | {"--" + name.replace("_", "-") for name in settings}
        defaults: dict[str, Any] = {"bind": "127.0.0.1:0"}
        # In memory unless told where to keep state.
        if not given & {"--data-dir", "--storage", "--ephemeral"}:
            defaults["ephemeral"] = True
        defaults = {k: v for k, v in defaults.items() if "--" + k.replace("_", "-") not in given}
        self.args: list[str] = settings_to_args({**defaults, **settings}) + args
        self.binary = binary or find_binary()
        # Plain log lines: they end up in files and test reports, not on a terminal.
        self._env = {"NO_COLOR": "1", **os.environ, **(env or {})}
        self.region: str = _flag_value(self.args, "--region") or self._env.get("ORDERLY_REGION") or _DEFAULT_REGION
        self.account_id: str = (
            _flag_value(self.args, "--account-id") or self._env.get("ORDERLY_ACCOUNT_ID") or _DEFAULT_ACCOUNT
        )
        self._single_namespace = "--single-namespace" in self.args
        self._start_timeout = start_timeout
        self._stop_timeout = stop_timeout
        self._endpoint: Optional[str] = None
        self._ready = threading.Event()
        self._stdout: collections.deque[str] = collections.deque(maxlen=1000)
        self._clients: dict[str, Any] = {}
        self._http = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        self._log_dir: Optional[tempfile.TemporaryDirectory[str]] = None
        self._process: Optional[subprocess.Popen[bytes]] = None
        self._last_logs = ""

    # ---- The process ----

    def start(self) -> "OrderlyServer":
        """Launch the binary and wait (at most `start_timeout` seconds) for its listening line."""
        if self._process is not None:
            raise OrderlyError("this server was started already")
        self._log_dir = tempfile.TemporaryDirectory(prefix="orderly-")
        self._log_path = os.path.join(self._log_dir.name, "orderly.log")
        with open(self._log_path, "wb") as log:
            try:
                self._process = subprocess.Popen(
                    [self.binary, *self.args],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=log,
                    env=self._env,
                )
            except OSError as error:
                self._log_dir.cleanup()
                raise OrderlyError(f"could not run {self.binary}: {error}") from error
        self._reader = threading.Thread(target=self._read_stdout, name="orderly-stdout", daemon=True)
        self._reader.start()
        listening = self._ready.wait(self._start_timeout) and self._endpoint is not None
        if not listening:
            code = self._process.poll()
            why = (
                f"orderly exited with code {code} before listening"
                if code is not None
                else f"orderly printed no listening line within {self._start_timeout} s"
            )
            self.stop()
            raise StartError(f"{why} ({self.binary} {' '.join(self.args)})", self._last_logs)
        return self

    def _read_stdout(self) -> None:
        assert self._process is not None and self._process.stdout is not None
        for raw in self._process.stdout:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            self._stdout.append(line)
            found = _LISTENING.search(line)
            if found and self._endpoint is None:
                self._endpoint = found.group(1).rstrip("/")
                self._ready.set()
        self._ready.set()  # end of stdout: the process is gone

    def stop(self) -> None:
        """SIGTERM, then wait up to `stop_timeout` seconds; SIGKILL if it is still there. The
        log directory is removed only once the process has exited."""
        process, self._process = self._process, None
        if process is None:
            return
        if process.poll() is None:
            process.terminate()  # SIGTERM: the server finishes what it is doing and exits
            try:
                process.wait(self._stop_timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        # The reader sees the end of stdout once the process has gone.
        self._reader.join(self._stop_timeout)
        if process.stdout is not None:
            process.stdout.close()
        self._last_logs = self._read_log(0, tail=_LOG_TAIL)
        if self._log_dir is not None:
            self._log_dir.cleanup()
            self._log_dir = None

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def pid(self) -> Optional[int]:
        return self._process.pid if self._process is not None else None

    def __enter__(self) -> "OrderlyServer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- Logs ----

    def log_size(self) -> int:
        """Bytes of log (stderr) written so far: a mark for `logs(since=...)`."""
        try:
            return os.path.getsize(self._log_path) if self._log_dir is not None else 0
        except OSError:
            return 0

    def logs(self, since: int = 0) -> str:
        """The server's log (its stderr, plus stdout) from byte `since`; after `stop()`, the
        last 64 KiB."""
        if self._log_dir is None:
            return self._last_logs
        return self._read_log(since)

    def _read_log(self, since: int, tail: Optional[int] = None) -> str:
        try:
            with open(self._log_path, "rb") as log:
                log.seek(since)
                text = log.read().decode("utf-8", "replace")
        except (OSError, AttributeError):
            text = ""
        stdout = "\n".join(self._stdout)
        text = f"{stdout}\n{text}" if since == 0 and stdout else text
        return text[-tail:] if tail else text

    # ---- Where it is ----

    @property
    def endpoint_url(self) -> str:
        """`http://127.0.0.1:PORT`, as the listening line said."""
        if self._endpoint is None:
            raise OrderlyError("the server is not listening")
        return self._endpoint

    def queue_name(self, queue: str) -> str:
        """The name the inspection endpoints know a queue by, from its URL (or a bare name):
        `name` in the home region and account, else `region:account:name`."""
        if "/" not in queue:
            return queue
        parts = urllib.parse.urlsplit(queue)
        path = [p for p in parts.path.split("/") if p]
        if not path:
            raise ValueError(f"not a queue URL: {queue}")
        name = path[-1]
        if self._single_namespace or len(path) < 2:
            return name
        account = path[-2]
        host = parts.hostname or ""
        regional = re.match(r"^sqs\.([a-z0-9-]+)\.", host) or re.match(r"^([a-z0-9-]+)\.queue\.", host)
        if len(path) >= 4 and path[-4] == "queue":
            region = path[-3]
        elif regional:
            region = regional.group(1)
        else:
            region = self.region
        if region == self.region and account == self.account_id:
            return name
        return f"{region}:{account}:{name}"

    # ---- Developer endpoints ----

    def _call(self, method: str, path: str, body: Optional[dict[str, Any]] = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(
            self.endpoint_url + path,
            data=data,
            method=method,
            headers={"Content-Type": "application/json"} if data is not None else {},
        )
        try:
            with self._http.open(request, timeout=30) as response:
                return json.load(response)
        except urllib.error.HTTPError as error:
            detail = error.read().decode("utf-8", "replace")
            try:
                detail = json.loads(detail).get("message", detail)
            except (ValueError, AttributeError):
                pass
            raise OrderlyError(f"{method} {path}: {error.code}: {detail}") from None

    def advance(self, duration: Duration) -> datetime.datetime:
        """Move the manual clock forward ("5m", "12h", "500ms", or seconds as a number); answers
        the new time. Needs `clock="manual"`."""
        return _time(self._call("POST", "/_orderly/clock", {"advance": _duration(duration)}))

    def set_time(self, when: Union[datetime.datetime, str]) -> datetime.datetime:
        """Move the manual clock to a later time (an aware datetime or RFC 3339 text)."""
        text = when.isoformat() if isinstance(when, datetime.datetime) else when
        return _time(self._call("POST", "/_orderly/clock", {"set": text}))

    def now(self) -> datetime.datetime:
        """The server's time (UTC). Needs `clock="manual"`."""
        return _time(self._call("GET", "/_orderly/clock"))

    def reset(self, messages_only: bool = False) -> None:
        """Delete every queue and topic (`POST /_orderly/reset?all=true`); with
        `messages_only=True`, only every message and the histories that would leak between
        tests (deduplication ids and the like), keeping queues, topics and subscriptions."""
        self._call("POST", "/_orderly/reset" if messages_only else "/_orderly/reset?all=true")

    def messages(
        self, queue: str, state: Union[str, Sequence[str], None] = None, limit: Optional[int] = None
    ) -> Peek:
        """A queue's messages, oldest first, without receiving them (nothing changes: receive
        counts, visibility and group locks stay). `queue` is its URL or name; `state` any of
        "visible", "inFlight", "delayed" (default all); `limit` 1 to 10,000 (default 100). At
        most 8 MiB of bodies and attributes come back: later messages are left out, and the
        list's `truncated` is then true."""
        params = {}
        if state is not None:
            params["state"] = state if isinstance(state, str) else ",".join(state)
        if limit is not None:
            params["limit"] = str(limit)
        name = urllib.parse.quote(self.queue_name(queue), safe="")
        query = "?" + urllib.parse.urlencode(params) if params else ""
        peek = self._call("GET", f"/_orderly/queues/{name}/messages{query}")
        return Peek(peek["messages"], bool(peek.get("truncated", False)))

    def client(self, service: str, **options: Any) -> Any:
        """A boto3 client for "sqs" or "sns" on this server, with dummy credentials and the
        server's region (options override them). Needs boto3 installed."""
        if not options and service in self._clients:
            return self._clients[service]
        try:
            import boto3
        except ImportError:
            raise OrderlyError("client() needs boto3: pip install boto3") from None
        settings = {
            "endpoint_url": self.endpoint_url,
            "region_name": self.region,
            "aws_access_key_id": _DUMMY_KEY,
            "aws_secret_access_key": _DUMMY_KEY,
            **options,
        }
        made = boto3.session.Session().client(service, **settings)
        if not options:
            self._clients[service] = made
        return made


def _time(answer: Mapping[str, Any]) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(answer["epochMillis"] / 1000, datetime.timezone.utc)


def start(**settings: Any) -> OrderlyServer:
    """Start an Orderly server and return it once it listens; use it as a context manager
    (`with orderly_server.start(clock="manual") as server:`) or call `stop()`.

    Settings are the binary's flags with underscores: `clock="manual"` is `--clock manual`,
    `region="eu-west-1"` is `--region eu-west-1`, `fifo_http_subscriptions=True` is the bare
    flag. Unless given otherwise it listens on a free port of 127.0.0.1 and keeps everything in
    memory (`--ephemeral`, left out when `data_dir` or `storage` is given). The launcher's own
    keywords: `args` adds raw flags, `binary` overrides `find_binary()`, `env` adds environment
    variables (`RUST_LOG`), `start_timeout` (30 s) bounds the wait for the listening line, after
    which, or when the server exits first, `StartError` is raised with the server's log;
    `stop_timeout` (10 s) is how long `stop()` waits after SIGTERM before killing it.
    """
    return OrderlyServer(**settings).start()


def run_binary(argv: Sequence[str]) -> int:
    """`python -m orderly_server ARGS`: the binary in the foreground."""
    binary = find_binary()
    if os.name != "nt":
        os.execv(binary, [binary, *argv])
    return subprocess.call([binary, *argv])
