package org.firn.spark;

import java.io.Serializable;
import org.apache.spark.sql.catalyst.expressions.UnsafeRow;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.util.collection.unsafe.sort.RecordComparator;

/**
 * Two rows as they lie in memory, compared by some of their columns (a load's partition
 * columns, then its key; or the partition columns alone): strings and binaries by
 * their bytes, unsigned (Firn's order), integers by value; a null first (the writer refuses
 * it after the sort, naming the column). Reads the rows where they are: a comparison copies
 * nothing.
 */
final class RowOrder extends RecordComparator implements Serializable {
  private static final long serialVersionUID = 1L;
  private final int[] ordinals;
  private final DataType[] types;
  private final boolean[] bytes;
  private final UnsafeRow left;
  private final UnsafeRow right;

  RowOrder(int fields, int[] ordinals, DataType[] types) {
    this.ordinals = ordinals;
    this.types = types;
    this.bytes = new boolean[types.length];
    for (int i = 0; i < types.length; i++) {
      bytes[i] = LoadSort.isText(types[i]);
    }
    this.left = new UnsafeRow(fields);
    this.right = new UnsafeRow(fields);
  }

  /** The columns compared, in order. */
  int[] ordinals() {
    return ordinals;
  }

  /** Two rows, by their columns. */
  int compare(UnsafeRow a, UnsafeRow b) {
    return compare(
        a.getBaseObject(), a.getBaseOffset(), a.getSizeInBytes(), b.getBaseObject(), b.getBaseOffset(), b.getSizeInBytes());
  }

  @Override
  public int compare(
      Object leftBase, long leftOffset, int leftLength, Object rightBase, long rightOffset, int rightLength) {
    left.pointTo(leftBase, leftOffset, leftLength);
    right.pointTo(rightBase, rightOffset, rightLength);
    for (int i = 0; i < ordinals.length; i++) {
      int o = ordinals[i];
      boolean leftNull = left.isNullAt(o);
      boolean rightNull = right.isNullAt(o);
      if (leftNull || rightNull) {
        if (leftNull != rightNull) {
          return leftNull ? -1 : 1;
        }
        continue;
      }
      int order =
          bytes[i]
              // A binary's bytes read as a string's: the same unsigned comparison.
              ? left.getUTF8String(o).binaryCompare(right.getUTF8String(o))
              : Long.compare(
                  KeyColumns.integral(left, o, types[i]), KeyColumns.integral(right, o, types[i]));
      if (order != 0) {
        return order;
      }
    }
    return 0;
  }
}
