package busgate.spark;

import java.io.Closeable;
import java.io.IOException;
import org.apache.hadoop.fs.FSDataInputStream;

/**
 * The records that start in [start, stop) of a segment, read a chunk at a time and verified;
 * damage found inside a chunk that is not the file's end is looked at again with the rest of
 * the file read. The Java twin of {@code bus.journal.segments.scan_file}.
 */
final class Chunks implements Closeable {
  static final int CHUNK = 8 * 1024 * 1024;

  /** Bytes of the segment, where they start in it, and what was found in them. */
  static final class Chunk {
    final byte[] data;
    final long base;
    final Scanner.Result result;

    Chunk(byte[] data, long base, Scanner.Result result) {
      this.data = data;
      this.base = base;
      this.result = result;
    }
  }

  private final FSDataInputStream in;
  private final Scanner scanner;
  private final int version;
  private final boolean fin;
  private final long size;
  private final long endAt;
  private final int chunk;
  private long pos;
  private long seq;
  private long want;
  private boolean done;

  /**
   * @param limit never read at or past this byte: the file's size when it was listed (-1: ask)
   */
  Chunks(Files files, String path, long start, long stop, long limit, int version, boolean fin,
      long afterSeq, Scanner scanner, int chunk) throws IOException {
    this.size = limit >= 0 ? limit : files.status(path).getLen();
    this.in = files.open(path);
    this.endAt = stop >= 0 ? Math.min(stop, size) : size;
    this.scanner = scanner;
    this.version = version;
    this.fin = fin;
    this.chunk = chunk;
    this.pos = start;
    this.seq = afterSeq;
    this.want = chunk;
  }

  /** The next chunk with records, damage or a tail; null at the end. */
  Chunk next() throws IOException {
    while (!done && pos < endAt) {
      boolean whole = pos + want >= size;
      byte[] data = Files.read(in, pos, whole ? size : pos + want);
      int stop = (int) (endAt - pos);
      Scanner.Result found = scanner.scan(data, data.length, 0, stop, version, fin && whole, seq);
      if (!found.damage.isEmpty() && !whole) {
        // the search for the next valid record needs the rest of the file
        int cut = (int) found.damage.get(0).offset;
        Scanner.Result keep = new Scanner.Result();
        for (int i = 0; i < found.count && found.offsets[i] < cut; i++) {
          keep.add(found.offsets[i]);
        }
        long base = pos;
        keep.end = cut;
        if (keep.count > 0 && version >= 2) {
          seq = Scanner.be64(data, keep.offsets[keep.count - 1] + 20);
        }
        keep.lastSeq = seq;
        pos += cut;
        want = size - pos;
        if (keep.count > 0) {
          return new Chunk(data, base, keep);
        }
        continue;
      }
      long base = pos;
      seq = found.lastSeq;
      int cutRecord = whole ? 0 : found.partial; // a record the chunk cut: read with the next
      found.partial = whole ? found.partial : 0;
      boolean emit = found.count > 0 || !found.damage.isEmpty() || (whole && found.partial > 0);
      if (found.end >= stop || (whole && (found.partial > 0 || found.end >= data.length))) {
        done = true;
      } else if (found.end == 0 && cutRecord > 0) { // a record larger than the chunk
        long length = data.length >= 12 ? Scanner.be32(data, 8) & 0xFFFFFFFFL : 0;
        want = Math.max(want * 2, Scanner.headerSize(version) + length);
        continue;
      } else {
        pos += found.end;
        want = chunk;
      }
      if (emit) {
        return new Chunk(data, base, found);
      }
    }
    return null;
  }

  @Override
  public void close() throws IOException {
    in.close();
  }
}
