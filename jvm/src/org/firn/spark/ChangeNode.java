package org.firn.spark;

import org.apache.spark.sql.Row;
import org.apache.spark.sql.api.java.UDF2;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * The tree node a change's key belongs to at a level ({@code firn.model.keyhash.node_index}
 * of FirnHash64), as a Spark SQL function: {@code firn_change_node(struct(key columns),
 * level)}. {@code firn.spark.write} shuffles an append's rows by it, so each node's rows
 * reach one task and an append writes one change file per node and operation, not one per
 * task, node and operation.
 *
 * <p>The key's columns arrive as Spark hands a Java UDF a struct: integers as their boxed
 * types (the caller turns dates into days and timestamps into microseconds first, as Firn
 * hashes them), strings as {@link String}, binaries as {@code byte[]}. A null key is placed
 * at node 0: the write task refuses it with the table's own message.
 */
public final class ChangeNode implements UDF2<Row, Integer, Integer> {
  private static final long serialVersionUID = 1L;

  /** The name the function is registered under. */
  public static final String NAME = "firn_change_node";

  @Override
  public Integer call(Row key, Integer level) {
    long h = 0;
    for (int c = 0; c < key.length(); c++) {
      Object value = key.get(c);
      if (value == null) {
        return 0;
      }
      long column;
      if (value instanceof String text) {
        column = KeyHash.stringColumn(UTF8String.fromString(text));
      } else if (value instanceof byte[] binary) {
        column = KeyHash.stringColumn(UTF8String.fromBytes(binary)); // hashed as a string's bytes
      } else if (value instanceof Long
          || value instanceof Integer
          || value instanceof Short
          || value instanceof Byte) {
        column = KeyHash.integerColumn(((Number) value).longValue());
      } else {
        throw new IllegalArgumentException(
            "firn-write: key column " + c + " has a " + value.getClass().getSimpleName()
                + " value; " + NAME + " takes integers, strings and binaries");
      }
      h = c == 0 ? KeyHash.first(column) : KeyHash.fold(h, column);
    }
    return (int) (h & (level - 1));
  }
}
