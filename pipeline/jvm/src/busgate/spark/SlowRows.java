package busgate.spark;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.BufferedInputStream;
import java.io.BufferedOutputStream;
import java.io.Closeable;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.File;
import java.io.IOException;
import java.util.List;
import org.apache.spark.sql.catalyst.util.ArrayBasedMapData;
import org.apache.spark.sql.catalyst.util.GenericArrayData;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * Full-decoder rows for the bodies {@link FrameDecoder} does not take, from a Python helper
 * process ({@code python -m pipeline.slowrows}) started on first need and kept for the
 * partition: the same code the Python source runs, so both readers give the same rows.
 */
final class SlowRows implements Closeable {
  /** The body-dependent values of one row (column order of {@link Schema}). */
  static final class Row {
    final UTF8String[] text = new UTF8String[Schema.TEXT.length]; // MID .. TGT CLR TRC, with ENC
    final Long[] numbers = new Long[4];
    UTF8String payload;
    ArrayBasedMapData payloadMap;
  }

  private static final ObjectMapper JSON = new ObjectMapper();
  private final String python;
  private Process process;
  private DataOutputStream out;
  private DataInputStream in;

  SlowRows(String python) {
    this.python = python;
  }

  private void start() throws IOException {
    ProcessBuilder builder = new ProcessBuilder(python, "-m", "pipeline.slowrows");
    builder.redirectError(ProcessBuilder.Redirect.INHERIT);
    builder.environment().put("PYTHONDONTWRITEBYTECODE", "1");
    process = builder.start();
    out = new DataOutputStream(new BufferedOutputStream(process.getOutputStream(), 1 << 16));
    in = new DataInputStream(new BufferedInputStream(process.getInputStream(), 1 << 16));
  }

  /** The rows of bodies data[offsets[i] .. + lengths[i]], in order. */
  Row[] rows(byte[] data, List<int[]> bodies) throws IOException {
    if (process == null) {
      start();
    }
    // the helper reads the whole request before it answers: write all, then read all
    out.writeInt(bodies.size());
    for (int[] body : bodies) {
      out.writeInt(body[1]);
      out.write(data, body[0], body[1]);
    }
    out.flush();
    Row[] rows = new Row[bodies.size()];
    for (int i = 0; i < rows.length; i++) {
      byte[] text = new byte[in.readInt()];
      in.readFully(text);
      rows[i] = parse(JSON.readTree(text));
    }
    return rows;
  }

  private static UTF8String str(JsonNode node) {
    return node == null || node.isNull() ? null : UTF8String.fromString(node.asText());
  }

  static Row parse(JsonNode node) throws IOException {
    if (node.has("e")) {
      throw new IOException("full decoder: " + node.get("e").asText());
    }
    Row row = new Row();
    JsonNode t = node.get("t");
    for (int k = 0; k < row.text.length; k++) {
      row.text[k] = str(t.get(k));
    }
    JsonNode n = node.get("i");
    for (int k = 0; k < 4; k++) {
      JsonNode v = n.get(k);
      row.numbers[k] = v == null || v.isNull() ? null : v.asLong();
    }
    row.payload = str(node.get("p"));
    JsonNode m = node.get("m");
    if (m != null && !m.isNull()) {
      Object[] keys = new Object[m.size()];
      Object[] values = new Object[m.size()];
      for (int i = 0; i < keys.length; i++) {
        keys[i] = UTF8String.fromString(m.get(i).get(0).asText());
        values[i] = UTF8String.fromString(m.get(i).get(1).asText());
      }
      row.payloadMap = new ArrayBasedMapData(new GenericArrayData(keys), new GenericArrayData(values));
    }
    return row;
  }

  /** The Python that runs the helper: spark.pyspark.python, PYSPARK_PYTHON, else python3. */
  static String python(String configured) {
    if (configured != null && !configured.isEmpty()) {
      return configured;
    }
    String env = System.getenv("PYSPARK_PYTHON");
    if (env != null && !env.isEmpty() && new File(env).canExecute()) {
      return env;
    }
    return "python3";
  }

  @Override
  public void close() {
    if (process != null) {
      try {
        out.close();
      } catch (IOException e) {
        // the helper is gone already
      }
      try {
        if (!process.waitFor(2, java.util.concurrent.TimeUnit.SECONDS)) {
          process.destroyForcibly();
        }
      } catch (InterruptedException e) {
        process.destroyForcibly();
        Thread.currentThread().interrupt();
      }
      process = null;
    }
  }
}
