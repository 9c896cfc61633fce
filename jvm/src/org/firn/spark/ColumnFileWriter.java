package org.firn.spark;

import java.io.IOException;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.Path;
import org.apache.parquet.column.ColumnDescriptor;
import org.apache.parquet.column.ColumnWriteStore;
import org.apache.parquet.column.ColumnWriter;
import org.apache.parquet.column.ParquetProperties;
import org.apache.parquet.compression.CompressionCodecFactory;
import org.apache.parquet.hadoop.CodecFactory;
import org.apache.parquet.hadoop.ColumnChunkPageWriteStore;
import org.apache.parquet.hadoop.ParquetFileWriter;
import org.apache.parquet.hadoop.ParquetWriter;
import org.apache.parquet.hadoop.api.WriteSupport;
import org.apache.parquet.hadoop.metadata.CompressionCodecName;
import org.apache.parquet.hadoop.util.HadoopOutputFile;
import org.apache.parquet.io.api.Binary;
import org.apache.parquet.schema.MessageType;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.execution.datasources.parquet.ParquetWriteSupport;
import org.apache.spark.sql.types.BinaryType;
import org.apache.spark.sql.types.BooleanType;
import org.apache.spark.sql.types.ByteType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DateType;
import org.apache.spark.sql.types.Decimal;
import org.apache.spark.sql.types.DecimalType;
import org.apache.spark.sql.types.DoubleType;
import org.apache.spark.sql.types.FloatType;
import org.apache.spark.sql.types.IntegerType;
import org.apache.spark.sql.types.LongType;
import org.apache.spark.sql.types.ShortType;
import org.apache.spark.sql.types.StringType;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.types.TimestampNTZType;
import org.apache.spark.sql.types.TimestampType;
import org.apache.spark.unsafe.Platform;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * A base file of a load written from Spark's rows straight into Parquet's column writers, as
 * Iceberg's Parquet writer writes: each value handed to its column's writer. The file is the
 * one Spark's {@link ParquetWriteSupport} writes through Parquet's record writer (its schema,
 * field ids and footer metadata are Spark's, from the same {@code init}), without the record
 * writer's calls per field (start and end of each field and record, the fields written noted
 * in a bit set, each int boxed), which took about a fifth of a load task's time (a JFR
 * profile of a 5M-row string-keyed load, 2026-12-06), and without a copy of each string.
 *
 * <p>Flat tables only: booleans, integers, floats, decimals, strings, binaries, dates and
 * timestamps, with dates and timestamps written as they are (Spark's {@code
 * datetimeRebaseModeInWrite} {@code CORRECTED}, its default) and decimals in the standard
 * form. Any other table goes through Spark's write support ({@link BaseFileWriter#open}).
 */
final class ColumnFileWriter implements BaseFileWriter {
  /** No dictionary pages, strings included: parquet-mr's dictionary lookups took a quarter of
   * a load's CPU, and without them a 5M-row load wrote 12% more bytes 15-20% faster, read no
   * slower by Spark and faster by pyarrow (bench/README.md, 2026-12-02). */
  static final boolean DICTIONARY = false;

  private static final int BOOLEAN = 0;
  private static final int BYTE = 1;
  private static final int SHORT = 2;
  private static final int INT = 3;
  private static final int LONG = 4;
  private static final int FLOAT = 5;
  private static final int DOUBLE = 6;
  private static final int STRING = 7;
  private static final int BINARY = 8;
  private static final int DECIMAL_INT = 9;
  private static final int DECIMAL_LONG = 10;
  private static final int DECIMAL_BYTES = 11;

  private final ParquetFileWriter file;
  private final MessageType parquetSchema;
  private final Map<String, String> metadata;
  private final ParquetProperties properties;
  private final CompressionCodecFactory codecs;
  private final CompressionCodecFactory.BytesInputCompressor compressor;
  private final long rowGroupBytes;
  private final List<ColumnDescriptor> descriptors;
  private final String[] names;
  private final int[] kinds;
  private final int[] precisions;
  private final int[] scales;
  /** Each column's definition level of a value (1 if it may be null, else 0). */
  private final int[] levels;
  private final ColumnWriter[] columns;
  /** A reused buffer per string or fixed-length decimal column, for values whose bytes are not
   * in a byte array (rows held in pages of longs, or off the heap). */
  private final byte[][] buffers;
  private ColumnChunkPageWriteStore pages;
  private ColumnWriteStore store;
  private long rowGroupRows;
  private long nextCheck;
  private long writtenBytes;
  private boolean closed;

