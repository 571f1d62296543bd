"""Weir for Beam Python: run a pipeline on Weir with ``--runner=weir.WeirRunner``.

The runner starts the ``weir-job-server`` this package carries on a free port of 127.0.0.1,
submits the pipeline to it (with a LOOPBACK harness unless ``--environment_type`` says
otherwise) and stops it when the pipeline ends. ``python -m weir`` runs a job server to share.
Weir's own flags are pipeline options spelled ``--weir_<flag>`` (``--weir_runner=timely``);
:class:`WeirOptions` declares them, so Beam parses them and ``--help`` lists them.
"""

from weir.options import WeirOptions
from weir.runner import WeirJobServer, WeirRunner, job_server_binary

__all__ = ["WeirOptions", "WeirRunner", "WeirJobServer", "job_server_binary"]
