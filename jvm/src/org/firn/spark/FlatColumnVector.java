package org.firn.spark;

import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarArray;
import org.apache.spark.sql.vectorized.ColumnarMap;

/** A column of a type with no children: the JVM reader takes no nested columns. */
abstract class FlatColumnVector extends ColumnVector {
  FlatColumnVector(DataType type) {
    super(type);
  }

  @Override
  public final ColumnarArray getArray(int rowId) {
    throw new UnsupportedOperationException("firn-merge reads no nested columns");
  }

  @Override
  public final ColumnarMap getMap(int rowId) {
    throw new UnsupportedOperationException("firn-merge reads no nested columns");
  }

  @Override
  public final ColumnVector getChild(int ordinal) {
    throw new UnsupportedOperationException("firn-merge reads no nested columns");
  }
}