  /** Whether this writer writes {@code schema}'s rows as Spark's write support would, with the
   * settings in {@code conf}. */
  static boolean writes(StructType schema, Configuration conf) {
    String rebase = conf.get("spark.sql.parquet.datetimeRebaseModeInWrite", "CORRECTED");
    boolean datesAsTheyAre = rebase.equalsIgnoreCase("CORRECTED");
    boolean standard = !conf.getBoolean("spark.sql.parquet.writeLegacyFormat", false);
    boolean micros = conf.get("spark.sql.parquet.outputTimestampType", "INT96").equals("TIMESTAMP_MICROS");
    for (StructField field : schema.fields()) {
      DataType t = field.dataType();
      if (t instanceof DateType || t instanceof TimestampType) {
        if (!datesAsTheyAre || (t instanceof TimestampType && !micros)) {
          return false;
        }
      } else if (t instanceof DecimalType) {
        if (!standard) {
          return false;
        }
      } else if (kindOf(t) < 0) {
        return false;
      }
    }
    return true;
  }

  private static int kindOf(DataType t) {
    if (t instanceof BooleanType) {
      return BOOLEAN;
    } else if (t instanceof ByteType) {
      return BYTE;
    } else if (t instanceof ShortType) {
      return SHORT;
    } else if (t instanceof IntegerType || t instanceof DateType) {
      return INT;
    } else if (t instanceof LongType || t instanceof TimestampType || t instanceof TimestampNTZType) {
      return LONG;
    } else if (t instanceof FloatType) {
      return FLOAT;
    } else if (t instanceof DoubleType) {
      return DOUBLE;
    } else if (t instanceof StringType) {
      return STRING;
    } else if (t instanceof BinaryType) {
      return BINARY;
    } else if (t instanceof DecimalType d) {
      if (d.precision() <= Decimal.MAX_INT_DIGITS()) {
        return DECIMAL_INT;
      }
      return d.precision() <= Decimal.MAX_LONG_DIGITS() ? DECIMAL_LONG : DECIMAL_BYTES;
    }
    return -1;
  }

  ColumnFileWriter(
      Path path, Configuration conf, StructType schema, CompressionCodecName codec, long rowGroupBytes)
      throws IOException {
    WriteSupport.WriteContext context = new ParquetWriteSupport().init(conf);
    this.parquetSchema = context.getSchema();
    this.metadata = context.getExtraMetaData();
    this.descriptors = parquetSchema.getColumns();
    int n = schema.size();
    if (descriptors.size() != n) {
      throw new IllegalStateException("a flat table of " + n + " columns has " + descriptors.size() + " in Parquet");
    }
    this.properties = ParquetProperties.builder().withDictionaryEncoding(DICTIONARY).build();
    this.rowGroupBytes = rowGroupBytes;
    this.names = new String[n];
    this.kinds = new int[n];
    this.precisions = new int[n];
    this.scales = new int[n];
    this.levels = new int[n];
    this.columns = new ColumnWriter[n];
    this.buffers = new byte[n][];
    for (int c = 0; c < n; c++) {
      DataType t = schema.fields()[c].dataType();
      names[c] = schema.fields()[c].name();
      kinds[c] = kindOf(t);
      levels[c] = descriptors.get(c).getMaxDefinitionLevel();
      if (t instanceof DecimalType d) {
        precisions[c] = d.precision();
        scales[c] = d.scale();
      }
      if (kinds[c] == STRING) {
        buffers[c] = new byte[64];
      } else if (kinds[c] == DECIMAL_BYTES) {
        buffers[c] = new byte[Decimal.minBytesForPrecision()[precisions[c]]];
      }
    }
    this.codecs = new CodecFactory(conf, properties.getPageSizeThreshold());
    this.compressor = codecs.getCompressor(codec);
    this.file =
        new ParquetFileWriter(
            HadoopOutputFile.fromPath(path, conf),
            parquetSchema,
            ParquetFileWriter.Mode.CREATE,
            rowGroupBytes,
            ParquetWriter.MAX_PADDING_SIZE_DEFAULT,
            null,
            properties);
    file.start();
    startRowGroup();
  }

  private void startRowGroup() {
    pages =
        new ColumnChunkPageWriteStore(
            compressor,
            parquetSchema,
            properties.getAllocator(),
            properties.getColumnIndexTruncateLength(),
            properties.getPageWriteChecksumEnabled());
    store = properties.newColumnWriteStore(parquetSchema, pages, pages);
    for (int c = 0; c < columns.length; c++) {
      columns[c] = store.getColumnWriter(descriptors.get(c));
    }
    rowGroupRows = 0;
    nextCheck = properties.getMinRowCountForPageSizeCheck();
  }

