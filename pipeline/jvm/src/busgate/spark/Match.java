package busgate.spark;

import java.io.Serializable;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import org.apache.spark.sql.sources.EqualTo;
import org.apache.spark.sql.sources.Filter;
import org.apache.spark.sql.sources.In;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * Equality filters on header text columns ({@code GRP = 'x'}, {@code TYP IN ('RQS', 'ACK')}),
 * checked per record from its decoded header before any other column is rendered. Spark applies
 * them again after the scan; here they only spare work.
 */
final class Match implements Serializable {
  private static final long serialVersionUID = 1L;
  static final Match NONE = new Match(new int[0], new String[0][]);

  final int[] columns; // column ids (Schema.TEXT0 ..)
  final String[][] values;
  private transient List<Set<UTF8String>> sets;

  Match(int[] columns, String[][] values) {
    this.columns = columns;
    this.values = values;
  }

  boolean any() {
    return columns.length > 0;
  }

  /** The text column id a filter tests, and its allowed values; null when it is not one. */
  static Object[] of(Filter f) {
    String column;
    Object[] allowed;
    if (f instanceof EqualTo) {
      column = ((EqualTo) f).attribute();
      allowed = new Object[] {((EqualTo) f).value()};
    } else if (f instanceof In) {
      column = ((In) f).attribute();
      allowed = ((In) f).values();
    } else {
      return null;
    }
    int id = -1;
    for (int k = 0; k < Schema.TEXT.length; k++) {
      if (Schema.TEXT[k].equals(column)) {
        id = Schema.TEXT0 + k;
      }
    }
    if (id < 0) {
      return null;
    }
    String[] text = new String[allowed.length];
    for (int i = 0; i < allowed.length; i++) {
      if (!(allowed[i] instanceof String)) {
        return null;
      }
      text[i] = (String) allowed[i];
    }
    return new Object[] {id, text};
  }

  static Match from(List<Object[]> found) {
    int[] columns = new int[found.size()];
    String[][] values = new String[found.size()][];
    for (int i = 0; i < columns.length; i++) {
      columns[i] = (Integer) found.get(i)[0];
      values[i] = (String[]) found.get(i)[1];
    }
    return new Match(columns, values);
  }

  /** Whether a value of filter i is allowed (null never is: a comparison with null fails). */
  boolean allows(int i, UTF8String value) {
    if (value == null) {
      return false;
    }
    if (sets == null) {
      sets = new ArrayList<>();
      for (String[] v : values) {
        Set<UTF8String> set = new HashSet<>();
        for (String s : v) {
          set.add(UTF8String.fromString(s));
        }
        sets.add(set);
      }
    }
    return sets.get(i).contains(value);
  }

  @Override
  public String toString() {
    StringBuilder out = new StringBuilder();
    for (int i = 0; i < columns.length; i++) {
      out.append(' ').append(Schema.TEXT[columns[i] - Schema.TEXT0]).append(" in ")
          .append(java.util.Arrays.toString(values[i]));
    }
    return out.toString();
  }
}
