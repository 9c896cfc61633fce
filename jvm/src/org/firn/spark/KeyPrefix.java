package org.firn.spark;

import java.nio.ByteOrder;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.execution.UnsafeExternalRowSorter;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.unsafe.Platform;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * A row's 8-byte sort prefix, from its key's first column, compared unsigned: it orders as
 * the keys do, a tie left to {@link RowOrder}. An integer's prefix is its value with the sign
 * bit flipped. A string's or binary's is its 8 bytes after the {@code skip} bytes every key
 * starts with, big-endian, zero-padded. A null's is 0.
 */
final class KeyPrefix extends UnsafeExternalRowSorter.PrefixComputer {
  private static final boolean LITTLE_ENDIAN = ByteOrder.nativeOrder() == ByteOrder.LITTLE_ENDIAN;
  private final int ordinal;
  private final DataType type;
  private final boolean text;
  private final int skip;
  private final UnsafeExternalRowSorter.PrefixComputer.Prefix result =
      new UnsafeExternalRowSorter.PrefixComputer.Prefix();

  KeyPrefix(int ordinal, DataType type, int skip) {
    this.ordinal = ordinal;
    this.type = type;
    this.text = LoadSort.isText(type);
    this.skip = skip;
  }

  /** The prefix of {@code row}'s key. */
  long of(InternalRow row) {
    return row.isNullAt(ordinal) ? 0 : notNull(row);
  }

  /** The prefix of {@code row}'s key, not null. */
  private long notNull(InternalRow row) {
    if (!text) {
      return KeyColumns.integral(row, ordinal, type) ^ Long.MIN_VALUE;
    }
    UTF8String k = row.getUTF8String(ordinal);
    Object base = k.getBaseObject();
    long offset = k.getBaseOffset() + skip;
    int n = Math.min(8, k.numBytes() - skip);
    if (n == 8) {
      long word = Platform.getLong(base, offset);
      return LITTLE_ENDIAN ? Long.reverseBytes(word) : word;
    }
    long value = 0;
    for (int i = 0; i < n; i++) {
      value |= (Platform.getByte(base, offset + i) & 0xFFL) << (56 - 8 * i);
    }
    return value;
  }

  @Override
  public UnsafeExternalRowSorter.PrefixComputer.Prefix computePrefix(InternalRow row) {
    result.isNull = row.isNullAt(ordinal);
    result.value = result.isNull ? 0 : notNull(row);
    return result;
  }
}
