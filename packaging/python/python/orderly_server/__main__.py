"""`python -m orderly_server ARGS` runs the installed `orderly` binary with ARGS."""

import sys

from ._server import run_binary

sys.exit(run_binary(sys.argv[1:]))
