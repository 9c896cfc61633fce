package org.firn.spark;

import java.io.IOException;
import java.io.Serializable;
import org.apache.spark.SparkEnv;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.UnsafeProjection;
import org.apache.spark.sql.catalyst.expressions.UnsafeRow;
import org.apache.spark.sql.execution.ExternalAppendOnlyUnsafeRowArray;
import org.apache.spark.sql.execution.UnsafeExternalRowSorter;
import org.apache.spark.sql.types.BinaryType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.StringType;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.Platform;
import org.apache.spark.unsafe.types.UTF8String;
import org.apache.spark.util.collection.unsafe.sort.PrefixComparators;
import org.apache.spark.util.collection.unsafe.sort.RecordComparator;
import scala.collection.Iterator;

/**
 * A load task's rows sorted by key in the task, for an unpartitioned table whose key starts
 * with a string or binary column ({@link LoadTable#requiredOrdering} then asks Spark for no
 * order). The rows are held first (in Spark's memory, spilled to disk when the task runs
 * short), while the bytes every key starts with are found; then they are sorted by Spark's
 * external sorter with, as each row's 8-byte prefix, the key's 8 bytes after those, and
 * Firn's own comparison on a tie.
 *
 * <p>Why: Spark's sort of a string compares its first 8 bytes, and on a tie both whole
 * rows. Keys that share their first bytes (zero-padded ids, {@code ORDER-0000123},
 * a tenant's name before an id) tie nearly always, and each tie reads two rows at random
 * out of the sort's pages: 5M zero-padded ids in no order took Spark's sort 3-4.5 s more
 * than reading them, 5M integers 0.9 s. Past the bytes all keys share, 8 bytes tell
 * nearly every pair apart. The cost: the rows are copied once more than Spark's sort
 * copies them, and are held twice while they move into the sorter (a task short of memory
 * spills some of them to disk).
 */
final class LoadSort {
  private final ExternalAppendOnlyUnsafeRowArray held;
  private final UnsafeProjection unsafe;
  private final StructType schema;
  private final int[] key;
  private final DataType[] types;
  private final int first;
  /** The first key's bytes (copied), and how many of them every key so far starts with. */
  private byte[] reference;
  private int shared;

  /** Whether a load of {@code plan}'s rows sorts in its tasks: an unpartitioned table whose
   * key starts with a string or binary column, its other key columns strings, binaries or
   * integers. */
  static boolean sortsInTask(LoadPlan plan) {
    if (plan.partition().length > 0) {
      return false;
    }
    for (int i = 0; i < plan.key().length; i++) {
      DataType t = plan.schema().fields()[plan.key()[i]].dataType();
      boolean text = t instanceof StringType || t instanceof BinaryType;
      if (i == 0 ? !text : !text && !KeyColumns.integral(t)) {
        return false;
      }
    }
    return true;
  }

  LoadSort(LoadPlan plan) {
    this.schema = plan.schema();
    this.key = plan.key();
    this.types = new DataType[key.length];
    for (int i = 0; i < key.length; i++) {
      types[i] = schema.fields()[key[i]].dataType();
    }
    this.first = key[0];
    this.unsafe = UnsafeProjection.create(schema);
    // Every row in Spark's pages (none as a Java object), spilled under memory pressure.
    this.held = new ExternalAppendOnlyUnsafeRowArray(0, Long.MAX_VALUE, Integer.MAX_VALUE, Long.MAX_VALUE);
  }

  /** Adds a row (the table's columns in order); copied, so the caller may reuse it. */
  void add(InternalRow row) {
    UnsafeRow given = row instanceof UnsafeRow u ? u : unsafe.apply(row);
    if (!given.isNullAt(first)) {
      UTF8String k = given.getUTF8String(first);
      if (reference == null) {
        reference = k.getBytes();
        shared = reference.length;
      } else {
        shared = common(reference, shared, k);
      }
    }
    held.add(given); // copied into the array's pages
  }

  /** The rows added, sorted; each valid until the next is taken. */
  Iterator<InternalRow> sorted() throws IOException {
    Prefix prefix = new Prefix(first, shared);
    UnsafeExternalRowSorter sorter =
        UnsafeExternalRowSorter.createWithRecordComparator(
            schema,
            () -> new Order(schema.size(), key, types),
            PrefixComparators.BINARY,
            prefix,
            SparkEnv.get().memoryManager().pageSizeBytes(),
            false);
    Iterator<UnsafeRow> rows = held.generateIterator();
    while (rows.hasNext()) {
      sorter.insertRow(rows.next());
    }
    held.clear();
    return sorter.sort();
  }

  /** Frees the rows held (a failed task; a finished one's sorter frees itself). */
  void release() {
    held.clear();
  }

  /** How many of {@code reference}'s first {@code upTo} bytes {@code k} starts with. */
  private static int common(byte[] reference, int upTo, UTF8String k) {
    int n = Math.min(upTo, k.numBytes());
    Object base = k.getBaseObject();
    long offset = k.getBaseOffset();
    int i = 0;
    while (i + 8 <= n
        && Platform.getLong(reference, Platform.BYTE_ARRAY_OFFSET + i) == Platform.getLong(base, offset + i)) {
      i += 8;
    }
    while (i < n && reference[i] == Platform.getByte(base, offset + i)) {
      i++;
    }
    return i;
  }

  /**
   * A row's prefix: the 8 bytes of its key's first column after the {@code skip} bytes every
   * key starts with, big-endian, zero-padded; compared unsigned, it orders as the keys do
   * (a tie is compared whole). A null key's marked so (the writer refuses it).
   */
  private static final class Prefix extends UnsafeExternalRowSorter.PrefixComputer {
    private final int ordinal;
    private final int skip;
    private final UnsafeExternalRowSorter.PrefixComputer.Prefix result =
        new UnsafeExternalRowSorter.PrefixComputer.Prefix();

    Prefix(int ordinal, int skip) {
      this.ordinal = ordinal;
      this.skip = skip;
    }

    @Override
    public UnsafeExternalRowSorter.PrefixComputer.Prefix computePrefix(InternalRow row) {
      result.isNull = row.isNullAt(ordinal);
      long value = 0;
      if (!result.isNull) {
        UTF8String k = row.getUTF8String(ordinal);
        Object base = k.getBaseObject();
        long offset = k.getBaseOffset() + skip;
        int n = Math.min(8, k.numBytes() - skip);
        for (int i = 0; i < n; i++) {
          value |= (Platform.getByte(base, offset + i) & 0xFFL) << (56 - 8 * i);
        }
      }
      result.value = value;
      return result;
    }
  }

  /**
   * Two rows as they lie in the sorter's pages, compared by their key columns: strings and
   * binaries by their bytes, unsigned (Firn's order), integers by value; a null first (the
   * writer refuses it after the sort, naming the column).
   */
  private static final class Order extends RecordComparator implements Serializable {
    private static final long serialVersionUID = 1L;
    private final int[] ordinals;
    private final DataType[] types;
    private final boolean[] bytes;
    private final UnsafeRow left;
    private final UnsafeRow right;

    Order(int fields, int[] ordinals, DataType[] types) {
      this.ordinals = ordinals;
      this.types = types;
      this.bytes = new boolean[types.length];
      for (int i = 0; i < types.length; i++) {
        bytes[i] = types[i] instanceof StringType || types[i] instanceof BinaryType;
      }
      this.left = new UnsafeRow(fields);
      this.right = new UnsafeRow(fields);
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
}
