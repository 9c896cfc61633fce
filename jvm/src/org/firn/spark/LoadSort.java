package org.firn.spark;

import java.io.IOException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import org.apache.spark.SparkEnv;
import org.apache.spark.TaskContext;
import org.apache.spark.memory.MemoryConsumer;
import org.apache.spark.memory.SparkOutOfMemoryError;
import org.apache.spark.memory.TaskMemoryManager;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.UnsafeProjection;
import org.apache.spark.sql.catalyst.expressions.UnsafeRow;
import org.apache.spark.sql.execution.UnsafeExternalRowSorter;
import org.apache.spark.sql.internal.SQLConf;
import org.apache.spark.sql.types.BinaryType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.StringType;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.Platform;
import org.apache.spark.unsafe.array.LongArray;
import org.apache.spark.unsafe.memory.MemoryBlock;
import org.apache.spark.unsafe.types.UTF8String;
import org.apache.spark.util.collection.unsafe.sort.PrefixComparators;
import scala.collection.Iterator;

/**
 * A load task's rows sorted by partition and key in the task, for a table whose key and
 * partition columns are strings, binaries or integers ({@link LoadTable#requiredOrdering}
 * then asks Spark for no order). The rows are copied into pages of the task's memory as they
 * come, while the task notes whether they come in order, how many bytes every string key
 * starts with, and each row's partition ({@link TaskPartitions}), whose number it keeps
 * beside the row. Once they are all in, rows
 * that came in order are written as they came, with no sort; the others are sorted by
 * reference, each partition on its own ({@link PrefixSort}: each row's {@link KeyPrefix}
 * beside its address), and written in that order, each row read a few rows ahead of its
 * write.
 *
 * <p>Why not Spark's sort: it sorts the same references, then reads the rows through them
 * one by one, each from anywhere in its pages, and waits on memory for each: loading 5M rows
 * of five columns in no order took 1.6 s more than in order, a quarter of its tasks' time in
 * that wait (a JFR profile, 2026-12-06). Read together, a few rows ahead, the waits overlap.
 * And its prefix of a string is the first 8 bytes, which keys such as zero-padded ids share
 * in runs of 10,000, so nearly every comparison reads both rows; here the prefix is the 8
 * bytes after those all the task's keys share.
 *
 * <p>Past {@code spark.firn.load.sortMemoryBytes} held, or when Spark's memory manager has
 * no more pages to give, the task hands its rows to Spark's external sorter, which spills to
 * disk, and sorts the rest that way.
 */
final class LoadSort extends MemoryConsumer {
  /** A Spark setting: bytes of rows a load task sorts in its own memory before it hands them
   * to Spark's sorter, which spills to disk. */
  static final String MEMORY_LIMIT = "spark.firn.load.sortMemoryBytes";
  /** Bytes before each row in a page: its length, then its partition's number ({@link
   * TaskPartitions}; 0 in a table without partitions). */
  static final int HEADER = 8;
  /** Rows read ahead of the one being written, when they are written in sorted order. */
  private static final int AHEAD = 16;

  /** Where a row handed over sorted goes. */
  interface RowSink {
    void accept(InternalRow row) throws IOException;
  }

  private final StructType schema;
  private final int[] key;
  /** The partitions of the rows held, or null: an unpartitioned table. */
  private final TaskPartitions partitions;
  private final int prefixColumn;
  private final DataType prefixType;
  /** Whether the prefix column is a string or a binary. */
  private final boolean text;
  private final UnsafeProjection unsafe;
  private final RowOrder order;
  private final long limit;
  private final List<MemoryBlock> pages = new ArrayList<>();
  private MemoryBlock page;
  private long pageUsed;
  /** Each held row's address (its page's index, high 32 bits; its offset in the page). */
  private LongArray addresses;
  private int count;
  private long held;
  /** Whether every row so far came in key order (a key twice counts as in order: the writer
   * names it). */
  private boolean inOrder = true;
  /** The first string key's bytes, how many of them every key starts with, and whether a
   * key was null. */
  private byte[] reference;
  private int shared;
  private boolean sawNull;
  /** The row held last, as {@link #noteKey} reads it. */
  private final UnsafeRow previous;
  /** Spark's sorter, once the rows outgrew the task's own sort; null until then. */
  private UnsafeExternalRowSorter spilling;
  /** Where {@link #touch} leaves what it read, so that the reads are not optimised away. */
  private long touched;

