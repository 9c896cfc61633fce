package org.firn.spark;

import java.nio.ByteOrder;
import org.apache.spark.unsafe.Platform;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * A split's changed string, binary or decimal keys in Firn's byte order (unsigned bytes, a
 * prefix first), walked beside a base file's keys as {@link SplitReader.SortedKeys} walks
 * integers: each base key moves a cursor forward, and a key smaller than the one before (a
 * file out of order) is found by binary search instead.
 *
 * <p>Each key is held as its first 16 bytes read as two big-endian words (zero-padded) and
 * its length, in arrays in key order: two words and a length order keys of at most 16 bytes
 * exactly (zero-padding puts a prefix first only when the lengths are compared last), and
 * only longer keys with equal words compare their remaining bytes. A walk then reads three
 * arrays front to back. It replaced strings of their own, each somewhere else in the heap:
 * sorting them and walking them beside the base keys was a fifth of a string-keyed read
 * before compaction, most of it waiting on the strings' cache misses.
 */
final class SortedBytes {
  private static final boolean SWAP = ByteOrder.nativeOrder() == ByteOrder.LITTLE_ENDIAN;
  /** Bytes the two words hold. */
  private static final int WORDS_BYTES = 16;

  private final long[] first;
  private final long[] second;
  private final int[] lengths;
  /** Where each key's bytes lie in {@code bytes}, for keys longer than the words. */
  private final int[] starts;
  private final byte[] bytes;
  private int cursor;

  /**
   * The keys whose bytes lie at {@code starts[i]} of {@code bytes}, {@code lengths[i]} long,
   * for {@code i < count} (any order; the arrays are not changed).
   */
  SortedBytes(byte[] bytes, int[] starts, int[] lengths, int count) {
    long[] a = new long[count];
    long[] b = new long[count];
    int[] order = new int[count];
    for (int i = 0; i < count; i++) {
      long at = Platform.BYTE_ARRAY_OFFSET + starts[i];
      a[i] = word(bytes, at, lengths[i], 0);
      b[i] = word(bytes, at, lengths[i], 8);
      order[i] = i;
    }
    Sorter sorted = new Sorter(a, b, order, bytes, starts, lengths);
    sorted.sort();
    this.bytes = bytes;
    this.first = sorted.a;
    this.second = sorted.b;
    this.lengths = new int[count];
    this.starts = new int[count];
    for (int k = 0; k < count; k++) {
      int i = sorted.order[k];
      this.lengths[k] = lengths[i];
      this.starts[k] = starts[i];
    }
  }

  /** Starts a new file. */
  void restart() {
    cursor = 0;
  }

  /**
   * Whether the key of the {@code length} bytes at {@code offset} of {@code base} (an array,
   * or null and an address) is among the changed keys. The cursor's last passed key, not the
   * base key before, tells a key out of order: a batch's keys lie in its buffer, which the
   * next batch refills, so no base key is kept from one call to the next.
   */
  boolean holds(Object base, long offset, int length) {
    long a = word(base, offset, length, 0);
    long b = word(base, offset, length, 8);
    if (cursor > 0 && compare(cursor - 1, a, b, base, offset, length) >= 0) {
      int low = 0;
      int high = cursor - 1;
      while (low < high) { // the first changed key not below this one
        int middle = (low + high) >>> 1;
        if (compare(middle, a, b, base, offset, length) < 0) {
          low = middle + 1;
        } else {
          high = middle;
        }
      }
      cursor = low;
    }
    while (cursor < first.length) {
      int order = compare(cursor, a, b, base, offset, length);
      if (order >= 0) {
        return order == 0;
      }
      cursor++;
    }
    return false;
  }

  /** {@link #holds(Object, long, int)} of {@code key}'s bytes. */
  boolean holds(UTF8String key) {
    return holds(key.getBaseObject(), key.getBaseOffset(), key.numBytes());
  }

  /** {@link #holds(Object, long, int)} of the key {@code bytes[at, at + length)}. */
  boolean holds(byte[] key, int at, int length) {
    return holds((Object) key, (long) Platform.BYTE_ARRAY_OFFSET + at, length);
  }

  /** The changed key {@code k} against a key given by its words and bytes: negative when
   * the changed key comes first. */
  private int compare(int k, long a, long b, Object base, long offset, int length) {
    int order = Long.compareUnsigned(first[k], a);
    if (order != 0) {
      return order;
    }
    order = Long.compareUnsigned(second[k], b);
    if (order != 0) {
      return order;
    }
    return rest(bytes, Platform.BYTE_ARRAY_OFFSET + starts[k], lengths[k], base, offset, length);
  }

  /**
   * Two keys whose words are equal, by their bytes past the words and then their lengths.
   * When either is at most 16 bytes long the lengths alone decide: its bytes past its end
   * read as zeros in the words, so the other holds it as a prefix.
   */
  static int rest(Object x, long xAt, int xLength, Object y, long yAt, int yLength) {
    int common = Math.min(xLength, yLength);
    for (int from = WORDS_BYTES; from < common; from += 8) {
      int order = Long.compareUnsigned(word(x, xAt, xLength, from), word(y, yAt, yLength, from));
      if (order != 0) {
        return order;
      }
    }
    return Integer.compare(xLength, yLength);
  }

