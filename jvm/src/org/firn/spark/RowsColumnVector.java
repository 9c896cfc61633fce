package org.firn.spark;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.Decimal;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * One column of rows held one by one (the winning upserts, copied as they were read): row
 * {@code i} is field {@code ordinal} of {@code rows[offset + i]}.
 */
final class RowsColumnVector extends FlatColumnVector {
  private final InternalRow[] rows;
  private final int offset;
  private final int count;
  private final int ordinal;

  RowsColumnVector(InternalRow[] rows, int offset, int count, int ordinal, DataType type) {
    super(type);
    this.rows = rows;
    this.offset = offset;
    this.count = count;
    this.ordinal = ordinal;
  }

  @Override
  public void close() {}

  @Override
  public boolean hasNull() {
    return numNulls() > 0;
  }

  @Override
  public int numNulls() {
    int nulls = 0;
    for (int i = 0; i < count; i++) {
      nulls += rows[offset + i].isNullAt(ordinal) ? 1 : 0;
    }
    return nulls;
  }

  @Override
  public boolean isNullAt(int rowId) {
    return rows[offset + rowId].isNullAt(ordinal);
  }

  @Override
  public boolean getBoolean(int rowId) {
    return rows[offset + rowId].getBoolean(ordinal);
  }

  @Override
  public byte getByte(int rowId) {
    return rows[offset + rowId].getByte(ordinal);
  }

  @Override
  public short getShort(int rowId) {
    return rows[offset + rowId].getShort(ordinal);
  }

  @Override
  public int getInt(int rowId) {
    return rows[offset + rowId].getInt(ordinal);
  }

  @Override
  public long getLong(int rowId) {
    return rows[offset + rowId].getLong(ordinal);
  }

  @Override
  public float getFloat(int rowId) {
    return rows[offset + rowId].getFloat(ordinal);
  }

  @Override
  public double getDouble(int rowId) {
    return rows[offset + rowId].getDouble(ordinal);
  }

  @Override
  public Decimal getDecimal(int rowId, int precision, int scale) {
    return rows[offset + rowId].getDecimal(ordinal, precision, scale);
  }

  @Override
  public UTF8String getUTF8String(int rowId) {
    return rows[offset + rowId].getUTF8String(ordinal);
  }

  @Override
  public byte[] getBinary(int rowId) {
    return rows[offset + rowId].getBinary(ordinal);
  }
}
