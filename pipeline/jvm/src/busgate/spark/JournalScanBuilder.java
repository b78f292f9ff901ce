package busgate.spark;

import java.util.ArrayList;
import java.util.List;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.SupportsPushDownFilters;
import org.apache.spark.sql.connector.read.SupportsPushDownRequiredColumns;
import org.apache.spark.sql.sources.And;
import org.apache.spark.sql.sources.EqualTo;
import org.apache.spark.sql.sources.Filter;
import org.apache.spark.sql.sources.GreaterThan;
import org.apache.spark.sql.sources.GreaterThanOrEqual;
import org.apache.spark.sql.sources.LessThan;
import org.apache.spark.sql.sources.LessThanOrEqual;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * Takes the columns a query needs and its comparisons on {@code ts} and {@code seq}: those make
 * bounds that skip segments, index blocks and records; Spark still applies every filter.
 */
final class JournalScanBuilder
    implements ScanBuilder, SupportsPushDownRequiredColumns, SupportsPushDownFilters {
  private final Options options;
  private StructType required = Schema.FULL;
  private Bounds bounds = Bounds.ALL;
  private Filter[] pushed = new Filter[0];
  private Match match = Match.NONE;
  private Filter[] ranged = new Filter[0]; // the filters that made the bounds

  JournalScanBuilder(CaseInsensitiveStringMap options) {
    this.options = new Options(options);
  }

  @Override
  public void pruneColumns(StructType requiredSchema) {
    required = requiredSchema;
  }

  private static Long number(String column, Object value) {
    if (column.equals("ts")) {
      if (value instanceof java.sql.Timestamp) {
        java.sql.Timestamp t = (java.sql.Timestamp) value;
        return Math.floorDiv(t.getTime(), 1000) * 1_000_000 + t.getNanos() / 1000;
      }
      if (value instanceof java.time.Instant) {
        java.time.Instant t = (java.time.Instant) value;
        return t.getEpochSecond() * 1_000_000 + t.getNano() / 1000;
      }
      return null;
    }
    if (value instanceof Long || value instanceof Integer || value instanceof Short
        || value instanceof Byte) {
      return ((Number) value).longValue();
    }
    return null;
  }

  /** The bounds of one filter (ALL when it gives none). */
  static Bounds bounds(Filter f) {
    if (f instanceof And) {
      return bounds(((And) f).left()).and(bounds(((And) f).right()));
    }
    String column;
    Object value;
    if (f instanceof GreaterThanOrEqual) {
      column = ((GreaterThanOrEqual) f).attribute();
      value = ((GreaterThanOrEqual) f).value();
    } else if (f instanceof GreaterThan) {
      column = ((GreaterThan) f).attribute();
      value = ((GreaterThan) f).value();
    } else if (f instanceof LessThan) {
      column = ((LessThan) f).attribute();
      value = ((LessThan) f).value();
    } else if (f instanceof LessThanOrEqual) {
      column = ((LessThanOrEqual) f).attribute();
      value = ((LessThanOrEqual) f).value();
    } else if (f instanceof EqualTo) {
      column = ((EqualTo) f).attribute();
      value = ((EqualTo) f).value();
    } else {
      return Bounds.ALL;
    }
    if (!column.equals("ts") && !column.equals("seq")) {
      return Bounds.ALL;
    }
    Long n = number(column, value);
    if (n == null) {
      return Bounds.ALL;
    }
    boolean ts = column.equals("ts");
    Bounds b = Bounds.ALL;
    if (f instanceof GreaterThanOrEqual || f instanceof EqualTo) {
      b = ts ? b.since(n) : b.sinceSeq(n);
    }
    if (f instanceof GreaterThan) {
      b = ts ? b.since(n + 1) : b.sinceSeq(n + 1);
    }
    if (f instanceof LessThan) {
      b = ts ? b.until(n) : b.untilSeq(n);
    }
    if (f instanceof LessThanOrEqual || f instanceof EqualTo) {
      b = ts ? b.until(n + 1) : b.untilSeq(n + 1);
    }
    return b;
  }

  @Override
  public Filter[] pushFilters(Filter[] filters) {
    List<Filter> used = new ArrayList<>();
    List<Object[]> matches = new ArrayList<>();
    Bounds b = Bounds.ALL;
    for (Filter f : filters) {
      Bounds one = bounds(f);
      Object[] m = Match.of(f);
      if (one.any()) {
        used.add(f);
        b = b.and(one);
      } else if (m != null) {
        used.add(f);
        matches.add(m);
      }
    }
    bounds = b;
    match = Match.from(matches);
    List<Filter> ranges = new ArrayList<>();
    for (Filter f : used) {
      if (bounds(f).any()) {
        ranges.add(f);
      }
    }
    ranged = ranges.toArray(new Filter[0]);
    pushed = used.toArray(new Filter[0]);
    return filters; // every filter is evaluated again after the scan
  }

  @Override
  public Filter[] pushedFilters() {
    return pushed;
  }

  @Override
  public Scan build() {
    return new JournalScan(options, required, options.bounds.and(bounds), match, ranged);
  }
}
