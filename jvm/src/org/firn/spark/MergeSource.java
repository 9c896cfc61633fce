package org.firn.spark;

import java.util.Map;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * {@code spark.read.format("firn-merge").option("plan", json).load()}: the merged rows of
 * splits that Firn's planner (in Python, on the driver) has already listed.
 *
 * <p>The plan names every file; this side never reaches the catalog. See {@link ReadPlan}
 * for its shape and {@link SplitReader} for the merge rule.
 */
public final class MergeSource implements TableProvider, DataSourceRegister {
  static final String PLAN = "plan";

  @Override
  public String shortName() {
    return "firn-merge";
  }

  @Override
  public StructType inferSchema(CaseInsensitiveStringMap options) {
    return ReadPlan.parse(options.get(PLAN)).schema();
  }

  @Override
  public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
    String plan = properties.get(PLAN);
    if (plan == null) {
      throw new IllegalArgumentException("format(\"firn-merge\") needs option plan (firn.spark.read writes it)");
    }
    return new MergeTable(ReadPlan.parse(plan), null, null); // no catalog here: not pruned
  }
}
