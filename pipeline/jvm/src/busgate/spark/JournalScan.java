package busgate.spark;

import java.util.List;
import org.apache.spark.sql.connector.metric.CustomMetric;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.types.StructType;

/** A planned read: the columns, the bounds, and the partitions of the journal. */
final class JournalScan implements Scan, Batch {
  private final Options options;
  private final StructType required;
  private final Bounds bounds;
  private final Match match;
  private final org.apache.spark.sql.sources.Filter[] ranged;
  private boolean compacted;

  JournalScan(Options options, StructType required, Bounds bounds, Match match,
      org.apache.spark.sql.sources.Filter[] ranged) {
    this.options = options;
    this.required = required;
    this.bounds = bounds;
    this.match = match;
    this.ranged = ranged;
  }

  @Override
  public StructType readSchema() {
    return required;
  }

  @Override
  public String description() {
    return "busjournal " + options.path + " " + bounds + match;
  }

  @Override
  public Batch toBatch() {
    return this;
  }

  @Override
  public MicroBatchStream toMicroBatchStream(String checkpointLocation) {
    return new JournalStream(options, required);
  }

  @Override
  public InputPartition[] planInputPartitions() {
    int cores = org.apache.spark.sql.SparkSession.active().sparkContext().defaultParallelism();
    List<JournalPartition> parts =
        Planner.packed(options.files, options.path, options.splitBytes, bounds,
            Options.MAX_RECORD, cores);
    for (JournalPartition part : parts) {
      for (JournalPartition.Range r : part.ranges) {
        compacted |= r.parquet != null;
      }
    }
    return parts.toArray(new InputPartition[0]);
  }

  @Override
  public PartitionReaderFactory createReaderFactory() {
    int[] ids = Schema.ids(required);
    CompactedReader parquet =
        compacted ? new CompactedReader(options.files, ids, match, ranged) : null;
    return new Factory(options.files, ids, options.python, match, parquet);
  }

  @Override
  public CustomMetric[] supportedCustomMetrics() {
    return Metrics.supported();
  }

  /** Makes the partition readers on the executors. */
  static final class Factory implements PartitionReaderFactory {
    private static final long serialVersionUID = 2L;
    private final Files files;
    private final int[] ids;
    private final String python;
    private final Match match;
    private final CompactedReader parquet;

    Factory(Files files, int[] ids, String python, Match match, CompactedReader parquet) {
      this.files = files;
      this.ids = ids;
      this.python = python;
      this.match = match;
      this.parquet = parquet;
    }

    @Override
    public PartitionReader<InternalRow> createReader(InputPartition partition) {
      return new JournalPartitionReader(files, ((JournalPartition) partition).ranges, ids, python,
          Options.MAX_RECORD, match, parquet);
    }
  }
}
