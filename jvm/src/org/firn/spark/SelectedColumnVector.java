package org.firn.spark;

import org.apache.spark.sql.types.Decimal;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * Some rows of a column, by position, without copying them: row {@code i} is row
 * {@code rows[i]} of the column underneath. How a base batch loses the rows whose keys a
 * change decides (Spark's batches have no selection vector of their own; Iceberg's reader
 * hides deleted rows the same way).
 */
final class SelectedColumnVector extends FlatColumnVector {
  private final ColumnVector column;
  private final int[] rows;

  SelectedColumnVector(ColumnVector column, int[] rows) {
    super(column.dataType());
    this.column = column;
    this.rows = rows;
  }

  @Override
  public void close() {
    // The column belongs to its reader's batch, which closes it.
  }

  @Override
  public boolean hasNull() {
    return column.hasNull();
  }

  @Override
  public int numNulls() {
    int nulls = 0;
    if (column.hasNull()) {
      for (int row : rows) {
        nulls += column.isNullAt(row) ? 1 : 0;
      }
    }
    return nulls;
  }

  @Override
  public boolean isNullAt(int rowId) {
    return column.isNullAt(rows[rowId]);
  }

  @Override
  public boolean getBoolean(int rowId) {
    return column.getBoolean(rows[rowId]);
  }

  @Override
  public byte getByte(int rowId) {
    return column.getByte(rows[rowId]);
  }

  @Override
  public short getShort(int rowId) {
    return column.getShort(rows[rowId]);
  }

  @Override
  public int getInt(int rowId) {
    return column.getInt(rows[rowId]);
  }

  @Override
  public long getLong(int rowId) {
    return column.getLong(rows[rowId]);
  }

  @Override
  public float getFloat(int rowId) {
    return column.getFloat(rows[rowId]);
  }

  @Override
  public double getDouble(int rowId) {
    return column.getDouble(rows[rowId]);
  }

  @Override
  public Decimal getDecimal(int rowId, int precision, int scale) {
    return column.getDecimal(rows[rowId], precision, scale);
  }

  @Override
  public UTF8String getUTF8String(int rowId) {
    return column.getUTF8String(rows[rowId]);
  }

  @Override
  public byte[] getBinary(int rowId) {
    return column.getBinary(rows[rowId]);
  }
}
