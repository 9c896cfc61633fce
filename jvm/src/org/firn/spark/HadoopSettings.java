package org.firn.spark;

import java.io.Serializable;
import java.util.HashMap;
import java.util.Map;
import java.util.Objects;
import org.apache.hadoop.conf.Configuration;
import org.apache.spark.sql.SparkSession;

/**
 * The session's Hadoop settings that differ from Hadoop's defaults, taken on the driver and
 * applied on the executors: an object store's connector settings ({@code
 * spark.hadoop.fs.s3a.endpoint}, credentials, path-style access) reach the merge reader's and
 * the loader's file systems as they reach Spark's own file sources, which carry the session's
 * configuration to their tasks the same way. Only the differences travel: a whole Hadoop
 * configuration is hundreds of default entries per task.
 */
final class HadoopSettings implements Serializable {
  private static final long serialVersionUID = 1L;

  private final HashMap<String, String> changed;

  private HadoopSettings(HashMap<String, String> changed) {
    this.changed = changed;
  }

  /** The active session's Hadoop configuration, as Spark's file sources build it. */
  static HadoopSettings ofSession() {
    Configuration session = SparkSession.active().sessionState().newHadoopConf();
    Configuration defaults = new Configuration();
    HashMap<String, String> changed = new HashMap<>();
    for (Map.Entry<String, String> entry : session) {
      String key = entry.getKey();
      if (!Objects.equals(entry.getValue(), defaults.getRaw(key))) {
        changed.put(key, entry.getValue());
      }
    }
    return new HadoopSettings(changed);
  }

  /** {@code conf} with the session's settings set on it; returns it. */
  Configuration applyTo(Configuration conf) {
    changed.forEach(conf::set);
    return conf;
  }
}
