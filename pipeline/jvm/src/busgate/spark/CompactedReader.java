package busgate.spark;

import java.io.IOException;
import java.io.Serializable;
import java.io.UncheckedIOException;
import java.util.ArrayList;
import java.util.List;
import org.apache.spark.paths.SparkPath;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.execution.datasources.PartitionedFile;
import org.apache.spark.sql.execution.datasources.parquet.ParquetFileFormat;
import org.apache.spark.sql.sources.Filter;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import scala.Function1;
import scala.collection.Iterator;
import scala.jdk.javaapi.CollectionConverters;

/**
 * Reads compacted segments (pipeline/compact.py: the busjournal columns as Parquet) with Spark's
 * own Parquet reader, built on the driver and shipped to the executors: only the columns needed
 * are read, and row groups outside the pushed ts/seq filters are skipped.
 */
final class CompactedReader implements Serializable {
  private static final long serialVersionUID = 1L;

  final StructType schema; // what is read: the columns asked for, and ts, seq, matched columns
  final int ts;
  final int seq;
  final int[] columnOf; // per schema field: its column id in Schema.FULL
  private final Function1<PartitionedFile, Iterator<InternalRow>> read;

  CompactedReader(Files files, int[] ids, Match match, Filter[] filters) {
    List<Integer> wanted = new ArrayList<>();
    for (int id : ids) {
      wanted.add(id);
    }
    for (int id : new int[] {Schema.TS, Schema.SEQ}) {
      if (!wanted.contains(id)) {
        wanted.add(id);
      }
    }
    for (int id : match.columns) {
      if (!wanted.contains(id)) {
        wanted.add(id);
      }
    }
    StructType s = new StructType();
    columnOf = new int[wanted.size()];
    for (int i = 0; i < columnOf.length; i++) {
      columnOf[i] = wanted.get(i);
      s = s.add(Schema.FULL.fields()[wanted.get(i)]);
    }
    schema = s;
    ts = wanted.indexOf(Schema.TS);
    seq = wanted.indexOf(Schema.SEQ);
    SparkSession spark = SparkSession.active();
    scala.collection.immutable.Map<String, String> options =
        new scala.collection.immutable.Map.Map1<>("returning_batch", "false");
    read = new ParquetFileFormat().buildReaderWithPartitionValues(spark, Schema.FULL,
        new StructType(), schema, CollectionConverters.asScala(java.util.Arrays.asList(filters)).toList(),
        // a copy: the reader writes the requested schema into it (and local mode broadcasts
        // share the object), so two scans must never build on the same configuration
        options, new org.apache.hadoop.conf.Configuration(files.conf()));
  }

  /** The rows of one compacted file (with {@link #schema}). */
  Iterator<InternalRow> rows(Files files, String path) {
    org.apache.hadoop.fs.FileStatus status;
    try {
      status = files.status(path);
    } catch (IOException e) {
      throw new UncheckedIOException("busjournal: cannot read " + path, e);
    }
    long length = status.getLen();
    PartitionedFile part = new PartitionedFile(InternalRow.empty(), SparkPath.fromPathString(path),
        0L, length, new String[0], status.getModificationTime(), length,
        scala.collection.immutable.Map$.MODULE$.<String, Object>empty());
    return read.apply(part);
  }

  /** The value of column id {@code id} in a row read from a compacted file. */
  Object value(InternalRow row, int field) {
    if (row.isNullAt(field)) {
      return null;
    }
    DataType type = schema.fields()[field].dataType();
    return row.get(field, type);
  }

  int field(int id) {
    for (int i = 0; i < columnOf.length; i++) {
      if (columnOf[i] == id) {
        return i;
      }
    }
    return -1;
  }

  static StructField[] fields(StructType s) {
    return s.fields();
  }
}
