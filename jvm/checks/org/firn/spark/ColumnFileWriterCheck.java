package org.firn.spark;

import java.io.File;
import java.math.BigDecimal;
import java.math.BigInteger;
import java.util.Random;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.Path;
import org.apache.parquet.hadoop.metadata.CompressionCodecName;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.catalyst.expressions.UnsafeProjection;
import org.apache.spark.sql.catalyst.expressions.UnsafeRow;
import org.apache.spark.sql.types.Decimal;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.Platform;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * Writes the same random rows of every type {@link ColumnFileWriter} takes twice: through
 * Parquet's record writer and Spark's write support ({@link BaseFileWriter#records}), and
 * straight into the column writers. The test reads both files and holds them equal: schema,
 * field ids, footer metadata, values. Nulls in every nullable column; decimals of 9, 18 and
 * 30 digits, negative ones sign-extended; strings and binaries with bytes above 0x7f; half
 * the rows held in a page of longs (as a load task holds them), half in byte arrays.
 *
 * <p>Arguments: seed, rows, the directory to write {@code records.parquet} and {@code
 * columns.parquet} in.
 */
public final class ColumnFileWriterCheck {
  static final String SCHEMA =
      "k STRING NOT NULL, b BOOLEAN, i8 TINYINT, i16 SMALLINT, i32 INT, i64 BIGINT NOT NULL, f32 FLOAT,"
          + " f64 DOUBLE, s STRING, raw BINARY, day DATE, ts TIMESTAMP, naive TIMESTAMP_NTZ,"
          + " d9 DECIMAL(9,2), d18 DECIMAL(18,3), d30 DECIMAL(30,4)";

  public static void main(String[] args) throws Exception {
    Random random = new Random(Long.parseLong(args[0]));
    int rows = Integer.parseInt(args[1]);
    File dir = new File(args[2]);
    StructType schema = StructType.fromDDL(SCHEMA);
    // The loader's own settings.
    Configuration conf = BaseFileWriter.sparkSettings(new Configuration(), schema);
    if (!ColumnFileWriter.writes(schema, conf)) {
      throw new AssertionError("the column writer does not take " + SCHEMA);
    }
    // Small row groups: several in each file.
    long rowGroupBytes = 64 * 1024;
    BaseFileWriter records =
        BaseFileWriter.records(new Path(new File(dir, "records.parquet").getPath()), conf, CompressionCodecName.LZ4_RAW, rowGroupBytes);
    BaseFileWriter columns =
        new ColumnFileWriter(
            new Path(new File(dir, "columns.parquet").getPath()), conf, schema, CompressionCodecName.LZ4_RAW, rowGroupBytes);
    UnsafeProjection unsafe = UnsafeProjection.create(schema);
    UnsafeRow inPage = new UnsafeRow(schema.size());
    for (int i = 0; i < rows; i++) {
      UnsafeRow row = unsafe.apply(randomRow(random, i));
      InternalRow given = row;
      if (random.nextBoolean()) {
        // As a load task holds it: in a page of longs.
        long[] page = new long[(row.getSizeInBytes() + 7) / 8 + 1];
        Platform.copyMemory(
            row.getBaseObject(), row.getBaseOffset(), page, Platform.LONG_ARRAY_OFFSET + 8, row.getSizeInBytes());
        inPage.pointTo(page, Platform.LONG_ARRAY_OFFSET + 8, row.getSizeInBytes());
        given = inPage;
      }
      records.write(given);
      columns.write(given);
    }
    records.close();
    columns.close();
    System.out.println("ok: " + rows + " rows");
  }

  private static GenericInternalRow randomRow(Random random, int i) {
    Object[] values = {
      UTF8String.fromString(String.format("%08d", i)),
      random.nextBoolean(),
      (byte) random.nextInt(),
      (short) random.nextInt(),
      random.nextInt(),
      random.nextLong(),
      random.nextFloat() * 1000 - 500,
      random.nextGaussian() * 1e6,
      UTF8String.fromString(text(random)),
      bytes(random),
      random.nextInt(100_000) - 50_000,
      random.nextLong() % 4_000_000_000_000_000L,
      random.nextLong() % 4_000_000_000_000_000L,
      decimal(random, 9, 2),
      decimal(random, 18, 3),
      decimal(random, 30, 4),
    };
    // Nulls in the nullable columns (not k, i64).
    for (int c = 1; c < values.length; c++) {
      if (c != 5 && random.nextInt(5) == 0) {
        values[c] = null;
      }
    }
    return new GenericInternalRow(values);
  }

  private static String text(Random random) {
    StringBuilder out = new StringBuilder();
    int n = random.nextInt(random.nextInt(4) == 0 ? 200 : 12);
    for (int i = 0; i < n; i++) {
      out.append(random.nextBoolean() ? (char) ('a' + random.nextInt(26)) : (char) (0xa0 + random.nextInt(0x500)));
    }
    return out.toString();
  }

  private static byte[] bytes(Random random) {
    byte[] out = new byte[random.nextInt(20)];
    random.nextBytes(out);
    return out;
  }

  private static Decimal decimal(Random random, int precision, int scale) {
    BigInteger unscaled = new BigInteger(precision * 3, random).mod(BigInteger.TEN.pow(precision));
    if (random.nextBoolean()) {
      unscaled = unscaled.negate();
    }
    return Decimal.apply(new BigDecimal(unscaled, scale), precision, scale);
  }
}
