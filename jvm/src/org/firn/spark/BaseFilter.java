package org.firn.spark;

import java.util.HashSet;
import java.util.Set;
import java.util.function.Function;
import org.apache.parquet.filter2.predicate.FilterApi;
import org.apache.parquet.filter2.predicate.FilterPredicate;
import org.apache.parquet.filter2.predicate.Operators.Column;
import org.apache.parquet.filter2.predicate.Operators.SupportsLtGt;
import org.apache.parquet.io.api.Binary;
import org.apache.spark.sql.sources.EqualTo;
import org.apache.spark.sql.sources.Filter;
import org.apache.spark.sql.sources.GreaterThan;
import org.apache.spark.sql.sources.GreaterThanOrEqual;
import org.apache.spark.sql.sources.In;
import org.apache.spark.sql.sources.LessThan;
import org.apache.spark.sql.sources.LessThanOrEqual;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;

/**
 * Spark's pushed filters as a Parquet predicate on a split's base files, so that their row
 * groups (and pages, where a file has a column index) that no row can pass are never decoded:
 * a base file is in key order, so a lookup by key keeps one row group of each file.
 *
 * <p>Dropping a base row that fails a filter never changes what passes it: the row is either
 * returned, and Spark drops it, or replaced by a change, which is read whatever the filter.
 * Change files are never filtered (a change row that fails the filter may still replace a base
 * row that passes). Only comparisons and {@code IN} on a top-level integer, long, string or
 * binary column with a literal of its type are taken; the rest prune nothing, and Spark applies
 * every filter to the rows the reader returns.
 */
final class BaseFilter {
  /** The filters taken as Parquet's comparisons (the string tests are not: Parquet has none). */
  private static final Set<Class<?>> COMPARISONS =
      Set.of(
          EqualTo.class,
          GreaterThan.class,
          GreaterThanOrEqual.class,
          LessThan.class,
          LessThanOrEqual.class);

  private BaseFilter() {}

  /** The conjunction of the filters that can be taken on {@code schema}'s columns, or null. */
  static FilterPredicate of(Filter[] filters, StructType schema) {
    FilterPredicate all = null;
    for (Filter filter : filters) {
      FilterPredicate one = one(filter, schema);
      if (one != null) {
        all = all == null ? one : FilterApi.and(all, one);
      }
    }
    return all;
  }

  private static FilterPredicate one(Filter filter, StructType schema) {
    if (filter instanceof In in) {
      return in(in.attribute(), in.values(), schema);
    }
    Object[] operands =
        COMPARISONS.contains(filter.getClass()) ? PushedFilters.operands(filter) : null;
    if (operands == null) {
      return null;
    }
    String column = (String) operands[0];
    DataType type = typeOf(column, schema);
    if (type == null || !fits(type, operands[1])) {
      return null;
    }
    if (type == DataTypes.LongType) {
      return compare(filter, FilterApi.longColumn(column), ((Number) operands[1]).longValue());
    }
    if (type == DataTypes.IntegerType) {
      return compare(filter, FilterApi.intColumn(column), ((Number) operands[1]).intValue());
    }
    return compare(filter, FilterApi.binaryColumn(column), binary(operands[1]));
  }

  /** A string's UTF-8 or a binary's bytes, as Parquet compares both (unsigned, by byte). */
  private static Binary binary(Object literal) {
    return literal instanceof String text
        ? Binary.fromString(text)
        : Binary.fromConstantByteArray((byte[]) literal);
  }

  /** {@code filter} (one of {@link #COMPARISONS}) as Parquet's predicate on {@code column}. */
  private static <T extends Comparable<T>, C extends Column<T> & SupportsLtGt>
      FilterPredicate compare(Filter filter, C column, T value) {
    if (filter instanceof EqualTo) {
      return FilterApi.eq(column, value);
    } else if (filter instanceof GreaterThan) {
      return FilterApi.gt(column, value);
    } else if (filter instanceof GreaterThanOrEqual) {
      return FilterApi.gtEq(column, value);
    } else if (filter instanceof LessThan) {
      return FilterApi.lt(column, value);
    }
    return FilterApi.ltEq(column, value);
  }

  /** {@code column IN values}: a null among them matches no row, so it is left out. */
  private static FilterPredicate in(String column, Object[] values, StructType schema) {
    DataType type = typeOf(column, schema);
    if (type == null) {
      return null;
    }
    Set<Object> literals = new HashSet<>();
    for (Object value : values) {
      if (value != null && !fits(type, value)) {
        return null;
      }
      if (value != null) {
        literals.add(value);
      }
    }
    if (literals.isEmpty()) {
      return null; // IN () or IN (NULL): Spark passes no row; prune none, all the same
    }
    if (type == DataTypes.LongType) {
      return FilterApi.in(
          FilterApi.longColumn(column), of(literals, v -> ((Number) v).longValue()));
    }
    if (type == DataTypes.IntegerType) {
      return FilterApi.in(FilterApi.intColumn(column), of(literals, v -> ((Number) v).intValue()));
    }
    return FilterApi.in(FilterApi.binaryColumn(column), of(literals, BaseFilter::binary));
  }

  private static <T> Set<T> of(Set<Object> literals, Function<Object, T> convert) {
    Set<T> converted = new HashSet<>();
    for (Object literal : literals) {
      converted.add(convert.apply(literal));
    }
    return converted;
  }

  /** The type of a top-level column whose name Parquet's column paths take as it is (no
   * dot), if it is one this class filters on; else null. */
  private static DataType typeOf(String column, StructType schema) {
    if (column.contains(".") || !Set.of(schema.fieldNames()).contains(column)) {
      return null;
    }
    DataType type = schema.apply(column).dataType();
    boolean taken =
        type == DataTypes.LongType
            || type == DataTypes.IntegerType
            || type == DataTypes.StringType
            || type == DataTypes.BinaryType;
    return taken ? type : null;
  }

  /** Whether {@code value} is a literal of {@code type} exactly (a long literal on an integer
   * column outside its range, say, is not taken). */
  private static boolean fits(DataType type, Object value) {
    if (type == DataTypes.StringType) {
      return value instanceof String;
    }
    if (type == DataTypes.BinaryType) {
      return value instanceof byte[];
    }
    if (type == DataTypes.LongType) {
      return value instanceof Long || value instanceof Integer;
    }
    return value instanceof Integer;
  }
}
