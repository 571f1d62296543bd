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

  # What Weir does not run yet, each named; Beam's own job service is run as it is.
  def _missing(self, feature):
    if os.environ.get("WEIR_JOB_SERVER") != "beam":
      raise unittest.SkipTest("Weir's portable runner lacks " + feature)

  def test_custom_merging_window(self):
    self._missing("window functions known only to the SDK (merging, run by the harness)")
    super().test_custom_merging_window()

  def test_custom_window_type(self):
    self._missing("window types and window coders known only to the SDK")
    super().test_custom_window_type()


def _lacks_state_and_timers(name):
  def test(self):
    self._missing("user state and timers (the State API's user state, timer streams)")
    getattr(portable_runner_test.PortableRunnerTest, name)(self)
  return test


for _name in [
    "test_pardo_dynamic_timer",
    "test_pardo_et_timer_with_no_firing",
    "test_pardo_et_timer_with_no_reset",
    "test_pardo_et_timer_with_no_reset_and_no_clear",
    "test_pardo_state_only",
    "test_pardo_state_timers",
    "test_pardo_state_timers_non_standard_coder",
    "test_pardo_state_with_custom_key_coder",
    "test_pardo_timers",
    "test_pardo_timers_clear",
    "test_windowed_pardo_state_timers",
]:
  setattr(WeirRunnerTest, _name, _lacks_state_and_timers(_name))


if __name__ == "__main__":
  unittest.main()
