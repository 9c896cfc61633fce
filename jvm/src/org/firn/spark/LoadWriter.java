package org.firn.spark;

import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.net.URI;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.parquet.hadoop.metadata.CompressionCodecName;
import org.apache.spark.TaskContext;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.ProjectingInternalRow;
import org.apache.spark.sql.catalyst.ProjectingInternalRow$;
import org.apache.spark.sql.connector.write.DataWriter;
import org.apache.spark.sql.connector.write.WriterCommitMessage;
import org.apache.spark.sql.types.StructType;
import scala.jdk.javaapi.CollectionConverters;

/**
 * One Spark task of a load: its rows, sorted by partition and key (by Spark, as {@link
 * LoadTable} asks, or, for a table whose key and partition columns are strings, binaries or
 * integers, by the task itself: written as they come while they come in order, after the
 * first {@link #STREAM_AFTER} did, and otherwise held and sorted once they are all in,
 * {@link LoadSort}), written as Firn base files ({@link BaseFileWriter}) under
 * a directory of the task attempt of its own: {@code <staged>/p<partition>-a<attempt>-<uuid>/<col>=<value>/B-<m>-<i>-<n>.parquet}.
 *
 * <p>Each row goes to the file of its tree node {@code (m, key hash mod m)} in its partition
 * (one open file per node of the current partition; a partition's files are finished when the
 * next partition starts). A file is cut once it holds {@code target} bytes less room for its
 * footer. A key seen twice (adjacent, once sorted) fails the task, naming it. What each file
 * holds (rows, size, node, partition values, first and last key) goes back to the driver in
 * the commit message; a failed attempt deletes its directory.
 */
final class LoadWriter implements DataWriter<InternalRow> {
  private static final ObjectMapper JSON = new ObjectMapper();
  /** Rows between two looks at an open file's size. */
  private static final int SIZE_CHECK_ROWS = 1024;
  /** Rows a task that sorts its own holds before it writes them as they come, if they came
   * in order. */
  static final int STREAM_AFTER = 4096;

  private final LoadPlan plan;
  private final KeyColumns key;
  private final KeyColumns partition;
  private final Configuration conf;
  private final Path directory;
  private final String relativeDirectory;
  private final long limit;
  private final NodeFile[] open;
  private final int[] fileCounts;
  private final List<String> written = new ArrayList<>();
  private final KeyColumns.Values row;
  private final KeyColumns.Values previous;
  private final KeyColumns.Values parts;
  private final KeyColumns.Values previousParts;
  /** Whether a row of the current partition was written (its key is in {@code previous}). */
  private boolean started;
  private String partitionPath = "";
  private List<Object> partitionValues = List.of();
  private long rows;
  /** The table's columns of a row handed over in another order, or null (in order). */
  private final ProjectingInternalRow reordered;
  /** The task's rows until they are all in, when the task sorts them ({@link LoadSort});
   * null when Spark sorted them. */
  private final LoadSort sort;
  /** Whether the task's rows have come in order so far and are written as they come, not
   * held ({@link #write}). */
  private boolean streaming;

  LoadWriter(LoadPlan plan, int partitionId, int[] columns, HadoopSettings hadoop) {
    this.plan = plan;
    this.reordered = columns == null ? null : reordering(plan.schema(), columns);
    this.key = new KeyColumns(plan.schema(), plan.key(), "key");
    this.partition = new KeyColumns(plan.schema(), plan.partition(), "partition");
    TaskContext context = TaskContext.get();
    int attempt = context == null ? 0 : context.attemptNumber();
    this.relativeDirectory =
        String.format(
            "p%05d-a%d-%s", partitionId, attempt, UUID.randomUUID().toString().replace("-", "").substring(0, 12));
    this.directory = new Path(URI.create(plan.staged() + relativeDirectory));
    this.conf = configuration(plan, hadoop);
    // Room for the footer, as firn.engine.writer leaves it.
    long reserve = Math.min(plan.target() / 10, 256 * 1024);
    this.limit = plan.target() - Math.min(reserve, plan.target() / 2);
    this.open = new NodeFile[plan.buckets()];
    this.fileCounts = new int[plan.buckets()];
    this.row = key.values();
    this.previous = key.values();
    this.parts = partition.values();
    this.previousParts = partition.values();
    this.sort = LoadSort.sortsInTask(plan) ? new LoadSort(plan) : null;
  }

  private static Configuration configuration(LoadPlan plan, HadoopSettings hadoop) {
    return BaseFileWriter.sparkSettings(hadoop.applyTo(new Configuration()), plan.schema());
  }

  /** A view of a row as the table's columns, the table's column c at {@code columns[c]}. */
  private static ProjectingInternalRow reordering(StructType schema, int[] columns) {
    List<Object> at = new ArrayList<>(columns.length);
    for (int c : columns) {
      at.add(c);
    }
    return ProjectingInternalRow$.MODULE$.apply(
        schema, CollectionConverters.asScala(at).toIndexedSeq());
  }

