"""``ray`` on the command line, with a loopback address kept as given.

Ray replaces ``127.0.0.1`` in ``--node-ip-address`` and ``--address`` with the host's
outward address (``resolve_ip_for_localhost``), which would bind a node's servers and
agents there. The test cluster must use 127.0.0.1 only, so this entry point keeps
the address it is given and runs Ray's own CLI.
"""

from __future__ import annotations

import sys

import ray._private.services as services
from ray.scripts.scripts import main

services.resolve_ip_for_localhost = lambda host: host

if __name__ == "__main__":
    sys.argv[0] = "ray"
    main()  # type: ignore[no-untyped-call]
