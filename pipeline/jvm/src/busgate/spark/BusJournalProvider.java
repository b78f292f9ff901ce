package busgate.spark;

import java.util.Map;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * {@code format("busjournal")}: the bus journal (PROTOCOL.md section 8) as a DataFrame, batch and
 * streaming, read in the JVM with column pruning and time/sequence filters pushed down.
 *
 * <p>The path is read through Hadoop's FileSystem API (plain, file://, hdfs://, webhdfs://,
 * s3a://, ...; {@link Files}); one that does not exist is Spark's PATH_NOT_FOUND error.
 *
 * <p>Options: {@code path}; {@code splitBytes} (default 32 MiB; 0: whole segments); {@code since},
 * {@code until} (epoch seconds or ISO 8601), {@code sinceSeq}, {@code untilSeq}; {@code python}
 * (the interpreter of the full-decoder helper); stream: {@code startingOffsets}
 * (earliest|latest), {@code maxRecordsPerTrigger}.
 */
public final class BusJournalProvider implements TableProvider, DataSourceRegister {
  @Override
  public String shortName() {
    return "busjournal";
  }

  @Override
  public StructType inferSchema(CaseInsensitiveStringMap options) {
    return Schema.FULL;
  }

  @Override
  public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
    CaseInsensitiveStringMap options = new CaseInsensitiveStringMap(properties);
    String path = options.get("path");
    if (path != null && !path.isEmpty()) { // a mistyped path is an error now, not 0 rows later
      Files.forSession(properties).journal(path);
    }
    return new JournalTable(options);
  }
}
