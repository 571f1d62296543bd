"""grpcio's channels can deadlock in their finalizers while the interpreter collects garbage on
its way out (grpc/grpc#20026); once pytest has reported, the process leaves at once with
pytest's exit status."""

import os
import sys

_status = {"code": 0}


def pytest_sessionfinish(session, exitstatus):
    _status["code"] = int(exitstatus)


def pytest_unconfigure(config):
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(_status["code"])
