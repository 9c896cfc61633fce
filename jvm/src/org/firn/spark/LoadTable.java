package org.firn.spark;

import java.util.EnumSet;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.catalog.SupportsWrite;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.distributions.Distribution;
import org.apache.spark.sql.connector.distributions.Distributions;
import org.apache.spark.sql.connector.expressions.Expressions;
import org.apache.spark.sql.connector.expressions.SortDirection;
import org.apache.spark.sql.connector.expressions.SortOrder;
import org.apache.spark.sql.connector.write.BatchWrite;
import org.apache.spark.sql.connector.write.DataWriter;
import org.apache.spark.sql.connector.write.DataWriterFactory;
import org.apache.spark.sql.connector.write.LogicalWriteInfo;
import org.apache.spark.sql.connector.write.PhysicalWriteInfo;
import org.apache.spark.sql.connector.write.RequiresDistributionAndOrdering;
import org.apache.spark.sql.connector.write.Write;
import org.apache.spark.sql.connector.write.WriteBuilder;
import org.apache.spark.sql.connector.write.WriterCommitMessage;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;

/**
 * A load as a Spark table to append to: each task's rows are sorted by the partition
 * columns, then the key (no shuffle, a sort within each task: by Spark, as {@link
 * RequiresDistributionAndOrdering} asks, or, for a table whose key and partition columns
 * are strings, binaries or integers, by the task's own {@link LoadSort}), and {@link
 * LoadWriter} writes them. The job's commit hands every committed
 * task's files, as JSON, to the Python driver that started it ({@link #take}); the driver
 * registers them in the catalog, or deletes the staged directory if the job failed.
 */
final class LoadTable implements SupportsWrite, WriteBuilder, RequiresDistributionAndOrdering, BatchWrite {
  /** Bytes a row group holds at most (as parquet-mr estimates them while encoding). */
  static final long ROW_GROUP_BYTES = 32L << 20;

  /** Each finished load's files (a JSON array), by the plan's token, until the driver takes
   * them. */
  private static final Map<String, String> FINISHED = new ConcurrentHashMap<>();

  private final LoadPlan plan;
  /** Where each of the table's columns is in the rows Spark hands over, or null: in order. */
  private final int[] columns;

  LoadTable(LoadPlan plan) {
    this.plan = plan;
    this.columns = null;
  }

  /**
   * A load of rows of {@code input}: the table's columns by name, in any order (a {@code
   * format("firn")} overwrite, which no select puts in the table's order first; the driver's
   * Python checked that the names and types are the table's).
   */
  LoadTable(LoadPlan plan, StructType input) {
    this.plan = plan;
    StructField[] fields = plan.schema().fields();
    int[] at = new int[fields.length];
    boolean inOrder = input.size() == fields.length;
    for (int c = 0; c < fields.length; c++) {
      at[c] = input.fieldIndex(fields[c].name());
      inOrder &= at[c] == c;
    }
    this.columns = inOrder ? null : at;
  }

  /** The files of the load whose plan had {@code token} (a JSON array of the objects {@link
   * LoadWriter} describes them by), or null if it has not committed; each load's once. */
  static String take(String token) {
    return FINISHED.remove(token);
  }

  /** The plan's token: the load's key on the Python side. */
  String token() {
    return plan.token();
  }

  @Override
  public String name() {
    return "firn-load";
  }

  @Override
  @SuppressWarnings("deprecation")
  public StructType schema() {
    return plan.schema();
  }

  @Override
  public Set<TableCapability> capabilities() {
    return EnumSet.of(TableCapability.BATCH_WRITE);
  }

  @Override
  public WriteBuilder newWriteBuilder(LogicalWriteInfo info) {
    return this;
  }

  @Override
  public Write build() {
    return this;
  }

  @Override
  public String description() {
    return "firn-load(" + plan.staged() + ")";
  }

  @Override
  public Distribution requiredDistribution() {
    return Distributions.unspecified();
  }

  @Override
  public SortOrder[] requiredOrdering() {
    if (LoadSort.sortsInTask(plan)) {
      return new SortOrder[0];
    }
    int[] partition = plan.partition();
    int[] key = plan.key();
    SortOrder[] order = new SortOrder[partition.length + key.length];
    for (int i = 0; i < partition.length; i++) {
      order[i] = ascending(partition[i]);
    }
    for (int i = 0; i < key.length; i++) {
      order[partition.length + i] = ascending(key[i]);
    }
    return order;
  }

  private SortOrder ascending(int ordinal) {
    return Expressions.sort(
        Expressions.column(plan.schema().fields()[ordinal].name()), SortDirection.ASCENDING);
  }

  @Override
  public BatchWrite toBatch() {
    return this;
  }

  @Override
  public DataWriterFactory createBatchWriterFactory(PhysicalWriteInfo info) {
    return new Factory(plan, columns, HadoopSettings.ofSession());
  }

  @Override
  public void commit(WriterCommitMessage[] messages) {
    StringBuilder out = new StringBuilder("[");
    for (WriterCommitMessage m : messages) {
      if (m == null) {
        continue;
      }
      for (String file : ((Written) m).files()) {
        out.append(out.length() > 1 ? "," : "").append(file);
      }
    }
    FINISHED.put(plan.token(), out.append(']').toString());
  }

  @Override
  public void abort(WriterCommitMessage[] messages) {
    // The driver deletes the whole staged directory (and its record) when the job fails.
  }

  /** What one task attempt wrote: its files as JSON objects, and its rows. */
  record Written(String[] files, long rows) implements WriterCommitMessage {}

  /** Serialised to the executors. */
  private record Factory(LoadPlan plan, int[] columns, HadoopSettings hadoop)
      implements DataWriterFactory {
    @Override
    public DataWriter<InternalRow> createWriter(int partitionId, long taskId) {
      return new LoadWriter(plan, partitionId, columns, hadoop);
    }
  }
}
