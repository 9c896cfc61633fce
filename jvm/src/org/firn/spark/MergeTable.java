package org.firn.spark;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import java.io.IOException;
import java.util.ArrayList;
import java.util.EnumSet;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import org.apache.parquet.filter2.predicate.FilterPredicate;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.SupportsPushDownFilters;
import org.apache.spark.sql.connector.read.SupportsPushDownRequiredColumns;
import org.apache.spark.sql.sources.Filter;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/**
 * The planned read as a Spark table: one batch scan, one Spark partition per split, of the
 * columns the query uses ({@link SupportsPushDownRequiredColumns}): a {@code select} of two
 * columns of a wide table decodes those two, and the key, which every merge reads.
 *
 * <p>Spark's filters prune the plan's splits ({@link SupportsPushDownFilters}): the driver's
 * Python answers which splits, and which of their files, can hold a passing row (partitions,
 * the hash nodes of whole keys, files' key ranges; {@code firn.spark.jvm_format.jvm_prune}),
 * and the others are not read. A split merged from only its kept files is exact for every
 * key the filters pass; every filter is still handed back to Spark, which applies it to the
 * rows read and so drops any other key. Pruning can only save work: a filter this side
 * cannot express, or a planner that does not answer, reads every split. Each query builds its own scan, so a later query of the same DataFrame
 * without the filter reads every split again.
 */
final class MergeTable implements SupportsRead {
  private static final ObjectMapper JSON = new ObjectMapper();
  private final ReadPlan plan;
  /** The read's options as the planner takes them, or null: not pruned by filters. */
  private final String options;
  private final FirnSource.Planner planner;

  MergeTable(ReadPlan plan, String options, FirnSource.Planner planner) {
    this.plan = plan;
    this.options = options;
    this.planner = planner;
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

  /** The plan's columns that Spark asks for, in the plan's order (all until it asks), and
   * its splits that Spark's filters leave (all until it pushes any). */
  private final class Pruned
      implements ScanBuilder, SupportsPushDownRequiredColumns, SupportsPushDownFilters, Scan,
          Batch {
    private StructType returned = plan.schema();
    private List<Filter> pushed = List.of();
    private List<ReadPlan.Task> tasks = plan.tasks();
    /** Spark's filters on base files' row groups, or null ({@link BaseFilter}). */
    private FilterPredicate baseFilter;

    @Override
    public Filter[] pushFilters(Filter[] filters) {
      if (options != null && planner != null && plan.snapshot() >= 0) {
        pushed = PushedFilters.usable(filters);
      }
      baseFilter = BaseFilter.of(filters, plan.read());
      return filters; // all of them: Spark filters the rows, splits and row groups are pruned
    }

    @Override
    public Filter[] pushedFilters() {
      return pushed.toArray(new Filter[0]);
    }

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
      if (!pushed.isEmpty()) {
        tasks = kept(prune());
      }
      return this;
    }

    /** The splits (their indexes, counted across tasks) and files that can hold a passing
     * row, or null: every one. */
    private Pruning prune() {
      ArrayNode named = JSON.createArrayNode();
      for (ReadPlan.Task task : plan.tasks()) {
        for (ReadPlan.Split split : task.splits()) {
          named.addArray().add(split.partition()).add(split.nodeLevel()).add(split.nodeIndex());
        }
      }
      String answer;
      try {
        answer = planner.prune(options, plan.snapshot(), named.toString(), PushedFilters.toJson(pushed));
      } catch (RuntimeException e) {
        return null; // the driver's Python is gone: read it all, Spark filters it
      }
      if (answer == null) {
        return null;
      }
      try {
        JsonNode root = JSON.readTree(answer);
        Set<Integer> indexes = new HashSet<>();
        for (JsonNode index : root.get("splits")) {
          indexes.add(index.asInt());
        }
        Set<String> files = new HashSet<>();
        for (JsonNode path : root.get("files")) {
          files.add(path.asText());
        }
        return new Pruning(indexes, files);
      } catch (IOException | RuntimeException e) {
        return null;
      }
    }

    /** The plan's tasks with only the splits and files {@code pruning} keeps (all when
     * null); a split left with no file, or a task with no split, is dropped. */
    private List<ReadPlan.Task> kept(Pruning pruning) {
      if (pruning == null) {
        return plan.tasks();
      }
      List<ReadPlan.Task> left = new ArrayList<>();
      int index = 0;
      for (ReadPlan.Task task : plan.tasks()) {
        List<ReadPlan.Split> splits = new ArrayList<>();
        for (ReadPlan.Split split : task.splits()) {
          if (pruning.splits().contains(index++)) {
            ReadPlan.Split narrowed = pruning.narrowed(split);
            if (narrowed.base().length + narrowed.changes().length > 0) {
              splits.add(narrowed);
            }
          }
        }
        if (!splits.isEmpty()) {
          left.add(new ReadPlan.Task(splits.toArray(new ReadPlan.Split[0])));
        }
      }
      return left;
    }

    @Override
    public StructType readSchema() {
      return returned;
    }

    @Override
    public String description() {
      String pruned = tasks == plan.tasks() ? ""
          : ", " + splitCount(tasks) + " of " + splitCount(plan.tasks()) + " splits, "
              + fileCount(tasks) + " of " + fileCount(plan.tasks()) + " files";
      String groups = baseFilter == null ? "" : ", base row groups by " + baseFilter;
      return "firn-merge(" + tasks.size() + " tasks, " + returned.size() + " of "
          + plan.schema().size() + " columns" + pruned + groups + ")";
    }

    @Override
    public Batch toBatch() {
      return this;
    }

    @Override
    public InputPartition[] planInputPartitions() {
      return tasks.toArray(new InputPartition[0]);
    }

    @Override
    public PartitionReaderFactory createReaderFactory() {
      return new Factory(
          returned, read(returned), plan.key(), baseFilter, HadoopSettings.ofSession());
    }
  }

