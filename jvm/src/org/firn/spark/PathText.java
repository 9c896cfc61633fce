package org.firn.spark;

import java.nio.charset.StandardCharsets;
import java.time.LocalDate;
import org.apache.spark.sql.types.DateType;
import org.apache.spark.sql.types.StructField;

/** A partition's directory name, Hive-style, as {@code firn.model.values.partition_path}
 * writes it: {@code column=value}, each escaped for one path component. */
final class PathText {
  private PathText() {}

  /** A partition value's text: a date as {@code YYYY-MM-DD}, other values as they print. */
  static String of(Object value, StructField field) {
    if (field.dataType() instanceof DateType) {
      return LocalDate.ofEpochDay((Long) value).toString();
    }
    return String.valueOf(value);
  }

  /** Every byte but ASCII letters, digits and {@code _.-~} percent-escaped (Python's
   * {@code quote(text, safe="")}). */
  static String escape(String text) {
    StringBuilder out = new StringBuilder(text.length());
    for (byte b : text.getBytes(StandardCharsets.UTF_8)) {
      char c = (char) (b & 0xFF);
      if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')
          || c == '_' || c == '.' || c == '-' || c == '~') {
        out.append(c);
      } else {
        out.append('%').append(Character.toUpperCase(Character.forDigit(c >> 4, 16)))
            .append(Character.toUpperCase(Character.forDigit(c & 15, 16)));
      }
    }
    return out.toString();
  }
}