  @Override
  public void write(InternalRow given) throws IOException {
    InternalRow record = given;
    if (reordered != null) {
      reordered.project(given);
      record = reordered;
    }
    if (sort == null) {
      writeSorted(record);
    } else if (streaming) {
      if (!writeInOrder(record)) {
        // The first row out of order: the files written so far keep the rows before it
        // (the driver reads files whose key ranges overlap for a key repeated across them,
        // as it does other tasks' files), and the rest are held and sorted.
        streaming = false;
        finishAll();
        started = false;
        sort.add(record);
      }
    } else {
      sort.add(record);
      if (sort.cameInOrder(STREAM_AFTER)) {
        // The first rows came in order: those held are written, and the rest as they come
        // for as long as they come in order, held in no memory of the task's.
        sort.writeSorted(this::writeSorted);
        streaming = true;
      }
    }
  }

  /** Writes the task's next row in (partition, key) order: the rows' order checked. */
  private void writeSorted(InternalRow record) throws IOException {
    if (!writeInOrder(record)) {
      // Spark or LoadSort sorted the task's rows: a bug if not.
      throw new IllegalStateException("rows reached the load out of key order at " + key.json(row));
    }
  }

  /** Writes the task's next row if it comes after the one before in (partition, key)
   * order; false (nothing written) if it comes before. A key seen twice fails the task. */
  private boolean writeInOrder(InternalRow record) throws IOException {
    if (partition.size() > 0) {
      partition.read(record, parts, "partition");
      int order = started ? partition.compare(parts, previousParts) : 1;
      if (order < 0) {
        key.read(record, row, "key");
        return false;
      }
      if (order > 0) {
        startPartition();
      }
    } else if (!started) {
      startPartition();
    }
    key.read(record, row, "key");
    if (started) {
      int order = key.compare(row, previous);
      if (order == 0) {
        throw new IllegalArgumentException(
            "firn-load: key " + JSON.writeValueAsString(key.json(row)) + " appears more than once; "
                + plan.duplicateRule());
      }
      if (order < 0) {
        return false;
      }
    }
    int nul = key.withNul(row);
    if (nul >= 0) {
      throw new IllegalArgumentException(
          "firn-load: key column " + key.name(nul) + " has a value with a NUL character, which the catalog cannot store");
    }
    started = true;
    previous.copyFrom(row);
    int node = (int) (key.hash(row) & (plan.buckets() - 1));
    NodeFile file = open[node];
    if (file == null) {
      file = open[node] = new NodeFile(node, fileCounts[node]++);
    }
    file.write(record);
    rows++;
    return true;
  }

  /** The rows from here on belong to the partition {@code parts} holds: finish the previous
   * partition's files. */
  private void startPartition() throws IOException {
    finishAll();
    previousParts.copyFrom(parts);
    partitionValues = partition.json(parts);
    StringBuilder path = new StringBuilder();
    for (int c = 0; c < partition.size(); c++) {
      path.append(PathText.escape(partition.name(c)))
          .append('=')
          .append(PathText.escape(PathText.of(partitionValues.get(c), plan.schema().fields()[plan.partition()[c]])))
          .append('/');
    }
    partitionPath = path.toString();
    started = false;
  }

  private void finishAll() throws IOException {
    for (int i = 0; i < open.length; i++) {
      if (open[i] != null) {
        open[i].finish();
        open[i] = null;
      }
    }
  }

  @Override
  public WriterCommitMessage commit() throws IOException {
    if (sort != null && !streaming) {
      sort.writeSorted(this::writeSorted);
    }
    finishAll();
    return new LoadTable.Written(written.toArray(new String[0]), rows);
  }

  @Override
  public void abort() throws IOException {
    if (sort != null) {
      sort.release();
    }
    for (NodeFile f : open) {
      if (f != null) {
        try {
          f.writer.close();
        } catch (IOException | RuntimeException e) {
          // The attempt failed already; its directory goes below.
        }
      }
    }
    FileSystem fs = directory.getFileSystem(conf);
    fs.delete(directory, true);
  }

  @Override
  public void close() {}

  /** One base file being written: a node's rows of the current partition. */
  private final class NodeFile {
    final int node;
    final String relative;
    final Path path;
    final BaseFileWriter writer;
    final KeyColumns.Values first = key.values();
    final KeyColumns.Values last = key.values();
    long count;

    NodeFile(int node, int n) throws IOException {
      this.node = node;
      String name = partitionPath + String.format("B-%d-%d-%05d.parquet", plan.buckets(), node, n);
      this.relative = relativeDirectory + "/" + name;
      this.path = new Path(directory, name);
      this.writer =
          BaseFileWriter.open(
              path, conf, plan.schema(), CompressionCodecName.valueOf(plan.codec()), LoadTable.ROW_GROUP_BYTES);
    }

    void write(InternalRow record) throws IOException {
      if (count == 0) {
        first.copyFrom(row);
      }
      writer.write(record);
      last.copyFrom(row);
      count++;
      if (count % SIZE_CHECK_ROWS == 0 && writer.dataSize() >= limit) {
        finish();
        open[node] = null;
      }
    }

    void finish() throws IOException {
      writer.close();
      long size = path.getFileSystem(conf).getFileStatus(path).getLen();
      Map<String, Object> out = new LinkedHashMap<>();
      out.put("path", relative);
      out.put("partition", partitionValues);
      out.put("node", List.of(plan.buckets(), node));
      out.put("rows", count);
      out.put("size", size);
      out.put("first", key.json(first));
      out.put("last", key.json(last));
      try {
        written.add(JSON.writeValueAsString(out));
      } catch (IOException e) {
        throw new UncheckedIOException(e);
      }
    }
  }
}
