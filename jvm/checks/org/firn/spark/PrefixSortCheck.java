package org.firn.spark;

import java.util.Arrays;
import java.util.Comparator;
import java.util.Random;

/**
 * Randomised checks of the loader's in-task sort, {@link PrefixSort}, against Java's own
 * sort: prefixes that differ in a few bytes or in all eight, with the sign bit set and not,
 * and many ties, each tie put in order by a second key; each a slice of longer arrays, whose
 * other entries must stay as they were. Run by {@code tests/integration/test_jvm_checks.py};
 * prints one line and exits 0, or throws.
 */
public final class PrefixSortCheck {
  private PrefixSortCheck() {}

  public static void main(String[] args) {
    long seed = args.length > 0 ? Long.parseLong(args[0]) : 38L;
    int trials = args.length > 1 ? Integer.parseInt(args[1]) : 300;
    Random random = new Random(seed);
    long sorted = 0;
    for (int t = 0; t < trials; t++) {
      sorted += check(random);
    }
    System.out.println("ok: " + trials + " trials, " + sorted + " rows sorted, seed " + seed);
  }

  private static int check(Random random) {
    int n = random.nextInt(random.nextBoolean() ? 40 : 5000);
    // Which bits may differ: a few low bytes (ids), everything, or the top bit alone.
    long[] masks = {0xFFL, 0xFFFFFFL, -1L, Long.MIN_VALUE | 0xF0L, 0x0F00_0000_0000_0000L};
    long mask = masks[random.nextInt(masks.length)];
    long base = random.nextLong() & ~mask;
    int distinct = 1 + random.nextInt(random.nextBoolean() ? 4 : 100_000);
    long[] pool = new long[distinct];
    for (int i = 0; i < distinct; i++) {
      pool[i] = base | (random.nextLong() & mask);
    }
    long[] keys = new long[n];
    long[] at = new long[n];
    // Each "row" i: its prefix, and a second key (its tie-break) that is unique.
    long[] second = new long[n];
    for (int i = 0; i < n; i++) {
      keys[i] = pool[random.nextInt(distinct)];
      second[i] = random.nextLong();
      at[i] = i;
    }
    Long[] expected = new Long[n];
    for (int i = 0; i < n; i++) {
      expected[i] = (long) i;
    }
    Comparator<Long> rows =
        (l, r) -> {
          int c = Long.compareUnsigned(keys[(int) (long) l], keys[(int) (long) r]);
          return c != 0 ? c : Long.compare(second[(int) (long) l], second[(int) (long) r]);
        };
    Arrays.sort(expected, rows);
    // The sort of a slice leaves what is around it alone.
    int from = random.nextInt(3);
    int to = from + n;
    long[] sortedKeys = new long[to + 2];
    long[] order = new long[to + 2];
    Arrays.fill(sortedKeys, 7);
    Arrays.fill(order, -1);
    System.arraycopy(keys, 0, sortedKeys, from, n);
    System.arraycopy(at, 0, order, from, n);
    PrefixSort.sort(sortedKeys, order, new long[to + 2], new long[to + 2], from, to);
    PrefixSort.orderTies(sortedKeys, order, from, to, (l, r) -> rows.compare(l, r));
    for (int i = 0; i < from; i++) {
      if (sortedKeys[i] != 7 || order[i] != -1) {
        throw new AssertionError("the sort of [" + from + ", " + to + ") changed " + i);
      }
    }
    if (sortedKeys[to] != 7 || order[to + 1] != -1) {
      throw new AssertionError("the sort of [" + from + ", " + to + ") changed what follows it");
    }
    sortedKeys = Arrays.copyOfRange(sortedKeys, from, to);
    order = Arrays.copyOfRange(order, from, to);
    for (int i = 0; i < n; i++) {
      if (order[i] != expected[i] || sortedKeys[i] != keys[(int) order[i]]) {
        throw new AssertionError(
            "row " + i + " of " + n + ": got " + order[i] + " (prefix " + Long.toHexString(sortedKeys[i])
                + "), expected " + expected[i] + " (mask " + Long.toHexString(mask) + ")");
      }
    }
    return n;
  }
}