  @Override
  public void write(InternalRow row) throws IOException {
    for (int c = 0; c < columns.length; c++) {
      ColumnWriter column = columns[c];
      int level = levels[c];
      if (row.isNullAt(c)) {
        if (level == 0) {
          throw new IllegalArgumentException("column " + names[c] + " may not be null, and a row has a null in it");
        }
        column.writeNull(0, 0);
        continue;
      }
      switch (kinds[c]) {
        case BOOLEAN -> column.write(row.getBoolean(c), 0, level);
        case BYTE -> column.write((int) row.getByte(c), 0, level);
        case SHORT -> column.write((int) row.getShort(c), 0, level);
        case INT -> column.write(row.getInt(c), 0, level);
        case LONG -> column.write(row.getLong(c), 0, level);
        case FLOAT -> column.write(row.getFloat(c), 0, level);
        case DOUBLE -> column.write(row.getDouble(c), 0, level);
        case STRING -> column.write(bytesOf(row.getUTF8String(c), c), 0, level);
        // A row's getBinary returns a copy of its own.
        case BINARY -> column.write(Binary.fromReusedByteArray(row.getBinary(c)), 0, level);
        case DECIMAL_INT -> column.write((int) row.getDecimal(c, precisions[c], scales[c]).toUnscaledLong(), 0, level);
        case DECIMAL_LONG -> column.write(row.getDecimal(c, precisions[c], scales[c]).toUnscaledLong(), 0, level);
        default -> column.write(decimalBytes(row.getDecimal(c, precisions[c], scales[c]), c), 0, level);
      }
    }
    store.endRecord();
    rowGroupRows++;
    if (rowGroupRows >= properties.getRowGroupRowCountLimit()) {
      finishRowGroup();
      startRowGroup();
    } else if (rowGroupRows >= nextCheck) {
      checkRowGroupSize();
    }
  }

  /**
   * A string's bytes where they lie if they are in a byte array, else copied into the
   * column's buffer. Marked reused either way: Parquet copies what it keeps (a page's and the
   * chunk's least and greatest values) and encodes the rest at once.
   */
  private Binary bytesOf(UTF8String value, int c) {
    Object base = value.getBaseObject();
    int length = value.numBytes();
    if (base instanceof byte[] array) {
      return Binary.fromReusedByteArray(array, (int) (value.getBaseOffset() - Platform.BYTE_ARRAY_OFFSET), length);
    }
    if (buffers[c].length < length) {
      buffers[c] = new byte[Math.max(length, buffers[c].length * 2)];
    }
    Platform.copyMemory(base, value.getBaseOffset(), buffers[c], Platform.BYTE_ARRAY_OFFSET, length);
    return Binary.fromReusedByteArray(buffers[c], 0, length);
  }

  /** A decimal of more than 18 digits as Spark writes it: its unscaled value's big-endian
   * two's complement, sign-extended to the column's fixed length. */
  private Binary decimalBytes(Decimal value, int c) {
    byte[] out = buffers[c];
    byte[] bytes = value.toJavaBigDecimal().unscaledValue().toByteArray();
    if (bytes.length == out.length) {
      return Binary.fromReusedByteArray(bytes);
    }
    Arrays.fill(out, 0, out.length - bytes.length, bytes[0] < 0 ? (byte) -1 : (byte) 0);
    System.arraycopy(bytes, 0, out, out.length - bytes.length, bytes.length);
    return Binary.fromReusedByteArray(out, 0, out.length);
  }

  /** Ends the row group when its buffered bytes come within two rows of the target, checking
   * as seldom as Parquet's record writer does (halfway to where the target is expected). */
  private void checkRowGroupSize() throws IOException {
    long buffered = store.getBufferedSize();
    long rowBytes = Math.max(1, buffered / rowGroupRows);
    if (buffered > rowGroupBytes - 2 * rowBytes) {
      finishRowGroup();
      startRowGroup();
    } else {
      nextCheck =
          Math.min(
              Math.max(properties.getMinRowCountForPageSizeCheck(), (rowGroupRows + rowGroupBytes / rowBytes) / 2),
              rowGroupRows + properties.getMaxRowCountForPageSizeCheck());
    }
  }

  private void finishRowGroup() throws IOException {
    try {
      if (rowGroupRows > 0) {
        file.startBlock(rowGroupRows);
        store.flush();
        pages.flushToFileWriter(file);
        file.endBlock();
        writtenBytes = file.getPos();
      }
    } finally {
      store.close();
      pages.close();
    }
  }

  @Override
  public long dataSize() {
    return writtenBytes + store.getBufferedSize();
  }

  @Override
  public void close() throws IOException {
    if (closed) {
      return;
    }
    closed = true;
    try {
      finishRowGroup();
      file.end(metadata);
    } finally {
      codecs.release();
    }
  }
}
