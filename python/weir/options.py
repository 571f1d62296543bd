"""Weir's flags as Beam pipeline options: ``--weir_<flag>`` for each of Weir's ``--<flag>``."""

import functools
import json
import logging
import subprocess

from apache_beam.options.pipeline_options import PipelineOptions

from weir._binary import job_server_binary

_LOGGER = logging.getLogger(__name__)

PREFIX = "weir_"


@functools.lru_cache(maxsize=1)
def weir_flags():
    """Weir's pipeline flags as the job server describes them (``--describe-flags``): a list of
    ``(flag, takes_value, help)``, e.g. ``("--runner", True, "...")``. Empty (with a warning)
    when no job server is found."""
    try:
        binary = job_server_binary()
    except FileNotFoundError as e:
        _LOGGER.warning("Weir's --weir_* options are not declared: %s", e)
        return []
    out = subprocess.run([binary, "--describe-flags"], check=True, capture_output=True, text=True, timeout=60)
    flags = []
    for line in out.stdout.splitlines():
        if line.strip():
            f = json.loads(line)
            flags.append((f["flag"], f["takes_value"], f["help"]))
    return flags


def option_name(flag):
    """The Beam option of a Weir flag: ``--max-batch-size`` is ``weir_max_batch_size``."""
    return PREFIX + flag.lstrip("-").replace("-", "_")


class WeirOptions(PipelineOptions):
    """Weir's flags, each as ``--weir_<flag>`` (dashes as underscores): ``--weir_runner=timely
    --weir_workers=2``. The job gives them to Weir, where they replace the job server's own."""

    @classmethod
    def _add_argparse_args(cls, parser):
        for flag, takes_value, help_text in weir_flags():
            name = "--" + option_name(flag)
            if takes_value:
                parser.add_argument(name, default=None, help=f"Weir's {flag}: {help_text}")
            else:
                # A switch: `--weir_explain` alone, or `--weir_explain=true|false`.
                parser.add_argument(
                    name, default=None, nargs="?", const="true", help=f"Weir's {flag} (a switch): {help_text}"
                )
