package org.firn.spark;

import java.util.EnumSet;
import java.util.HashSet;
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
import org.apache.spark.sql.connector.read.SupportsPushDownRequiredColumns;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/**
 * The planned read as a Spark table: one batch scan, one Spark partition per split, of the
 * columns the query uses ({@link SupportsPushDownRequiredColumns}): a {@code select} of two
 * columns of a wide table decodes those two, and the key, which every merge reads.
 */
final class MergeTable implements SupportsRead {
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
    return new Pruned();
  }

  /** The plan's columns that Spark asks for, in the plan's order (all until it asks). */
  private final class Pruned
      implements ScanBuilder, SupportsPushDownRequiredColumns, Scan, Batch {
    private StructType returned = plan.schema();

    @Override
    public void pruneColumns(StructType required) {
      // Top-level columns only: a struct asked for in part is read whole (Spark's
      // projection above the scan takes what it needs of it).
      Set<String> asked = new HashSet<>();
      for (StructField field : required.fields()) {
        asked.add(field.name());
      }
      StructType kept = new StructType();
      for (StructField field : plan.schema().fields()) {
        if (asked.contains(field.name())) {
          kept = kept.add(field);
        }
      }
      returned = kept;
    }

    @Override
    public Scan build() {
      return this;
    }

    @Override
    public StructType readSchema() {
      return returned;
    }

    @Override
    public String description() {
      return "firn-merge(" + plan.tasks().size() + " tasks, " + returned.size() + " of "
          + plan.schema().size() + " columns)";
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
      return new Factory(returned, read(returned), plan.key());
    }
  }

  /** What a file is read as: the returned columns, then the key when it is not among them
   * (the merge decides every row by it). */
  private StructType read(StructType returned) {
    for (StructField field : returned.fields()) {
      if (field.name().equals(plan.key())) {
        return returned;
      }
    }
    return returned.add(plan.read().apply(plan.key()));
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
