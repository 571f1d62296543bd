"""A pytest plugin for running Beam's own tests that build a `TestPipeline` on Weir.

It registers the `--test-pipeline-options` flag (Beam's repository registers it in a conftest
the wheel does not ship), through which a `TestPipeline()` goes to a runner, here Weir's job
server. With `--test-pipeline-options-override`, a `TestPipeline(options=...)` built with
options of its own (streaming, say) goes there too: the flag's options replace its runner.

    python -m pytest -p weir_test_pipeline \\
      --test-pipeline-options="--runner=PortableRunner --job_endpoint=localhost:8099 \\
      --environment_type=LOOPBACK" .../apache_beam/transforms/userstate_test.py
"""

import shlex


def pytest_addoption(parser):
  parser.addoption(
      "--test-pipeline-options",
      help="the options of every TestPipeline the tests build")
  parser.addoption(
      "--test-pipeline-options-override",
      action="store_true",
      help="also give them to TestPipelines built with options of their own")


def pytest_configure(config):
  flags = config.getoption("--test-pipeline-options")
  if not flags or not config.getoption("--test-pipeline-options-override"):
    return
  from apache_beam.options.pipeline_options import PipelineOptions
  from apache_beam.testing.test_pipeline import TestPipeline
  built = TestPipeline.__init__

  def init(self, runner=None, options=None, *args, **kwargs):
    if options is not None and runner is None:
      merged = options.get_all_options(drop_default=True)
      merged.update(PipelineOptions(shlex.split(flags)).get_all_options(drop_default=True))
      options = PipelineOptions.from_dictionary(merged)
    built(self, runner, options, *args, **kwargs)

  TestPipeline.__init__ = init
