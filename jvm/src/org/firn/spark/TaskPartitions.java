package org.firn.spark;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.function.IntBinaryOperator;
import org.apache.spark.sql.catalyst.expressions.UnsafeRow;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.StructType;

/**
 * The partitions of the rows a load task holds ({@link LoadSort}), as the rows come: each
 * row's partition, numbered as the partitions first came, and the first row of each. Once
 * the rows are all in, the partitions' order, so that each partition's rows are sorted on
 * their own and written one partition after another.
 */
final class TaskPartitions {
  private final int[] ordinals;
  private final DataType[] types;
  private final RowOrder order;
  private final Map<List<Object>, Integer> numbers = new HashMap<>();
  /** The row (by its place among the rows held) each partition first came with. */
  private final List<Integer> firstRows = new ArrayList<>();
  /** Each row's partition number. */
  private int[] of = new int[1024];
  /** Each partition number's place in the partitions' order, once {@link #starts} found it. */
  private int[] rank;

  TaskPartitions(StructType schema, int[] ordinals) {
    this.ordinals = ordinals;
    this.types = LoadSort.typesOf(schema, ordinals);
    this.order = new RowOrder(schema.size(), ordinals, types);
  }

  /** Notes the partition of {@code row}, the {@code index}th held; {@code previous} is the
   * row held before it (null for the first): rows of one partition tend to come together,
   * and a row of the previous one's partition is not looked up. */
  void add(UnsafeRow row, UnsafeRow previous, int index) {
    int number;
    if (previous != null && order.compare(previous, row) == 0) {
      number = of[index - 1];
    } else {
      List<Object> values = new ArrayList<>(ordinals.length);
      for (int c = 0; c < ordinals.length; c++) {
        int o = ordinals[c];
        values.add(
            row.isNullAt(o)
                ? null
                : KeyColumns.integral(types[c]) ? KeyColumns.integral(row, o, types[c]) : row.getUTF8String(o).clone());
      }
      Integer known = numbers.get(values);
      if (known == null) {
        known = numbers.size();
        numbers.put(values, known);
        firstRows.add(index);
      }
      number = known;
    }
    if (index == of.length) {
      of = Arrays.copyOf(of, of.length * 2);
    }
    of[index] = number;
  }

  /**
   * Where each partition's rows start among the {@code count} rows sorted by partition, in
   * the partitions' order (one more entry: {@code count}); {@code rows} compares two rows by
   * their places among those held.
   */
  int[] starts(int count, IntBinaryOperator rows) {
    int partitions = firstRows.size();
    Integer[] inOrder = new Integer[partitions];
    for (int p = 0; p < partitions; p++) {
      inOrder[p] = p;
    }
    Arrays.sort(inOrder, (a, b) -> rows.applyAsInt(firstRows.get(a), firstRows.get(b)));
    rank = new int[partitions];
    for (int r = 0; r < partitions; r++) {
      rank[inOrder[r]] = r;
    }
    int[] starts = new int[partitions + 1];
    for (int i = 0; i < count; i++) {
      starts[rank[of[i]] + 1]++;
    }
    for (int r = 0; r < partitions; r++) {
      starts[r + 1] += starts[r];
    }
    return starts;
  }

  /** The place of row {@code index}'s partition in the partitions' order. */
  int rankOf(int index) {
    return rank[of[index]];
  }

  void clear() {
    numbers.clear();
    firstRows.clear();
    of = new int[1024];
    rank = null;
  }
}
