package busgate.spark;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.util.ArrayList;
import java.util.List;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.connector.metric.CustomTaskMetric;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.unsafe.types.UTF8String;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The rows of one partition: records found and verified a chunk at a time (damaged spans skipped
 * and logged), records outside the bounds dropped from their headers, and only the columns asked
 * for decoded (none at all for a count).
 */
final class JournalPartitionReader implements PartitionReader<InternalRow> {
  private static final Logger LOG = LoggerFactory.getLogger("busgate.spark.busjournal");
  private static final UTF8String FRAM = UTF8String.fromString("FRAM");

  private final JournalPartition.Range[] ranges;
  private final int[] ids;
  private final boolean body;
  private final long maxRecord;
  private final Match match;
  private final CompactedReader parquet;
  private final Files files;
  private scala.collection.Iterator<InternalRow> compactedRows; // the range is a compacted file
  private int[] outField; // per output column: its field in the compacted rows
  private final FrameDecoder decoder = new FrameDecoder();
  private final SlowRows slow;
  private final GenericInternalRow row;
  private int rangeIndex = -1;
  private JournalPartition.Range part;
  private Chunks chunks;
  private UTF8String segment;
  private int header;
  private Chunks.Chunk chunk;
  private int[] kept = new int[0];
  private int keptCount;
  private int index;
  private SlowRows.Row[] slowRows; // per kept record: the full decoder's row, or null
  private long damagedSpans;
  private long skippedBytes;

  JournalPartitionReader(
      Files files, JournalPartition.Range[] ranges, int[] ids, String python, long maxRecord,
      Match match, CompactedReader parquet) {
    this.files = files;
    this.ranges = ranges;
    this.ids = ids;
    this.maxRecord = maxRecord;
    this.match = match;
    this.parquet = parquet;
    boolean needs = match.any();
    for (int id : ids) {
      needs |= Schema.needsBody(id);
    }
    this.body = needs;
    this.slow = needs ? new SlowRows(python) : null;
    this.row = new GenericInternalRow(ids.length);
  }

  /** Open the next range; false when there is none. */
  private boolean nextRange() throws IOException {
    if (chunks != null) {
      chunks.close();
      chunks = null;
    }
    if (++rangeIndex >= ranges.length) {
      return false;
    }
    part = ranges[rangeIndex];
    compactedRows = null;
    if (part.parquet != null && parquet != null) {
      compactedRows = parquet.rows(files, part.parquet);
      if (outField == null) {
        outField = new int[ids.length];
        for (int c = 0; c < ids.length; c++) {
          outField[c] = parquet.field(ids[c]);
        }
      }
      return true;
    }
    segment = UTF8String.fromString(new org.apache.hadoop.fs.Path(part.path).getName());
    header = Scanner.headerSize(part.version);
    try {
      chunks = new Chunks(files, part.path, part.start, part.stop, part.limit, part.version,
          part.fin, part.afterSeq, new Scanner(maxRecord), Chunks.CHUNK);
    } catch (IOException e) {
      throw new UncheckedIOException("busjournal: cannot read " + part.path, e);
    }
    return true;
  }

  private boolean load() throws IOException {
    while (true) {
      chunk = chunks == null ? null : chunks.next();
      if (chunk == null) {
        if (!nextRange()) {
          return false;
        }
        if (compactedRows != null) {
          return false; // next() reads the compacted range
        }
        continue;
      }
      Scanner.Result r = chunk.result;
      for (Scanner.Damage d : r.damage) {
        damagedSpans++;
        skippedBytes += d.size;
        LOG.warn("busjournal: {}: {} at offset {} ({} bytes skipped)", part.path, d.reason,
            chunk.base + d.offset, d.size);
      }
      byte[] data = chunk.data;
      if (kept.length < r.count) {
        kept = new int[r.count];
      }
      keptCount = 0;
      Bounds bounds = part.bounds;
      boolean filter = bounds.any();
      boolean v2 = part.version >= 2;
      for (int i = 0; i < r.count; i++) {
        int at = r.offsets[i];
        if (filter && !bounds.keeps(Scanner.be64(data, at + 12), v2 ? Scanner.be64(data, at + 20) : 0, v2)) {
          continue;
        }
        kept[keptCount++] = at;
      }
      index = 0;
      slowRows = null;
      if (body && keptCount > 0) {
        findSlow(data);
      }
      if (keptCount > 0) {
        return true;
      }
    }
  }

