package org.firn.spark;

import java.io.Closeable;
import java.io.IOException;
import java.util.NoSuchElementException;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.Path;
import org.apache.parquet.hadoop.ParquetFileWriter;
import org.apache.parquet.hadoop.ParquetWriter;
import org.apache.parquet.hadoop.api.WriteSupport;
import org.apache.parquet.hadoop.metadata.CompressionCodecName;
import org.apache.spark.internal.config.ConfigEntry;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.execution.datasources.parquet.ParquetWriteSupport;
import org.apache.spark.sql.internal.SQLConf;
import org.apache.spark.sql.internal.SQLConf$;
import org.apache.spark.sql.types.StructType;

/**
 * One Parquet file of a load being written from Spark's rows, as Spark's own Parquet writes
 * encode them (Spark's schema conversion, field ids and footer metadata). Tables whose
 * columns are all of the flat types {@link ColumnFileWriter} writes go straight into
 * Parquet's column writers; the others through Parquet's record writer and Spark's {@link
 * ParquetWriteSupport}.
 */
interface BaseFileWriter extends Closeable {
  void write(InternalRow row) throws IOException;

  /** Bytes written so far and buffered to be written. */
  long dataSize();

  /**
   * {@code conf} with what Spark's write support reads from it, as Spark's own writes put it
   * there: every {@code spark.sql.parquet} setting at its session value (Spark adds settings
   * between versions, and the write support insists on finding each), then the rows' schema
   * and Firn's: the standard (not legacy) form, microsecond timestamps, field ids.
   */
  static Configuration sparkSettings(Configuration conf, StructType schema) {
    SQLConf session = SQLConf.get();
    for (ConfigEntry<?> entry : SQLConf$.MODULE$.getConfigEntries()) {
      if (entry.key().startsWith("spark.sql.parquet.")) {
        try {
          conf.set(entry.key(), session.getConfString(entry.key()));
        } catch (NoSuchElementException e) {
          // A setting without a default that nobody set: the writer does without it.
        }
      }
    }
    conf.set(ParquetWriteSupport.SPARK_ROW_SCHEMA(), schema.json());
    conf.set("spark.sql.parquet.writeLegacyFormat", "false");
    conf.set("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS");
    conf.set("spark.sql.parquet.fieldId.write.enabled", "true");
    return conf;
  }

  /** A writer of a new file at {@code path}: {@code conf} holds Spark's Parquet settings and
   * the rows' schema ({@link #sparkSettings}). */
  static BaseFileWriter open(
      Path path, Configuration conf, StructType schema, CompressionCodecName codec, long rowGroupBytes)
      throws IOException {
    if (ColumnFileWriter.writes(schema, conf)) {
      return new ColumnFileWriter(path, conf, schema, codec, rowGroupBytes);
    }
    return records(path, conf, codec, rowGroupBytes);
  }

  /** A writer of a new file at {@code path} through Parquet's record writer and Spark's write
   * support, whatever the table's columns. */
  static BaseFileWriter records(Path path, Configuration conf, CompressionCodecName codec, long rowGroupBytes)
      throws IOException {
    ParquetWriter<InternalRow> records =
        new RowsBuilder(path)
            .withConf(conf)
            .withWriteMode(ParquetFileWriter.Mode.CREATE)
            .withCompressionCodec(codec)
            .withRowGroupSize(rowGroupBytes)
            .withDictionaryEncoding(ColumnFileWriter.DICTIONARY)
            .build();
    return new BaseFileWriter() {
      @Override
      public void write(InternalRow row) throws IOException {
        records.write(row);
      }

      @Override
      public long dataSize() {
        return records.getDataSize();
      }

      @Override
      public void close() throws IOException {
        records.close();
      }
    };
  }

  /** A Parquet writer of Spark's rows, through Spark's write support. */
  final class RowsBuilder extends ParquetWriter.Builder<InternalRow, RowsBuilder> {
    RowsBuilder(Path path) {
      super(path);
    }

    @Override
    protected RowsBuilder self() {
      return this;
    }

    @Override
    protected WriteSupport<InternalRow> getWriteSupport(Configuration conf) {
      return new ParquetWriteSupport();
    }
  }
}
