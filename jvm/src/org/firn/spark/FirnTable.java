package org.firn.spark;

import java.util.EnumSet;
import java.util.Map;
import java.util.Set;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.SupportsWrite;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.write.LogicalWriteInfo;
import org.apache.spark.sql.connector.write.WriteBuilder;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * A {@code format("firn")} table planned for a read ({@link FirnSource}): batch reads by the
 * JVM merge reader, writes (a stream sink is planned as a read first) by the Python source's
 * table.
 */
final class FirnTable implements SupportsRead, SupportsWrite {
  private final MergeTable read;
  private final Table written;

  FirnTable(MergeTable read, Table written) {
    this.read = read;
    this.written = written;
  }

  @Override
  public String name() {
    return read.name(); // what a query plan shows: the merge reader's scan
  }

  @Override
  @SuppressWarnings("deprecation")
  public StructType schema() {
    return read.schema();
  }

  @Override
  public Transform[] partitioning() {
    return written.partitioning();
  }

  @Override
  public Map<String, String> properties() {
    return written.properties();
  }

  @Override
  public Set<TableCapability> capabilities() {
    Set<TableCapability> both = EnumSet.of(TableCapability.BATCH_READ);
    both.addAll(written.capabilities());
    both.remove(TableCapability.MICRO_BATCH_READ); // the merge reader reads batches only
    both.remove(TableCapability.CONTINUOUS_READ);
    return both;
  }

  @Override
  public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
    return read.newScanBuilder(options);
  }

  @Override
  public WriteBuilder newWriteBuilder(LogicalWriteInfo info) {
    if (!(written instanceof SupportsWrite)) {
      throw new UnsupportedOperationException("format(\"firn\") " + written.name() + " cannot be written");
    }
    return ((SupportsWrite) written).newWriteBuilder(info);
  }
}
