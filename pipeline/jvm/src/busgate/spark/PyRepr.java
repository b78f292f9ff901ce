package busgate.spark;

import java.math.BigDecimal;
import java.math.MathContext;
import java.math.RoundingMode;

/**
 * Doubles as Python's {@code repr} prints them (what {@code bus.frame.jsonmap.to_json} writes): the
 * shortest digits that read back as the same double (the nearest when several), fixed notation
 * for decimal exponents in (-4, 16], else {@code 1.5e-05} / {@code 1.0e+16} (an exponent always
 * with a fraction, as to_json writes since PROTOCOL.md 1.7); integral values end in {@code .0}.
 */
final class PyRepr {
  private static final double[] POW10 = {
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15
  };
  private static final RoundingMode[] MODES = {
    RoundingMode.HALF_EVEN, RoundingMode.FLOOR, RoundingMode.CEILING
  };

  private PyRepr() {}

  /** repr(d) for a finite double. */
  static String repr(double d) {
    if (d == 0) {
      return (1 / d < 0) ? "-0.0" : "0.0";
    }
    String fast = shortFixed(d);
    if (fast != null) {
      return fast;
    }
    BigDecimal exact = new BigDecimal(d);
    BigDecimal best = null;
    for (int p = 1; p <= 17 && best == null; p++) {
      MathContext mc;
      for (RoundingMode mode : MODES) {
        mc = new MathContext(p, mode);
        BigDecimal r = exact.round(mc);
        if (r.doubleValue() == d) {
          if (best == null
              || r.subtract(exact).abs().compareTo(best.subtract(exact).abs()) < 0) {
            best = r;
          }
        }
      }
    }
    if (best == null) {
      best = exact;
    }
    best = best.stripTrailingZeros();
    String digits = best.unscaledValue().abs().toString();
    int decpt = digits.length() - best.scale();
    return format(d < 0, digits, decpt);
  }

  static String format(boolean negative, String digits, int decpt) {
    StringBuilder out = new StringBuilder(32);
    if (negative) {
      out.append('-');
    }
    int n = digits.length();
    if (decpt > -4 && decpt <= 16) {
      if (decpt <= 0) {
        out.append("0.");
        for (int i = 0; i < -decpt; i++) {
          out.append('0');
        }
        out.append(digits);
      } else if (decpt >= n) {
        out.append(digits);
        for (int i = n; i < decpt; i++) {
          out.append('0');
        }
        out.append(".0");
      } else {
        out.append(digits, 0, decpt).append('.').append(digits, decpt, n);
      }
      return out.toString();
    }
    out.append(digits.charAt(0));
    // to_json's rule (PROTOCOL.md 1.7): an exponent always has a fraction (1.0e+16, not Python's
    // 1e+16), so Java's JsonFrameParser reads the number back as a DOUBLE
    out.append('.').append(n > 1 ? digits.substring(1) : "0");
    int exp = decpt - 1;
    out.append('e').append(exp < 0 ? '-' : '+');
    int abs = Math.abs(exp);
    if (abs < 10) {
      out.append('0');
    }
    out.append(abs);
    return out.toString();
  }

  /**
   * The common case without BigDecimal (bus/native/_journalscan.c put_short_double): d == m / 10^k
   * exactly with 0 < |m| < 10^15, k <= 15 and 1e-4 <= |d|: the digits of m are the shortest.
   */
  private static String shortFixed(double d) {
    double a = Math.abs(d);
    if (!(a >= 1e-4 && a < 1e15)) {
      return null;
    }
    for (int k = 0; k < 16; k++) {
      double scaled = a * POW10[k];
      if (scaled >= 1e15) {
        return null;
      }
      double m = (double) (long) (scaled + 0.5);
      if (m == 0 || m / POW10[k] != a) {
        continue;
      }
      String digits = Long.toString((long) m);
      int n = digits.length();
      StringBuilder out = new StringBuilder(24);
      if (d < 0) {
        out.append('-');
      }
      if (n <= k) {
        out.append("0.");
        for (int z = 0; z < k - n; z++) {
          out.append('0');
        }
        out.append(digits);
      } else if (k == 0) {
        out.append(digits).append(".0");
      } else {
        out.append(digits, 0, n - k).append('.').append(digits, n - k, n);
      }
      return out.toString();
    }
    return null;
  }
}
