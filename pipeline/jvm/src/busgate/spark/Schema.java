package busgate.spark;

import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;

/** The columns of busjournal: the same as pipeline.decode.SPARK_SCHEMA, in the same order. */
final class Schema {
  /** pipeline.rows.HEADER_TEXT: CLR (the caller) and TRC (traceparent) are PROTOCOL.md 5.11's. */
  static final String[] TEXT = {
    "MID", "RID", "GRP", "RPY", "TYP", "CMD", "ENC", "MSG", "SRC", "TGT", "CLR", "TRC"
  };
  static final String[] NUMBERS = {"RCD", "FLG", "XPY", "PRI"};
  // column ids
  static final int TS = 0, SEQ = 1, SEGMENT = 2, OFFSET = 3, TEXT0 = 4, ENC = 10, NUM0 = 16;
  static final int SIZE = 20, PAYLOAD = 21, PAYLOAD_MAP = 22;
  static final StructType FULL;

  static {
    StructType s = new StructType()
        .add("ts", DataTypes.TimestampType)
        .add("seq", DataTypes.LongType)
        .add("segment", DataTypes.StringType)
        .add("offset", DataTypes.LongType);
    for (String name : TEXT) {
      s = s.add(name, DataTypes.StringType);
    }
    for (String name : NUMBERS) {
      s = s.add(name, DataTypes.LongType);
    }
    FULL = s.add("size", DataTypes.IntegerType)
        .add("payload", DataTypes.StringType)
        .add("payload_map", DataTypes.createMapType(DataTypes.StringType, DataTypes.StringType));
    if (ENC != TEXT0 + 6 || NUM0 != TEXT0 + TEXT.length || SIZE != NUM0 + NUMBERS.length
        || !"ENC".equals(TEXT[ENC - TEXT0]) || FULL.fieldIndex("payload_map") != PAYLOAD_MAP) {
      throw new IllegalStateException("busjournal: Schema's column ids do not match its columns");
    }
  }

  private Schema() {}

  /** The column id of each field of a (pruned) schema. */
  static int[] ids(StructType schema) {
    StructField[] fields = schema.fields();
    int[] ids = new int[fields.length];
    for (int i = 0; i < fields.length; i++) {
      ids[i] = FULL.fieldIndex(fields[i].name());
    }
    return ids;
  }

  /** Whether a column needs the message body decoded. */
  static boolean needsBody(int id) {
    return id >= TEXT0 && id != SIZE;
  }
}
