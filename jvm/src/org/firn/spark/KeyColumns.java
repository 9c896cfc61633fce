package org.firn.spark;

import java.io.Serializable;
import java.math.BigDecimal;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.types.BinaryType;
import org.apache.spark.sql.types.ByteType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DateType;
import org.apache.spark.sql.types.Decimal;
import org.apache.spark.sql.types.DecimalType;
import org.apache.spark.sql.types.IntegerType;
import org.apache.spark.sql.types.LongType;
import org.apache.spark.sql.types.ShortType;
import org.apache.spark.sql.types.StringType;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.types.TimestampNTZType;
import org.apache.spark.sql.types.TimestampType;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * Some columns of a row (a key, or the partition columns) read into {@link Values}: integers,
 * dates (days) and timestamps (microseconds) as longs, strings and a key's binaries as copies
 * of their bytes, a key's decimals in their {@link DecimalKeys} form. Compared as Firn orders
 * keys (numbers by value, strings and binaries by their bytes, unsigned, as Spark sorts them
 * too; a decimal's form orders as its number), hashed as FirnHash64 folds a composite key (a
 * binary as a string of its bytes, a decimal as its two lanes), and put in the JSON form the
 * catalog keeps ({@code firn.model.values.column_to_json}: a binary in hex, a decimal as its
 * text).
 */
final class KeyColumns implements Serializable {
  private static final long serialVersionUID = 1L;

  private final int[] ordinals;
  private final DataType[] types;
  private final String[] names;
  /** Which columns are strings, binaries or decimals: compared and held as bytes. */
  private final boolean[] bytes;
  /** Which of those are decimals (their bytes a {@link DecimalKeys} form). */
  private final boolean[] decimals;

  KeyColumns(StructType schema, int[] ordinals, String what) {
    this.ordinals = ordinals;
    this.types = new DataType[ordinals.length];
    this.names = new String[ordinals.length];
    this.bytes = new boolean[ordinals.length];
    this.decimals = new boolean[ordinals.length];
    for (int c = 0; c < ordinals.length; c++) {
      types[c] = schema.fields()[ordinals[c]].dataType();
      names[c] = schema.fields()[ordinals[c]].name();
      boolean key = what.equals("key");
      decimals[c] = types[c] instanceof DecimalType && key;
      bytes[c] =
          types[c] instanceof StringType
              || (types[c] instanceof BinaryType && key)
              || decimals[c];
      if (!integral(types[c]) && !bytes[c]) {
        throw new IllegalArgumentException(
            what + " column " + names[c] + " has type " + types[c].simpleString()
                + ", which format(\"firn-load\") does not take");
      }
    }
  }

  int size() {
    return ordinals.length;
  }

  Values values() {
    return new Values(ordinals.length);
  }

  /** Reads the row's columns into {@code into}; a null is refused ({@code what} names it). */
  void read(InternalRow row, Values into, String what) {
    for (int c = 0; c < ordinals.length; c++) {
      int o = ordinals[c];
      if (row.isNullAt(o)) {
        throw new IllegalArgumentException("firn-load: " + what + " column " + names[c] + " has nulls");
      }
      DataType t = types[c];
      if (t instanceof StringType) {
        into.strings[c] = row.getUTF8String(o).clone();
      } else if (t instanceof BinaryType) {
        into.strings[c] = UTF8String.fromBytes(row.getBinary(o)); // a row's getBinary copies
      } else if (t instanceof DecimalType d) {
        Decimal value = row.getDecimal(o, d.precision(), d.scale());
        into.strings[c] = UTF8String.fromBytes(decimalForm(value, d.scale()));
      } else {
        into.longs[c] = integral(row, o, t);
      }
    }
  }

  /** The value of the integer, date (days) or timestamp (microseconds) column {@code o} of
   * type {@code t} in {@code row}, not null. */
  static long integral(InternalRow row, int o, DataType t) {
    if (t instanceof LongType || t instanceof TimestampType || t instanceof TimestampNTZType) {
      return row.getLong(o);
    } else if (t instanceof IntegerType || t instanceof DateType) {
      return row.getInt(o);
    } else if (t instanceof ShortType) {
      return row.getShort(o);
    }
    return row.getByte(o);
  }

