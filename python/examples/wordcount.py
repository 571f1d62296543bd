"""Beam Python's word count, as a user writes it: nothing in it names Weir. Run it on Weir with
`--runner=weir.WeirRunner` (the `weir-beam` wheel), or on any other Beam runner.

    python python/examples/wordcount.py --input README.md --output /tmp/weir-py/counts --runner=weir.WeirRunner
"""

import argparse
import re

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--input", required=True)
    parser.add_argument("--output", required=True)
    known, pipeline_args = parser.parse_known_args(argv)
    with beam.Pipeline(options=PipelineOptions(pipeline_args)) as p:
        (
            p
            | "Read" >> beam.io.ReadFromText(known.input)
            | "Words" >> beam.FlatMap(lambda line: re.findall(r"[^\W\d_]+", line))
            | "Count" >> beam.combiners.Count.PerElement()
            | "Format" >> beam.MapTuple(lambda word, n: f"{word}: {n}")
            | "Write" >> beam.io.WriteToText(known.output)
        )


if __name__ == "__main__":
    main()
