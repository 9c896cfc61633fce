package org.firn.spark;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.function.IntUnaryOperator;
import org.apache.spark.sql.catalyst.expressions.UnsafeRow;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.StructType;

/**
 * The partitions of the rows a load task holds ({@link LoadSort}), as the rows come: each
 * partition numbered as it first came, with a copy of its first row. {@link LoadSort} keeps
 * each row's number beside the row, in the task's memory. Once the rows are all in, the
 * partitions' order, so that each partition's rows are sorted on their own and written one
 * partition after another.
 */
final class TaskPartitions {
  /** Partitions a row is compared with, the latest first, before its values are looked up:
   * rows of one partition tend to come together, or a few partitions in turn. */
  private static final int RECENT = 8;

  private final int[] ordinals;
  private final DataType[] types;
  private final RowOrder order;
  private final Map<List<Object>, Integer> numbers = new HashMap<>();
  /** Each partition's first row, a copy, by number. */
  private final List<UnsafeRow> firsts = new ArrayList<>();
  /** The partitions rows came with last, the latest first. */
  private final int[] recent = new int[RECENT];
  private int recentCount;
  /** Each partition number's place in the partitions' order, once {@link #starts} found it. */
  private int[] rank;

  TaskPartitions(StructType schema, int[] ordinals) {
    this.ordinals = ordinals;
    this.types = LoadSort.typesOf(schema, ordinals);
    this.order = new RowOrder(schema.size(), ordinals, types);
  }

  /** The number of {@code row}'s partition, numbering it if it is new. */
  int numberOf(UnsafeRow row) {
    for (int i = 0; i < recentCount; i++) {
      int number = recent[i];
      if (order.compare(firsts.get(number), row) == 0) {
        System.arraycopy(recent, 0, recent, 1, i);
        recent[0] = number;
        return number;
      }
    }
    List<Object> values = new ArrayList<>(ordinals.length);
    for (int c = 0; c < ordinals.length; c++) {
      int o = ordinals[c];
      values.add(
          row.isNullAt(o)
              ? null
              : KeyColumns.integral(types[c]) ? KeyColumns.integral(row, o, types[c]) : row.getUTF8String(o).clone());
    }
    Integer number = numbers.get(values);
    if (number == null) {
      number = numbers.size();
      numbers.put(values, number);
      firsts.add(row.copy());
    }
    System.arraycopy(recent, 0, recent, 1, Math.min(recentCount, RECENT - 1));
    recent[0] = number;
    recentCount = Math.min(recentCount + 1, RECENT);
    return number;
  }

  /**
   * Where each partition's rows start among the {@code count} rows sorted by partition, in
   * the partitions' order (one more entry: {@code count}); {@code numberAt} gives the
   * partition number of each row held, by its place.
   */
  int[] starts(int count, IntUnaryOperator numberAt) {
    int partitions = firsts.size();
    Integer[] inOrder = new Integer[partitions];
    for (int p = 0; p < partitions; p++) {
      inOrder[p] = p;
    }
    Arrays.sort(inOrder, (a, b) -> order.compare(firsts.get(a), firsts.get(b)));
    rank = new int[partitions];
    for (int r = 0; r < partitions; r++) {
      rank[inOrder[r]] = r;
    }
    int[] starts = new int[partitions + 1];
    for (int i = 0; i < count; i++) {
      starts[rank[numberAt.applyAsInt(i)] + 1]++;
    }
    for (int r = 0; r < partitions; r++) {
      starts[r + 1] += starts[r];
    }
    return starts;
  }

  /** The place of partition {@code number} in the partitions' order. */
  int rankOf(int number) {
    return rank[number];
  }

  void clear() {
    numbers.clear();
    firsts.clear();
    recentCount = 0;
    rank = null;
  }
}
