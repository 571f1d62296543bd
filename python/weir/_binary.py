"""Where the ``weir-job-server`` binary is."""

import os
import shutil
import sys
import sysconfig

NAME = "weir-job-server"


def job_server_binary():
    """The job server to start: ``$WEIR_JOB_SERVER`` if set, else the one installed with this
    package (in the environment's scripts folder), else the first on the ``PATH``."""
    override = os.environ.get("WEIR_JOB_SERVER")
    if override:
        if not os.access(override, os.X_OK):
            raise FileNotFoundError(f"WEIR_JOB_SERVER={override} is not an executable file")
        return override
    exe = NAME + (".exe" if sys.platform == "win32" else "")
    folders = [sysconfig.get_path("scripts"), os.path.dirname(sys.executable)]
    for folder in folders:
        candidate = os.path.join(folder, exe)
        if os.access(candidate, os.X_OK):
            return candidate
    found = shutil.which(NAME)
    if found:
        return found
    raise FileNotFoundError(
        f"cannot find {NAME}: it is installed with the weir package (pip install weir-beam) into "
        f"{folders[0]}; or set WEIR_JOB_SERVER to its path"
    )
