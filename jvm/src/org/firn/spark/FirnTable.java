package org.firn.spark;

import java.util.EnumSet;
import java.util.Map;
import java.util.Set;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.SupportsWrite;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.distributions.Distribution;
import org.apache.spark.sql.connector.expressions.SortOrder;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.write.BatchWrite;
import org.apache.spark.sql.connector.write.DataWriterFactory;
import org.apache.spark.sql.connector.write.LogicalWriteInfo;
import org.apache.spark.sql.connector.write.PhysicalWriteInfo;
import org.apache.spark.sql.connector.write.RequiresDistributionAndOrdering;
import org.apache.spark.sql.connector.write.SupportsTruncate;
import org.apache.spark.sql.connector.write.Write;
import org.apache.spark.sql.connector.write.WriteBuilder;
import org.apache.spark.sql.connector.write.WriterCommitMessage;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * A {@code format("firn")} table ({@link FirnSource}): the Python source's table, with two
 * exceptions. A read planned for the JVM merge reader ({@code read}) is read by it (writes
 * to that table, a stream sink being planned as a read first, stay the Python source's). A
 * batch write's overwrite (a load) that the JVM loader can write is written by it ({@code
 * loads}: the driver's Python stages the load and answers its plan, the loader ({@link
 * LoadTable}) writes the base files, and the job's commit hands them back to Python, which
 * registers them as one load).
 */
final class FirnTable implements SupportsRead, SupportsWrite {
  private final Table python;
  /** The merge reader's table, or null: the Python source reads. */
  private final MergeTable read;
  /** Who plans a load, or null: the Python source writes every write. */
  private final FirnSource.Planner loads;
  /** The write's options (a JSON object) for {@code loads}. */
  private final String options;

  private FirnTable(Table python, MergeTable read, FirnSource.Planner loads, String options) {
    this.python = python;
    this.read = read;
    this.loads = loads;
    this.options = options;
  }

  /** A read the merge reader takes whole; written (as a stream sink) by the Python source. */
  static FirnTable planned(MergeTable read, Table python) {
    return new FirnTable(python, read, null, null);
  }

  /** A batch write (or a read of a given schema: the Python source's), whose overwrite asks
   * {@code loads} for the JVM loader's plan first. */
  static FirnTable writing(Table python, String options, FirnSource.Planner loads) {
    return new FirnTable(python, null, loads, options);
  }

  @Override
  public String name() {
    return read != null ? read.name() : python.name(); // a query plan shows the scan's
  }

  @Override
  @SuppressWarnings("deprecation")
  public StructType schema() {
    return read != null ? read.schema() : python.schema();
  }

  @Override
  public Transform[] partitioning() {
    return python.partitioning();
  }

  @Override
  public Map<String, String> properties() {
    return python.properties();
  }

  @Override
  public Set<TableCapability> capabilities() {
    if (read == null) {
      return python.capabilities();
    }
    Set<TableCapability> both = EnumSet.of(TableCapability.BATCH_READ);
    both.addAll(python.capabilities());
    both.remove(TableCapability.MICRO_BATCH_READ); // the merge reader reads batches only
    both.remove(TableCapability.CONTINUOUS_READ);
    return both;
  }

  @Override
  public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
    return read != null
        ? read.newScanBuilder(options)
        : ((SupportsRead) python).newScanBuilder(options);
  }

  @Override
  public WriteBuilder newWriteBuilder(LogicalWriteInfo info) {
    if (!(python instanceof SupportsWrite written)) {
      throw new UnsupportedOperationException("format(\"firn\") " + python.name() + " cannot be written");
    }
    WriteBuilder builder = written.newWriteBuilder(info);
    return loads == null ? builder : new Builder(builder, info);
  }

  /** The Python source's write builder, but a truncating one asks for the JVM loader first. */
  private final class Builder implements WriteBuilder, SupportsTruncate {
    private WriteBuilder written;
    private final LogicalWriteInfo info;
    private boolean truncated;

    Builder(WriteBuilder written, LogicalWriteInfo info) {
      this.written = written;
      this.info = info;
    }

    @Override
    public WriteBuilder truncate() {
      written = ((SupportsTruncate) written).truncate();
      truncated = true;
      return this;
    }

    @Override
    public Write build() {
      if (truncated) {
        String plan;
        try {
          plan = loads.load(options, info.schema().json());
        } catch (RuntimeException e) {
          plan = null; // the Python source checks the write again and says what is wrong
        }
        if (plan != null) {
          return new PlannedLoad(new LoadTable(LoadPlan.parse(plan), info.schema()), loads);
        }
      }
      return written.build();
    }
  }

  /** A load by the JVM loader whose commit (or failure) goes back to the driver's Python. */
  private static final class PlannedLoad
      implements Write, RequiresDistributionAndOrdering, BatchWrite {
    private final LoadTable load;
    private final FirnSource.Planner planner;
    private final String token;

    PlannedLoad(LoadTable load, FirnSource.Planner planner) {
      this.load = load;
      this.planner = planner;
      this.token = load.token();
    }

    @Override
    public String description() {
      return load.description();
    }

    @Override
    public Distribution requiredDistribution() {
      return load.requiredDistribution();
    }

    @Override
    public SortOrder[] requiredOrdering() {
      return load.requiredOrdering();
    }

    @Override
    public BatchWrite toBatch() {
      return this;
    }

    @Override
    public DataWriterFactory createBatchWriterFactory(PhysicalWriteInfo info) {
      return load.createBatchWriterFactory(info);
    }

    @Override
    public void commit(WriterCommitMessage[] messages) {
      load.commit(messages);
      planner.loaded(token, LoadTable.take(token));
    }

    @Override
    public void abort(WriterCommitMessage[] messages) {
      LoadTable.take(token); // whatever a commit left behind
      planner.discarded(token);
    }
  }
}
