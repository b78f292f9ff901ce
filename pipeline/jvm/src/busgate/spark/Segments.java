package busgate.spark;

import java.io.File;
import java.io.IOException;
import java.io.RandomAccessFile;
import java.nio.file.Files;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.zip.CRC32;

/**
 * Segment files: names, headers and index files, read without scanning records; the Java twin of
 * {@code bus.journal.segments} (PROTOCOL.md section 8).
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
    final File file;
    final long number;
    final long size;
    final boolean headerOk;
    final int version;
    final int firstRecord;
    final long firstSeq; // -1: none (v1 or unreadable header)
    final Block[] blocks; // null: no usable index

    Info(File file, long number, long size, boolean headerOk, int version, int firstRecord,
        long firstSeq, Block[] blocks) {
      this.file = file;
      this.number = number;
      this.size = size;
      this.headerOk = headerOk;
      this.version = version;
      this.firstRecord = firstRecord;
      this.firstSeq = firstSeq;
      this.blocks = blocks;
    }
  }

  static long number(File file) {
    Matcher m = NAME.matcher(file.getName());
    return m.matches() ? Long.parseLong(m.group(1)) : 0;
  }

  /** The segment files of a directory (or the one file given), oldest first. */
  static List<File> list(String path) {
    File base = new File(path);
    List<File> found = new ArrayList<>();
    if (base.isFile()) {
      found.add(base);
      return found;
    }
    File[] children = base.listFiles();
    if (children == null) {
      return found;
    }
    for (File child : children) {
      if (NAME.matcher(child.getName()).matches()) {
        found.add(child);
      }
    }
    found.sort((a, b) -> Long.compare(number(a), number(b)));
    return found;
  }

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

  static Info info(File file) throws IOException {
    long size;
    byte[] head = new byte[HEADER_V2];
    int got;
    try (RandomAccessFile in = new RandomAccessFile(file, "r")) {
      size = in.length();
      got = 0;
      while (got < head.length) {
        int n = in.read(head, got, head.length - got);
        if (n < 0) {
          break;
        }
        got += n;
      }
    }
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
    Block[] blocks = ok ? readIndex(file, size) : null;
    return new Info(file, number(file), size, ok, version, first, firstSeq, blocks);
  }

  /** The blocks of a segment's index file, when it is intact and describes this size. */
  static Block[] readIndex(File segment, long size) {
    String name = segment.getName();
    File index = new File(segment.getParentFile(), name.substring(0, name.length() - 4) + ".idx");
    byte[] data;
    try {
      if (!index.isFile()) {
        return null;
      }
      data = Files.readAllBytes(index.toPath());
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
  static int[] firstRecord(File file, long maxRecord) throws IOException {
    byte[] data = Files.readAllBytes(file.toPath());
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

  /** Read bytes [start, stop) of a file (fewer at its end). */
  static byte[] read(RandomAccessFile in, long start, long stop) throws IOException {
    int want = (int) Math.max(0, stop - start);
    byte[] data = new byte[want];
    in.seek(start);
    int got = 0;
    while (got < want) {
      int n = in.read(data, got, want - got);
      if (n < 0) {
        return Arrays.copyOf(data, got);
      }
      got += n;
    }
    return data;
  }
}
