"""Writes Parquet with WriteToParquet, reads it back with ReadFromParquet and writes per-key
sums as JSON lines: two pipelines, run on the DirectRunner and on Weir by the tests, whose
outputs are compared.

    python parquet_pipeline.py --dir DIR [Beam pipeline options...]
"""

import argparse
import json
import os

import apache_beam as beam
import pyarrow
from apache_beam.options.pipeline_options import PipelineOptions

SCHEMA = pyarrow.schema([("key", pyarrow.string()), ("value", pyarrow.int64()), ("score", pyarrow.float64())])


def run(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--dir", required=True)
    known, rest = parser.parse_known_args(argv)
    parquet = os.path.join(known.dir, "rows")
    with beam.Pipeline(options=PipelineOptions(rest)) as p:
        (p
         | "Rows" >> beam.Create([{"key": "k%d" % (i % 13), "value": i, "score": i / 7.0} for i in range(5000)])
         | "WriteParquet" >> beam.io.WriteToParquet(parquet, SCHEMA, num_shards=3))
    with beam.Pipeline(options=PipelineOptions(rest)) as p:
        (p
         | "ReadParquet" >> beam.io.ReadFromParquet(parquet + "*")
         | "Pair" >> beam.Map(lambda r: (r["key"], (r["value"], r["score"])))
         | "Sum" >> beam.CombinePerKey(lambda vs: tuple(map(sum, zip(*vs))) if vs else (0, 0.0))
         | "Json" >> beam.MapTuple(lambda k, s: json.dumps([k, s[0], round(s[1], 6)]))
         | "Write" >> beam.io.WriteToText(os.path.join(known.dir, "sums")))


if __name__ == "__main__":
    run()
