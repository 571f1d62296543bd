"""A streaming pipeline for comparing runners: a TestStream of keyed numbers with watermark
advances, counted per key in fixed windows, and buffered per key and window by a stateful
DoFn that emits its buffer when an event-time timer fires at the window's end.

    python streaming_pipeline.py [Beam options...]

prints each result as a line `RESULT ...`, in no order (the DoFns run in this process: use
the DirectRunner with --streaming, or a portable runner in LOOPBACK).
"""

import os
import sys

import apache_beam as beam
from apache_beam.coders import VarIntCoder
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.test_stream import TestStream
from apache_beam.transforms import userstate
from apache_beam.transforms.window import FixedWindows, TimestampedValue

class Record(beam.DoFn):
  def process(self, element, window=beam.DoFn.WindowParam):
    # One write a line: bundles run on several threads, and their lines must not interleave.
    os.write(1, ("RESULT %s window=%s\n" % (element, window.start)).encode())


class BufferUntilWindowEnd(beam.DoFn):
  BUFFER = userstate.BagStateSpec("buffer", VarIntCoder())
  END = userstate.TimerSpec("end", userstate.TimeDomain.WATERMARK)

  def process(
      self,
      kv,
      window=beam.DoFn.WindowParam,
      buffer=beam.DoFn.StateParam(BUFFER),
      end=beam.DoFn.TimerParam(END)):
    buffer.add(kv[1])
    end.set(window.max_timestamp())

  @userstate.on_timer(END)
  def flush(self, key=beam.DoFn.KeyParam, buffer=beam.DoFn.StateParam(BUFFER)):
    yield ("buffered", key, sorted(buffer.read()))
    buffer.clear()


def main(argv):
  events = (
      TestStream()
      .add_elements([TimestampedValue(("a", 1), 1), TimestampedValue(("b", 2), 2)])
      .add_elements([TimestampedValue(("a", 3), 3)])
      .advance_watermark_to(5)
      .add_elements([TimestampedValue(("a", 4), 6), TimestampedValue(("b", 5), 12)])
      .advance_watermark_to(15)
      .add_elements([TimestampedValue(("b", 6), 14), TimestampedValue(("a", 7), 21)])
      .advance_watermark_to(30)
      .add_elements([TimestampedValue(("a", 8), 35)])
      .advance_watermark_to_infinity())
  with beam.Pipeline(options=PipelineOptions(argv)) as p:
    windowed = p | events | beam.WindowInto(FixedWindows(10))
    (windowed
     | beam.CombinePerKey(sum)
     | "Counted" >> beam.Map(lambda kv: ("sum", kv[0], kv[1]))
     | "RecordSums" >> beam.ParDo(Record()))
    (windowed
     | beam.ParDo(BufferUntilWindowEnd())
     | "RecordBuffers" >> beam.ParDo(Record()))


if __name__ == "__main__":
  main(sys.argv[1:])