  /**
   * The key's bytes {@code [from, from + 8)} as a big-endian word, zeros past its {@code
   * length}: an unsigned comparison of two keys' words is then that of their bytes. Reads no
   * byte outside the key.
   */
  static long word(Object base, long offset, int length, int from) {
    int left = length - from;
    if (left >= 8) {
      return bigEndian(Platform.getLong(base, offset + from));
    }
    if (left <= 0) {
      return 0;
    }
    if (length >= 8) { // the last 8 bytes of the key end with these
      return bigEndian(Platform.getLong(base, offset + length - 8)) << (8 * (8 - left));
    }
    long word = 0;
    for (int i = 0; i < left; i++) {
      word |= (Platform.getByte(base, offset + from + i) & 0xFFL) << (56 - 8 * i);
    }
    return word;
  }

  private static long bigEndian(long word) {
    return SWAP ? Long.reverseBytes(word) : word;
  }

  /**
   * Sorts keys by their words (and, where the words tie, their bytes): a merge sort of the
   * runs already in order (a split's changed keys arrive as one ascending run per change
   * file, each file in key order). Each pass moves the words themselves and the keys'
   * numbers, front to back, where a sort of the numbers alone looked each one's words up
   * at random: in a profile of a two-column read of a string-keyed table before compaction,
   * that sort was about a third of the time its splits spent on their changes.
   */
  private static final class Sorter {
    /** The keys' words and numbers; sorted once {@link #sort} returns. */
    long[] a;
    long[] b;
    int[] order;
    private final byte[] bytes;
    private final int[] starts;
    private final int[] lengths;

    Sorter(long[] a, long[] b, int[] order, byte[] bytes, int[] starts, int[] lengths) {
      this.a = a;
      this.b = b;
      this.order = order;
      this.bytes = bytes;
      this.starts = starts;
      this.lengths = lengths;
    }

    /** Whether the key of words {@code (xa, xb)}, number {@code x}, comes before {@code
     * (ya, yb)}, number {@code y}. */
    private boolean before(long xa, long xb, int x, long ya, long yb, int y) {
      if (xa != ya) {
        return Long.compareUnsigned(xa, ya) < 0;
      }
      if (xb != yb) {
        return Long.compareUnsigned(xb, yb) < 0;
      }
      long base = Platform.BYTE_ARRAY_OFFSET;
      return rest(bytes, base + starts[x], lengths[x], bytes, base + starts[y], lengths[y]) < 0;
    }

    void sort() {
      int n = order.length;
      if (n < 2) {
        return;
      }
      // The runs' ends: each maximal ascending stretch.
      int[] ends = new int[n];
      int runs = 0;
      for (int i = 1; i < n; i++) {
        if (before(a[i], b[i], order[i], a[i - 1], b[i - 1], order[i - 1])) {
          ends[runs++] = i;
        }
      }
      ends[runs++] = n;
      if (runs == 1) {
        return;
      }
      long[] intoA = new long[n];
      long[] intoB = new long[n];
      int[] intoOrder = new int[n];
      while (runs > 1) {
        int merged = 0;
        int start = 0;
        for (int r = 0; r < runs; r += 2) {
          int middle = ends[r];
          int end = r + 1 < runs ? ends[r + 1] : middle;
          merge(intoA, intoB, intoOrder, start, middle, end);
          ends[merged++] = end;
          start = end;
        }
        runs = merged;
        long[] swapA = a;
        a = intoA;
        intoA = swapA;
        long[] swapB = b;
        b = intoB;
        intoB = swapB;
        int[] swapOrder = order;
        order = intoOrder;
        intoOrder = swapOrder;
      }
    }

    /** Merges the runs {@code [start, middle)} and {@code [middle, end)} into the {@code into}
     * arrays; on a tie the first run's key comes first. */
    private void merge(
        long[] intoA, long[] intoB, int[] intoOrder, int start, int middle, int end) {
      int i = start;
      int j = middle;
      int k = start;
      while (i < middle && j < end) {
        if (before(a[j], b[j], order[j], a[i], b[i], order[i])) {
          intoA[k] = a[j];
          intoB[k] = b[j];
          intoOrder[k++] = order[j++];
        } else {
          intoA[k] = a[i];
          intoB[k] = b[i];
          intoOrder[k++] = order[i++];
        }
      }
      int left = middle - i;
      System.arraycopy(a, i, intoA, k, left);
      System.arraycopy(b, i, intoB, k, left);
      System.arraycopy(order, i, intoOrder, k, left);
      k += left;
      System.arraycopy(a, j, intoA, k, end - j);
      System.arraycopy(b, j, intoB, k, end - j);
      System.arraycopy(order, j, intoOrder, k, end - j);
    }
  }
}