  /** Whether a load of {@code plan}'s rows sorts in its tasks: a table whose key and
   * partition columns are strings, binaries or integers (the loader takes no binary
   * partition column). */
  static boolean sortsInTask(LoadPlan plan) {
    for (int ordinal : ordering(plan)) {
      DataType t = plan.schema().fields()[ordinal].dataType();
      if (!isText(t) && !KeyColumns.integral(t)) {
        return false;
      }
    }
    return true;
  }

  /** The columns rows are sorted by: the partition columns, then the key's. */
  static int[] ordering(LoadPlan plan) {
    int[] out = Arrays.copyOf(plan.partition(), plan.partition().length + plan.key().length);
    System.arraycopy(plan.key(), 0, out, plan.partition().length, plan.key().length);
    return out;
  }

  /** The column the sort prefix comes from: the key's first that is not a partition column
   * (in a partition, the others are all one value). */
  private static int prefixColumn(LoadPlan plan) {
    for (int k : plan.key()) {
      if (Arrays.stream(plan.partition()).noneMatch(p -> p == k)) {
        return k;
      }
    }
    return plan.key()[0];
  }

  static boolean isText(DataType t) {
    return t instanceof StringType || t instanceof BinaryType;
  }

  LoadSort(LoadPlan plan) {
    this(plan, TaskContext.get().taskMemoryManager());
  }

  private LoadSort(LoadPlan plan, TaskMemoryManager memory) {
    super(memory, memory.pageSizeBytes(), memory.getTungstenMemoryMode());
    this.schema = plan.schema();
    this.key = plan.key();
    int[] columns = ordering(plan);
    this.order = new RowOrder(schema.size(), columns, typesOf(schema, columns));
    this.partitions = plan.partition().length == 0 ? null : new TaskPartitions(schema, plan.partition());
    this.prefixColumn = prefixColumn(plan);
    this.prefixType = schema.fields()[prefixColumn].dataType();
    this.text = isText(prefixType);
    this.unsafe = UnsafeProjection.create(schema);
    this.previous = new UnsafeRow(schema.size());
    this.limit = memoryLimit(SQLConf.get().getConfString(MEMORY_LIMIT, ""));
  }

  static DataType[] typesOf(StructType schema, int[] columns) {
    DataType[] out = new DataType[columns.length];
    for (int i = 0; i < columns.length; i++) {
      out[i] = schema.fields()[columns[i]].dataType();
    }
    return out;
  }

  private static long memoryLimit(String setting) {
    if (setting.isBlank()) {
      return Long.MAX_VALUE;
    }
    try {
      return Long.parseLong(setting.trim());
    } catch (NumberFormatException e) {
      throw new IllegalArgumentException(MEMORY_LIMIT + " must be a number of bytes, got " + setting, e);
    }
  }

  /** Adds a row (the table's columns in order); copied, so the caller may reuse it. */
  void add(InternalRow row) throws IOException {
    UnsafeRow given = row instanceof UnsafeRow u ? u : unsafe.apply(row);
    if (spilling != null) {
      spilling.insertRow(given);
      return;
    }
    int partition = noteKey(given);
    if (!hold(given, partition)) {
      handToSpark();
      spilling.insertRow(given);
    }
  }

  /** Notes the row's key; returns its partition's number. */
  private int noteKey(UnsafeRow row) {
    if (row.isNullAt(prefixColumn)) {
      sawNull = true;
    } else if (text) {
      UTF8String k = row.getUTF8String(prefixColumn);
      if (reference == null) {
        reference = k.getBytes();
        shared = reference.length;
      } else {
        shared = common(reference, shared, k);
      }
    }
    UnsafeRow previous = count == 0 ? null : pointAt(this.previous, addresses.get(count - 1));
    if (inOrder && previous != null) {
      inOrder = order.compare(previous, row) <= 0;
    }
    return partitions == null ? 0 : partitions.numberOf(row);
  }

