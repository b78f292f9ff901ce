package busgate.spark;

import java.io.EOFException;
import java.io.FileNotFoundException;
import java.io.IOException;
import java.io.ObjectInputStream;
import java.io.ObjectOutputStream;
import java.io.Serializable;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.errors.QueryCompilationErrors;

/**
 * The journal's files through Hadoop's FileSystem API, so a journal is read wherever Hadoop
 * reaches: plain paths and {@code file://}, {@code hdfs://}, {@code webhdfs://}, {@code s3a://}
 * (with its jars) and any other scheme configured. The Hadoop configuration is the session's
 * (its {@code core-site.xml}, {@code spark.hadoop.*}) plus the read's options, as Spark's own
 * file sources take it, and travels with the scan to the executors (PROTOCOL.md section 8).
 */
final class Files implements Serializable {
  private static final long serialVersionUID = 1L;
  private transient Configuration conf;

  Files(Configuration conf) {
    this.conf = conf;
    MediaTypes.install();
  }

  /** The session's Hadoop configuration with the read's options (as file sources do). */
  static Files forSession(Map<String, String> options) {
    SparkSession spark = SparkSession.active();
    Configuration conf = new Configuration(spark.sparkContext().hadoopConfiguration());
    for (Map.Entry<String, String> e : options.entrySet()) {
      if (e.getValue() != null && e.getKey().contains(".")) { // Hadoop's keys, not busjournal's
        conf.set(e.getKey(), e.getValue());
      }
    }
    return new Files(conf);
  }

  Configuration conf() {
    return conf;
  }

  FileSystem fs(Path path) throws IOException {
    return path.getFileSystem(conf);
  }

  /** The path made whole: a plain path becomes file:/... (or the default file system's). */
  String qualify(String path) throws IOException {
    Path p = new Path(path);
    return fs(p).makeQualified(p).toString();
  }

  FSDataInputStream open(String path) throws IOException {
    Path p = new Path(path);
    return fs(p).open(p);
  }

  FileStatus status(String path) throws IOException {
    Path p = new Path(path);
    return fs(p).getFileStatus(p);
  }

  /**
   * The status of a journal path, or Spark's PATH_NOT_FOUND error naming it (what Spark's file
   * sources raise) when there is nothing there.
   */
  FileStatus journal(String path) {
    try {
      return status(path);
    } catch (FileNotFoundException e) {
      throw Files.<RuntimeException>sneaky(QueryCompilationErrors.dataPathNotExistError(path));
    } catch (IOException e) {
      throw new java.io.UncheckedIOException("busjournal: cannot read " + path + ": " + e, e);
    }
  }

  @SuppressWarnings("unchecked")
  private static <E extends Throwable> E sneaky(Throwable e) throws E {
    throw (E) e;
  }

  /** A journal directory listed once: its segments in number order, and every file by name. */
  static final class Listing {
    final List<FileStatus> segments = new ArrayList<>();
    final Map<String, FileStatus> byName = new HashMap<>();
  }

  /** The segments of a journal directory (or the one segment given) and the files beside them. */
  Listing list(String path) throws IOException {
    Listing out = new Listing();
    FileStatus base = journal(path);
    if (!base.isDirectory()) { // one segment: its index may be beside it
      out.segments.add(base);
      String name = base.getPath().getName();
      if (name.endsWith(".seg")) {
        Path index = new Path(base.getPath().getParent(), name.substring(0, name.length() - 4) + ".idx");
        try {
          out.byName.put(index.getName(), fs(index).getFileStatus(index));
        } catch (FileNotFoundException e) {
          // no index: the segment is scanned
        }
      }
      return out;
    }
    for (FileStatus child : fs(base.getPath()).listStatus(base.getPath())) {
      String name = child.getPath().getName();
      out.byName.put(name, child);
      if (child.isFile() && Segments.NAME.matcher(name).matches()) {
        out.segments.add(child);
      }
    }
    out.segments.sort((a, b) -> Long.compare(
        Segments.number(a.getPath().getName()), Segments.number(b.getPath().getName())));
    return out;
  }

  /** Bytes [start, stop) of an open file (fewer at its end). */
  static byte[] read(FSDataInputStream in, long start, long stop) throws IOException {
    int want = (int) Math.max(0, stop - start);
    byte[] data = new byte[want];
    int got = 0;
    while (got < want) {
      int n;
      try {
        n = in.read(start + got, data, got, want - got);
      } catch (EOFException e) {
        n = -1;
      }
      if (n < 0) {
        return java.util.Arrays.copyOf(data, got);
      }
      got += n;
    }
    return data;
  }

  /** A whole (small) file. */
  byte[] readAll(String path, long size) throws IOException {
    try (FSDataInputStream in = open(path)) {
      return read(in, 0, size);
    }
  }

  private void writeObject(ObjectOutputStream out) throws IOException {
    out.defaultWriteObject();
    conf.write(out);
  }

  private void readObject(ObjectInputStream in) throws IOException, ClassNotFoundException {
    in.defaultReadObject();
    conf = new Configuration(false);
    conf.readFields(in);
    MediaTypes.install();
  }
}
