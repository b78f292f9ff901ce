package busgate.spark;

import java.io.Serializable;

/**
 * The records a query keeps: sinceUs <= ts < untilUs and sinceSeq <= seq < untilSeq (Long.MIN /
 * Long.MAX: open). With a sequence bound, v1 records (no sequence number) are not kept. The twin
 * of {@code pipeline.plan.Bounds}.
 */
final class Bounds implements Serializable {
  private static final long serialVersionUID = 1L;
  static final Bounds ALL = new Bounds(Long.MIN_VALUE, Long.MAX_VALUE, Long.MIN_VALUE, Long.MAX_VALUE);

  final long sinceUs;
  final long untilUs;
  final long sinceSeq;
  final long untilSeq;

  Bounds(long sinceUs, long untilUs, long sinceSeq, long untilSeq) {
    this.sinceUs = sinceUs;
    this.untilUs = untilUs;
    this.sinceSeq = sinceSeq;
    this.untilSeq = untilSeq;
  }

  boolean any() {
    return byTime() || bySeq();
  }

  boolean byTime() {
    return sinceUs != Long.MIN_VALUE || untilUs != Long.MAX_VALUE;
  }

  boolean bySeq() {
    return sinceSeq != Long.MIN_VALUE || untilSeq != Long.MAX_VALUE;
  }

  Bounds since(long us) {
    return new Bounds(Math.max(sinceUs, us), untilUs, sinceSeq, untilSeq);
  }

  Bounds until(long us) {
    return new Bounds(sinceUs, Math.min(untilUs, us), sinceSeq, untilSeq);
  }

  Bounds sinceSeq(long seq) {
    return new Bounds(sinceUs, untilUs, Math.max(sinceSeq, seq), untilSeq);
  }

  Bounds untilSeq(long seq) {
    return new Bounds(sinceUs, untilUs, sinceSeq, Math.min(untilSeq, seq));
  }

  Bounds and(Bounds o) {
    return new Bounds(Math.max(sinceUs, o.sinceUs), Math.min(untilUs, o.untilUs),
        Math.max(sinceSeq, o.sinceSeq), Math.min(untilSeq, o.untilSeq));
  }

  boolean empty() {
    return sinceUs >= untilUs || sinceSeq >= untilSeq;
  }

  /** Whether an index block may hold a kept record (following: the next block's first seq). */
  boolean keepsBlock(Segments.Block block, long following) {
    if (block.maxTs < sinceUs || block.minTs >= untilUs) {
      return false;
    }
    if (sinceSeq != Long.MIN_VALUE && following != 0 && following <= sinceSeq) {
      return false;
    }
    return untilSeq == Long.MAX_VALUE || block.firstSeq < untilSeq;
  }

  boolean keeps(long tsUs, long seq, boolean hasSeq) {
    if (tsUs < sinceUs || tsUs >= untilUs) {
      return false;
    }
    if (!bySeq()) {
      return true;
    }
    return hasSeq && seq >= sinceSeq && seq < untilSeq;
  }

  @Override
  public String toString() {
    return "ts[" + (sinceUs == Long.MIN_VALUE ? "" : sinceUs) + ","
        + (untilUs == Long.MAX_VALUE ? "" : untilUs) + ") seq["
        + (sinceSeq == Long.MIN_VALUE ? "" : sinceSeq) + ","
        + (untilSeq == Long.MAX_VALUE ? "" : untilSeq) + ")";
  }
}
