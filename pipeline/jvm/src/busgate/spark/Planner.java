package busgate.spark;

import java.io.IOException;
import java.io.UncheckedIOException;
import org.apache.hadoop.fs.FSDataInputStream;
import java.util.ArrayList;
import java.util.List;

/**
 * Partitions of a batch query: whole segments and index blocks outside the bounds are never read;
 * indexed segments are cut at block starts, others at record boundaries found by walking the
 * record headers. The twin of {@code pipeline.plan.plan_batch}.
 */
final class Planner {
  private Planner() {}

  /**
   * The partitions of a batch read, packed like Spark's file sources: ranges are cut to at most
   * min(splitBytes, max(4 MiB, total / parallelism)) bytes and packed, largest first, into
   * partitions of at most that many bytes, so the cores get even shares.
   */
  static List<JournalPartition> packed(Files files, String path, long splitBytes, Bounds bounds,
      long maxRecord, int parallelism) {
    List<Segments.Info> infos = infos(files, path);
    List<JournalPartition.Range> whole = plan(files, infos, 0, bounds, maxRecord, true);
    long total = 0;
    for (JournalPartition.Range r : whole) {
      total += r.bytes();
    }
    long perCore = total / Math.max(1, parallelism) + 1;
    long split = Math.max(4L << 20, perCore);
    if (splitBytes > 0) {
      split = Math.min(splitBytes, split);
    }
    List<JournalPartition.Range> ranges = plan(files, infos, split, bounds, maxRecord, true);
    ranges.sort((a, b) -> Long.compare(b.bytes(), a.bytes()));
    long room = split + split / 8; // ranges cut at record boundaries run a little over
    List<List<JournalPartition.Range>> bins = new ArrayList<>();
    List<Long> sizes = new ArrayList<>();
    for (JournalPartition.Range r : ranges) {
      int fit = -1;
      for (int i = 0; i < bins.size() && fit < 0; i++) {
        if (sizes.get(i) + r.bytes() <= room) {
          fit = i;
        }
      }
      if (fit < 0) {
        bins.add(new ArrayList<>());
        sizes.add(0L);
        fit = bins.size() - 1;
      }
      bins.get(fit).add(r);
      sizes.set(fit, sizes.get(fit) + r.bytes());
    }
    List<JournalPartition> parts = new ArrayList<>();
    for (List<JournalPartition.Range> bin : bins) {
      bin.sort((a, b) -> a.path.equals(b.path) ? Long.compare(a.start, b.start) : a.path.compareTo(b.path));
      parts.add(new JournalPartition(bin.toArray(new JournalPartition.Range[0])));
    }
    return parts;
  }

  static List<Segments.Info> infos(Files files, String path) {
    try {
      return Segments.infos(files, path);
    } catch (IOException e) {
      throw new UncheckedIOException("busjournal: cannot list " + path, e);
    }
  }

  static List<JournalPartition.Range> plan(Files files, String path, long splitBytes,
      Bounds bounds, long maxRecord) {
    return plan(files, infos(files, path), splitBytes, bounds, maxRecord, true);
  }

