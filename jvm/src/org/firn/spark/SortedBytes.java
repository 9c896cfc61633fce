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
    for (int i = 0; i < count; i++) {
      long at = Platform.BYTE_ARRAY_OFFSET + starts[i];
      a[i] = word(bytes, at, lengths[i], 0);
      b[i] = word(bytes, at, lengths[i], 8);
    }
    int[] order = new int[count];
    for (int i = 0; i < count; i++) {
      order[i] = i;
    }
    new Sorter(a, b, bytes, starts, lengths).sort(order);
    this.bytes = bytes;
    this.first = new long[count];
    this.second = new long[count];
    this.lengths = new int[count];
    this.starts = new int[count];
    for (int k = 0; k < count; k++) {
      int i = order[k];
      first[k] = a[i];
      second[k] = b[i];
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
   * Sorts key numbers by their keys: a merge sort of the runs already in order (a split's
   * changed keys arrive as one ascending run per change file, each file in key order), on
   * primitive arrays.
   */
  private static final class Sorter {
    private final long[] a;
    private final long[] b;
    private final byte[] bytes;
    private final int[] starts;
    private final int[] lengths;

    Sorter(long[] a, long[] b, byte[] bytes, int[] starts, int[] lengths) {
      this.a = a;
      this.b = b;
      this.bytes = bytes;
      this.starts = starts;
      this.lengths = lengths;
    }

    private int compare(int i, int j) {
      int order = Long.compareUnsigned(a[i], a[j]);
      if (order != 0) {
        return order;
      }
      order = Long.compareUnsigned(b[i], b[j]);
      if (order != 0) {
        return order;
      }
      long base = Platform.BYTE_ARRAY_OFFSET;
      return rest(bytes, base + starts[i], lengths[i], bytes, base + starts[j], lengths[j]);
    }

    void sort(int[] order) {
      int n = order.length;
      if (n < 2) {
        return;
      }
      // The runs' ends: each maximal ascending stretch.
      int[] ends = new int[n];
      int runs = 0;
      for (int i = 1; i < n; i++) {
        if (compare(order[i - 1], order[i]) > 0) {
          ends[runs++] = i;
        }
      }
      ends[runs++] = n;
      int[] from = order;
      int[] into = new int[n];
      while (runs > 1) {
        int merged = 0;
        int start = 0;
        for (int r = 0; r < runs; r += 2) {
          int middle = ends[r];
          int end = r + 1 < runs ? ends[r + 1] : middle;
          merge(from, into, start, middle, end);
          ends[merged++] = end;
          start = end;
        }
        runs = merged;
        int[] swap = from;
        from = into;
        into = swap;
      }
      if (from != order) {
        System.arraycopy(from, 0, order, 0, n);
      }
    }

    private void merge(int[] from, int[] into, int start, int middle, int end) {
      int i = start;
      int j = middle;
      int k = start;
      while (i < middle && j < end) {
        into[k++] = compare(from[j], from[i]) < 0 ? from[j++] : from[i++];
      }
      System.arraycopy(from, i, into, k, middle - i);
      System.arraycopy(from, j, into, k + middle - i, end - j);
    }
  }
}
