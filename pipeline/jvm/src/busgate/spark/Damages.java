package busgate.spark;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;

/**
 * The damaged spans in a time range of a journal on any Hadoop file system, found on the driver
 * by verifying records (nothing decoded): what {@code pipeline.report.journal_damage} does for a
 * local journal, for {@code busgate report --journal hdfs://...}.
 */
public final class Damages {
  private Damages() {}

  /**
   * Every damaged span a read of {@code [sinceUs, untilUs)} skips, in file order.
   *
   * @param path the journal (any Hadoop URI, or a plain path)
   * @param sinceUs first time kept, microseconds (Long.MIN_VALUE: open)
   * @param untilUs first time not kept (Long.MAX_VALUE: open)
   * @return one line per span: path, offset, bytes skipped and reason, tab-separated
   */
  public static String[] find(String path, long sinceUs, long untilUs) {
    Files files = Files.forSession(Collections.emptyMap());
    files.journal(path);
    Bounds bounds = Bounds.ALL.since(sinceUs).until(untilUs);
    List<String> out = new ArrayList<>();
    for (JournalPartition.Range r : Planner.plan(files, path, 0, bounds, Options.MAX_RECORD)) {
      try (Chunks chunks = new Chunks(files, r.path, r.start, r.stop, r.limit, r.version, r.fin,
          r.afterSeq, new Scanner(Options.MAX_RECORD), Chunks.CHUNK)) {
        for (Chunks.Chunk c = chunks.next(); c != null; c = chunks.next()) {
          for (Scanner.Damage d : c.result.damage) {
            out.add(r.path + "\t" + (c.base + d.offset) + "\t" + d.size + "\t" + d.reason);
          }
        }
      } catch (IOException e) {
        throw new UncheckedIOException("busjournal: cannot read " + r.path, e);
      }
    }
    return out.toArray(new String[0]);
  }
}