  /** Copies the row into the task's pages; false if it may not (past the limit, or Spark
   * has no page to give). */
  private boolean hold(UnsafeRow row, int partition) {
    long size = HEADER + row.getSizeInBytes();
    if (held + size > limit) {
      return false;
    }
    try {
      if (page == null || pageUsed + size > page.size()) {
        page = allocatePage(Math.max(size, taskMemoryManager.pageSizeBytes()));
        pages.add(page);
        pageUsed = 0;
      }
      if (addresses == null || count == addresses.size()) {
        LongArray grown = allocateArray(addresses == null ? 4096 : addresses.size() * 2L);
        if (addresses != null) {
          Platform.copyMemory(
              addresses.getBaseObject(), addresses.getBaseOffset(), grown.getBaseObject(), grown.getBaseOffset(), count * 8L);
          freeArray(addresses);
        }
        addresses = grown;
      }
    } catch (SparkOutOfMemoryError e) {
      return false;
    }
    Object base = page.getBaseObject();
    long at = page.getBaseOffset() + pageUsed;
    Platform.putInt(base, at, row.getSizeInBytes());
    Platform.putInt(base, at + 4, partition);
    Platform.copyMemory(row.getBaseObject(), row.getBaseOffset(), base, at + HEADER, row.getSizeInBytes());
    addresses.set(count++, (long) (pages.size() - 1) << 32 | pageUsed);
    pageUsed += size;
    held += size;
    return true;
  }

  static int page(long address) {
    return (int) (address >>> 32);
  }

  static long offset(long address) {
    return address & 0xFFFFFFFFL;
  }

  /** Hands every row held to Spark's external sorter and frees them. */
  private void handToSpark() throws IOException {
    int[] columns = order.ordinals();
    // Spark's prefix of the first column sorted by (its usual one: the bytes all keys share
    // are not known until the last row).
    spilling =
        UnsafeExternalRowSorter.createWithRecordComparator(
            schema,
            () -> new RowOrder(schema.size(), columns, typesOf(schema, columns)),
            PrefixComparators.BINARY,
            new KeyPrefix(columns[0], schema.fields()[columns[0]].dataType(), 0),
            SparkEnv.get().memoryManager().pageSizeBytes(),
            false);
    UnsafeRow row = new UnsafeRow(schema.size());
    for (int i = 0; i < count; i++) {
      long address = addresses.get(i);
      spilling.insertRow(pointAt(row, address));
      boolean lastOfPage = i + 1 == count || page(addresses.get(i + 1)) != page(address);
      if (lastOfPage) {
        // Each page freed once its rows are in, for the sorter to take.
        freePage(pages.get(page(address)));
        pages.set(page(address), null);
      }
    }
    freeHeldRows();
  }

  /** Whether {@code rows} rows or more are held, all in key order (none handed to Spark's
   * sorter). */
  boolean cameInOrder(int rows) {
    return spilling == null && inOrder && count >= rows;
  }

  /** Writes the rows added, in key order, to {@code sink}, then frees them; rows added after
   * that start afresh. */
  void writeSorted(RowSink sink) throws IOException {
    try {
      if (spilling == null && inOrder) {
        UnsafeRow row = new UnsafeRow(schema.size());
        for (int i = 0; i < count; i++) {
          sink.accept(pointAt(row, addresses.get(i)));
        }
        return;
      }
      if (spilling == null && sortHeld(sink)) {
        return;
      }
      if (spilling == null) {
        handToSpark(); // no memory to sort them in: Spark's sorter, which spills
      }
      Iterator<InternalRow> rows = spilling.sort();
      while (rows.hasNext()) {
        sink.accept(rows.next());
      }
    } finally {
      release();
    }
  }

