package org.firn.spark;

/**
 * FirnHash64 of a key of one integer column: the hash that puts a key in its tree node, as
 * {@code firn.model.keyhash} defines it (part of the on-disk format; the pinned vectors of
 * its tests hold this port too, through the Spark reader's tests).
 */
final class KeyHash {
  private static final long SEED = 0x9E3779B97F4A7C15L;
  private static final long P1 = 0x87C37B91114253D5L;
  private static final long P2 = 0x4CF5AD432745937FL;
  private static final long F1 = 0xFF51AFD7ED558CCDL;
  private static final long F2 = 0xC4CEB9FE1A85EC53L;
  private static final long TAG_INTEGER = 1L;

  private KeyHash() {}

  private static final long P3 = 0x9FB21C651E98DF25L;

  /** The hash of a key of one integer column (any width: the value as an int64). */
  static long ofInteger(long value) {
    return fmix(integerColumn(value));
  }

  /** The hash of a composite key: {@code prefix} folded over its other columns, then an
   * integer last column. */
  static long after(long prefix, long value) {
    return fmix(prefix * P3 + integerColumn(value));
  }

  /** The column hash of an integer value: one lane absorbed, finished with the lane count. */
  private static long integerColumn(long value) {
    long x = (value * P1) ^ (SEED ^ TAG_INTEGER);
    x = Long.rotateLeft(x, 31) * P2;
    return fmix(x ^ 1L);
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
