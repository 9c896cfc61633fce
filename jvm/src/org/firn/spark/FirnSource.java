package org.firn.spark;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.util.Locale;
import java.util.Map;
import java.util.TreeMap;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.execution.datasources.v2.python.PythonDataSourceV2;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * {@code format("firn")} in a session that has this jar: a read of the merged view that the
 * JVM merge reader can take whole is read by it ({@link MergeTable}, which Spark's filters
 * prune); everything else (writes, stream sinks, change reads, the {@code filter} and {@code
 * pushdown} options, splits the merge reader does not take) is Firn's Python
 * data source, which {@code firn.spark.register(spark)} registers as {@code firn-python} in a
 * session with this jar (Spark refuses a Python source of a JVM source's name), and to which
 * this provider hands the call unchanged.
 *
 * <p>Spark asks a provider for the schema ({@link #inferSchema}) before the table only when
 * nobody gave one: a batch read, or a stream sink. A planned read's table ({@link FirnTable#planned})
 * reads by the JVM reader and writes by the Python source, so a stream sink, planned as a
 * read, still writes. A batch write gives its DataFrame's schema and is never planned as a
 * read: its table ({@link FirnTable#writing}) asks the driver's Python whether an overwrite (a load)
 * is one the JVM loader writes.
 *
 * <p>Why a JVM name in front of the Python one: Spark looks a format up among the JVM's
 * registered sources before the session's Python ones, and a Python source hands every row
 * to Spark through Arrow, which alone costs a read about what Iceberg's connector takes for
 * all of it. Only the driver's Python knows the catalog, so this side asks it ({@link
 * Planner}, a Py4J callback that {@code firn.spark.register} installs) for the read's plan:
 * the same plan {@code firn.spark.read} gives the JVM reader. Without a planner (a session
 * where Firn was never registered, or one whose Python is gone) every call goes to the
 * Python source, which says what is missing.
 */
public final class FirnSource implements TableProvider, DataSourceRegister {
  /** The format's name. */
  static final String NAME = "firn";

  /** The Python source's name in a session with this jar ({@code firn.spark.source}). */
  static final String PYTHON = "firn-python";

  private static final ObjectMapper JSON = new ObjectMapper();

  /** What Firn's Python answers on the driver (implemented by {@code firn.spark.jvm_format}). */
  public interface Planner {
    /**
     * The JVM reader's plan ({@link ReadPlan}'s JSON) for a read with these options (a JSON
     * object of strings, keys lower case), or null when the read is not one it takes whole.
     */
    String plan(String options);

    /**
     * The JVM loader's plan ({@link LoadPlan}'s JSON) for an overwrite with these options of
     * rows of {@code schema} (a {@code StructType}'s JSON), its directory staged, or null
     * when the Python source is to write it.
     */
    String load(String options, String schema);

    /**
     * Which of a planned read's splits can hold a row passing Spark's filters: their indexes
     * (a JSON array), or null to read them all. {@code options} are the read's (as for {@link
     * #plan}), {@code snapshot} the plan's, {@code splits} a JSON array of {@code [partition,
     * m, i]}, {@code filters} {@link PushedFilters}' JSON array.
     */
    String prune(String options, long snapshot, String splits, String filters);

    /** The load of {@code token} committed these files (the loader's JSON): register them. */
    void loaded(String token, String files);

    /** The load of {@code token} failed: delete what it staged. */
    void discarded(String token);
  }

  private static volatile Planner planner;

  /** Installed by {@code firn.spark.register}; null removes it. */
  public static void plannedBy(Planner answering) {
    planner = answering;
  }

  private final PythonDataSourceV2 python = new PythonDataSourceV2();
  /** The options inferSchema planned and what they gave: Spark asks for the schema, then the table. */
  private Map<String, String> planned;

  private ReadPlan plan;
  /** {@link #planned} as the JSON the planner takes, for pruning by filters. */
  private String plannedOptions;

  public FirnSource() {
    python.setShortName(PYTHON);
  }

  @Override
  public String shortName() {
    return NAME;
  }

  @Override
  public StructType inferSchema(CaseInsensitiveStringMap options) {
    ReadPlan found = planFor(options.asCaseSensitiveMap());
    if (found != null) {
      return found.schema();
    }
    try {
      return python.inferSchema(options);
    } catch (RuntimeException e) {
      if (planner == null) {
        throw new IllegalStateException(
            "format(\"firn\") needs firn.spark.register(spark) in this session first ("
                + e.getMessage()
                + ")",
            e);
      }
      throw e;
    }
  }

  @Override
  public Transform[] inferPartitioning(CaseInsensitiveStringMap options) {
    return python.inferPartitioning(options);
  }

  @Override
  public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
    Table written = python.getTable(schema, partitioning, properties);
    Map<String, String> asked = lowered(properties);
    if (asked.equals(planned)) {
      // Asked for its schema first: a read, or a stream sink (which is written by Python).
      return plan != null && plan.schema().equals(schema)
          ? FirnTable.planned(new MergeTable(plan, plannedOptions, planner), written)
          : written;
    }
    // A batch write (Spark gives it the DataFrame's schema), or a read of a given schema.
    Planner answering = planner;
    if (answering == null) {
      return written;
    }
    try {
      return FirnTable.writing(written, JSON.writeValueAsString(asked), answering);
    } catch (JsonProcessingException e) {
      return written;
    }
  }

  @Override
  public boolean supportsExternalMetadata() {
    return python.supportsExternalMetadata();
  }

  /** The JVM reader's plan for a read with these options, or null (the Python source's). */
  private ReadPlan planFor(Map<String, String> options) {
    Map<String, String> asked = lowered(options);
    Planner answering = planner;
    String text = null;
    if (answering != null) {
      try {
        text = answering.plan(JSON.writeValueAsString(asked));
      } catch (JsonProcessingException | RuntimeException e) {
        // The driver's Python is gone or failed: the Python source reads it, or says why not.
        text = null;
      }
    }
    planned = asked;
    plannedOptions = null;
    try {
      plannedOptions = JSON.writeValueAsString(asked);
    } catch (JsonProcessingException e) {
      plannedOptions = null; // the read is not pruned by its filters, only filtered
    }
    plan = text == null ? null : ReadPlan.parse(text);
    return plan;
  }

  private static Map<String, String> lowered(Map<String, String> options) {
    Map<String, String> lowered = new TreeMap<>();
    for (Map.Entry<String, String> option : options.entrySet()) {
      lowered.put(option.getKey().toLowerCase(Locale.ROOT), option.getValue());
    }
    return lowered;
  }
}
