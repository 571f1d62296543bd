"""The installed `weir` package, as a Beam Python user runs it: `--runner=weir.WeirRunner`
starts the bundled job server and stops it, `python -m weir` serves jobs, and `--weir_*`
options are declared and reach the job.

    pip install target/wheels/weir_beam-*.whl pytest
    pytest python/tests

CI runs it in a fresh virtual environment, with no Rust toolchain on the PATH.
"""

import collections
import glob
import logging
import os
import socket
import subprocess
import sys
import time

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing import test_stream
from apache_beam.transforms.window import FixedWindows, TimestampedValue

import weir

TEXT = """the quick brown fox jumps over the lazy dog
the dog sleeps and the fox runs
a fox a dog a day
"""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def listening(port):
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def read_lines(prefix):
    out = []
    for path in sorted(glob.glob(prefix + "*")):
        with open(path) as f:
            out.extend(line for line in f.read().splitlines() if line)
    return out


def test_the_job_server_is_installed_with_the_package():
    binary = weir.job_server_binary()
    assert os.path.basename(binary) == "weir-job-server"
    assert os.access(binary, os.X_OK)


def test_wordcount_runs_on_a_job_server_the_runner_starts_and_stops(tmp_path, monkeypatch):
    started = []
    real = weir.WeirJobServer.subprocess_cmd_and_endpoint

    def spy(self):
        cmd, endpoint = real(self)
        started.append(int(endpoint.rsplit(":", 1)[1]))
        return cmd, endpoint

    monkeypatch.setattr(weir.WeirJobServer, "subprocess_cmd_and_endpoint", spy)
    src = tmp_path / "in.txt"
    src.write_text(TEXT)
    out = str(tmp_path / "counts")
    options = PipelineOptions(["--runner=weir.WeirRunner"])
    p = beam.Pipeline(options=options)
    (
        p
        | beam.io.ReadFromText(str(src))
        | beam.FlatMap(str.split)
        | beam.combiners.Count.PerElement()
        | beam.MapTuple(lambda w, n: f"{w}: {n}")
        | beam.io.WriteToText(out)
    )
    result = p.run()
    assert result.wait_until_finish() == "DONE"
    want = collections.Counter(TEXT.split())
    got = dict(line.split(": ") for line in read_lines(out))
    assert {w: int(n) for w, n in got.items()} == dict(want)
    # One server was started, and it is gone once the pipeline ended.
    assert len(started) == 1, started
    deadline = time.time() + 10
    while listening(started[0]) and time.time() < deadline:
        time.sleep(0.1)
    assert not listening(started[0]), f"the job server on port {started[0]} still listens"


def test_a_streaming_pipeline_fires_windows_by_the_watermark(tmp_path):
    out = str(tmp_path / "sums")
    events = (
        test_stream.TestStream()
        .add_elements([TimestampedValue(("a", 1), 1), TimestampedValue(("b", 2), 2)])
        .add_elements([TimestampedValue(("a", 3), 3)])
        .advance_watermark_to(5)
        .add_elements([TimestampedValue(("a", 4), 6), TimestampedValue(("b", 5), 12)])
        .advance_watermark_to(15)
        .add_elements([TimestampedValue(("b", 6), 14), TimestampedValue(("a", 7), 21)])
        .advance_watermark_to_infinity()
    )

    class Write(beam.DoFn):
        def process(self, kv, window=beam.DoFn.WindowParam):
            line = f"{kv[0]} {int(window.start)} {kv[1]}\n"
            fd = os.open(out, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
            try:
                os.write(fd, line.encode())
            finally:
                os.close(fd)

    options = PipelineOptions(["--runner=weir.WeirRunner", "--streaming"])
    with beam.Pipeline(options=options) as p:
        _ = p | events | beam.WindowInto(FixedWindows(10)) | beam.CombinePerKey(sum) | beam.ParDo(Write())
    with open(out) as f:
        got = sorted(f.read().splitlines())
    assert got == ["a 0 8", "a 20 7", "b 0 2", "b 10 11"]


def test_weir_options_are_declared_and_reach_the_job(caplog):
    with caplog.at_level(logging.WARNING):
        options = PipelineOptions(["--weir_max_batch_size=7", "--weir_explain"])
        view = options.view_as(weir.WeirOptions)
        assert view.weir_max_batch_size == "7"
        assert view.weir_explain == "true"
        options.get_all_options()
    assert "Unparseable" not in caplog.text, caplog.text
    # A value Weir refuses fails the job, naming the flag: the option reached it.
    options = PipelineOptions(["--runner=weir.WeirRunner", "--weir_max_batch_size=lots"])
    with pytest.raises(Exception, match="max-batch-size"):
        with beam.Pipeline(options=options) as p:
            _ = p | beam.Create([1, 2, 3]) | beam.Map(lambda x: x)


def test_help_lists_the_weir_options():
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "import weir; weir.WeirOptions(['--help'])",
        ],
        capture_output=True,
        text=True,
    )
    assert "--weir_runner" in out.stdout and "--weir_state_backend" in out.stdout, out.stdout[-2000:]


def test_an_endpoint_where_nothing_listens_fails_at_once_naming_it():
    port = free_port()
    options = PipelineOptions(["--runner=weir.WeirRunner", f"--job_endpoint=localhost:{port}"])
    started = time.time()
    with pytest.raises(RuntimeError, match=f"localhost:{port}.*python -m weir"):
        with beam.Pipeline(options=options) as p:
            _ = p | beam.Create([1])
    assert time.time() - started < 30


def test_python_m_weir_serves_jobs(tmp_path):
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "weir", "--job-port", str(port)], stderr=subprocess.PIPE)
    try:
        deadline = time.time() + 30
        while not listening(port):
            assert server.poll() is None, server.stderr.read().decode()
            assert time.time() < deadline, "python -m weir did not listen"
            time.sleep(0.1)
        out = str(tmp_path / "squares")
        options = PipelineOptions(["--runner=weir.WeirRunner", f"--job_endpoint=localhost:{port}"])
        with beam.Pipeline(options=options) as p:
            _ = p | beam.Create([1, 2, 3]) | beam.Map(lambda x: x * x) | beam.io.WriteToText(out)
        assert sorted(read_lines(out)) == ["1", "4", "9"]
        # A server the user started is left running.
        assert server.poll() is None
    finally:
        server.terminate()
        server.wait(timeout=30)
