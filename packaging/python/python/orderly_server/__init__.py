"""Orderly, the Amazon SQS and SNS emulator, for Python code and tests.

The `orderly-server` wheel puts the `orderly` binary on PATH; this package starts it:

    import orderly_server

    with orderly_server.start(clock="manual") as server:
        sqs = server.client("sqs")            # boto3, dummy credentials, the server's region
        server.advance("5m")                  # the manual clock
        server.messages(queue_url)            # peek without receiving

and its pytest plugin (registered on install) gives the fixtures `orderly_server` (one
in-memory server with a manual clock for the session) and `orderly` (that server, reset before
each test). See the package's README for the settings.
"""

from ._server import (
    OrderlyError,
    OrderlyServer,
    Peek,
    StartError,
    drop_flags,
    find_binary,
    settings_to_args,
    start,
)

__all__ = [
    "OrderlyError",
    "OrderlyServer",
    "Peek",
    "StartError",
    "drop_flags",
    "find_binary",
    "settings_to_args",
    "start",
]
