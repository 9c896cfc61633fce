package org.firn.spark;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.math.BigDecimal;
import java.time.LocalDate;
import java.util.ArrayList;
import java.util.Base64;
import java.util.List;
import java.util.Map;
import java.util.function.Function;
import org.apache.spark.sql.sources.EqualNullSafe;
import org.apache.spark.sql.sources.EqualTo;
import org.apache.spark.sql.sources.Filter;
import org.apache.spark.sql.sources.GreaterThan;
import org.apache.spark.sql.sources.GreaterThanOrEqual;
import org.apache.spark.sql.sources.In;
import org.apache.spark.sql.sources.IsNotNull;
import org.apache.spark.sql.sources.IsNull;
import org.apache.spark.sql.sources.LessThan;
import org.apache.spark.sql.sources.LessThanOrEqual;
import org.apache.spark.sql.sources.Not;
import org.apache.spark.sql.sources.StringContains;
import org.apache.spark.sql.sources.StringEndsWith;
import org.apache.spark.sql.sources.StringStartsWith;

/**
 * Spark's pushed filters as JSON for the driver's Python ({@code
 * firn.spark.pushdown.from_jvm}), which prunes the planned splits with them: {@code
 * {"filter": "EqualTo", "column": ["region"], "value": "eu"}}, {@code "values"} for
 * {@code In}, {@code "child"} for {@code Not}, a date as {@code {"date": "2026-12-04"}}, a
 * binary as {@code {"binary": "<base64>"}}, a decimal as {@code {"decimal": "12.50"}}.
 *
 * <p>Only what Python takes exactly as its own data source API would give it: comparisons,
 * {@code IN}, {@code IS [NOT] NULL}, {@code NOT} and the string tests, on a top-level column,
 * with a string, boolean, integer, finite floating point, date, binary or decimal literal.
 * Anything else (a nested column, a timestamp literal, {@code OR}) is left out: the merge reader
 * never filters rows itself, Spark applies every filter after the scan, so a filter left out
 * only prunes less.
 */
final class PushedFilters {
  private static final ObjectMapper JSON = new ObjectMapper();

  /** A comparison's (or string test's) column and literal, by its class. */
  private static final Map<Class<?>, Function<Filter, Object[]>> COMPARISONS =
      Map.of(
          EqualTo.class, f -> new Object[] {((EqualTo) f).attribute(), ((EqualTo) f).value()},
          EqualNullSafe.class,
              f -> new Object[] {((EqualNullSafe) f).attribute(), ((EqualNullSafe) f).value()},
          GreaterThan.class,
              f -> new Object[] {((GreaterThan) f).attribute(), ((GreaterThan) f).value()},
          GreaterThanOrEqual.class,
              f -> new Object[] {
                ((GreaterThanOrEqual) f).attribute(), ((GreaterThanOrEqual) f).value()
              },
          LessThan.class, f -> new Object[] {((LessThan) f).attribute(), ((LessThan) f).value()},
          LessThanOrEqual.class,
              f -> new Object[] {((LessThanOrEqual) f).attribute(), ((LessThanOrEqual) f).value()},
          StringStartsWith.class,
              f -> new Object[] {((StringStartsWith) f).attribute(), ((StringStartsWith) f).value()},
          StringEndsWith.class,
              f -> new Object[] {((StringEndsWith) f).attribute(), ((StringEndsWith) f).value()},
          StringContains.class,
              f -> new Object[] {((StringContains) f).attribute(), ((StringContains) f).value()});

  private PushedFilters() {}

  /** A comparison's (or string test's) column and literal, or null for another filter. */
  static Object[] operands(Filter filter) {
    Function<Filter, Object[]> parts = COMPARISONS.get(filter.getClass());
    return parts == null ? null : parts.apply(filter);
  }

  /** The filters that have a JSON form (the ones pruning uses). */
  static List<Filter> usable(Filter[] filters) {
    List<Filter> usable = new ArrayList<>();
    for (Filter filter : filters) {
      if (json(filter) != null) {
        usable.add(filter);
      }
    }
    return usable;
  }

  /** The JSON array of {@code filters}' forms (every one must have one). */
  static String toJson(List<Filter> filters) {
    ArrayNode array = JSON.createArrayNode();
    for (Filter filter : filters) {
      array.add(json(filter));
    }
    return array.toString();
  }

  /** {@code filter}'s JSON form, or null when it has none. */
  static ObjectNode json(Filter filter) {
    if (filter instanceof Not not) {
      ObjectNode child = json(not.child());
      return child == null ? null : named("Not").set("child", child);
    }
    if (filter instanceof IsNull f) {
      return column("IsNull", f.attribute());
    }
    if (filter instanceof IsNotNull f) {
      return column("IsNotNull", f.attribute());
    }
    if (filter instanceof In f) {
      ObjectNode node = column("In", f.attribute());
      if (node == null) {
        return null;
      }
      ArrayNode values = node.putArray("values");
      for (Object value : f.values()) {
        if (!add(values, value)) {
          return null;
        }
      }
      return node;
    }
    Object[] attributeAndValue = operands(filter);
    if (attributeAndValue == null) {
      return null;
    }
    String attribute = (String) attributeAndValue[0];
    Object value = attributeAndValue[1];
    ObjectNode node = column(filter.getClass().getSimpleName(), attribute);
    if (node == null) {
      return null;
    }
    ArrayNode holder = JSON.createArrayNode();
    if (!add(holder, value)) {
      return null;
    }
    return node.set("value", holder.get(0));
  }

  private static ObjectNode named(String filter) {
    return JSON.createObjectNode().put("filter", filter);
  }

  /** A filter on a top-level column; null for a nested one (Spark names it {@code a.b}, and
   * quotes a name holding a dot in backticks). */
  private static ObjectNode column(String filter, String attribute) {
    if (attribute.contains(".") || attribute.contains("`")) {
      return null;
    }
    ObjectNode node = named(filter);
    node.putArray("column").add(attribute);
    return node;
  }

  /** Appends {@code value}'s JSON form; false when it has none. */
  private static boolean add(ArrayNode values, Object value) {
    if (value == null) {
      values.addNull();
    } else if (value instanceof String text) {
      values.add(text);
    } else if (value instanceof Boolean b) {
      values.add(b);
    } else if (value instanceof Long || value instanceof Integer || value instanceof Short
        || value instanceof Byte) {
      values.add(((Number) value).longValue());
    } else if (value instanceof Double || value instanceof Float) {
      double d = ((Number) value).doubleValue();
      if (Double.isNaN(d) || Double.isInfinite(d)) {
        return false;
      }
      values.add(d);
    } else if (value instanceof LocalDate date) {
      values.addObject().put("date", date.toString());
    } else if (value instanceof java.sql.Date date) {
      values.addObject().put("date", date.toLocalDate().toString());
    } else if (value instanceof byte[] bytes) {
      values.addObject().put("binary", Base64.getEncoder().encodeToString(bytes));
    } else if (value instanceof BigDecimal decimal) {
      // As text, not a JSON number: a number would come back a float, its digits and
      // scale lost.
      values.addObject().put("decimal", decimal.toPlainString());
    } else {
      return false;
    }
    return true;
  }
}
