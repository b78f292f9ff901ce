package busgate.spark;

import org.apache.spark.sql.connector.metric.CustomMetric;
import org.apache.spark.sql.connector.metric.CustomSumMetric;
import org.apache.spark.sql.connector.metric.CustomTaskMetric;

/** What a scan skipped, shown with the scan in Spark's UI and query metrics. */
final class Metrics {
  private Metrics() {}

  /** Damaged spans of the journal read around. */
  public static final class DamagedSpans extends CustomSumMetric {
    @Override
    public String name() {
      return "damagedSpans";
    }

    @Override
    public String description() {
      return "damaged journal spans skipped";
    }
  }

  /** Bytes of those spans. */
  public static final class SkippedBytes extends CustomSumMetric {
    @Override
    public String name() {
      return "skippedBytes";
    }

    @Override
    public String description() {
      return "damaged journal bytes skipped";
    }
  }

  static CustomMetric[] supported() {
    return new CustomMetric[] {new DamagedSpans(), new SkippedBytes()};
  }

  private static CustomTaskMetric value(String name, long value) {
    return new CustomTaskMetric() {
      @Override
      public String name() {
        return name;
      }

      @Override
      public long value() {
        return value;
      }
    };
  }

  static CustomTaskMetric[] values(long spans, long bytes) {
    return new CustomTaskMetric[] {value("damagedSpans", spans), value("skippedBytes", bytes)};
  }
}
