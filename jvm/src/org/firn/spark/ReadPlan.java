package org.firn.spark;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.io.Serializable;
import java.util.ArrayList;
import java.util.List;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * What {@code firn.spark.jvm.read_plan} hands over, as JSON:
 *
 * <pre>
 * {"snapshot": n, "key": "id",
 *  "schema": {Spark StructType JSON: the columns returned},
 *  "read": {the same, then the key column when it is not returned},
 *  "tasks": [[{"partition": path, "node": [m, i], "prefix": n or null,
 *              "base": [{"path": uri, "size": bytes, "rows": n,
 *                        "vector": {"path": uri, "size": bytes, "rows": n} or null}, ...],
 *              "changes": [{"path": uri, "size": bytes, "rows": n, "type": "I" or "D",
 *                           "seq": n, "floor": n, "shared": bool}, ...]},
 *             ...], ...]}
 * </pre>
 *
 * <p>One Spark task per element of {@code tasks}, reading its splits one after another. A
 * change file's {@code seq} stands for its rows that carry no {@code _seq} of their own;
 * {@code floor} is its partition's max_merged_seq (rows at or below it are merged already);
 * a {@code shared} file lies at a shallower node than its split (a small commit's files sit
 * at the partition's root) and holds the keys of sibling nodes too, which the split must not
 * return: only the rows whose key hashes into the split's node {@code (m, i)} count. The
 * key's hash is FirnHash64 folded over its columns; {@code prefix} is the fold over the key's
 * partition columns (the same for every row of the split), null for a key of one column. A base
 * file's {@code vector} is its deletion vector: a Parquet file of one column, {@code pos},
 * the ascending positions of the rows it hides. {@code snapshot} and each split's
 * {@code partition} (its path, {@code ""} unpartitioned) and node name the split to the
 * driver's Python when Spark's filters prune the plan ({@link PushedFilters}).
 */
record ReadPlan(long snapshot, String key, StructType schema, StructType read, List<Task> tasks) {
  private static final ObjectMapper JSON = new ObjectMapper();

  static ReadPlan parse(String text) {
    if (text == null) {
      throw new IllegalArgumentException("format(\"firn-merge\") needs option plan");
    }
    try {
      JsonNode root = JSON.readTree(text);
      List<Task> tasks = new ArrayList<>();
      for (JsonNode task : root.get("tasks")) {
        List<Split> splits = new ArrayList<>();
        for (JsonNode s : task) {
          List<BaseFile> base = new ArrayList<>();
          for (JsonNode f : s.get("base")) {
            JsonNode vector = f.get("vector");
            base.add(
                new BaseFile(
                    file(f),
                    f.get("rows").asLong(),
                    vector == null || vector.isNull() ? null : file(vector),
                    vector == null || vector.isNull() ? 0 : vector.get("rows").asLong()));
          }
          List<Change> changes = new ArrayList<>();
          for (JsonNode c : s.get("changes")) {
            changes.add(
                new Change(
                    file(c),
                    c.get("rows").asLong(),
                    "D".equals(c.get("type").asText()),
                    c.get("seq").asLong(),
                    c.get("floor").asLong(),
                    c.get("shared").asBoolean()));
          }
          JsonNode node = s.get("node");
          JsonNode prefix = s.get("prefix");
          JsonNode partition = s.get("partition");
          splits.add(
              new Split(
                  partition == null || partition.isNull() ? "" : partition.asText(),
                  base.toArray(new BaseFile[0]),
                  changes.toArray(new Change[0]),
                  node.get(0).asLong(),
                  node.get(1).asLong(),
                  prefix != null && !prefix.isNull(),
                  prefix == null || prefix.isNull() ? 0 : prefix.asLong()));
        }
        tasks.add(new Task(splits.toArray(new Split[0])));
      }
      JsonNode snapshot = root.get("snapshot");
      return new ReadPlan(
          snapshot == null || snapshot.isNull() ? -1 : snapshot.asLong(),
          root.get("key").asText(), struct(root.get("schema")), struct(root.get("read")), tasks);
    } catch (IOException | RuntimeException e) {
      throw new IllegalArgumentException(
          "format(\"firn-merge\"): option plan is not a read plan: " + e, e);
    }
  }

  private static StructType struct(JsonNode json) {
    return (StructType) DataType.fromJson(json.toString());
  }

  private static File file(JsonNode json) {
    return new File(json.get("path").asText(), json.get("size").asLong());
  }

  /** A data file and its size in bytes (as the catalog records it: no listing, no stat). */
  record File(String path, long size) implements Serializable {}

  /** A base file, with its deletion vector ({@code null}: every row live). */
  record BaseFile(File file, long rows, File vector, long hidden) implements Serializable {}

  /** One change file of a split. */
  record Change(File file, long rows, boolean delete, long seq, long floor, boolean shared)
      implements Serializable {}

  /** One split: its base files and its unmerged change files, of node {@code (m, i)} of a
   * partition. */
  record Split(
      String partition,
      BaseFile[] base,
      Change[] changes,
      long nodeLevel,
      long nodeIndex,
      boolean prefixed,
      long prefix)
      implements Serializable {
    /** Whether the key whose last column is {@code key} belongs to the split's node. */
    boolean holds(long key) {
      long hash = prefixed ? KeyHash.after(prefix, key) : KeyHash.ofInteger(key);
      return (hash & (nodeLevel - 1)) == nodeIndex;
    }

    /** {@link #holds(long)} for a key whose last column is a decimal, in its {@link
     * DecimalKeys} form at {@code bytes[at, at + 16)}. */
    boolean holdsDecimal(byte[] bytes, int at) {
      long column = DecimalKeys.columnHash(bytes, at);
      long hash = prefixed ? KeyHash.fold(prefix, column) : KeyHash.first(column);
      return (hash & (nodeLevel - 1)) == nodeIndex;
    }

    /** {@link #holds(long)} for a key whose last column is a string. */
    boolean holds(UTF8String key) {
      long hash = prefixed ? KeyHash.afterString(prefix, key) : KeyHash.ofString(key);
      return (hash & (nodeLevel - 1)) == nodeIndex;
    }
  }

  /** One Spark task: splits read one after another. */
  record Task(Split[] splits) implements InputPartition {}
}
