package org.firn.spark;

import org.apache.spark.unsafe.types.UTF8String;

/**
 * FirnHash64: the hash that puts a key in its tree node, as {@code firn.model.keyhash}
 * defines it (part of the on-disk format; the pinned vectors of its tests hold this port
 * too, through the Spark reader's and loader's tests). A value becomes 64-bit lanes: an
 * integer, a date (days) or a timestamp (microseconds) one lane, tagged alike; a decimal the
 * low and high 64 bits of its unscaled value; a string its byte length, then its bytes as
 * little-endian 8-byte words, the last one zero-padded.
 */
final class KeyHash {
  private static final long SEED = 0x9E3779B97F4A7C15L;
  private static final long P1 = 0x87C37B91114253D5L;
  private static final long P2 = 0x4CF5AD432745937FL;
  private static final long P3 = 0x9FB21C651E98DF25L;
  private static final long F1 = 0xFF51AFD7ED558CCDL;
  private static final long F2 = 0xC4CEB9FE1A85EC53L;
  private static final long TAG_INTEGER = 1L;
  private static final long TAG_DECIMAL = 2L;
  private static final long TAG_BYTES = 3L;

  private KeyHash() {}

  /** The hash of a key of one integer column (any width: the value as an int64). */
  static long ofInteger(long value) {
    return fmix(integerColumn(value));
  }

  /** The hash of a composite key: {@code prefix} folded over its other columns, then one
   * more column whose column hash is {@code column}. */
  static long after(long prefix, long value) {
    return fold(prefix, integerColumn(value));
  }

  /** The hash of a key of one string column. */
  static long ofString(UTF8String value) {
    return fmix(stringColumn(value));
  }

  /** {@link #after} for a string last column. */
  static long afterString(long prefix, UTF8String value) {
    return fold(prefix, stringColumn(value));
  }

  /** A key's hash so far ({@code prefix}) folded with its next column's hash. */
  static long fold(long prefix, long column) {
    return fmix(prefix * P3 + column);
  }

  /** The hash of a key's first column, given that column's hash. */
  static long first(long column) {
    return fmix(column);
  }

  /** The column hash of an integer, date or timestamp value: one lane. */
  static long integerColumn(long value) {
    return fmix(absorb(SEED ^ TAG_INTEGER, value) ^ 1L);
  }

  /** The column hash of a decimal: the low, then the high 64 bits of its unscaled value. */
  static long decimalColumn(long low, long high) {
    return fmix(absorb(absorb(SEED ^ TAG_DECIMAL, low), high) ^ 2L);
  }

  /** The column hash of a string: its UTF-8 length, then its bytes 8 at a time. */
  static long stringColumn(UTF8String value) {
    int n = value.numBytes();
    long h = absorb(SEED ^ TAG_BYTES, n);
    int words = (n + 7) / 8;
    for (int w = 0; w < words; w++) {
      long word = 0;
      int end = Math.min(n, 8 * w + 8);
      for (int b = end - 1; b >= 8 * w; b--) {
        word = (word << 8) | (value.getByte(b) & 0xFFL);
      }
      h = absorb(h, word);
    }
    return fmix(h ^ (words + 1L));
  }

  private static long absorb(long h, long lane) {
    return Long.rotateLeft(h ^ (lane * P1), 31) * P2;
  }

  static long fmix(long h) {
    h ^= h >>> 33;
    h *= F1;
    h ^= h >>> 33;
    h *= F2;
    h ^= h >>> 33;
    return h;
  }
}
