package busgate.spark;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.util.ArrayList;
import java.util.List;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.connector.read.streaming.Offset;
import org.apache.spark.sql.connector.read.streaming.ReadLimit;
import org.apache.spark.sql.connector.read.streaming.ReadMaxRows;
import org.apache.spark.sql.connector.read.streaming.SupportsTriggerAvailableNow;
import org.apache.spark.sql.types.StructType;

/**
 * The journal as a micro-batch stream. An offset is {@code {"segment": N, "pos": P}}: every
 * record before byte P of segment N (and in earlier segments) has been read. Offsets stop at a
 * whole record and never look past an incomplete record of the newest segment (it is being
 * written); once a newer segment exists, the older one is read to its end. The twin of the
 * Python source's stream reader (pipeline/source.py).
 */
final class JournalStream implements MicroBatchStream, SupportsTriggerAvailableNow {
  private static final ObjectMapper JSON = new ObjectMapper();
  private final Options options;
  private final StructType required;

  JournalStream(Options options, StructType required) {
    this.options = options;
    this.required = required;
  }

  /** A stream position. */
  static final class Position extends Offset {
    final long segment;
    final long pos;

    Position(long segment, long pos) {
      this.segment = segment;
      this.pos = pos;
    }

    @Override
    public String json() {
      return "{\"segment\":" + segment + ",\"pos\":" + pos + "}";
    }
  }

  @Override
  public Offset deserializeOffset(String json) {
    try {
      JsonNode node = JSON.readTree(json);
      // "seq" held the segment number in offsets written before sequence numbers existed
      JsonNode segment = node.has("segment") ? node.get("segment") : node.get("seq");
      return new Position(segment.asLong(), node.get("pos").asLong());
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  private List<Segments.Info> infos() {
    return Planner.infos(options.files, options.path);
  }

  /** {end, records, whole}: where the complete records from start end (see plan.complete_end). */
  private long[] completeEnd(Segments.Info info, long start, boolean fin, long budget) {
    long end = start;
    long count = 0;
    try (Chunks chunks = new Chunks(options.files, info.path, start, -1, info.size, info.version,
        fin, -1, new Scanner(Options.MAX_RECORD), Chunks.CHUNK)) {
      for (Chunks.Chunk c = chunks.next(); c != null; c = chunks.next()) {
        Scanner.Result r = c.result;
        if (budget >= 0 && count + r.count > budget) {
          return new long[] {c.base + r.offsets[(int) (budget - count)], budget, 0};
        }
        count += r.count;
        end = c.base + r.end;
      }
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
    return new long[] {end, count, 1};
  }

  @Override
  public Offset initialOffset() {
    List<Segments.Info> infos = infos();
    if (infos.isEmpty()) {
      return new Position(0, 0);
    }
    if ("latest".equalsIgnoreCase(options.starting)) {
      Segments.Info newest = infos.get(infos.size() - 1);
      return new Position(newest.number, completeEnd(newest, newest.firstRecord, false, -1)[0]);
    }
    return new Position(infos.get(0).number, 0);
  }

  @Override
  public ReadLimit getDefaultReadLimit() {
    return options.maxRecordsPerTrigger > 0
        ? ReadLimit.maxRows(options.maxRecordsPerTrigger)
        : ReadLimit.allAvailable();
  }

  @Override
  public Offset latestOffset() {
    throw new UnsupportedOperationException("latestOffset(start, limit) is used");
  }

  /** Trigger.AvailableNow: what is there when the query starts is read, and no more. */
  @Override
  public void prepareForTriggerAvailableNow() {
    List<Segments.Info> infos = infos();
    Position first = new Position(infos.isEmpty() ? 0 : infos.get(0).number, 0);
    availableNow = (Position) latestOffset(first, ReadLimit.allAvailable());
  }

  private Position availableNow;

  private static boolean after(Position a, Position b) {
    return a.segment > b.segment || (a.segment == b.segment && a.pos > b.pos);
  }

  @Override
  public Offset latestOffset(Offset startOffset, ReadLimit limit) {
    Position end = (Position) latest(startOffset, limit);
    return availableNow != null && after(end, availableNow) ? availableNow : end;
  }

  private Offset latest(Offset startOffset, ReadLimit limit) {
    Position start = (Position) startOffset;
    long budget = limit instanceof ReadMaxRows ? ((ReadMaxRows) limit).maxRows() : -1;
    Position end = start;
    List<Segments.Info> infos = infos();
    for (int i = 0; i < infos.size(); i++) {
      Segments.Info info = infos.get(i);
      if (info.number < start.segment) {
        continue;
      }
      boolean newest = i == infos.size() - 1;
      long begin = Math.max(info.number == start.segment ? start.pos : 0, info.firstRecord);
      long[] found = completeEnd(info, begin, !newest, budget);
      // an older segment is done with: the next offset is past all of it
      end = new Position(info.number, found[2] == 1 && !newest ? info.size : found[0]);
      if (budget >= 0) {
        budget -= found[1];
        if (budget <= 0) {
          break;
        }
      }
    }
    return end;
  }

  @Override
  public InputPartition[] planInputPartitions(Offset startOffset, Offset endOffset) {
    Position start = (Position) startOffset;
    Position end = (Position) endOffset;
    List<InputPartition> parts = new ArrayList<>();
    for (Segments.Info info : infos()) {
      if (info.number < start.segment || info.number > end.segment) {
        continue;
      }
      long begin = Math.max(info.number == start.segment ? start.pos : 0, info.firstRecord);
      long stop = info.number == end.segment ? end.pos : info.size;
      if (stop > begin) {
        parts.add(new JournalPartition(new JournalPartition.Range(info.path, begin, stop,
            stop, info.version, -1, true, Bounds.ALL)));
      }
    }
    return parts.toArray(new InputPartition[0]);
  }

  @Override
  public PartitionReaderFactory createReaderFactory() {
    return new JournalScan.Factory(options.files, Schema.ids(required), options.python,
        Match.NONE, null);
  }

  @Override
  public void commit(Offset end) {}

  @Override
  public void stop() {}
}
