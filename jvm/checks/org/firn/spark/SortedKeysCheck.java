package org.firn.spark;

import java.io.ByteArrayOutputStream;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashSet;
import java.util.List;
import java.util.Random;
import java.util.Set;

/**
 * Randomised checks of the merge reader's changed-key sets, {@link SortedBytes} and {@link
 * SplitReader.SortedKeys}, against Java's own sets: every base key asked about, in key order
 * (the walk), in any order (the binary search a key smaller than the one before takes), and
 * after a restart. Run by {@code tests/integration/test_jvm_checks.py}; prints one line and
 * exits 0, or throws.
 */
public final class SortedKeysCheck {
  /** Prefixes that put keys' differences before, at and past the words' 8 and 16 bytes. */
  private static final int[] PREFIX_LENGTHS = {0, 1, 7, 8, 9, 15, 16, 17, 24};

  private SortedKeysCheck() {}

  public static void main(String[] args) {
    long seed = args.length > 0 ? Long.parseLong(args[0]) : 38L;
    int trials = args.length > 1 ? Integer.parseInt(args[1]) : 300;
    Random random = new Random(seed);
    long asked = 0;
    for (int t = 0; t < trials; t++) {
      asked += checkBytes(random);
      asked += checkLongs(random);
    }
    System.out.println("ok: " + trials + " trials, " + asked + " keys asked about, seed " + seed);
  }

  private static long checkBytes(Random random) {
    byte[][] prefixes = new byte[4][];
    for (int p = 0; p < prefixes.length; p++) {
      prefixes[p] = bytes(random, PREFIX_LENGTHS[random.nextInt(PREFIX_LENGTHS.length)]);
    }
    Set<Key> changed = new HashSet<>();
    int wanted = 1 + random.nextInt(random.nextBoolean() ? 20 : 600);
    while (changed.size() < wanted) {
      changed.add(new Key(key(random, prefixes)));
    }
    // The keys in the arena as change files give them: a few runs, each in key order.
    List<Key> order = new ArrayList<>(changed);
    int runs = 1 + random.nextInt(4);
    List<Key> arranged = new ArrayList<>();
    for (int r = 0; r < runs; r++) {
      List<Key> run = new ArrayList<>(order.subList(r * order.size() / runs, (r + 1) * order.size() / runs));
      if (random.nextInt(3) > 0) {
        run.sort(null);
      }
      arranged.addAll(run);
    }
    ByteArrayOutputStream arena = new ByteArrayOutputStream();
    int[] starts = new int[arranged.size() + 3];
    int[] lengths = new int[arranged.size() + 3];
    for (int i = 0; i < arranged.size(); i++) {
      arena.write(7); // a gap: no key starts where the last ended
      starts[i] = arena.size();
      lengths[i] = arranged.get(i).bytes.length;
      arena.writeBytes(arranged.get(i).bytes);
    }
    SortedBytes sorted = new SortedBytes(arena.toByteArray(), starts, lengths, arranged.size());

    long asked = 0;
    for (int file = 0; file < 3; file++) {
      List<Key> base = new ArrayList<>(changed);
      while (base.size() < 2 * changed.size() + 5) {
        base.add(new Key(key(random, prefixes)));
      }
      base = new ArrayList<>(new HashSet<>(base)); // a file holds a key once
      int shape = random.nextInt(3);
      if (shape == 0) {
        base.sort(null); // the walk
      } else if (shape == 1) {
        java.util.Collections.shuffle(base, random); // every key out of order
      } else {
        base.sort(null); // in order, but now and then back to an earlier key
        for (int i = 1; i < base.size(); i += 1 + random.nextInt(8)) {
          base.set(i, base.get(random.nextInt(i)));
        }
      }
      sorted.restart();
      for (Key k : base) {
        // The key's bytes at an offset of a larger array, as a batch's buffer holds them.
        int at = random.nextInt(5);
        byte[] buffer = new byte[at + k.bytes.length + random.nextInt(3)];
        Arrays.fill(buffer, (byte) 0x5A);
        System.arraycopy(k.bytes, 0, buffer, at, k.bytes.length);
        boolean held = sorted.holds(buffer, at, k.bytes.length);
        if (held != changed.contains(k)) {
          throw new AssertionError(
              "SortedBytes.holds(" + k + ") = " + held + ", changed " + changed.contains(k)
                  + " (shape " + shape + ", " + changed.size() + " changed keys)");
        }
        asked++;
      }
    }
    return asked;
  }

  private static long checkLongs(Random random) {
    Set<Long> changed = new HashSet<>();
    int wanted = 1 + random.nextInt(random.nextBoolean() ? 20 : 600);
    long spread = random.nextBoolean() ? 1000 : Long.MAX_VALUE;
    while (changed.size() < wanted) {
      changed.add(longKey(random, spread));
    }
    long[] keys = changed.stream().mapToLong(Long::longValue).toArray();
    SplitReader.SortedKeys sorted = new SplitReader.SortedKeys(keys.clone());
    long asked = 0;
    for (int file = 0; file < 3; file++) {
      List<Long> base = new ArrayList<>(changed);
      for (int i = 0; i < changed.size() + 5; i++) {
        base.add(longKey(random, spread));
      }
      base = new ArrayList<>(new HashSet<>(base));
      if (random.nextBoolean()) {
        base.sort(null);
      } else {
        java.util.Collections.shuffle(base, random);
      }
      sorted.restart();
      for (long k : base) {
        if (sorted.holds(k) != changed.contains(k)) {
          throw new AssertionError("SortedKeys.holds(" + k + ") = " + sorted.holds(k));
        }
        asked++;
      }
    }
    return asked;
  }

  private static long longKey(Random random, long spread) {
    int pick = random.nextInt(20);
    if (pick == 0) {
      return Long.MIN_VALUE;
    }
    if (pick == 1) {
      return Long.MAX_VALUE;
    }
    return spread == Long.MAX_VALUE ? random.nextLong() : random.nextLong() % spread;
  }

  /** A key: one of the prefixes, then a tail that is sometimes zero bytes (a shorter key
   * padded with zeros must not be taken for it) and sometimes bytes above 0x7f. */
  private static byte[] key(Random random, byte[][] prefixes) {
    byte[] prefix = prefixes[random.nextInt(prefixes.length)];
    int tail = random.nextInt(12);
    byte[] out = Arrays.copyOf(prefix, prefix.length + tail);
    int kind = random.nextInt(3);
    for (int i = prefix.length; i < out.length; i++) {
      out[i] = kind == 0 ? 0 : (byte) (kind == 1 ? '0' + random.nextInt(3) : random.nextInt(256));
    }
    return out;
  }

  private static byte[] bytes(Random random, int length) {
    byte[] out = new byte[length];
    random.nextBytes(out);
    return out;
  }

  /** Bytes compared as Firn orders keys: unsigned, a prefix first. */
  private static final class Key implements Comparable<Key> {
    final byte[] bytes;

    Key(byte[] bytes) {
      this.bytes = bytes;
    }

    @Override
    public int compareTo(Key other) {
      return Arrays.compareUnsigned(bytes, other.bytes);
    }

    @Override
    public boolean equals(Object other) {
      return other instanceof Key k && Arrays.equals(bytes, k.bytes);
    }

    @Override
    public int hashCode() {
      return Arrays.hashCode(bytes);
    }

    @Override
    public String toString() {
      return Arrays.toString(bytes);
    }
  }
}
