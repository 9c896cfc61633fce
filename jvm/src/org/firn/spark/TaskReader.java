package org.firn.spark;

import java.io.IOException;
import org.apache.parquet.filter2.predicate.FilterPredicate;
import org.apache.spark.sql.vectorized.ColumnarBatch;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.types.StructType;

/** One Spark task's rows: its splits' merged rows, one split after another. */
final class TaskReader implements PartitionReader<ColumnarBatch> {
  private final ReadPlan.Split[] splits;
  private final StructType schema;
  private final StructType read;
  private final String key;
  private final FilterPredicate baseFilter;
  private final HadoopSettings hadoop;
  private int next;
  private SplitReader current;

  TaskReader(
      ReadPlan.Split[] splits,
      StructType schema,
      StructType read,
      String key,
      FilterPredicate baseFilter,
      HadoopSettings hadoop) {
    this.splits = splits;
    this.hadoop = hadoop;
    this.schema = schema;
    this.read = read;
    this.key = key;
    this.baseFilter = baseFilter;
  }

  @Override
  public boolean next() throws IOException {
    while (true) {
      if (current != null && current.next()) {
        return true;
      }
      if (current != null) {
        current.close();
        current = null;
      }
      if (next == splits.length) {
        return false;
      }
      current = new SplitReader(splits[next++], schema, read, key, baseFilter, hadoop);
    }
  }

  @Override
  public ColumnarBatch get() {
    return current.get();
  }

  @Override
  public void close() throws IOException {
    if (current != null) {
      current.close();
    }
  }
}
