#!/usr/bin/env python3
"""Compares `beam.binpb` with the descriptors of the installed `apache-beam` wheel: every file,
message (nested ones too), field (name, number, label, type, type name, oneof), enum value and
service method. Prints each difference and exits 1 if there is one.

    python3 portable/proto/check.py
"""

import os
import sys

from google.protobuf import descriptor_pb2

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import generate  # noqa: E402


def fields(m):
    return {
        f.name: (f.number, f.label, f.type, f.type_name, f.oneof_index if f.HasField("oneof_index") else None)
        for f in m.field
    }


def compare_enum(path, a, b, out):
    va = {v.name: v.number for v in a.value}
    vb = {v.name: v.number for v in b.value}
    if va != vb:
        out.append(f"enum {path}: {va} here, {vb} in apache-beam")


def compare_message(path, a, b, out):
    fa, fb = fields(a), fields(b)
    for name in sorted(set(fa) | set(fb)):
        if fa.get(name) != fb.get(name):
            out.append(f"field {path}.{name}: {fa.get(name)} here, {fb.get(name)} in apache-beam")
    compare_nested(path, a.nested_type, b.nested_type, a.enum_type, b.enum_type, out)


def compare_named(kind, path, xa, xb, compare, out):
    """Pairs two lists of `kind` by name: one on one side only is a difference, the others are
    compared with `compare`."""
    da, db = {x.name: x for x in xa}, {x.name: x for x in xb}
    for name in sorted(set(da) | set(db)):
        if name not in da or name not in db:
            out.append(f"{kind} {path}.{name}: {'missing here' if name not in da else 'not in apache-beam'}")
        else:
            compare(f"{path}.{name}", da[name], db[name], out)


def compare_nested(path, ma, mb, ea, eb, out):
    compare_named("message", path, ma, mb, compare_message, out)
    compare_named("enum", path, ea, eb, compare_enum, out)


def compare_file(a, b, out):
    compare_nested(a.package, a.message_type, b.message_type, a.enum_type, b.enum_type, out)
    sa = {(s.name, m.name): (m.input_type, m.output_type, m.client_streaming, m.server_streaming)
          for s in a.service for m in s.method}
    sb = {(s.name, m.name): (m.input_type, m.output_type, m.client_streaming, m.server_streaming)
          for s in b.service for m in s.method}
    for k in sorted(set(sa) | set(sb)):
        if sa.get(k) != sb.get(k):
            out.append(f"method {a.package}.{k[0]}.{k[1]}: {sa.get(k)} here, {sb.get(k)} in apache-beam")


def main():
    import apache_beam

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "beam.binpb")
    ours = descriptor_pb2.FileDescriptorSet()
    with open(path, "rb") as f:
        ours.ParseFromString(f.read())
    theirs = {f.name: f for f in generate.files()}
    out = []
    for f in ours.file:
        if f.name not in theirs:
            out.append(f"file {f.name}: not in apache-beam")
        else:
            compare_file(f, theirs.pop(f.name), out)
    out.extend(f"file {name}: missing here" for name in sorted(theirs))
    messages = sum(len(f.message_type) for f in ours.file)
    for line in out:
        print(line)
    print(f"{len(ours.file)} files, {messages} top-level messages compared with apache-beam "
          f"{apache_beam.__version__}: {len(out)} differences")
    return 1 if out else 0


if __name__ == "__main__":
    sys.exit(main())