  static List<JournalPartition.Range> plan(Files files, List<Segments.Info> infos,
      long splitBytes, Bounds bounds, long maxRecord, boolean useCompacted) {
    List<JournalPartition.Range> parts = new ArrayList<>();
    if (bounds.empty()) {
      return parts;
    }
    try {
      for (int i = 0; i < infos.size(); i++) {
        long later = i + 1 < infos.size() ? infos.get(i + 1).firstSeq : -1;
        Segments.Info info = infos.get(i);
        String compacted = null;
        if (useCompacted && i + 1 < infos.size() && info.blocks != null) {
          compacted = info.compacted;
        }
        segment(files, parts, info, later, splitBytes, bounds, maxRecord, compacted);
      }
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
    return parts;
  }

  private static void segment(Files files, List<JournalPartition.Range> out, Segments.Info info,
      long laterSeq, long split, Bounds bounds, long maxRecord, String compacted)
      throws IOException {
    String path = info.path;
    long size = info.size;
    if (!info.headerOk) { // a damaged header: find the first intact record (rare)
      int[] found = Segments.firstRecord(files, info, maxRecord);
      out.add(new JournalPartition.Range(path, 0, size, size, found[1], -1, true, bounds));
      return;
    }
    int version = info.version;
    if (bounds.bySeq() && version < 2) {
      return;
    }
    if (bounds.sinceSeq != Long.MIN_VALUE && laterSeq >= 0 && laterSeq <= bounds.sinceSeq) {
      return;
    }
    if (bounds.untilSeq != Long.MAX_VALUE && info.firstSeq >= 0 && info.firstSeq >= bounds.untilSeq) {
      return;
    }
    if (compacted != null) {
      boolean any = false;
      for (int i = 0; i < info.blocks.length && !any; i++) {
        any = bounds.keepsBlock(info.blocks[i], i + 1 < info.blocks.length ? info.blocks[i + 1].firstSeq : 0);
      }
      if (any || info.blocks.length == 0) {
        out.add(new JournalPartition.Range(path, 0, size, size, version, -1, true, bounds,
            compacted));
      }
      return;
    }
    if (info.blocks != null && info.blocks.length > 0) {
      List<long[]> ranges = new ArrayList<>(); // {start, stop, afterSeq}
      Segments.Block[] blocks = info.blocks;
      for (int i = 0; i < blocks.length; i++) {
        long following = i + 1 < blocks.length ? blocks[i + 1].firstSeq : 0;
        if (!bounds.keepsBlock(blocks[i], following)) {
          continue;
        }
        long after = blocks[i].firstSeq != 0 ? blocks[i].firstSeq - 1 : -1;
        long[] last = ranges.isEmpty() ? null : ranges.get(ranges.size() - 1);
        if (last != null && last[1] == blocks[i].offset
            && (split <= 0 || blocks[i].end - last[0] <= split)) {
          last[1] = blocks[i].end;
        } else {
          ranges.add(new long[] {blocks[i].offset, blocks[i].end, after});
        }
      }
      for (long[] r : ranges) {
        if (split <= 0 || r[1] - r[0] <= split * 3 / 2) {
          out.add(new JournalPartition.Range(path, r[0], r[1], size, version, r[2], true, bounds));
          continue;
        }
        List<Long> points = boundaries(files, path, r[0], r[1], split, version);
        addRanges(out, path, points, r[1], size, version, r[2], bounds);
      }
      return;
    }
    if (size <= info.firstRecord) {
      return;
    }
    long after = info.firstSeq > 0 ? info.firstSeq - 1 : -1;
    List<Long> points;
    if (split > 0 && split < size - info.firstRecord) {
      points = boundaries(files, path, info.firstRecord, size, split, version);
    } else {
      points = new ArrayList<>();
      points.add((long) info.firstRecord);
    }
    addRanges(out, path, points, size, size, version, after, bounds);
  }

  private static void addRanges(List<JournalPartition.Range> out, String path, List<Long> points,
      long end, long size, int version, long after, Bounds bounds) {
    for (int n = 0; n < points.size(); n++) {
      long stop = n + 1 < points.size() ? points.get(n + 1) : end;
      out.add(new JournalPartition.Range(path, points.get(n), stop, size, version, n == 0 ? after : -1,
          true, bounds));
    }
  }

  /** Record offsets from start about split bytes apart and before end, walking headers. */
  static List<Long> boundaries(Files files, String path, long start, long end, long split,
      int version) throws IOException {
    byte[] data;
    try (FSDataInputStream in = files.open(path)) {
      data = Files.read(in, start, end);
    }
    int header = Scanner.headerSize(version);
    byte last = (byte) (version >= 2 ? '2' : '1');
    List<Long> points = new ArrayList<>();
    points.add(start);
    long target = start + split;
    long pos = start;
    while (pos - start <= data.length - header) {
      int p = (int) (pos - start);
      if (data[p] != 'B' || data[p + 1] != 'J' || data[p + 2] != 'R' || data[p + 3] != last) {
        break;
      }
      pos += header + (Scanner.be32(data, p + 8) & 0xFFFFFFFFL);
      if (pos >= target && pos < end) {
        points.add(pos);
        target = pos + split;
      }
    }
    return points;
  }
}
