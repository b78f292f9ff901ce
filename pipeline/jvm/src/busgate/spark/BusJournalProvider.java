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
    return new JournalTable(new CaseInsensitiveStringMap(properties));
  }
}
