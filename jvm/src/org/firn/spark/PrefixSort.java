package org.firn.spark;

import java.util.Arrays;

/**
 * Sorts rows by reference: each row's 8-byte key prefix (compared unsigned) beside its
 * address. The prefixes are sorted by radix, least significant byte first, over only the
 * bytes in which they differ (three for the ids of a few million rows); then each run of
 * equal prefixes is put in order by comparing its rows, unless the prefix is the whole key.
 */
final class PrefixSort {
  /** A run of tied prefixes at most this long is put in order by insertion. */
  private static final int SHORT_RUN = 16;

  /** The order of two rows by their addresses (a comparison of their keys). */
  interface Rows {
    int compare(long left, long right);
  }

  private PrefixSort() {}

  /**
   * Sorts {@code keys[from..to)} (unsigned) with their {@code at}, in place, using the
   * spares (as long as the arrays) as room.
   */
  static void sort(long[] keys, long[] at, long[] keysSpare, long[] atSpare, int from, int to) {
    long differ = 0;
    for (int i = from + 1; i < to; i++) {
      differ |= keys[i] ^ keys[from];
    }
    int[] counts = new int[256];
    boolean inSpare = false;
    for (int shift = 0; shift < 64; shift += 8) {
      if (((differ >>> shift) & 0xFF) == 0) {
        continue;
      }
      long[] fromKeys = inSpare ? keysSpare : keys;
      long[] fromAt = inSpare ? atSpare : at;
      long[] toKeys = inSpare ? keys : keysSpare;
      long[] toAt = inSpare ? at : atSpare;
      Arrays.fill(counts, 0);
      for (int i = from; i < to; i++) {
        counts[(int) (fromKeys[i] >>> shift) & 0xFF]++;
      }
      int sum = from;
      for (int d = 0; d < 256; d++) {
        int c = counts[d];
        counts[d] = sum;
        sum += c;
      }
      for (int i = from; i < to; i++) {
        int slot = counts[(int) (fromKeys[i] >>> shift) & 0xFF]++;
        toKeys[slot] = fromKeys[i];
        toAt[slot] = fromAt[i];
      }
      inSpare = !inSpare;
    }
    if (inSpare) {
      System.arraycopy(keysSpare, from, keys, from, to - from);
      System.arraycopy(atSpare, from, at, from, to - from);
    }
  }

  /** Puts each run of equal {@code keys[from..to)} (sorted) in {@code rows}' order. */
  static void orderTies(long[] keys, long[] at, int from, int to, Rows rows) {
    int start = from;
    while (start < to) {
      int end = start + 1;
      while (end < to && keys[end] == keys[start]) {
        end++;
      }
      if (end - start > SHORT_RUN) {
        Long[] run = new Long[end - start];
        for (int i = start; i < end; i++) {
          run[i - start] = at[i];
        }
        Arrays.sort(run, rows::compare);
        for (int i = start; i < end; i++) {
          at[i] = run[i - start];
        }
      } else {
        for (int i = start + 1; i < end; i++) {
          long moving = at[i];
          int j = i - 1;
          while (j >= start && rows.compare(at[j], moving) > 0) {
            at[j + 1] = at[j];
            j--;
          }
          at[j + 1] = moving;
        }
      }
      start = end;
    }
  }
}
