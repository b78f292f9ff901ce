package busgate.spark;

import java.io.Serializable;
import org.apache.spark.sql.connector.read.InputPartition;

/** One partition: one or more byte ranges of segments, read in order. */
final class JournalPartition implements InputPartition {
  private static final long serialVersionUID = 2L;

  /** The records of a segment that start in [start, stop). */
  static final class Range implements Serializable {
    private static final long serialVersionUID = 1L;
    final String path;
    final long start;
    final long stop;
    final long limit;
    final int version;
    final long afterSeq;
    final boolean fin;
    final Bounds bounds;
    final String parquet; // the segment's compacted file, read instead of it (null: none)

    Range(String path, long start, long stop, long limit, int version, long afterSeq, boolean fin,
        Bounds bounds) {
      this(path, start, stop, limit, version, afterSeq, fin, bounds, null);
    }

    Range(String path, long start, long stop, long limit, int version, long afterSeq, boolean fin,
        Bounds bounds, String parquet) {
      this.parquet = parquet;
      this.path = path;
      this.start = start;
      this.stop = stop;
      this.limit = limit;
      this.version = version;
      this.afterSeq = afterSeq;
      this.fin = fin;
      this.bounds = bounds;
    }

    long bytes() {
      return stop - start;
    }
  }

  final Range[] ranges;

  JournalPartition(Range... ranges) {
    this.ranges = ranges;
  }

  @Override
  public String[] preferredLocations() {
    return new String[0];
  }
}
