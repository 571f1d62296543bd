"""A batch pipeline with Beam's grouping, combining, side inputs, flattening and windowing,
writing its results with WriteToText. The tests run it on Beam Python's DirectRunner and on
Weir (through weir-job-server) and compare the files.

    python batch_pipeline.py --output PREFIX [Beam pipeline options...]
"""

import argparse
import json
import struct

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.transforms import window

TEXT = [
    "the quick brown fox jumps over the lazy dog",
    "the dog sleeps",
    "a fox is quick and a dog is lazy",
    "over and over again",
]


def run(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--output", required=True)
    known, rest = parser.parse_known_args(argv)
    with beam.Pipeline(options=PipelineOptions(rest)) as p:
        lines = p | "Lines" >> beam.Create(TEXT)
        words = lines | "Split" >> beam.FlatMap(str.split)
        # GroupByKey, then a plain function of the groups.
        grouped = (
            words
            | "Pair" >> beam.Map(lambda w: (w[0], w))
            | "GroupByFirst" >> beam.GroupByKey()
            | "Sorted" >> beam.MapTuple(lambda k, ws: ("group", k, sorted(ws))))
        # CombinePerKey (lifted: precombined before the grouping).
        counts = (
            words
            | "One" >> beam.Map(lambda w: (w, 1))
            | "Count" >> beam.CombinePerKey(sum)
            | "Counted" >> beam.MapTuple(lambda w, n: ("count", w, n)))
        # Side inputs: a singleton, a list and a dict.
        total = words | "Total" >> beam.combiners.Count.Globally()
        stop = p | "Stop" >> beam.Create([("the", "article"), ("a", "article"), ("and", "conjunction")])
        tagged = (
            words
            | "Distinct" >> beam.Distinct()
            | "Tag" >> beam.Map(
                lambda w, total, stop, lengths: ("tagged", w, stop.get(w, "word"), total, max(lengths)),
                total=beam.pvalue.AsSingleton(total),
                stop=beam.pvalue.AsDict(stop),
                lengths=beam.pvalue.AsList(lines | "Lengths" >> beam.Map(len))))
        # Fixed windows over timestamped elements, summed per window.
        windowed = (
            p
            | "Events" >> beam.Create([(i, i * 7 % 60) for i in range(40)])
            | "Stamp" >> beam.Map(lambda e: window.TimestampedValue(("k%d" % (e[0] % 3), e[0]), e[1]))
            | "Window" >> beam.WindowInto(window.FixedWindows(15))
            | "SumPerWindow" >> beam.CombinePerKey(sum)
            | "WithWindow" >> beam.ParDo(_WithWindow())
            | "Rewindow" >> beam.WindowInto(window.GlobalWindows()))
        # Flatten of differently windowed counts (Beam Python warns, and each element keeps
        # its window), then each with its window.
        stamped = (
            p
            | "More" >> beam.Create([(i, i * 11 % 50) for i in range(30)])
            | "StampMore" >> beam.Map(lambda e: window.TimestampedValue(("m%d" % (e[0] % 2), 1), e[1])))
        fixed = stamped | "Fixed" >> beam.WindowInto(window.FixedWindows(20)) | "CountFixed" >> beam.CombinePerKey(sum)
        sliding = (stamped | "Sliding" >> beam.WindowInto(window.SlidingWindows(20, 10))
                   | "CountSliding" >> beam.CombinePerKey(sum))
        sessions = (stamped | "Sessions" >> beam.WindowInto(window.Sessions(3))
                    | "CountSessions" >> beam.CombinePerKey(sum))
        mixed = (
            (fixed, sliding, sessions)
            | "Mixed" >> beam.Flatten()
            | "MixedWithWindow" >> beam.ParDo(_WithWindow())
            | "MixedRewindow" >> beam.WindowInto(window.GlobalWindows()))
        # A GroupByKey's output straight into a Flatten whose output has another coder: Weir
        # groups, and a harness re-encodes the groups in the Flatten's output's coder.
        by_length = words | "PairByLength" >> beam.Map(lambda w: (len(w), w)) | "GroupByLength" >> beam.GroupByKey()
        regrouped = (
            (by_length, p | "NoGroup" >> beam.Create([("none", "x")]))
            | "Regrouped" >> beam.Flatten()
            | "ListedGroups" >> beam.Map(
                lambda kv: ("bylength", str(kv[0]), [kv[1]] if isinstance(kv[1], str) else sorted(kv[1]))))
        # A window function of the user's own whose windows merge: the harness assigns and
        # merges them, Weir groups.
        own_sessions = (
            stamped
            | "OwnSessions" >> beam.WindowInto(_OwnSessions(4))
            | "CountOwnSessions" >> beam.CombinePerKey(sum)
            | "OwnWithWindow" >> beam.ParDo(_WithWindow())
            | "OwnRewindow" >> beam.WindowInto(window.GlobalWindows()))
        # Windows of the user's own type and coder, which Weir carries as bytes: sessions per
        # key, some windows longer than Weir keeps inline (a long key makes a long tag).
        tagged_sessions = (
            stamped
            | "LongKeys" >> beam.Map(lambda kv: (kv[0] * (1 if kv[0] == "m0" else 12), kv[1]))
            | "TaggedSessions" >> beam.WindowInto(_TaggedSessions(4))
            | "CountTagged" >> beam.CombinePerKey(sum)
            | "TaggedWithWindow" >> beam.ParDo(_WithTaggedWindow())
            | "TaggedRewindow" >> beam.WindowInto(window.GlobalWindows()))
        # Flatten, of inputs with different coders (and one windowing, as Beam requires).
        everything = ((grouped, counts, tagged, windowed, mixed, regrouped, own_sessions, tagged_sessions)
                      | "All" >> beam.Flatten())
        (everything
         | "Json" >> beam.Map(lambda r: json.dumps(r, sort_keys=True))
         | "Write" >> beam.io.WriteToText(known.output))


class _OwnSessions(window.WindowFn):
    """Sessions of `gap` seconds, merged by the SDK (Weir does not know this function)."""

    def __init__(self, gap):
        self.gap = gap

    def assign(self, context):
        return [window.IntervalWindow(context.timestamp, context.timestamp + self.gap)]

    def merge(self, merge_context):
        run, end = [], None
        for w in sorted(merge_context.windows, key=lambda w: w.start):
            if run and w.start < end:
                run.append(w)
                end = max(end, w.end)
                continue
            if len(run) > 1:
                merge_context.merge(run, self._merged(run, end))
            run, end = [w], w.end
        if len(run) > 1:
            merge_context.merge(run, self._merged(run, end))

    def _merged(self, run, end):
        """The window `run` merges into, ending at `end`."""
        return window.IntervalWindow(run[0].start, end)

    def get_window_coder(self):
        return beam.coders.coders.IntervalWindowCoder()


class _TaggedWindow(window.BoundedWindow):
    """A window of the user's own type: an interval with a tag (the key it was made for)."""

    def __init__(self, start, end, tag):
        super().__init__(end)
        self._start = window.Timestamp.of(start)
        self.tag = tag

    @property
    def start(self):
        return self._start

    def _parts(self):
        return (self.start, self.end, self.tag)

    def __eq__(self, other):
        return type(other) is _TaggedWindow and self._parts() == other._parts()

    def __hash__(self):
        return hash(self._parts())

    def __lt__(self, other):
        return self._parts() < other._parts()

    def __repr__(self):
        return "_TaggedWindow(%s, %s, %s)" % self._parts()


class _TaggedWindowCoder(beam.coders.Coder):
    """The tagged window's own coder: start and end in microseconds, then the tag."""

    def encode(self, w):
        tag = w.tag.encode()
        return struct.pack(">qqB", w.start.micros, w.end.micros, len(tag)) + tag

    def decode(self, b):
        start, end, n = struct.unpack(">qqB", b[:17])
        return _TaggedWindow(window.Timestamp(micros=start), window.Timestamp(micros=end), b[17:17 + n].decode())

    def is_deterministic(self):
        return True


class _TaggedSessions(_OwnSessions):
    """Sessions of `gap` seconds in tagged windows, merged by the SDK."""

    def assign(self, context):
        return [_TaggedWindow(context.timestamp, context.timestamp + self.gap, context.element[0])]

    def _merged(self, run, end):
        return _TaggedWindow(run[0].start, end, run[0].tag)

    def get_window_coder(self):
        return _TaggedWindowCoder()


class _WithTaggedWindow(beam.DoFn):
    def process(self, kv, w=beam.DoFn.WindowParam, ts=beam.DoFn.TimestampParam):
        # The grouping's output at the end of the window, in milliseconds (Beam's portable
        # runners keep time in milliseconds; Beam Python's own DirectRunner in microseconds).
        yield ("tagged_window", kv[0], kv[1], float(w.start), float(w.end), w.tag, ts.micros // 1000)


class _WithWindow(beam.DoFn):
    def process(self, kv, w=beam.DoFn.WindowParam):
        yield ("window", kv[0], kv[1], float(w.start), float(w.end))


if __name__ == "__main__":
    run()
