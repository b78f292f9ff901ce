package busgate.spark;

import java.nio.charset.StandardCharsets;
import org.apache.spark.sql.catalyst.util.ArrayBasedMapData;
import org.apache.spark.sql.catalyst.util.GenericArrayData;
import org.apache.spark.sql.catalyst.util.MapData;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * The columns of a message body in binary data-frame form (seed 000, PROTOCOL.md section 1), the
 * Java twin of the C accelerator's fast path (bus/native/_journalscan.c read_record / emit): a body
 * it is not sure to render exactly as the full decoder would ({@link #read} false) goes to the
 * full decoder ({@link SlowRows}).
 */
final class FrameDecoder {
  static final int T_FRAME = 0, T_UDEF = 1, T_BYTEARRAY = 2, T_STRING = 3, T_U64 = 11;
  static final int T_FLOAT = 12, T_DOUBLE = 13, T_BOOLEAN = 14, T_DATE = 15, T_URI = 16;
  static final int T_ARRAY = 17;
  private static final int[] SIZES = {-1, 0, -1, -1, 1, 1, 2, 2, 4, 4, 8, 8, 4, 8, 1, 8, -1, -1};
  static final long MAX_BODY = 16L * 1024 * 1024;
  static final int MAX_FIELDS = 100_000;

  /**
   * Header fields, in column order: the 11 text columns but ENC ({@link Schema#TEXT} without
   * it), the 4 numbers, then PLD.
   */
  static final String[] WANTED = {
    "MID", "RID", "GRP", "RPY", "TYP", "CMD", "MSG", "SRC", "TGT", "CLR", "TRC",
    "RCD", "FLG", "XPY", "PRI", "PLD"
  };
  static final int N_TEXT = 11, N_INT = 4, W_CMD = 5, W_PLD = 15;
  private static final int[] KEYS = new int[WANTED.length];

  static {
    for (int k = 0; k < WANTED.length; k++) {
      String w = WANTED[k];
      KEYS[k] = (w.charAt(0) << 16) | (w.charAt(1) << 8) | w.charAt(2);
    }
    for (int k = 0; k < N_TEXT; k++) { // the text columns of Schema, ENC left out
      if (!WANTED[k].equals(Schema.TEXT[k < 6 ? k : k + 1])) {
        throw new IllegalStateException("busjournal: FrameDecoder.WANTED is not Schema.TEXT");
      }
    }
  }

  private byte[] b;
  // header fields found: value offset, length, type
  private final boolean[] found = new boolean[WANTED.length];
  private final int[] valuePos = new int[WANTED.length];
  private final int[] valueLen = new int[WANTED.length];
  private final int[] type = new int[WANTED.length];
  // the payload's fields
  private int count;
  private int[] nameAt = new int[16], nameLen = new int[16], fType = new int[16];
  private int[] fAt = new int[16], fLen = new int[16];
  private int cmd; // -1 none, -2 the header's CMD, else a payload field index
  // the field being read by next()
  private int nNameAt, nNameLen, nType, nAt;
  private long nLen;

  private boolean next(int[] pos, int end) {
    int p = pos[0];
    int nl = b[p] & 255;
    if ((long) end - p < 2L + nl) {
      return false;
    }
    int t = b[p + 1 + nl] & 255;
    nNameAt = p + 1;
    nNameLen = nl;
    p += 2 + nl;
    if (t > T_ARRAY) {
      return false;
    }
    long vlen;
    if (SIZES[t] < 0) {
      if (end - p < 4) {
        return false;
      }
      vlen = Scanner.be32(b, p) & 0xFFFFFFFFL;
      p += 4;
    } else {
      vlen = SIZES[t];
    }
    if (end - p < vlen) {
      return false;
    }
    for (int i = 0; i < nl; i++) {
      if (b[nNameAt + i] < 0) {
        return false; // names must be UTF-8: only ASCII is taken here
      }
    }
    nType = t;
    nAt = p;
    nLen = vlen;
    pos[0] = p + (int) vlen;
    return true;
  }

  private int slot() {
    if (nNameLen != 3) {
      return -1;
    }
    int key = (b[nNameAt] << 16) | (b[nNameAt + 1] << 8) | b[nNameAt + 2];
    for (int k = 0; k < KEYS.length; k++) {
      if (KEYS[k] == key) {
        return k;
      }
    }
    return -1;
  }

  static boolean isText(int t) {
    return t == T_STRING || t == T_URI;
  }

  static boolean isInt(int t) {
    return t >= 4 && t <= T_U64;
  }

  private void push() {
    if (count == nameAt.length) {
      int size = count * 2;
      nameAt = java.util.Arrays.copyOf(nameAt, size);
      nameLen = java.util.Arrays.copyOf(nameLen, size);
      fType = java.util.Arrays.copyOf(fType, size);
      fAt = java.util.Arrays.copyOf(fAt, size);
      fLen = java.util.Arrays.copyOf(fLen, size);
    }
    nameAt[count] = nNameAt;
    nameLen[count] = nNameLen;
    fType[count] = nType;
    fAt[count] = nAt;
    fLen[count] = (int) nLen;
    count++;
  }

  /** Read a body; true when this decoder renders it exactly, false: the full decoder's job. */
  boolean read(byte[] data, int off, int len) {
    b = data;
    java.util.Arrays.fill(found, false);
    count = 0;
    cmd = -1;
    if (len == 0 || len > MAX_BODY) {
      return false;
    }
    int end = off + len;
    int[] pos = {off};
    int fields = 0;
    while (pos[0] < end) {
      if (!next(pos, end)) {
        return false;
      }
      fields++;
      int s = slot();
      if (nType == T_ARRAY || nType == T_DATE || (nType == T_FRAME && s != W_PLD)) {
        return false; // values needing a deeper check than this path makes
      }
      if (s >= 0 && !found[s]) {
        found[s] = true;
        valuePos[s] = nAt;
        valueLen[s] = (int) nLen;
        type[s] = nType;
      } else if (nType == T_FRAME) {
        return false; // a second PLD frame: its inside is not checked here
      }
    }
    for (int k = 0; k < N_TEXT; k++) {
      if (found[k] && !isText(type[k])) {
        return false;
      }
    }
    for (int k = N_TEXT; k < N_TEXT + N_INT; k++) {
      if (found[k] && !isInt(type[k])) {
        return false;
      }
    }
    if (found[W_CMD]) {
      cmd = -2;
    }
    if (!found[W_PLD]) {
      return true;
    }
    if (type[W_PLD] != T_FRAME) {
      return false;
    }
    pos[0] = valuePos[W_PLD];
    int pend = valuePos[W_PLD] + valueLen[W_PLD];
    while (pos[0] < pend) {
      if (!next(pos, pend)) {
        return false;
      }
      if (nNameLen == 0 || nType == T_FRAME || nType == T_ARRAY || nType == T_DATE
          || nType == T_BYTEARRAY) {
        return false;
      }
      if (++fields > MAX_FIELDS) {
        return false;
      }
      push();
    }
    if (cmd == -1) {
      for (int i = 0; i < count; i++) {
        if (nameLen[i] == 3 && b[nameAt[i]] == 'C' && b[nameAt[i] + 1] == 'M'
            && b[nameAt[i] + 2] == 'D') {
          if (!isText(fType[i])) {
            return false;
          }
          cmd = i;
          break;
        }
      }
    }
    return true;
  }

  // -- rendering (after a read() that returned true) ------------------------------------------

  /** Latin-1 bytes as a UTF8String (ASCII as is, without a copy). */
  static UTF8String latin1(byte[] b, int at, int len) {
    for (int i = 0; i < len; i++) {
      if (b[at + i] < 0) {
        return UTF8String.fromString(new String(b, at, len, StandardCharsets.ISO_8859_1));
      }
    }
    return UTF8String.fromBytes(b, at, len);
  }

  /** Text column k (0..10 in WANTED order), or null. */
  UTF8String text(int k) {
    if (k == W_CMD) {
      if (cmd == -1) {
        return null;
      }
      if (cmd == -2) {
        return latin1(b, valuePos[W_CMD], valueLen[W_CMD]);
      }
      return latin1(b, fAt[cmd], fLen[cmd]);
    }
    return found[k] ? latin1(b, valuePos[k], valueLen[k]) : null;
  }

  static long readInt(byte[] b, int at, int len, int t) {
    long u = 0;
    for (int i = 0; i < len; i++) {
      u = (u << 8) | (b[at + i] & 255);
    }
    switch (t) {
      case 4:
        return (byte) u;
      case 6:
        return (short) u;
      case 8:
        return (int) u;
      default:
        return u;
    }
  }

  /** Number column k (0..3: RCD FLG XPY PRI), or null. */
  Long number(int k) {
    int s = N_TEXT + k;
    return found[s] ? readInt(b, valuePos[s], valueLen[s], type[s]) : null;
  }

  boolean hasPayload() {
    return found[W_PLD];
  }

  private static final char[] HEX = "0123456789abcdef".toCharArray();

  /** Latin-1 text as a JSON string (json module escapes, ensure_ascii off). */
  static void jsonText(StringBuilder out, byte[] b, int at, int len) {
    out.append('"');
    for (int i = 0; i < len; i++) {
      int c = b[at + i] & 255;
      if (c >= 0x20 && c != '"' && c != '\\') {
        out.append((char) c);
        continue;
      }
      out.append('\\');
      switch (c) {
        case '"':
          out.append('"');
          break;
        case '\\':
          out.append('\\');
          break;
        case '\b':
          out.append('b');
          break;
        case '\f':
          out.append('f');
          break;
        case '\n':
          out.append('n');
          break;
        case '\r':
          out.append('r');
          break;
        case '\t':
          out.append('t');
          break;
        default:
          out.append("u00").append(HEX[c >> 4]).append(HEX[c & 15]);
      }
    }
    out.append('"');
  }

  /** A scalar payload value as text: JSON (strings quoted) or map text (strings bare). */
  private void value(StringBuilder out, int i, boolean json) {
    int t = fType[i];
    int at = fAt[i];
    int len = fLen[i];
    switch (t) {
      case T_STRING:
      case T_URI:
        if (json) {
          jsonText(out, b, at, len);
        } else {
          out.append(new String(b, at, len, StandardCharsets.ISO_8859_1));
        }
        return;
      case T_UDEF:
        out.append("null");
        return;
      case T_BOOLEAN:
        out.append(b[at] > 0 ? "true" : "false");
        return;
      case T_FLOAT:
      case T_DOUBLE: {
        long bits = readInt(b, at, len, 0);
        double d = t == T_FLOAT ? Float.intBitsToFloat((int) bits) : Double.longBitsToDouble(bits);
        out.append(Double.isFinite(d) ? PyRepr.repr(d) : "null");
        return;
      }
      default: {
        long v = readInt(b, at, len, t);
        out.append(t == T_U64 ? Long.toUnsignedString(v) : Long.toString(v));
      }
    }
  }

  /** The payload as Kestrel JSON text, or null when there is no PLD. */
  UTF8String payload() {
    if (!found[W_PLD]) {
      return null;
    }
    StringBuilder out = new StringBuilder(16 + 24 * count);
    out.append('{');
    for (int i = 0; i < count; i++) {
      if (i > 0) {
        out.append(',');
      }
      jsonText(out, b, nameAt[i], nameLen[i]);
      out.append(':');
      value(out, i, true);
    }
    out.append('}');
    return UTF8String.fromString(out.toString());
  }

  /** The payload's top-level fields, name to text, or null when there is no PLD. */
  MapData payloadMap() {
    if (!found[W_PLD]) {
      return null;
    }
    Object[] keys = new Object[count];
    Object[] values = new Object[count];
    StringBuilder text = new StringBuilder(24);
    for (int i = 0; i < count; i++) {
      keys[i] = UTF8String.fromBytes(b, nameAt[i], nameLen[i]); // names are ASCII here
      text.setLength(0);
      value(text, i, false);
      values[i] = UTF8String.fromString(text.toString());
    }
    return new ArrayBasedMapData(new GenericArrayData(keys), new GenericArrayData(values));
  }
}
