package busgate.spark;

import java.util.EnumSet;
import java.util.Set;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/** A journal directory as a table that can be read in batch and as a micro-batch stream. */
final class JournalTable implements SupportsRead {
  private final CaseInsensitiveStringMap properties;

  JournalTable(CaseInsensitiveStringMap properties) {
    this.properties = properties;
  }

  @Override
  public String name() {
    return "busjournal";
  }

  @Override
  @SuppressWarnings("deprecation") // columns() is built from it by default
  public StructType schema() {
    return Schema.FULL;
  }

  @Override
  public Set<TableCapability> capabilities() {
    return EnumSet.of(TableCapability.BATCH_READ, TableCapability.MICRO_BATCH_READ);
  }

  @Override
  public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
    java.util.Map<String, String> all = new java.util.HashMap<>(properties);
    all.putAll(options);
    return new JournalScanBuilder(new CaseInsensitiveStringMap(all));
  }
}