  /**
   * Writes the rows held, sorted by reference ({@link PrefixSort}), to {@code sink}; false
   * (nothing written) if the task's memory has no room for the references.
   */
  private boolean sortHeld(RowSink sink) throws IOException {
    long room = 4L * 8 * count;
    long granted = acquireMemory(room);
    try {
      if (granted < room) {
        return false;
      }
      KeyPrefix prefix = new KeyPrefix(prefixColumn, prefixType, text ? shared : 0);
      UnsafeRow row = new UnsafeRow(schema.size());
      long[] keys = new long[count];
      long[] at = new long[count];
      // Each partition's rows together, the partitions in order (arrival order within one).
      UnsafeRow left = new UnsafeRow(schema.size());
      UnsafeRow right = new UnsafeRow(schema.size());
      int[] starts =
          partitions == null
              ? new int[] {0, count}
              : partitions.starts(count, i -> partitionAt(addresses.get(i)));
      int[] next = Arrays.copyOf(starts, starts.length);
      for (int i = 0; i < count; i++) {
        int slot = partitions == null ? i : next[partitions.rankOf(partitionAt(addresses.get(i)))]++;
        at[slot] = addresses.get(i);
        keys[slot] = prefix.of(pointAt(row, at[slot]));
      }
      long[] keysSpare = new long[count];
      long[] atSpare = new long[count];
      // An integer key alone is its prefix: rows of equal prefix have equal keys.
      boolean ties = text || key.length > 1 || sawNull;
      for (int p = 0; p + 1 < starts.length; p++) {
        PrefixSort.sort(keys, at, keysSpare, atSpare, starts[p], starts[p + 1]);
        if (ties) {
          PrefixSort.orderTies(
              keys, at, starts[p], starts[p + 1], (l, r) -> order.compare(pointAt(left, l), pointAt(right, r)));
        }
      }
      for (int i = 0; i < count; i++) {
        if (i % AHEAD == 0) {
          touch(at, i + AHEAD, Math.min(count, i + 2 * AHEAD));
        }
        sink.accept(pointAt(row, at[i]));
      }
      return true;
    } finally {
      freeMemory(granted);
    }
  }

  /**
   * Reads the first two cache lines of the rows at {@code at[from..to)}, all at once: rows
   * read in key order lie anywhere in the pages, and each would wait on memory in turn; read
   * together a few rows ahead, their waits overlap, and the rows are in the cache when
   * written. (Spark's sorter, which reads them one by one, spent a quarter of a 5M-row load
   * in that wait; read so, each task's 2.5M rows took 1.7-1.8 s to write in sorted order, as
   * long as the same rows in the order they came: throwaway timings, 2026-12-06.)
   */
  private void touch(long[] at, int from, int to) {
    long sum = 0;
    for (int i = from; i < to; i++) {
      MemoryBlock block = pages.get(page(at[i]));
      long o = offset(at[i]);
      sum += Platform.getLong(block.getBaseObject(), block.getBaseOffset() + o);
      if (o + 72 <= block.size()) {
        sum += Platform.getLong(block.getBaseObject(), block.getBaseOffset() + o + 64);
      }
    }
    touched += sum;
  }

  /** The partition number of the row held at {@code address}. */
  private int partitionAt(long address) {
    MemoryBlock block = pages.get(page(address));
    return Platform.getInt(block.getBaseObject(), block.getBaseOffset() + offset(address) + 4);
  }

  private UnsafeRow pointAt(UnsafeRow row, long address) {
    MemoryBlock block = pages.get(page(address));
    long at = block.getBaseOffset() + offset(address);
    row.pointTo(block.getBaseObject(), at + HEADER, Platform.getInt(block.getBaseObject(), at));
    return row;
  }

  /** Frees every row held (the task's end frees them too; this frees them sooner). */
  void release() {
    freeHeldRows();
    if (spilling != null) {
      spilling.cleanupResources();
      spilling = null;
    }
  }

  /** Frees the rows held in arrival order, and forgets what was noted of them. */
  private void freeHeldRows() {
    for (MemoryBlock block : pages) {
      if (block != null) {
        freePage(block);
      }
    }
    pages.clear();
    page = null;
    if (addresses != null) {
      freeArray(addresses);
      addresses = null;
    }
    count = 0;
    held = 0;
    inOrder = true;
    reference = null;
    shared = 0;
    sawNull = false;
    if (partitions != null) {
      partitions.clear();
    }
  }

  /** The rows held cannot be spilled: a task short of memory hands them to Spark's sorter
   * when it next adds a row. */
  @Override
  public long spill(long size, MemoryConsumer trigger) {
    return 0;
  }

  /** How many of {@code reference}'s first {@code upTo} bytes {@code k} starts with. */
  private static int common(byte[] reference, int upTo, UTF8String k) {
    int n = Math.min(upTo, k.numBytes());
    Object base = k.getBaseObject();
    long offset = k.getBaseOffset();
    int i = 0;
    while (i + 8 <= n
        && Platform.getLong(reference, Platform.BYTE_ARRAY_OFFSET + i) == Platform.getLong(base, offset + i)) {
      i += 8;
    }
    while (i < n && reference[i] == Platform.getByte(base, offset + i)) {
      i++;
    }
    return i;
  }
}