  /** The first string column whose value holds a NUL byte (the catalog cannot store it), or
   * -1. */
  int withNul(Values v) {
    for (int c = 0; c < ordinals.length; c++) {
      if (types[c] instanceof StringType && hasNul(v.strings[c])) {
        return c;
      }
    }
    return -1;
  }

  /** A byte loop: {@code UTF8String.indexOf} is a substring search, a twentieth of a
   * string-keyed load's writer time (a JFR profile). {@link #read} copied the value, so its
   * bytes are its own array and {@code getBytes} returns that array without a copy. */
  private static boolean hasNul(UTF8String s) {
    for (byte b : s.getBytes()) {
      if (b == 0) {
        return true;
      }
    }
    return false;
  }

  String name(int c) {
    return names[c];
  }

  /** Negative, zero or positive as {@code a} orders before, with or after {@code b}. */
  int compare(Values a, Values b) {
    for (int c = 0; c < ordinals.length; c++) {
      int order =
          bytes[c]
              ? a.strings[c].binaryCompare(b.strings[c])
              : Long.compare(a.longs[c], b.longs[c]);
      if (order != 0) {
        return order;
      }
    }
    return 0;
  }

  /** FirnHash64 of the key {@code v} holds (these columns in key order). */
  long hash(Values v) {
    long h = 0;
    for (int c = 0; c < ordinals.length; c++) {
      long column;
      if (decimals[c]) {
        column = DecimalKeys.columnHash(v.strings[c].getBytes(), 0);
      } else {
        column =
            bytes[c] ? KeyHash.stringColumn(v.strings[c]) : KeyHash.integerColumn(v.longs[c]);
      }
      h = c == 0 ? KeyHash.first(column) : KeyHash.fold(h, column);
    }
    return h;
  }

  /** The values as the catalog stores a key: numbers (dates in days, timestamps in
   * microseconds), strings, and binaries in hex. */
  List<Object> json(Values v) {
    List<Object> out = new ArrayList<>(ordinals.length);
    for (int c = 0; c < ordinals.length; c++) {
      if (types[c] instanceof StringType) {
        out.add(v.strings[c].toString());
      } else if (types[c] instanceof BinaryType) {
        out.add(HexFormat.of().formatHex(v.strings[c].getBytes()));
      } else if (decimals[c]) {
        // Python's str of a Decimal and BigDecimal's toString write the same text (both
        // the General Decimal Arithmetic's to-scientific-string).
        int scale = ((DecimalType) types[c]).scale();
        out.add(new BigDecimal(DecimalKeys.unscaled(v.strings[c].getBytes()), scale).toString());
      } else {
        out.add(v.longs[c]);
      }
    }
    return out;
  }

  /** A decimal's {@link DecimalKeys} form: its unscaled value at its column's scale. */
  private static byte[] decimalForm(Decimal value, int scale) {
    byte[] form = new byte[DecimalKeys.WIDTH];
    if (value.scale() == scale && value.precision() <= Decimal.MAX_LONG_DIGITS()) {
      DecimalKeys.fromLong(value.toUnscaledLong(), form, 0);
    } else {
      byte[] unscaled = value.toJavaBigDecimal().setScale(scale).unscaledValue().toByteArray();
      DecimalKeys.fromBigEndian(unscaled, 0, unscaled.length, form, 0);
    }
    return form;
  }

  static boolean integral(DataType t) {
    return t instanceof LongType
        || t instanceof IntegerType
        || t instanceof ShortType
        || t instanceof ByteType
        || t instanceof DateType
        || t instanceof TimestampType
        || t instanceof TimestampNTZType;
  }

  /** One row's values of the columns (strings copied: Spark reuses a row's memory). */
  static final class Values {
    final long[] longs;
    final UTF8String[] strings;

    Values(int n) {
      longs = new long[n];
      strings = new UTF8String[n];
    }

    void copyFrom(Values other) {
      System.arraycopy(other.longs, 0, longs, 0, longs.length);
      System.arraycopy(other.strings, 0, strings, 0, strings.length);
    }
  }
}