  /** What the driver's Python answered: the splits kept, and the files of theirs kept. */
  private record Pruning(Set<Integer> splits, Set<String> files) {
    /** {@code split} with only the files kept: the others cannot hold a key the filters
     * pass, so the merge of the rest is exact for every key Spark keeps. */
    ReadPlan.Split narrowed(ReadPlan.Split split) {
      List<ReadPlan.BaseFile> base = new ArrayList<>();
      for (ReadPlan.BaseFile file : split.base()) {
        if (files.contains(file.file().path())) {
          base.add(file);
        }
      }
      List<ReadPlan.Change> changes = new ArrayList<>();
      for (ReadPlan.Change change : split.changes()) {
        if (files.contains(change.file().path())) {
          changes.add(change);
        }
      }
      return new ReadPlan.Split(
          split.partition(),
          base.toArray(new ReadPlan.BaseFile[0]),
          changes.toArray(new ReadPlan.Change[0]),
          split.nodeLevel(),
          split.nodeIndex(),
          split.prefixed(),
          split.prefix());
    }
  }

  private static int fileCount(List<ReadPlan.Task> tasks) {
    int count = 0;
    for (ReadPlan.Task task : tasks) {
      for (ReadPlan.Split split : task.splits()) {
        count += split.base().length + split.changes().length;
      }
    }
    return count;
  }

  private static int splitCount(List<ReadPlan.Task> tasks) {
    int count = 0;
    for (ReadPlan.Task task : tasks) {
      count += task.splits().length;
    }
    return count;
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
    private final FilterPredicate baseFilter;
    private final HadoopSettings hadoop;

    Factory(
        StructType schema,
        StructType read,
        String key,
        FilterPredicate baseFilter,
        HadoopSettings hadoop) {
      this.schema = schema;
      this.read = read;
      this.key = key;
      this.baseFilter = baseFilter;
      this.hadoop = hadoop;
    }

    @Override
    public boolean supportColumnarReads(InputPartition partition) {
      return true;
    }

    @Override
    public PartitionReader<ColumnarBatch> createColumnarReader(InputPartition partition) {
      return new TaskReader(
          ((ReadPlan.Task) partition).splits(), schema, read, key, baseFilter, hadoop);
    }

    @Override
    public PartitionReader<InternalRow> createReader(InputPartition partition) {
      throw new UnsupportedOperationException("firn-merge reads columnar batches only");
    }
  }
}
