package org.firn.spark;

import java.util.EnumSet;
import java.util.Set;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/** The planned read as a Spark table: one batch scan, one Spark partition per split. */
final class MergeTable implements SupportsRead, ScanBuilder, Scan, Batch {
  private final ReadPlan plan;

  MergeTable(ReadPlan plan) {
    this.plan = plan;
  }

  @Override
  public String name() {
    return "firn-merge";
  }

  @Override
  @SuppressWarnings("deprecation")
  public StructType schema() {
    return plan.schema();
  }

  @Override
  public Set<TableCapability> capabilities() {
    return EnumSet.of(TableCapability.BATCH_READ);
  }

  @Override
  public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
    return this;
  }

  @Override
  public Scan build() {
    return this;
  }

  @Override
  public StructType readSchema() {
    return plan.schema();
  }

  @Override
  public String description() {
    return "firn-merge(" + plan.tasks().size() + " tasks)";
  }

  @Override
  public Batch toBatch() {
    return this;
  }

  @Override
  public InputPartition[] planInputPartitions() {
    return plan.tasks().toArray(new InputPartition[0]);
  }

  @Override
  public PartitionReaderFactory createReaderFactory() {
    return new Factory(plan.schema(), plan.read(), plan.key());
  }

  /** Serialised to the executors: what every split's reader shares. */
  private static final class Factory implements PartitionReaderFactory {
    private static final long serialVersionUID = 1L;
    private final StructType schema;
    private final StructType read;
    private final String key;

    Factory(StructType schema, StructType read, String key) {
      this.schema = schema;
      this.read = read;
      this.key = key;
    }

    @Override
    public boolean supportColumnarReads(InputPartition partition) {
      return true;
    }

    @Override
    public PartitionReader<ColumnarBatch> createColumnarReader(InputPartition partition) {
      return new TaskReader(((ReadPlan.Task) partition).splits(), schema, read, key);
    }

    @Override
    public PartitionReader<InternalRow> createReader(InputPartition partition) {
      throw new UnsupportedOperationException("firn-merge reads columnar batches only");
    }
  }
}
