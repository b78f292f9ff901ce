"""busgate's data pipeline on Apache Spark, reading the bus journal."""
