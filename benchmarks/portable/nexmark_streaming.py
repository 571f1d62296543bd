"""Beam Python's Nexmark queries in streaming mode, fed from an events file.

Beam's Nexmark launcher streams only from Pub/Sub. This driver runs its queries unchanged on
an unbounded source instead: a `PeriodicImpulse` whose firings replay the events file in
event-time order, one slice of event time per firing. Each firing's timestamp is the start of
its slice, so the impulse's watermark never passes an event still to come and no event is late.
The pipeline is unbounded, so Beam Python's DirectRunner runs it in streaming mode (on its
BundleBasedDirectRunner: the FnApiRunner has no streaming mode) and Weir runs it on its
streaming engine. The impulse stops after the last slice, which ends the job.

    python nexmark_streaming.py --events FILE --slices 20 --query 3 [pipeline options]

It prints the launcher's own counts of events and results.
"""

import json
import os
import sys
import tempfile

import apache_beam as beam
from apache_beam.options.pipeline_options import StandardOptions
from apache_beam.testing.benchmarks.nexmark import nexmark_util
from apache_beam.testing.benchmarks.nexmark.nexmark_launcher import NexmarkLauncher
from apache_beam.transforms import window
from apache_beam.transforms.periodicsequence import PeriodicImpulse


def take(flag, default):
    """Removes `flag VALUE` from the command line, for the launcher's parser not to see it."""
    if flag in sys.argv:
        i = sys.argv.index(flag)
        value = sys.argv[i + 1]
        del sys.argv[i:i + 2]
        return value
    return default


def slice_events(path, slices, into):
    """Writes the events into `slices` files by event time; returns (first ms, slice ms)."""
    with open(path) as f:
        lines = [l for l in f if l.strip()]
    times = [json.loads(l)["dateTime"] for l in lines]
    first, last = min(times), max(times)
    width = max(1, (last - first) // slices + 1)
    files = [open(os.path.join(into, "slice-%05d.json" % i), "w") for i in range(slices)]
    for line, t in zip(lines, times):
        files[(t - first) // width].write(line)
    for f in files:
        f.close()
    return first, width


class ReadSlice(beam.DoFn):
    """The events of the slice that starts at the firing's timestamp."""

    def __init__(self, into, first_ms, width_ms):
        self.into, self.first_ms, self.width_ms = into, first_ms, width_ms

    def process(self, fired):
        index = int(round((float(fired) * 1000 - self.first_ms) / self.width_ms))
        with open(os.path.join(self.into, "slice-%05d.json" % index)) as f:
            for line in f:
                yield line


class StreamingLauncher(NexmarkLauncher):
    def __init__(self, into, first_ms, width_ms, slices):
        super().__init__()
        self.into, self.first_ms, self.width_ms, self.slices = into, first_ms, width_ms, slices
        self.pipeline_options.view_as(StandardOptions).streaming = True

    def read_from_file(self):
        start = self.first_ms / 1000.0
        return (
            self.pipeline
            | 'replaying_slices' >> PeriodicImpulse(
                start_timestamp=start,
                stop_timestamp=start + self.slices * self.width_ms / 1000.0,
                fire_interval=self.width_ms / 1000.0)
            | 'reading_slice' >> beam.ParDo(ReadSlice(self.into, self.first_ms, self.width_ms))
            | 'deserialization' >> beam.ParDo(nexmark_util.ParseJsonEventFn())
            | 'timestamping' >> beam.Map(lambda e: window.TimestampedValue(e, e.date_time)))


def main():
    events = take("--events", None)
    slices = int(take("--slices", "20"))
    if events is None:
        sys.exit("--events FILE is required")
    into = tempfile.mkdtemp(prefix="nexmark-slices-")
    first_ms, width_ms = slice_events(events, slices, into)
    sys.argv += ["--input", events]
    launcher = StreamingLauncher(into, first_ms, width_ms, slices)
    launcher.run()
    launcher.cleanup()


if __name__ == "__main__":
    main()
    sys.stdout.flush()
    os._exit(0)
