package busgate.spark;

import java.io.IOException;
import java.util.ArrayList;
import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.zip.CRC32;
import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.FileStatus;

/**
 * Segment files: names, headers and index files, read without scanning records (through Hadoop's
 * FileSystem API: {@link Files}); the Java twin of {@code bus.journal.segments} (PROTOCOL.md
 * section 8).
 */
final class Segments {
  static final Pattern NAME = Pattern.compile("^journal-(\\d{8,})\\.seg$");
  static final byte[] MAGIC_V1 = {'B', 'G', 'J', 'R', 'N', 'L', 0, 1};
  static final byte[] MAGIC_V2 = {'B', 'G', 'J', 'R', 'N', 'L', 0, 2};
  static final byte[] INDEX_MAGIC = {'B', 'G', 'J', 'I', 'D', 'X', 0, 1};
  static final int HEADER_V1 = 16;
  static final int HEADER_V2 = 28;

  private Segments() {}

  /** One block of an index: records starting in [offset, end). */
  static final class Block {
    final long offset;
    final long end;
    final long firstSeq;
    final long count;
    final long minTs;
    final long maxTs;

    Block(long offset, long end, long firstSeq, long count, long minTs, long maxTs) {
      this.offset = offset;
      this.end = end;
      this.firstSeq = firstSeq;
      this.count = count;
      this.minTs = minTs;
      this.maxTs = maxTs;
    }
  }

  /** What is known of a segment without scanning it. */
  static final class Info {
    final String path; // the whole URI: file:/..., hdfs://..., ...
    final String name;
    final long number;
    final long size;
    final boolean headerOk;
    final int version;
    final int firstRecord;
    final long firstSeq; // -1: none (v1 or unreadable header)
    final Block[] blocks; // null: no usable index
    final String compacted; // the valid compacted file (pipeline/compact.py), or null

    Info(String path, String name, long size, boolean headerOk, int version, int firstRecord,
        long firstSeq, Block[] blocks, String compacted) {
      this.path = path;
      this.name = name;
      this.number = number(name);
      this.size = size;
      this.headerOk = headerOk;
      this.version = version;
      this.firstRecord = firstRecord;
      this.firstSeq = firstSeq;
      this.blocks = blocks;
      this.compacted = compacted;
    }
  }

  static long number(String name) {
    Matcher m = NAME.matcher(name);
    return m.matches() ? Long.parseLong(m.group(1)) : 0;
  }

  /** The columns' version in a compacted file's name: pipeline/plan.py COMPACTED_VERSION. */
  static final int COMPACTED_VERSION = 2;

  private static boolean startsWith(byte[] data, int length, byte[] magic) {
    if (length < magic.length) {
      return false;
    }
    for (int i = 0; i < magic.length; i++) {
      if (data[i] != magic[i]) {
        return false;
      }
    }
    return true;
  }

  /** Every segment of a journal (a directory, or one segment file), oldest first. */
  static List<Info> infos(Files files, String path) throws IOException {
    Files.Listing listing = files.list(path);
    List<Info> out = new ArrayList<>();
    for (FileStatus segment : listing.segments) {
      out.add(info(files, segment, listing));
    }
    return out;
  }

  /** What the header and the index file (when listed beside it) of a segment say. */
  static Info info(Files files, FileStatus segment, Files.Listing listing) throws IOException {
    String path = segment.getPath().toString();
    String name = segment.getPath().getName();
    long size = segment.getLen();
    byte[] head;
    try (FSDataInputStream in = files.open(path)) {
      head = Files.read(in, 0, Math.min(size, HEADER_V2));
    }
    int got = head.length;
    boolean ok = false;
    int version = 2;
    int first = 0;
    long firstSeq = -1;
    if (startsWith(head, got, MAGIC_V2) && got >= HEADER_V2) {
      CRC32 crc = new CRC32();
      crc.update(head, 8, 16);
      if ((int) crc.getValue() == Scanner.be32(head, 24)) {
        ok = true;
        first = HEADER_V2;
        firstSeq = Scanner.be64(head, 16);
      }
    } else if (startsWith(head, got, MAGIC_V1) && got >= HEADER_V1) {
      ok = true;
      version = 1;
      first = HEADER_V1;
    }
    String stem = name.substring(0, name.length() - 4);
    Block[] blocks = null;
    FileStatus index = listing.byName.get(stem + ".idx");
    if (ok && index != null && index.isFile()) {
      blocks = readIndex(files, index, size);
    }
    FileStatus compacted = listing.byName.get(stem + "." + size + ".v" + COMPACTED_VERSION
        + ".parquet");
    return new Info(path, name, size, ok, version, first, firstSeq, blocks,
        compacted != null && compacted.isFile() ? compacted.getPath().toString() : null);
  }

  /** The blocks of a segment's index file, when it is intact and describes this size. */
  static Block[] readIndex(Files files, FileStatus index, long size) {
    byte[] data;
    try {
      data = files.readAll(index.getPath().toString(), index.getLen());
    } catch (IOException e) {
      return null;
    }
    int head = 8 + 6 * 8 + 4;
    if (data.length < head + 4 || !startsWith(data, data.length, INDEX_MAGIC)) {
      return null;
    }
    CRC32 crc = new CRC32();
    crc.update(data, 0, data.length - 4);
    if ((int) crc.getValue() != Scanner.be32(data, data.length - 4)) {
      return null;
    }
    long segmentSize = Scanner.be64(data, 8);
    int count = Scanner.be32(data, head - 4);
    if (segmentSize != size || count < 0 || data.length != head + count * 36 + 4) {
      return null;
    }
    Block[] blocks = new Block[count];
    for (int i = 0; i < count; i++) {
      int p = head + i * 36;
      long offset = Scanner.be64(data, p);
      long end = i + 1 < count ? Scanner.be64(data, p + 36) : segmentSize;
      blocks[i] = new Block(offset, end, Scanner.be64(data, p + 8),
          Scanner.be32(data, p + 16) & 0xFFFFFFFFL, Scanner.be64(data, p + 20),
          Scanner.be64(data, p + 28));
    }
    return blocks;
  }

  /** The first valid record of a segment whose header is damaged: {offset, version}. */
  static int[] firstRecord(Files files, Info info, long maxRecord) throws IOException {
    byte[] data = files.readAll(info.path, info.size);
    Scanner scanner = new Scanner(maxRecord);
    for (int version : new int[] {2, 1}) {
      byte last = (byte) (version == 2 ? '2' : '1');
      for (int p = 0; p + 4 <= data.length; p++) {
        if (data[p] == 'B' && data[p + 1] == 'J' && data[p + 2] == 'R' && data[p + 3] == last) {
          Scanner.Result r = scanner.scan(data, data.length, p, p + 1, version, true, -1);
          if (r.count > 0) {
            return new int[] {r.offsets[0], version};
          }
          if (!r.damage.isEmpty() && r.end < data.length) {
            return new int[] {r.end, version};
          }
          break;
        }
      }
    }
    return new int[] {-1, 2};
  }
}
