#!/usr/bin/env python3
"""Writes Beam's portability API (the Runner, Fn, Job, artifact and provision APIs and what they
import) as one FileDescriptorSet, `beam.binpb`, from the descriptors that the installed
`apache-beam` wheel embeds in its `*_pb2` modules: the messages, fields, field numbers,
enums and services of the wire format, without Beam's proto sources or their comments.
`build.rs` compiles it with prost and tonic; `check.py` compares it with an installed wheel.

    python3 portable/proto/generate.py            # rewrites portable/proto/beam.binpb
"""

import importlib
import os
import sys

from google.protobuf import descriptor_pb2

API = "apache_beam.portability.api.org.apache.beam.model"
MODULES = [
    "pipeline.v1.beam_runner_api_pb2",
    "pipeline.v1.endpoints_pb2",
    "pipeline.v1.external_transforms_pb2",
    "pipeline.v1.metrics_pb2",
    "pipeline.v1.schema_pb2",
    "pipeline.v1.standard_window_fns_pb2",
    "fn_execution.v1.beam_fn_api_pb2",
    "fn_execution.v1.beam_provision_api_pb2",
    "job_management.v1.beam_job_api_pb2",
    "job_management.v1.beam_artifact_api_pb2",
]


def files():
    """Every file of the modules, dependencies first, each once."""
    out, seen = [], set()

    def add(fd):
        if fd.name in seen:
            return
        for dep in fd.dependencies:
            add(dep)
        seen.add(fd.name)
        proto = descriptor_pb2.FileDescriptorProto()
        fd.CopyToProto(proto)
        out.append(proto)

    for m in MODULES:
        add(importlib.import_module(f"{API}.{m}").DESCRIPTOR)
    return out


def descriptor_set():
    fds = descriptor_pb2.FileDescriptorSet()
    fds.file.extend(files())
    return fds


def main():
    import apache_beam

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "beam.binpb")
    data = descriptor_set().SerializeToString(deterministic=True)
    with open(path, "wb") as f:
        f.write(data)
    print(f"wrote {path}: {len(descriptor_set().file)} files from apache-beam {apache_beam.__version__}")


if __name__ == "__main__":
    sys.exit(main())
