"""``python -m weir [flags]``: runs the bundled ``weir-job-server`` in this process, with its
flags (``--job-port 8099``, ``--runner timely``, ``--help``)."""

import os
import sys

from weir._binary import job_server_binary


def main():
    binary = job_server_binary()
    os.execv(binary, [binary] + sys.argv[1:])


if __name__ == "__main__":
    main()
