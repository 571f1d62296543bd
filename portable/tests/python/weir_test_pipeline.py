"""A pytest plugin for running Beam's own tests that build a `TestPipeline()`: registers the
`--test-pipeline-options` flag (Beam's repository registers it in a conftest the wheel does
not ship), through which those pipelines go to a runner, here Weir's job server:

    python -m pytest -p weir_test_pipeline \
      --test-pipeline-options="--runner=PortableRunner --job_endpoint=localhost:8099 \
      --environment_type=LOOPBACK" .../apache_beam/transforms/userstate_test.py
"""


def pytest_addoption(parser):
  parser.addoption(
      "--test-pipeline-options",
      help="the options of every TestPipeline the tests build")
