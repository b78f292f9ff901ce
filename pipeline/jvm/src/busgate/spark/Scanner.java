package busgate.spark;

import java.util.ArrayList;
import java.util.List;
import java.util.zip.CRC32;

/**
 * Finds and verifies journal records in a buffer, resynchronising over damage: the Java twin of
 * {@code bus.journal.format.scan_records} (PROTOCOL.md section 8), tested to give the same
 * offsets, end, tail, damaged spans and last sequence number.
 */
final class Scanner {
  static final int HEADER_V1 = 20;
  static final int HEADER_V2 = 28;

  /** A damaged span: where it starts, how many bytes, why. */
  static final class Damage {
    final long offset;
    final long size;
    final String reason;

    Damage(long offset, long size, String reason) {
      this.offset = offset;
      this.size = size;
      this.reason = reason;
    }
  }

  /** What a scan found; offsets relative to the buffer. */
  static final class Result {
    int[] offsets = new int[64];
    int count;
    int end;
    int partial;
    final List<Damage> damage = new ArrayList<>(0);
    long lastSeq;

    void add(int offset) {
      if (count == offsets.length) {
        offsets = java.util.Arrays.copyOf(offsets, count * 2);
      }
      offsets[count++] = offset;
    }
  }

  private final CRC32 crc = new CRC32();
  private final long maxRecord;

  Scanner(long maxRecord) {
    this.maxRecord = maxRecord;
  }

  static int be32(byte[] b, int p) {
    return ((b[p] & 255) << 24) | ((b[p + 1] & 255) << 16) | ((b[p + 2] & 255) << 8) | (b[p + 3] & 255);
  }

  static long be64(byte[] b, int p) {
    return ((long) be32(b, p) << 32) | (be32(b, p + 4) & 0xFFFFFFFFL);
  }

  static int headerSize(int version) {
    return version >= 2 ? HEADER_V2 : HEADER_V1;
  }

  private static boolean magicAt(byte[] b, int p, int version, int n) {
    byte last = (byte) (version >= 2 ? '2' : '1');
    byte[] magic = {'B', 'J', 'R', last};
    for (int i = 0; i < n; i++) {
      if (b[p + i] != magic[i]) {
        return false;
      }
    }
    return true;
  }

  private int crcOf(byte[] b, int from, int length) {
    crc.reset();
    crc.update(b, from, length);
    return (int) crc.getValue();
  }

  /** A whole record whose magic, length and CRC check out (and, v2, seq > after) at pos? */
  private boolean validAt(byte[] b, int size, int pos, int version, long after) {
    int header = headerSize(version);
    if (size - pos < header) {
      return false;
    }
    long length = be32(b, pos + 8) & 0xFFFFFFFFL;
    if (length > maxRecord || length > size - pos - header) {
      return false;
    }
    if (crcOf(b, pos + 8, header - 8 + (int) length) != be32(b, pos + 4)) {
      return false;
    }
    if (version >= 2) {
      long seq = be64(b, pos + 20);
      return after < 0 || Long.compareUnsigned(seq, after) > 0;
    }
    return true;
  }

  /** The first offset from {@code from} where a valid record starts, or -1. */
  private int resync(byte[] b, int size, int from, int version, long after) {
    for (int p = from; p + 4 <= size; p++) {
      if (b[p] == 'B' && magicAt(b, p, version, 4) && validAt(b, size, p, version, after)) {
        return p;
      }
    }
    return -1;
  }

  /** Whether b[pos:size] is a whole record whose length field alone is wrong. */
  private boolean wholeButLength(byte[] b, int size, int pos, int version) {
    int header = headerSize(version);
    int rest = size - pos;
    if (rest < header) {
      return false;
    }
    int actual = rest - header;
    byte[] len = {(byte) (actual >>> 24), (byte) (actual >>> 16), (byte) (actual >>> 8), (byte) actual};
    crc.reset();
    crc.update(len, 0, 4);
    crc.update(b, pos + 12, rest - 12);
    return (int) crc.getValue() == be32(b, pos + 4);
  }

  /**
   * Scan {@code b[start:size]} for records starting before {@code stop}.
   *
   * @param b the buffer
   * @param size bytes of it that are data
   * @param start the first record (or damaged span)
   * @param stop records starting at or after this are left (-1: none)
   * @param version 1 or 2
   * @param fin false when the buffer may still grow (an incomplete last record is not looked past)
   * @param afterSeq the sequence number before start, or -1
   */
  Result scan(byte[] b, int size, int start, int stop, int version, boolean fin, long afterSeq) {
    Result r = new Result();
    int header = headerSize(version);
    int limit = stop < 0 ? size : Math.min(stop, size);
    int lastHeader = size - header;
    long lastSeq = afterSeq;
    int pos = start;
    while (pos < limit) {
      String reason = null;
      if (pos > lastHeader) {
        int n = Math.min(4, size - pos);
        if (!magicAt(b, pos, version, n)) {
          reason = "bad record magic";
        }
      } else {
        long length = be32(b, pos + 8) & 0xFFFFFFFFL;
        if (!magicAt(b, pos, version, 4)) {
          reason = "bad record magic";
        } else if (length > maxRecord) {
          reason = "record length " + length + " exceeds max_record " + maxRecord;
        } else if (length <= size - pos - header) {
          if (crcOf(b, pos + 8, header - 8 + (int) length) == be32(b, pos + 4)) {
            r.add(pos);
            if (version >= 2) {
              lastSeq = be64(b, pos + 20);
            }
            pos += header + (int) length;
            continue;
          }
          reason = "checksum mismatch";
        }
      }
      if (reason == null) { // an incomplete record: a torn tail unless a valid record follows
        int again = fin ? resync(b, size, pos + 1, version, lastSeq) : -1;
        if (again < 0 && fin && wholeButLength(b, size, pos, version)) {
          r.damage.add(new Damage(pos, size - pos, "record length field damaged"));
          pos = size;
          break;
        }
        if (again < 0) {
          r.partial = size - pos;
          break;
        }
        r.damage.add(new Damage(pos, again - pos, "record runs past the next record"));
        pos = again;
        continue;
      }
      int again = resync(b, size, pos + 1, version, lastSeq);
      r.damage.add(new Damage(pos, (again < 0 ? size : again) - pos, reason));
      if (again < 0) {
        pos = size;
        break;
      }
      pos = again;
    }
    r.end = pos;
    r.lastSeq = lastSeq;
    return r;
  }
}
