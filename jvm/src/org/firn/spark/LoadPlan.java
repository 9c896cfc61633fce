package org.firn.spark;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.io.Serializable;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.StructType;

/**
 * What {@code firn.spark.load} hands over, as JSON:
 *
 * <pre>
 * {"token": "a name for this load's result",
 *  "staged": "file:///table/load/uuid/" (recorded in the catalog as staged before the job),
 *  "schema": {Spark StructType JSON: the table's columns in order, each with its Firn field
 *             id as metadata "parquet.field.id"},
 *  "key": ["id", ...], "partition": ["region", ...],
 *  "buckets": m (the tree level base files are written at), "target": bytes a file,
 *  "codec": "LZ4_RAW" | "ZSTD" | "SNAPPY",
 *  "rule": "what to do about a key seen twice (the end of the error that names it)"}
 * </pre>
 *
 * <p>Every column named must be in {@code schema}; {@link Keys} says which types a key or a
 * partition column may have.
 */
record LoadPlan(
    String token,
    String staged,
    StructType schema,
    int[] key,
    int[] partition,
    int buckets,
    long target,
    String codec,
    String duplicateRule)
    implements Serializable {
  private static final ObjectMapper JSON = new ObjectMapper();

  static LoadPlan parse(String text) {
    if (text == null) {
      throw new IllegalArgumentException("format(\"firn-load\") needs option plan (firn.spark.load writes it)");
    }
    try {
      JsonNode root = JSON.readTree(text);
      StructType schema = (StructType) DataType.fromJson(root.get("schema").toString());
      int buckets = root.get("buckets").asInt();
      if (buckets < 1 || Integer.bitCount(buckets) != 1) {
        throw new IllegalArgumentException("buckets must be a power of two, got " + buckets);
      }
      return new LoadPlan(
          root.get("token").asText(),
          root.get("staged").asText(),
          schema,
          indices(schema, root.get("key")),
          indices(schema, root.get("partition")),
          buckets,
          root.get("target").asLong(),
          root.get("codec").asText(),
          root.get("rule").asText());
    } catch (IOException | RuntimeException e) {
      throw new IllegalArgumentException(
          "format(\"firn-load\"): option plan is not a load plan: " + e, e);
    }
  }

  private static int[] indices(StructType schema, JsonNode names) {
    int[] out = new int[names.size()];
    for (int i = 0; i < out.length; i++) {
      out[i] = schema.fieldIndex(names.get(i).asText());
    }
    return out;
  }
}
