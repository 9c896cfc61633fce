package org.firn.spark;

import java.math.BigInteger;
import org.apache.spark.sql.execution.vectorized.WritableColumnVector;
import org.apache.spark.sql.types.Decimal;
import org.apache.spark.sql.types.DecimalType;
import org.apache.spark.sql.vectorized.ColumnVector;

/**
 * A decimal key as the merge reader compares, numbers and hashes it: its unscaled value as
 * 16 bytes, big-endian, the sign bit flipped. Unsigned byte order is then numeric order (a
 * key column keeps its scale: Firn never retypes a key), and one value has one form however
 * a file stored it: Spark holds a decimal of up to 9 digits as an int, up to 18 as a long,
 * and a wider one as the bytes its file had (a fixed width that depends on the precision the
 * file was written with, or a minimal two's complement). So a decimal key goes through the
 * string keys' machinery (numbered, sorted, walked beside a base file by its bytes) in this
 * form. FirnHash64 hashes a decimal as two lanes, the low then the high 64 bits of the
 * unscaled value ({@code firn.model.keyhash}).
 */
final class DecimalKeys {
  /** Bytes of a key's form. */
  static final int WIDTH = 16;

  private DecimalKeys() {}

  /**
   * Writes row {@code row}'s key in its form at {@code out[at, at + 16)}. {@code inPlace} is
   * the vector's bytes when a wide decimal's are in one array ({@link
   * SplitReader.InPlaceStrings#bytes}), else null (they are then copied out per row).
   */
  static void write(
      ColumnVector keys, DecimalType type, byte[] inPlace, int row, byte[] out, int at) {
    if (type.precision() <= Decimal.MAX_INT_DIGITS()) {
      fromLong(keys.getInt(row), out, at);
    } else if (type.precision() <= Decimal.MAX_LONG_DIGITS()) {
      fromLong(keys.getLong(row), out, at);
    } else if (inPlace != null) {
      WritableColumnVector vector = (WritableColumnVector) keys;
      fromBigEndian(inPlace, vector.getArrayOffset(row), vector.getArrayLength(row), out, at);
    } else {
      byte[] bytes = keys.getBinary(row);
      fromBigEndian(bytes, 0, bytes.length, out, at);
    }
  }

  static void fromLong(long value, byte[] out, int at) {
    putLong(out, at, (value >> 63) ^ Long.MIN_VALUE);
    putLong(out, at + 8, value);
  }

  /** The form of a two's complement, big-endian value of {@code length} bytes. */
  static void fromBigEndian(byte[] bytes, int from, int length, byte[] out, int at) {
    if (length > WIDTH) {
      throw new IllegalArgumentException("a decimal key of " + length + " bytes (at most 16)");
    }
    byte fill = length > 0 && bytes[from] < 0 ? (byte) 0xFF : 0;
    int pad = WIDTH - length;
    for (int i = 0; i < pad; i++) {
      out[at + i] = fill;
    }
    System.arraycopy(bytes, from, out, at + pad, length);
    out[at] ^= (byte) 0x80;
  }

  /** The unscaled value whose form is {@code form} (16 bytes). */
  static BigInteger unscaled(byte[] form) {
    byte[] value = form.clone();
    value[0] ^= (byte) 0x80;
    return new BigInteger(value);
  }

  /** FirnHash64's column hash of the key whose form is at {@code bytes[at, at + 16)}. */
  static long columnHash(byte[] bytes, int at) {
    long high = getLong(bytes, at) ^ Long.MIN_VALUE;
    long low = getLong(bytes, at + 8);
    return KeyHash.decimalColumn(low, high);
  }

  private static void putLong(byte[] out, int at, long value) {
    for (int i = 7; i >= 0; i--) {
      out[at + i] = (byte) value;
      value >>>= 8;
    }
  }

  private static long getLong(byte[] bytes, int at) {
    long value = 0;
    for (int i = 0; i < 8; i++) {
      value = (value << 8) | (bytes[at + i] & 0xFFL);
    }
    return value;
  }
}