  /** The full decoder's rows for the kept records the fast path does not take. */
  private void findSlow(byte[] data) throws IOException {
    List<int[]> bodies = null;
    List<Integer> where = null;
    for (int i = 0; i < keptCount; i++) {
      int at = kept[i];
      int length = Scanner.be32(data, at + 8);
      if (!decoder.read(data, at + header, length)) {
        if (bodies == null) {
          bodies = new ArrayList<>();
          where = new ArrayList<>();
        }
        bodies.add(new int[] {at + header, length});
        where.add(i);
      }
    }
    if (bodies != null) {
      SlowRows.Row[] rows = slow.rows(data, bodies);
      slowRows = new SlowRows.Row[keptCount];
      for (int j = 0; j < rows.length; j++) {
        slowRows[where.get(j)] = rows[j];
      }
    }
  }

  /** Text column id of the current record (fast: from the decoder, else the full row). */
  private UTF8String text(int id, SlowRows.Row full) {
    if (full != null) {
      return full.text[id - Schema.TEXT0];
    }
    if (id == Schema.ENC) {
      return FRAM;
    }
    int k = id - Schema.TEXT0; // MID..CMD, then MSG SRC TGT CLR TRC after ENC
    return decoder.text(k < 6 ? k : k - 1);
  }

  private boolean matches(SlowRows.Row full) {
    for (int i = 0; i < match.columns.length; i++) {
      if (!match.allows(i, text(match.columns[i], full))) {
        return false;
      }
    }
    return true;
  }

  /** The next row of the compacted range that is kept; false when the range is done. */
  private boolean nextCompacted() {
    Bounds bounds = part.bounds;
    while (compactedRows.hasNext()) {
      InternalRow found = compactedRows.next();
      if (bounds.any()) {
        boolean hasSeq = !found.isNullAt(parquet.seq);
        long seq = hasSeq ? found.getLong(parquet.seq) : 0;
        if (!bounds.keeps(found.getLong(parquet.ts), seq, hasSeq)) {
          continue;
        }
      }
      boolean ok = true;
      for (int i = 0; i < match.columns.length && ok; i++) {
        Object v = parquet.value(found, parquet.field(match.columns[i]));
        ok = match.allows(i, (UTF8String) v);
      }
      if (!ok) {
        continue;
      }
      for (int c = 0; c < ids.length; c++) {
        row.update(c, parquet.value(found, outField[c]));
      }
      return true;
    }
    return false;
  }

  @Override
  public boolean next() throws IOException {
    while (true) {
      if (compactedRows != null) {
        if (nextCompacted()) {
          return true;
        }
        compactedRows = null;
        chunk = null;
        if (!nextRange()) {
          return false;
        }
        continue;
      }
      if (chunk == null || index >= keptCount) {
        if (!load()) {
          if (compactedRows != null) {
            continue; // the next range is a compacted file
          }
          return false;
        }
      }
      if (fill()) {
        return true;
      }
    }
  }

  /** Build the row of the current record and move on; false when it does not match. */
  private boolean fill() {
    byte[] data = chunk.data;
    int at = kept[index];
    int length = Scanner.be32(data, at + 8);
    SlowRows.Row full = slowRows == null ? null : slowRows[index];
    boolean fast = false;
    if (body && full == null) {
      fast = decoder.read(data, at + header, length);
    }
    if (match.any() && !matches(full)) {
      index++;
      return false;
    }
    for (int c = 0; c < ids.length; c++) {
      int id = ids[c];
      Object value;
      switch (id) {
        case Schema.TS:
          value = Scanner.be64(data, at + 12);
          break;
        case Schema.SEQ:
          value = part.version >= 2 ? (Object) Scanner.be64(data, at + 20) : null;
          break;
        case Schema.SEGMENT:
          value = segment;
          break;
        case Schema.OFFSET:
          value = chunk.base + at;
          break;
        case Schema.SIZE:
          value = length;
          break;
        case Schema.PAYLOAD:
          value = full != null ? full.payload : decoder.payload();
          break;
        case Schema.PAYLOAD_MAP:
          value = full != null ? full.payloadMap : decoder.payloadMap();
          break;
        default:
          if (id >= Schema.NUM0) {
            value = full != null ? full.numbers[id - Schema.NUM0] : decoder.number(id - Schema.NUM0);
          } else {
            value = text(id, full);
          }
      }
      row.update(c, value);
    }
    if (body && full == null && !fast) {
      throw new IllegalStateException("busjournal: record at " + (chunk.base + at) + " undecoded");
    }
    index++;
    return true;
  }

  @Override
  public InternalRow get() {
    return row;
  }

  @Override
  public CustomTaskMetric[] currentMetricsValues() {
    return Metrics.values(damagedSpans, skippedBytes);
  }

  @Override
  public void close() throws IOException {
    if (chunks != null) {
      chunks.close();
    }
    if (slow != null) {
      slow.close();
    }
  }
}
