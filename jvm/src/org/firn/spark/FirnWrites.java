package org.firn.spark;

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
 * A {@code format("firn")} table as a batch write finds it ({@link FirnSource}): the Python
 * source's table, except that an overwrite (a load) the JVM loader can write is written by
 * it ({@link LoadTable}): the driver's Python stages the load and answers its plan, the
 * loader writes the base files, and the job's commit hands them back to Python, which
 * registers them as one load. Everything else is the Python source's table unchanged.
 */
final class FirnWrites implements SupportsRead, SupportsWrite {
  private final Table python;
  private final String options;
  private final FirnSource.Planner planner;

  FirnWrites(Table python, String options, FirnSource.Planner planner) {
    this.python = python;
    this.options = options;
    this.planner = planner;
  }

  @Override
  public String name() {
    return python.name();
  }

  @Override
  @SuppressWarnings("deprecation")
  public StructType schema() {
    return python.schema();
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
    return python.capabilities();
  }

  @Override
  public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
    return ((SupportsRead) python).newScanBuilder(options);
  }

  @Override
  public WriteBuilder newWriteBuilder(LogicalWriteInfo info) {
    return new Builder(((SupportsWrite) python).newWriteBuilder(info), info);
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
          plan = planner.load(options, info.schema().json());
        } catch (RuntimeException e) {
          plan = null; // the Python source checks the write again and says what is wrong
        }
        if (plan != null) {
          return new PlannedLoad(new LoadTable(LoadPlan.parse(plan)), planner);
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
