"""busgate's data pipeline on Apache Spark, reading the bus journal (``bus/journal.py``).

Modules, readers and writers kept apart from the pure transforms:

- :mod:`pipeline.decode`: journal records to Arrow record batches, column-wise (no Spark), through
  :mod:`pipeline.decode_c` (the C accelerator) or :mod:`pipeline.decode_numpy`; the columns are
  in :mod:`pipeline.schema`;
- :mod:`pipeline.source`: the ``busjournal`` Spark data source, batch and streaming;
- :mod:`pipeline.session`: a SparkSession with the source registered (``local[2]`` by default);
- :mod:`pipeline.daemon`: the PySpark worker daemon that preloads the decoder;
- :mod:`pipeline.transforms`: pure DataFrame -> DataFrame functions (outcomes, latencies, ...);
- :mod:`pipeline.io`: reading a time range, writing Parquet tables;
- :mod:`pipeline.report` and :mod:`pipeline.cli`: ``busgate report`` (Parquet + HTML + charts).
"""
