"""Beam Python's own portable runner tests, run on Weir.

This subclasses Beam's `PortableRunnerTest` (which runs every test of `FnApiRunnerTest`
through a job service), as Beam's `prism_runner_test` does for Prism: each test starts (once
per class) `weir-job-server` on a free port and submits its pipeline there, with the user code
in LOOPBACK harnesses.

    WEIR_JOB_SERVER=target/debug/weir-job-server python -m pytest portable/tests/python/weir_runner_test.py

`WEIR_JOB_SERVER_ARGS` adds flags (`--runner direct`, `--parallelism 2`). With
`WEIR_JOB_SERVER=beam`, the same tests run against Beam's own Python job service instead, for
comparison.
"""

import os
import shlex
import sys
import unittest

from apache_beam.options.pipeline_options import PortableOptions
from apache_beam.runners.portability import portable_runner_test


class WeirRunnerTest(portable_runner_test.PortableRunnerTest):
  _use_subprocesses = True

  @classmethod
  def _subprocess_command(cls, job_port, expansion_port):
    server = os.environ.get("WEIR_JOB_SERVER", "weir-job-server")
    if server == "beam":
      return [
          sys.executable,
          "-m",
          "apache_beam.runners.portability.local_job_service_main",
          "-p",
          str(job_port),
      ]
    args = shlex.split(os.environ.get("WEIR_JOB_SERVER_ARGS", ""))
    return [server, "--job-port", str(job_port)] + args

  def create_options(self):
    options = super().create_options()
    options.view_as(PortableOptions).environment_type = "LOOPBACK"
    return options

  # Skipped by Beam for the runners it had ("TestStream not yet supported"); Weir plays a
  # TestStream itself.
  def test_teststream_pardo_timers(self):
    getattr(portable_runner_test.PortableRunnerTest.test_teststream_pardo_timers, "__wrapped__")(self)


if __name__ == "__main__":
  unittest.main()
