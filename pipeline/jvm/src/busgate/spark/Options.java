package busgate.spark;

import java.time.LocalDateTime;
import java.time.OffsetDateTime;
import java.time.ZoneOffset;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/** The source's options, read once on the driver. */
final class Options {
  static final long DEFAULT_SPLIT = 128L * 1024 * 1024; // as spark.sql.files.maxPartitionBytes
  static final long MAX_RECORD = 16L * 1024 * 1024;

  final String path;
  final long splitBytes;
  final Bounds bounds;
  final String python;
  final String starting;
  final long maxRecordsPerTrigger;
  final Files files;

  Options(CaseInsensitiveStringMap o) {
    path = o.get("path");
    if (path == null || path.isEmpty()) {
      throw new IllegalArgumentException("busjournal needs a path: .load('/path/to/journal')");
    }
    splitBytes = o.getLong("splitBytes", DEFAULT_SPLIT);
    Bounds b = Bounds.ALL;
    if (o.containsKey("since")) {
      b = b.since(micros(o.get("since")));
    }
    if (o.containsKey("until")) {
      b = b.until(micros(o.get("until")));
    }
    if (o.containsKey("sinceSeq")) {
      b = b.sinceSeq(Long.parseLong(o.get("sinceSeq").trim()));
    }
    if (o.containsKey("untilSeq")) {
      b = b.untilSeq(Long.parseLong(o.get("untilSeq").trim()));
    }
    bounds = b;
    String configured = o.get("python");
    if (configured == null) {
      SparkSession active = SparkSession.active();
      configured = active.conf().get("spark.pyspark.python", null);
    }
    python = SlowRows.python(configured);
    starting = o.getOrDefault("startingOffsets", "earliest");
    maxRecordsPerTrigger = o.getLong("maxRecordsPerTrigger", -1);
    files = Files.forSession(o.asCaseSensitiveMap());
  }

  /** Epoch seconds or ISO 8601 (UTC unless an offset is given) as microseconds. */
  static long micros(String text) {
    String t = text.trim();
    try {
      return Math.round(Double.parseDouble(t) * 1_000_000);
    } catch (NumberFormatException e) {
      OffsetDateTime when;
      if (t.endsWith("Z") || t.matches(".*[+-]\\d\\d:\\d\\d$")) {
        when = OffsetDateTime.parse(t.replace("Z", "+00:00"));
      } else {
        when = LocalDateTime.parse(t).atOffset(ZoneOffset.UTC);
      }
      return when.toEpochSecond() * 1_000_000 + when.getNano() / 1000;
    }
  }
}
