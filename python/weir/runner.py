"""``WeirRunner``: Beam's ``PortableRunner`` on a ``weir-job-server`` it starts itself."""

import logging
import socket
import sys

from apache_beam.options import pipeline_options
from apache_beam.runners.portability import job_server, portable_runner
from apache_beam.utils import subprocess_server

from weir._binary import job_server_binary
from weir.options import WeirOptions  # noqa: F401  (declares --weir_* before options parse)

_LOGGER = logging.getLogger(__name__)


class WeirJobServer(job_server.SubprocessJobServer):
    """The bundled ``weir-job-server`` on a free port of 127.0.0.1 (or ``--job_port``)."""

    def __init__(self, options):
        super().__init__()
        self._job_port = options.view_as(pipeline_options.JobServerOptions).job_port

    def subprocess_cmd_and_endpoint(self):
        (port,) = subprocess_server.pick_port(self._job_port or None)
        # PROCESS harnesses of Beam Python run with this interpreter, which has Beam.
        cmd = [job_server_binary(), "--job-port", str(port), "--python", sys.executable]
        return cmd, f"localhost:{port}"


class WeirRunner(portable_runner.PortableRunner):
    """Runs a Beam pipeline on Weir: ``--runner=weir.WeirRunner``.

    Without ``--job_endpoint`` it starts the ``weir-job-server`` this package installed, and
    stops it once the pipeline ends (the job's metrics are read first, so ``result.metrics()``
    still answers). With one, it submits there, and says at once when nothing listens there.
    The SDK harness is LOOPBACK (in this process) unless ``--environment_type`` says otherwise.
    Weir's flags are ``--weir_<flag>`` options (see :class:`weir.WeirOptions`)."""

    def default_environment(self, options):
        portable = options.view_as(pipeline_options.PortableOptions)
        if not portable.environment_type and not portable.output_executable_path:
            portable.environment_type = "LOOPBACK"
        return super().default_environment(options)

    def run_pipeline(self, pipeline, options):
        portable = options.view_as(pipeline_options.PortableOptions)
        if not portable.environment_type and not portable.output_executable_path:
            portable.environment_type = "LOOPBACK"
        if portable.job_endpoint and portable.job_endpoint != "embed":
            check_endpoint(portable.job_endpoint)
        self._started = None
        return super().run_pipeline(pipeline, options)

    def default_job_server(self, options):
        self._started = job_server.StopOnExitJobServer(WeirJobServer(options))
        return self._started

    def create_job_service_handle(self, job_service, options):
        # Weir's --weir_* options reach the job, declared or not.
        return portable_runner.JobServiceHandle(job_service, options, retain_unknown_options=True)

    def run_portable_pipeline(self, pipeline, options):
        result = super().run_portable_pipeline(pipeline, options)
        started, self._started = getattr(self, "_started", None), None
        if started is not None:

            def stop():
                # The metrics are read while the server still answers.
                try:
                    result.metrics()
                except Exception as e:  # the job may never have started
                    _LOGGER.debug("no metrics of the job: %s", e)
                started.stop()

            result._cleanup_callbacks = tuple(result._cleanup_callbacks) + (stop,)
        return result


def check_endpoint(endpoint, timeout=5.0):
    """Fails at once, naming the endpoint, when nothing listens at ``host:port`` (Beam would
    wait ``--job_server_timeout`` and then raise a bare timeout)."""
    host, _, port = endpoint.rpartition(":")
    try:
        with socket.create_connection((host or "localhost", int(port)), timeout=timeout):
            pass
    except (OSError, ValueError) as e:
        raise RuntimeError(
            f"no Weir job server answers at --job_endpoint={endpoint} ({e}): start one with "
            f"`python -m weir --job-port {port or 8099}`, or leave --job_endpoint out and "
            f"WeirRunner starts its own"
        ) from None
