package org.firn.spark;

import java.util.Map;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * {@code df.write.format("firn-load").option("plan", json).mode("append").save()}: the rows
 * written as a Firn table's base files under a staged directory, for the Python driver that
 * made the plan ({@code firn.spark.load}) to register as one load. See {@link LoadPlan} for the
 * plan and {@link LoadWriter} for the files. This side never reaches the catalog.
 */
public final class LoadSource implements TableProvider, DataSourceRegister {
  @Override
  public String shortName() {
    return "firn-load";
  }

  @Override
  public StructType inferSchema(CaseInsensitiveStringMap options) {
    return LoadPlan.parse(options.get(MergeSource.PLAN)).schema();
  }

  @Override
  public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
    return new LoadTable(LoadPlan.parse(properties.get(MergeSource.PLAN)));
  }

  /** The files of the finished load whose plan had {@code token} (JSON), or null; see {@link
   * LoadTable#take}. Called by the Python driver through py4j. */
  public static String take(String token) {
    return LoadTable.take(token);
  }
}
