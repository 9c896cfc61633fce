package org.firn.spark;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.lang.ref.SoftReference;
import java.lang.reflect.Field;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Map;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.mapred.FileSplit;
import org.apache.hadoop.mapreduce.TaskAttemptID;
import org.apache.hadoop.mapreduce.task.TaskAttemptContextImpl;
import org.apache.parquet.HadoopReadOptions;
import org.apache.parquet.filter2.predicate.FilterPredicate;
import org.apache.parquet.hadoop.ParquetFileReader;
import org.apache.parquet.hadoop.ParquetInputFormat;
import org.apache.parquet.hadoop.metadata.BlockMetaData;
import org.apache.parquet.hadoop.metadata.ParquetMetadata;
import org.apache.parquet.hadoop.util.HadoopInputFile;
import org.apache.parquet.io.SeekableInputStream;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.UnsafeProjection;
import org.apache.spark.sql.catalyst.expressions.UnsafeRow;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.execution.datasources.parquet.ParquetFileFormat;
import org.apache.spark.sql.execution.datasources.parquet.ParquetReadSupport;
import org.apache.spark.sql.execution.datasources.parquet.VectorizedParquetRecordReader;
import org.apache.spark.sql.execution.vectorized.OnHeapColumnVector;
import org.apache.spark.sql.execution.vectorized.WritableColumnVector;
import org.apache.spark.sql.internal.SQLConf;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.DecimalType;
import org.apache.spark.sql.types.BinaryType;
import org.apache.spark.sql.types.StringType;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarBatch;
import org.apache.spark.unsafe.Platform;
import org.apache.spark.unsafe.hash.Murmur3_x86_32;
import org.apache.spark.unsafe.types.UTF8String;
import scala.Option;

/**
 * The merged rows of one split, by Firn's merge rule: among the change rows of a key whose
 * seq is above its partition's max_merged_seq, the greatest LSN {@code (seq, _ord)} wins; an
 * upsert gives its row, a delete gives nothing; a key without such a row keeps its base row.
 *
 * <p>How: the change files are read first (they are the small side) and each key's winner
 * kept in a hash map, an upsert's row left in its file's last batch (the file's reader kept
 * open) or copied when the reader moves on; then the base files are streamed
 * with Spark's vectorised Parquet reader, batch by batch, each without the rows whose keys
 * have a winner ({@link SelectedColumnVector}: nothing copied); then the winning upserts.
 * The key is one integer, date, timestamp, string, binary or decimal column. A string's
 * (or binary's) changes are numbered as they are first read ({@link StringIds}), and the
 * winners' slots are those numbers; the base walk compares each base key where it lies
 * with the winners' keys held as words, in the byte order Firn sorts them by ({@link
 * SortedBytes}). A decimal goes the same way in a
 * form of 16 bytes whose byte order is its numeric order ({@link DecimalKeys}).
 *
 * <p>A base file's rows are in key order (loads and compactions write them so), so whether
 * a base key has a winner is found by walking the winners' sorted keys beside the file, not
 * by probing the hash map: a probe of a map of a few hundred thousand keys misses the CPU's
 * caches twice, and 5M such probes were most of a read's time.
 */
final class SplitReader implements PartitionReader<ColumnarBatch> {
  static final String SEQ = "_seq";
  static final String ORD = "_ord";
  private static final int BATCH_ROWS = 4096;

  /**
   * Rows of a change batch whose map entries are loaded before they are claimed: their
   * cache lines (one each) stay well within a core's L2 until the claims reach them.
   */
  private static final int CHUNK_ROWS = 256;

  /** Most insert files' readers a split keeps open (each holds a file handle). */
  private static final int MOST_HELD = 256;
  /** Most rows those readers' batches hold in all: an insert file of at most {@link
   * #WHOLE_FILE_ROWS} rows is read as one batch (so none of its winners is copied), and
   * the batches held stay within this many rows. */
  private static final long MOST_HELD_ROWS = 1L << 20;
  private static final int WHOLE_FILE_ROWS = 1 << 15;
  /** Hadoop's defaults, parsed once per executor JVM and copied per reader. */
  private static final Configuration DEFAULTS = new Configuration();
  private static final long[] NONE_HIDDEN = new long[0];
  private static final StructType VECTOR_SCHEMA =
      new StructType().add("pos", DataTypes.LongType, false);

  private final ReadPlan.Split split;
  /** The columns returned. */
  private final StructType schema;
  /** What a change's data is read as: the returned columns, then the key if not among them. */
  private final StructType dataSchema;
  private final int keyColumn;
  /** What a base file is read as: {@code dataSchema}, or without the key when nothing in the
   * split changed (a compacted split: no key is looked up, so none is decoded unasked); with
   * {@code baseFilter}, then each row's index in its file. */
  private final StructType baseSchema;
  /** Spark's filters as Parquet's predicate on base files ({@link BaseFilter}), or null. */
  private final FilterPredicate baseFilter;
  /** With {@code baseFilter}: where a base batch's rows' indexes in their file are (the row
   * groups the filter skips leave gaps that a deletion vector's positions count). */
  private final int rowIndexColumn;
  /** Whether the split has change files above its base: if not, no base row is looked up. */
  private final boolean merging;
  /** What an insert file is read as: the data columns, then _ord and _seq. */
  private final StructType insertSchema;
  /** What a delete file is read as: the key, _ord and _seq. */
  private final StructType deleteSchema;
  private final UnsafeProjection copy;
  private final Configuration conf;
  /** A task context per schema read (each carries a copy of the configuration). */
  private final Map<StructType, TaskAttemptContextImpl> contexts = new IdentityHashMap<>();

  /** A chunk's keys, read once for the load ahead and for the claims. */
  private final long[] chunkKeys = new long[CHUNK_ROWS];
  /** A chunk's string (or binary) keys: where each one's bytes lie, and their hashes. */
  private final Object[] chunkBases = new Object[CHUNK_ROWS];
  private final long[] chunkOffsets = new long[CHUNK_ROWS];
  private final int[] chunkLengths = new int[CHUNK_ROWS];
  private final int[] chunkHashes = new int[CHUNK_ROWS];

  /** Whether the key is a string or binary column, compared, hashed and numbered by its bytes
   * (as Firn orders and hashes both), or a decimal, by its {@link DecimalKeys} form: its
   * changed keys are numbered ({@link StringIds}). */
  private final boolean bytesKey;
  /** A decimal key's type (null for any other key): its values are compared, numbered and
   * hashed in their {@link DecimalKeys} form, written into {@code decimalBytes}. */
  private final DecimalType decimalKey;
  /** Decimal keys' forms: a chunk's, or one base row's at the start. */
  private final byte[] decimalBytes = new byte[CHUNK_ROWS * DecimalKeys.WIDTH];
  /** A string (or binary) key's number, by the key; sized for the split's change rows. */
  private StringIds ids;

  /** Whether the split's changes have been read (their winners sorted and listed). */
  private boolean merged;
  private SortedKeys changed;
  private SortedBytes changedStrings;
  /** Insert files' readers kept open: their last batch holds winning upserts. */
  private final List<FileReader> held = new ArrayList<>();
  private long heldRows;
  /** The winning upserts still to send: held rows by reader, then copied rows. */
  private int[][] heldUpserts;
  private int heldSent;
  private InternalRow[] upserts;
  private int upsertsSent;
  private int baseFile = -1;
  private FileReader base;
  /** The rows of the base file being read that its deletion vector hides, ascending. */
  private long[] hidden = NONE_HIDDEN;
  private int hiddenCursor;
  /** The position in its file of the first row of the next base batch (without {@code
   * baseFilter}: every row is read). */
  private long position;
  /** With {@code baseFilter}: the base batch's rows' positions in their file. */
  private ColumnVector rowIndexes;
  /** The positions of a base batch's rows passed on (the batch is consumed before the next). */
  private final int[] kept = new int[BATCH_ROWS];
  private ColumnarBatch current;

  SplitReader(
      ReadPlan.Split split,
      StructType schema,
      StructType dataSchema,
      String key,
      FilterPredicate baseFilter,
      HadoopSettings hadoop) {
    this.conf = readerConf(hadoop);
    this.split = split;
    this.schema = schema;
    this.dataSchema = dataSchema;
    this.keyColumn = dataSchema.fieldIndex(key);
    DataType keyType = dataSchema.apply(key).dataType();
    this.decimalKey = keyType instanceof DecimalType decimal ? decimal : null;
    this.bytesKey =
        keyType instanceof StringType || keyType instanceof BinaryType || decimalKey != null;
    this.merging = split.changes().length > 0;
    StructType base =
        merging ? dataSchema : new StructType(Arrays.copyOf(dataSchema.fields(), schema.size()));
    this.baseFilter = baseFilter;
    // Spark's reader fills this column with each row's index in its file (nullable: a
    // column the file lacks must be, or the reader refuses it as missing).
    this.baseSchema =
        baseFilter == null
            ? base
            : base.add(ParquetFileFormat.ROW_INDEX_TEMPORARY_COLUMN_NAME(), DataTypes.LongType, true);
    this.rowIndexColumn = baseFilter == null ? -1 : base.size();
    if (baseFilter != null) {
      contexts.put(baseSchema, filteredContext(baseSchema, baseFilter));
    }
    // A producer's file has no _seq: its rows take the file's (the column reads as nulls).
    this.insertSchema =
        dataSchema.add(ORD, DataTypes.LongType, false).add(SEQ, DataTypes.LongType, true);
    this.deleteSchema =
        new StructType()
            .add(dataSchema.apply(key))
            .add(ORD, DataTypes.LongType, false)
            .add(SEQ, DataTypes.LongType, true);
    this.copy = UnsafeProjection.create(insertSchema);
  }

  @Override
  public boolean next() throws IOException {
    if (!merged) {
      Winners winners = readChanges();
      if (bytesKey) {
        changedStrings = ids.sorted(winners.keys, winners.size);
      } else {
        changed = new SortedKeys(Arrays.copyOf(winners.keys, winners.size));
      }
      upserts = winners.upserts();
      heldUpserts = winners.heldUpserts(held.size());
      winners.release();
      merged = true;
    }
    while (base != null || baseFile + 1 < split.base().length) {
      if (base == null) {
        ReadPlan.BaseFile file = split.base()[++baseFile];
        base = open(file.file(), baseSchema);
        checkRows(base, file.file(), file.rows());
        if (bytesKey) {
          changedStrings.restart();
        } else {
          changed.restart();
        }
        hidden = file.vector() == null ? NONE_HIDDEN : positions(file);
        hiddenCursor = 0;
        position = 0;
      }
      if (!base.nextBatch()) {
        base.close();
        base = null;
        continue;
      }
      ColumnarBatch rows = base.resultBatch();
      int n = rows.numRows();
      rowIndexes = baseFilter == null ? null : rows.column(rowIndexColumn);
      int live = merging ? keep(rows.column(keyColumn), n) : visible(n);
      position += n;
      if (live == 0) {
        continue;
      }
      ColumnVector[] columns = new ColumnVector[schema.size()];
      for (int c = 0; c < columns.length; c++) {
        columns[c] = live == n ? rows.column(c) : new SelectedColumnVector(rows.column(c), kept);
      }
      current = new ColumnarBatch(columns, live);
      return true;
    }
    while (heldSent < heldUpserts.length) {
      int[] rows = heldUpserts[heldSent];
      ColumnarBatch batch = held.get(heldSent++).resultBatch();
      if (rows.length == 0) {
        continue;
      }
      ColumnVector[] columns = new ColumnVector[schema.size()];
      for (int c = 0; c < columns.length; c++) {
        columns[c] = new SelectedColumnVector(batch.column(c), rows);
      }
      current = new ColumnarBatch(columns, rows.length);
      return true;
    }
    if (upsertsSent < upserts.length) {
      int count = Math.min(BATCH_ROWS, upserts.length - upsertsSent);
      ColumnVector[] columns = new ColumnVector[schema.size()];
      for (int c = 0; c < columns.length; c++) {
        columns[c] =
            new RowsColumnVector(upserts, upsertsSent, count, c, schema.fields()[c].dataType());
      }
      upsertsSent += count;
      current = new ColumnarBatch(columns, count);
      return true;
    }
    return false;
  }

  /**
   * Fills {@code kept} with the positions of the batch's rows that are live (not hidden by
   * the file's deletion vector) and whose key no change decides.
   */
  private int keep(ColumnVector keys, int n) {
    if (hidden.length > 0) {
      return keepVisible(keys, n);
    }
    int live = 0;
    byte[] bytes = bytesKey ? InPlaceStrings.bytes(keys) : null;
    if (decimalKey != null) {
      for (int i = 0; i < n; i++) {
        DecimalKeys.write(keys, decimalKey, bytes, i, decimalBytes, 0);
        if (!changedStrings.holds(decimalBytes, 0, DecimalKeys.WIDTH)) {
          kept[live++] = i;
        }
      }
    } else if (bytes != null) {
      WritableColumnVector strings = (WritableColumnVector) keys;
      for (int i = 0; i < n; i++) {
        int at = strings.getArrayOffset(i);
        if (!changedStrings.holds(bytes, at, strings.getArrayLength(i))) {
          kept[live++] = i;
        }
      }
    } else if (bytesKey) {
      for (int i = 0; i < n; i++) {
        if (!changedStrings.holds(keys.getUTF8String(i))) {
          kept[live++] = i;
        }
      }
    } else if (keys.dataType() == DataTypes.LongType) {
      for (int i = 0; i < n; i++) {
        if (!changed.holds(keys.getLong(i))) {
          kept[live++] = i;
        }
      }
    } else {
      for (int i = 0; i < n; i++) {
        if (!changed.holds(keyAt(keys, i))) {
          kept[live++] = i;
        }
      }
    }
    return live;
  }

  /** {@link #keep} of a split with no changes: the batch's rows its deletion vector does not
   * hide (all {@code n}, {@code kept} untouched, when it hides none). */
  private int visible(int n) {
    if (hidden.length == 0) {
      return n;
    }
    int live = 0;
    for (int i = 0; i < n; i++) {
      long at = positionOf(i);
      while (hiddenCursor < hidden.length && hidden[hiddenCursor] < at) {
        hiddenCursor++;
      }
      if (hiddenCursor < hidden.length && hidden[hiddenCursor] == at) {
        continue;
      }
      kept[live++] = i;
    }
    return live;
  }

  private int keepVisible(ColumnVector keys, int n) {
    int live = 0;
    byte[] bytes = decimalKey != null ? InPlaceStrings.bytes(keys) : null;
    for (int i = 0; i < n; i++) {
      long at = positionOf(i);
      while (hiddenCursor < hidden.length && hidden[hiddenCursor] < at) {
        hiddenCursor++;
      }
      if (hiddenCursor < hidden.length && hidden[hiddenCursor] == at) {
        continue;
      }
      boolean decided;
      if (decimalKey != null) {
        DecimalKeys.write(keys, decimalKey, bytes, i, decimalBytes, 0);
        decided = changedStrings.holds(decimalBytes, 0, DecimalKeys.WIDTH);
      } else {
        decided =
            bytesKey ? changedStrings.holds(keys.getUTF8String(i)) : changed.holds(keyAt(keys, i));
      }
      if (!decided) {
        kept[live++] = i;
      }
    }
    return live;
  }

  /** The position in its file of the base batch's row {@code i}. */
  private long positionOf(int i) {
    return rowIndexes == null ? position + i : rowIndexes.getLong(i);
  }

  /** The positions a base file's deletion vector hides, checked as the Python side does. */
  private long[] positions(ReadPlan.BaseFile file) throws IOException {
    long[] found = new long[(int) file.hidden()];
    int count = 0;
    VectorizedParquetRecordReader reader = open(file.vector(), VECTOR_SCHEMA);
    try {
      ColumnarBatch rows = reader.resultBatch();
      while (reader.nextBatch()) {
        ColumnVector pos = rows.column(0);
        for (int i = 0; i < rows.numRows(); i++) {
          long at = pos.getLong(i);
          if (count == found.length
              || at < 0
              || at >= file.rows()
              || (count > 0 && at <= found[count - 1])) {
            throw new IOException(
                "firn-merge: deletion vector "
                    + file.vector().path()
                    + " does not match its catalog entry ("
                    + file.hidden()
                    + " ascending positions inside "
                    + file.rows()
                    + " rows)");
          }
          found[count++] = at;
        }
      }
    } finally {
      reader.close();
    }
    if (count != found.length) {
      throw new IOException(
          "firn-merge: deletion vector " + file.vector().path() + " holds " + count
              + " positions, its catalog entry " + found.length);
    }
    return found;
  }

  @Override
  public ColumnarBatch get() {
    return current;
  }

  @Override
  public void close() throws IOException {
    if (base != null) {
      base.close();
      base = null;
    }
    for (FileReader reader : held) {
      reader.close();
    }
    held.clear();
    heldRows = 0;
  }

  private Winners readChanges() throws IOException {
    long rows = 0;
    for (ReadPlan.Change change : split.changes()) {
      rows += change.rows();
    }
    Winners found = Winners.forRows(rows);
    if (bytesKey) {
      ids = new StringIds(rows);
    }
    // Inserts before deletes, as the Python merge stacks them: on an LSN tie (which a
    // valid table never has) the earlier row stays.
    for (boolean deletes : new boolean[] {false, true}) {
      for (ReadPlan.Change change : split.changes()) {
        if (change.delete() == deletes) {
          readChange(change, found);
        }
      }
    }
    return found;
  }

  private void readChange(ReadPlan.Change change, Winners found) throws IOException {
    StructType schema = change.delete() ? deleteSchema : insertSchema;
    int[] columns = {
      change.delete() ? 0 : keyColumn, schema.fieldIndex(ORD), schema.fieldIndex(SEQ)
    };
    // An insert file's winners stay in its reader's last batch, not copied, when the
    // reader can be kept open until the split's upserts are sent.
    boolean holding =
        !change.delete()
            && held.size() < MOST_HELD
            && heldRows + Math.min(change.rows(), BATCH_ROWS) <= MOST_HELD_ROWS;
    // A small insert file is read as one batch, all of it held; a larger one a batch at a
    // time, its winners in earlier batches copied.
    boolean whole =
        holding && change.rows() <= WHOLE_FILE_ROWS && heldRows + change.rows() <= MOST_HELD_ROWS;
    int holder = held.size();
    FileReader reader = open(change.file(), schema, whole ? (int) change.rows() : BATCH_ROWS);
    checkRows(reader, change.file(), change.rows());
    boolean kept = false;
    try {
      ColumnarBatch rows = reader.resultBatch();
      int[] claimed = new int[0];
      int claims = 0;
      long seen = 0;
      // Never past the last batch: the reader would clear it, and it may hold winners.
      while (seen < change.rows() && reader.nextBatch()) {
        int n = rows.numRows();
        if (holding && claimed.length < n) {
          claimed = new int[Math.max(n, BATCH_ROWS)];
        }
        claims = claimBatch(change, rows, columns, found, holding ? holder : -1, claimed);
        seen += n;
        if (holding && seen < change.rows()) {
          // The reader refills this batch next: its winners are copied first.
          for (int c = 0; c < claims; c++) {
            int slot = claimed[c];
            if (found.holder[slot] == holder) {
              found.rows[slot] = copy.apply(rows.getRow(found.heldRow[slot])).copy();
              found.holder[slot] = -1;
            }
          }
          claims = 0;
        }
      }
      for (int c = 0; c < claims && !kept; c++) {
        kept = found.holder[claimed[c]] == holder;
      }
      if (kept) {
        held.add(reader);
        heldRows += whole ? change.rows() : BATCH_ROWS;
      }
    } finally {
      if (!kept) {
        reader.close();
      }
    }
  }

  /**
   * Claims the winners among one batch of a change file's rows ({@code columns}: the
   * key's, _ord's and _seq's positions in the batch); with a {@code holder}
   * (not -1), a winner stays in the batch and its slot is listed in {@code claimed} (how
   * many is returned), otherwise an upsert's row is copied. A method of its own, small,
   * so the JIT compiles this loop early, not with the whole file's reading around it.
   */
  private int claimBatch(
      ReadPlan.Change change,
      ColumnarBatch rows,
      int[] columns,
      Winners found,
      int holder,
      int[] claimed) {
    ColumnVector key = rows.column(columns[0]);
    ColumnVector ord = rows.column(columns[1]);
    ColumnVector seq = rows.column(columns[2]);
    int n = rows.numRows();
    int claims = 0;
    if (bytesKey) {
      return claimBytes(change, rows, key, ord, seq, found, holder, claimed);
    }
    long[] keys = chunkKeys;
    // A chunk's keys are read and their map entries loaded first, then claimed: the
    // loads do not wait on one another, so their cache misses overlap (a probe of a map
    // of a few hundred thousand keys nearly always misses, and claiming row by row
    // waited out each miss in turn: a profile of the read before compaction put a sixth
    // of its samples on that one load).
    for (int start = 0; start < n; start += CHUNK_ROWS) {
      int end = Math.min(n, start + CHUNK_ROWS);
      for (int i = start; i < end; i++) {
        keys[i - start] = keyAt(key, i);
      }
      found.touch(keys, end - start);
      for (int i = start; i < end; i++) {
        long lsn = seq.isNullAt(i) ? change.seq() : seq.getLong(i);
        if (lsn <= change.floor()) {
          continue; // merged already
        }
        long k = keys[i - start];
        if (change.shared() && !split.holds(k)) {
          continue; // a sibling node's key
        }
        int slot = found.claim(k, lsn, ord.getLong(i));
        if (slot >= 0) {
          claims = won(change, rows, i, slot, found, holder, claimed, claims);
        }
      }
    }
    return claims;
  }

  /**
   * {@link #claimBatch} of a string, binary or decimal key, chunk by chunk as the integer
   * path goes: a chunk's keys are hashed and the entries of their numbers' table loaded
   * first, then numbered and claimed, so the table's cache misses overlap instead of each
   * waiting on the last. A key's bytes are read where they lie in the batch's one array; a
   * batch that does not hold them so (a dictionary-encoded change file's, as pyarrow writes
   * a producer's keys) gives a string per row; a decimal is written in its form. Numbered
   * keys are claimed by their numbers ({@link Winners#claimNumbered}): no second map.
   */
  private int claimBytes(
      ReadPlan.Change change,
      ColumnarBatch rows,
      ColumnVector key,
      ColumnVector ord,
      ColumnVector seq,
      Winners found,
      int holder,
      int[] claimed) {
    byte[] bytes = InPlaceStrings.bytes(key);
    WritableColumnVector strings =
        bytes == null || decimalKey != null ? null : (WritableColumnVector) key;
    int n = rows.numRows();
    int claims = 0;
    for (int start = 0; start < n; start += CHUNK_ROWS) {
      int end = Math.min(n, start + CHUNK_ROWS);
      for (int i = start; i < end; i++) {
        int c = i - start;
        if (decimalKey != null) {
          DecimalKeys.write(key, decimalKey, bytes, i, decimalBytes, c * DecimalKeys.WIDTH);
          chunkBases[c] = decimalBytes;
          chunkOffsets[c] = Platform.BYTE_ARRAY_OFFSET + c * DecimalKeys.WIDTH;
          chunkLengths[c] = DecimalKeys.WIDTH;
        } else if (strings != null) {
          chunkBases[c] = bytes;
          chunkOffsets[c] = Platform.BYTE_ARRAY_OFFSET + strings.getArrayOffset(i);
          chunkLengths[c] = strings.getArrayLength(i);
        } else {
          UTF8String text = key.getUTF8String(i);
          chunkBases[c] = text.getBaseObject();
          chunkOffsets[c] = text.getBaseOffset();
          chunkLengths[c] = text.numBytes();
        }
        chunkHashes[c] = StringIds.hash(chunkBases[c], chunkOffsets[c], chunkLengths[c]);
      }
      ids.touch(chunkHashes, end - start);
      for (int i = start; i < end; i++) {
        int c = i - start;
        long lsn = seq.isNullAt(i) ? change.seq() : seq.getLong(i);
        if (lsn <= change.floor()) {
          continue; // merged already
        }
        Object base = chunkBases[c];
        long offset = chunkOffsets[c];
        int length = chunkLengths[c];
        if (change.shared() && !sharedKeyHeld(base, offset, length)) {
          continue; // a sibling node's key
        }
        int id = ids.of(base, offset, length, chunkHashes[c]);
        int slot = found.claimNumbered(id, lsn, ord.getLong(i));
        if (slot >= 0) {
          claims = won(change, rows, i, slot, found, holder, claimed, claims);
        }
      }
    }
    Arrays.fill(chunkBases, null); // not the batch's buffer kept past it
    return claims;
  }

  /** Whether a shared change file's key, its bytes (or its decimal form) at {@code offset}
   * of {@code base}, belongs to the split's node. */
  private boolean sharedKeyHeld(Object base, long offset, int length) {
    if (decimalKey != null) {
      return split.holdsDecimal((byte[]) base, (int) (offset - Platform.BYTE_ARRAY_OFFSET));
    }
    return split.holds(UTF8String.fromAddress(base, offset, length));
  }

  /** Row {@code i} of the batch now wins {@code slot}: kept in its batch (listed in {@code
   * claimed}, whose new count is returned) or copied. */
  private int won(
      ReadPlan.Change change,
      ColumnarBatch rows,
      int i,
      int slot,
      Winners found,
      int holder,
      int[] claimed,
      int claims) {
    found.upsert[slot] = !change.delete();
    found.rows[slot] = null;
    found.holder[slot] = holder;
    if (holder >= 0) {
      found.heldRow[slot] = i;
      claimed[claims++] = slot;
    } else if (!change.delete()) {
      found.rows[slot] = copy.apply(rows.getRow(i)).copy();
    }
    return claims;
  }

  /**
   * A Parquet file read through Spark's vectorised reader as {@code schema} (a column the
   * file lacks, such as {@code _seq} in a producer's file, reads as nulls). One Hadoop
   * configuration per reader and one task context per schema, not per file: building a
   * configuration parses Hadoop's default resources (about 3 ms), and each task context
   * copies its configuration (about 0.3 ms), which a split of a few hundred small change
   * files would pay again and again.
   */
  private FileReader open(ReadPlan.File file, StructType schema) throws IOException {
    return open(file, schema, BATCH_ROWS);
  }

  /** {@link #open(ReadPlan.File, StructType)}, reading up to {@code batchRows} rows a batch. */
  private FileReader open(ReadPlan.File file, StructType schema, int batchRows)
      throws IOException {
    Path path = new Path(file.path());
    TaskAttemptContextImpl context = contexts.computeIfAbsent(schema, this::contextFor);
    // One look at the file's status, one open and one footer read, all handed to Spark's
    // reader: on an object store each is a request (a HEAD, then ranged GETs), and Spark's
    // reader left to itself looks the file up and opens it again.
    HadoopInputFile input = HadoopInputFile.fromPath(path, context.getConfiguration());
    if (input.getLength() != file.size()) {
      // As the Python side checks (firn.io.integrity): a file that is not what the
      // catalog recorded is named, never read as if it were.
      throw new IOException(
          "firn-merge: " + file.path() + " is " + input.getLength() + " bytes, its catalog entry "
              + file.size());
    }
    FileReader reader = new FileReader(Math.max(1, batchRows));
    FileSplit whole = new FileSplit(path, 0, file.size(), new String[0]);
    SeekableInputStream stream = null;
    try {
      stream = input.newStream();
      ParquetMetadata footer =
          ParquetFileReader.readFooter(input, HadoopReadOptions.builder(conf, path).build(), stream);
      // Counted before a filter drops row groups: every row the file holds, for checkRows.
      for (BlockMetaData group : footer.getBlocks()) {
        reader.fileRows += group.getRowCount();
      }
      reader.initialize(
          whole, context, Option.apply(input), Option.apply(stream), Option.apply(footer));
      reader.resultBatch(); // allocates the batch nextBatch fills
    } catch (IOException | InterruptedException | RuntimeException e) {
      reader.close();
      if (stream != null) {
        stream.close();
      }
      throw new IOException("firn-merge: cannot read " + file.path() + ": " + e.getMessage(), e);
    }
    return reader;
  }

  /** As the Python side checks (firn.io.integrity): a file of other rows than the catalog's. */
  private static void checkRows(FileReader reader, ReadPlan.File file, long rows)
      throws IOException {
    if (reader.fileRows != rows) {
      reader.close();
      throw new IOException(
          "firn-merge: " + file.path() + " holds " + reader.fileRows + " rows, its catalog entry "
              + rows);
    }
  }

  /** Spark's vectorised Parquet reader, saying how many rows the file holds. */
  static final class FileReader extends VectorizedParquetRecordReader {
    /** The file's rows, whether or not a filter skips some of them. */
    long fileRows;

    FileReader(int batchRows) {
      super(false, batchRows);
    }

    /** The rows the reader returns: those of the row groups (and pages) a filter keeps. */
    long rowsToRead() {
      return totalRowCount;
    }
  }

  /** What a file read as {@code schema} is read with (Spark's reader only reads the context). */
  private TaskAttemptContextImpl contextFor(StructType schema) {
    conf.set(ParquetReadSupport.SPARK_ROW_REQUESTED_SCHEMA(), schema.json());
    return new TaskAttemptContextImpl(conf, new TaskAttemptID());
  }

  /** {@link #contextFor}, with Parquet's row groups (and pages) filtered by {@code filter}. */
  private TaskAttemptContextImpl filteredContext(StructType schema, FilterPredicate filter) {
    Configuration filtered = new Configuration(conf);
    filtered.set(ParquetReadSupport.SPARK_ROW_REQUESTED_SCHEMA(), schema.json());
    ParquetInputFormat.setFilterPredicate(filtered, filter);
    return new TaskAttemptContextImpl(filtered, new TaskAttemptID());
  }

  /** The session's Hadoop settings (an object store's connector), then the reader's own. */
  private static Configuration readerConf(HadoopSettings hadoop) {
    Configuration conf = hadoop.applyTo(new Configuration(DEFAULTS));
    conf.set(ParquetInputFormat.READ_SUPPORT_CLASS, ParquetReadSupport.class.getName());
    conf.setBoolean(SQLConf.CASE_SENSITIVE().key(), false);
    conf.setBoolean(SQLConf.PARQUET_BINARY_AS_STRING().key(), false);
    conf.setBoolean(SQLConf.PARQUET_INT96_AS_TIMESTAMP().key(), false);
    conf.setBoolean(SQLConf.PARQUET_INFER_TIMESTAMP_NTZ_ENABLED().key(), false);
    conf.setBoolean(SQLConf.LEGACY_PARQUET_NANOS_AS_LONG().key(), false);
    return conf;
  }

  /**
   * A key as the long FirnHash64 hashes and Firn orders: an integer's value, a date's days,
   * a timestamp's microseconds (Spark reads all three as the integers Parquet stores).
   */
  private static long keyAt(ColumnVector keys, int row) {
    DataType type = keys.dataType();
    if (type == DataTypes.LongType
        || type == DataTypes.TimestampType
        || type == DataTypes.TimestampNTZType) {
      return keys.getLong(row);
    }
    if (type == DataTypes.IntegerType || type == DataTypes.DateType) {
      return keys.getInt(row);
    }
    if (type == DataTypes.ShortType) {
      return keys.getShort(row);
    }
    if (type == DataTypes.ByteType) {
      return keys.getByte(row);
    }
    throw new UncheckedIOException(new IOException("firn-merge: the key must be one integer, date or timestamp column, not " + type));
  }

  /**
   * The changed keys in order, walked beside a base file's keys: each base key moves a cursor
   * forward, so a file in key order costs one pass over both. A key smaller than the one
   * before (a file out of order) is looked up by binary search instead, so the answer holds
   * for any order.
   */
  static final class SortedKeys {
    private final long[] keys;
    private int cursor;
    private long last = Long.MIN_VALUE;

    SortedKeys(long[] keys) {
      Arrays.sort(keys);
      this.keys = keys;
    }

    /** Starts a new file. */
    void restart() {
      cursor = 0;
      last = Long.MIN_VALUE;
    }

    /** Whether {@code key} is among the changed keys. */
    boolean holds(long key) {
      if (key < last) {
        int found = Arrays.binarySearch(keys, key);
        cursor = found >= 0 ? found : -found - 1;
      }
      last = key;
      while (cursor < keys.length && keys[cursor] < key) {
        cursor++;
      }
      return cursor < keys.length && keys[cursor] == key;
    }
  }

  /**
   * The numbers of a split's changed string keys, 0, 1, 2... in the order the keys are first
   * met: an open-addressing table probed with a key's bytes where they lie (a batch's, or a
   * string's), each number's key copied into one array of them all, one after the other. An
   * entry holds the key's hash beside its number, so a probe that meets another key's entry
   * tells so without reading that key's bytes (another cache miss). A key first met is
   * copied; one met again costs a hash and a comparison of bytes, no allocation.
   */
  static final class StringIds {
    private static final int SEED = 0x2A;
    /** The most bytes one array holds (a Java array's length is an int). */
    private static final int MOST_BYTES = Integer.MAX_VALUE - 8;
    /** The keys' bytes, in the order of their numbers. */
    private byte[] bytes;
    private int used;
    private int[] starts;
    private int[] lengths;
    private int count;
    /** Each entry the key's hash in the high half and its number + 1 in the low (0: empty). */
    private long[] table;
    private int mask;
    /** What {@link #touch} loaded, summed: never read, kept so the loads stay. */
    long touched;

    StringIds(long expected) {
      int capacity = Integer.highestOneBit((int) Math.min(Math.max(expected, 8), 1 << 28));
      table = new long[capacity * 2];
      mask = table.length - 1;
      int keys = (int) Math.min(Math.max(expected, 8), 1 << 20);
      starts = new int[keys];
      lengths = new int[keys];
      bytes = new byte[keys * 16];
    }

    /** The hash {@link #of} takes for the key whose bytes are at {@code offset} of {@code base}. */
    static int hash(Object base, long offset, int length) {
      return Murmur3_x86_32.hashUnsafeBytes(base, offset, length, SEED);
    }

    /** The keys numbered {@code ids[0, n)}, in key order. */
    SortedBytes sorted(long[] ids, int n) {
      int[] at = new int[n];
      int[] length = new int[n];
      for (int i = 0; i < n; i++) {
        at[i] = starts[(int) ids[i]];
        length[i] = lengths[(int) ids[i]];
      }
      return new SortedBytes(bytes, at, length, n);
    }

    /** Loads the entries the first {@code n} {@code hashes} probe first ({@link
     * Winners#touch}'s reason). */
    void touch(int[] hashes, int n) {
      long sum = 0;
      for (int i = 0; i < n; i++) {
        sum += table[hashes[i] & mask];
      }
      touched += sum;
    }

    /** The number of the key whose bytes are at {@code offset} of {@code base}, its
     * {@link #hash} {@code h}. */
    int of(Object base, long offset, int length, int h) {
      for (int slot = h & mask; ; slot = (slot + 1) & mask) {
        long entry = table[slot];
        if (entry == 0) {
          int id = add(base, offset, length);
          table[slot] = ((long) h << 32) | (id + 1);
          if (count * 2 > table.length) {
            grow();
          }
          return id;
        }
        int id = (int) entry - 1;
        if ((int) (entry >>> 32) == h && same(id, base, offset, length)) {
          return id;
        }
      }
    }

    /** Copies a new key's bytes after the others': its number. */
    private int add(Object base, long offset, int length) {
      if (count == starts.length) {
        starts = Arrays.copyOf(starts, count * 2);
        lengths = Arrays.copyOf(lengths, count * 2);
      }
      if (used + length > bytes.length) {
        long needed = (long) used + length;
        if (needed > MOST_BYTES) {
          throw new IllegalStateException(
              "a split's changed keys take more than " + MOST_BYTES + " bytes: compact the table");
        }
        long grown = Math.min(Math.max(2L * bytes.length, needed), MOST_BYTES);
        bytes = Arrays.copyOf(bytes, (int) grown);
      }
      Platform.copyMemory(base, offset, bytes, Platform.BYTE_ARRAY_OFFSET + used, length);
      starts[count] = used;
      lengths[count] = length;
      used += length;
      return count++;
    }

    /** Whether key {@code id}'s bytes are the {@code length} bytes at {@code offset} of
     * {@code base}. */
    private boolean same(int id, Object base, long offset, int length) {
      if (lengths[id] != length) {
        return false;
      }
      long mine = Platform.BYTE_ARRAY_OFFSET + starts[id];
      int i = 0;
      for (; i + 8 <= length; i += 8) {
        if (Platform.getLong(bytes, mine + i) != Platform.getLong(base, offset + i)) {
          return false;
        }
      }
      for (; i < length; i++) {
        if (Platform.getByte(bytes, mine + i) != Platform.getByte(base, offset + i)) {
          return false;
        }
      }
      return true;
    }

    private void grow() {
      long[] old = table;
      table = new long[old.length * 2];
      mask = table.length - 1;
      for (long entry : old) {
        if (entry != 0) {
          int slot = (int) (entry >>> 32) & mask;
          while (table[slot] != 0) {
            slot = (slot + 1) & mask;
          }
          table[slot] = entry;
        }
      }
    }
  }

  /** A batch's string keys read where they lie in an on-heap vector's bytes, not copied. */
  static final class InPlaceStrings {
    private static final Field BYTES = byteData();

    private InPlaceStrings() {}

    private static Field byteData() {
      try {
        Field field = OnHeapColumnVector.class.getDeclaredField("byteData");
        field.setAccessible(true);
        return field;
      } catch (ReflectiveOperationException | RuntimeException e) {
        return null; // another Spark's vector: strings are made per row
      }
    }

    /** The bytes of a string column's values, or null when they are not in one on-heap
     * array (an off-heap or dictionary-encoded batch: its strings are made per row). */
    static byte[] bytes(ColumnVector keys) {
      if (BYTES == null || !(keys instanceof OnHeapColumnVector vector) || vector.hasDictionary()) {
        return null;
      }
      try {
        return (byte[]) BYTES.get(vector.arrayData());
      } catch (ReflectiveOperationException | RuntimeException e) {
        return null;
      }
    }
  }

  /** Each changed key's winning change so far: an open-addressing map from key to slot. */
  static final class Winners {
    /**
     * Most slots a map kept for its thread's next split may have (its arrays then take about
     * 70 MB): a larger one is left to the collector.
     */
    private static final int MOST_KEPT = 1 << 20;

    /**
     * The map of the last split this thread read, emptied, for its next one. A split's map
     * runs to tens of megabytes, which G1 allocates as humongous objects in the old
     * generation: a map per split started a concurrent collection every few splits. Softly
     * held, so memory short elsewhere in the executor takes it back.
     */
    private static final ThreadLocal<SoftReference<Winners>> SPARE = new ThreadLocal<>();

    /** A map for a split of {@code expected} change rows: this thread's spare, if it fits. */
    static Winners forRows(long expected) {
      SoftReference<Winners> kept = SPARE.get();
      SPARE.remove();
      Winners spare = kept == null ? null : kept.get();
      // Not one far larger than needed: emptying its table would cost more than a new one.
      boolean fits =
          spare != null
              && spare.keys.length >= expected
              && spare.keys.length <= 4 * Math.max(expected, 1024);
      return fits ? spare : new Winners(expected);
    }

    /** Empties the map and keeps it for this thread's next split (once its rows are sent on). */
    void release() {
      if (keys.length > MOST_KEPT) {
        return;
      }
      Arrays.fill(rows, 0, size, null); // the copied upserts now belong to the split alone
      if (table != null) {
        Arrays.fill(table, 0L);
      }
      size = 0;
      SPARE.set(new SoftReference<>(this));
    }

    int size;
    long[] keys;
    long[] seqs;
    long[] ords;
    boolean[] upsert;
    /** A winning upsert copied out of its file's batch, or null when its file's reader holds it. */
    UnsafeRow[] rows;
    /** Which held reader's batch has the winning upsert (-1: copied, or a delete). */
    int[] holder;
    /** Its row in that batch. */
    int[] heldRow;
    /**
     * Open addressing, each entry a key and its slot + 1 side by side (0: empty), so that a
     * probe reads one cache line: with a few hundred thousand keys nearly every probe misses
     * the caches, and a table of slots alone then needed a second miss for the key. Made at
     * the first key {@link #touch}ed or claimed: a string's, binary's or decimal's winners
     * are claimed by number ({@link #claimNumbered}) and never probe it.
     */
    private long[] table;
    private int mask;
    /** What {@link #touch} loaded, summed: never read, kept so the loads stay. */
    long touched;

    /** A map sized for {@code expected} changed keys (the split's change rows). */
    Winners(long expected) {
      // A power of two at least expected, at most 2^26 up front (grow takes it further).
      int capacity = Integer.highestOneBit((int) Math.min(Math.max(expected, 16), 1 << 26));
      capacity = capacity < expected && capacity < (1 << 26) ? capacity << 1 : capacity;
      keys = new long[capacity];
      seqs = new long[capacity];
      ords = new long[capacity];
      upsert = new boolean[capacity];
      rows = new UnsafeRow[capacity];
      holder = new int[capacity];
      heldRow = new int[capacity];
    }

    /** The table, made for the arrays' capacity if no key was claimed by it yet. */
    private long[] table() {
      if (table == null) {
        table = new long[keys.length * 4]; // twice the capacity, two longs an entry
        mask = keys.length * 2 - 1;
      }
      return table;
    }

    /** The winning upserts copied out of their files' batches. */
    InternalRow[] upserts() {
      int count = 0;
      for (int slot = 0; slot < size; slot++) {
        count += upsert[slot] && holder[slot] < 0 ? 1 : 0;
      }
      InternalRow[] found = new InternalRow[count];
      int next = 0;
      for (int slot = 0; slot < size; slot++) {
        if (upsert[slot] && holder[slot] < 0) {
          found[next++] = rows[slot];
        }
      }
      return found;
    }

    /** The rows of each held reader's batch that are winning upserts. */
    int[][] heldUpserts(int readers) {
      int[] counts = new int[readers];
      for (int slot = 0; slot < size; slot++) {
        if (upsert[slot] && holder[slot] >= 0) {
          counts[holder[slot]]++;
        }
      }
      int[][] found = new int[readers][];
      for (int r = 0; r < readers; r++) {
        found[r] = new int[counts[r]];
        counts[r] = 0;
      }
      for (int slot = 0; slot < size; slot++) {
        if (upsert[slot] && holder[slot] >= 0) {
          found[holder[slot]][counts[holder[slot]]++] = heldRow[slot];
        }
      }
      return found;
    }

    /**
     * Loads the map entries the first {@code n} {@code keys} probe first (their sum is kept
     * so the loads are not optimised away): independent loads, so their misses overlap,
     * and the claims that follow find the entries in the caches.
     */
    void touch(long[] keys, int n) {
      long[] table = table();
      long sum = 0;
      for (int i = 0; i < n; i++) {
        sum += table[2 * (mix(keys[i]) & mask) + 1];
      }
      touched += sum;
    }

    /** The slot {@code key}'s change now wins in, or -1 when an earlier one has a greater LSN. */
    int claim(long key, long seq, long ord) {
      long[] table = table();
      int h = mix(key) & mask;
      for (; ; h = (h + 1) & mask) {
        long entry = table[2 * h + 1];
        if (entry == 0) {
          break;
        }
        if (table[2 * h] == key) {
          int slot = (int) entry - 1;
          if (seq > seqs[slot] || (seq == seqs[slot] && ord > ords[slot])) {
            seqs[slot] = seq;
            ords[slot] = ord;
            return slot;
          }
          return -1;
        }
      }
      if (size == keys.length) {
        grow();
        return claim(key, seq, ord);
      }
      int slot = size++;
      keys[slot] = key;
      seqs[slot] = seq;
      ords[slot] = ord;
      table[2 * h] = key;
      table[2 * h + 1] = slot + 1;
      return slot;
    }

    /**
     * {@link #claim} of a key numbered 0, 1, 2... in the order it is first claimed (a string
     * key's {@link StringIds} number, taken just before its claim): its number is its slot,
     * so no table is probed.
     */
    int claimNumbered(int id, long seq, long ord) {
      if (id < size) {
        if (seq > seqs[id] || (seq == seqs[id] && ord > ords[id])) {
          seqs[id] = seq;
          ords[id] = ord;
          return id;
        }
        return -1;
      }
      if (id != size) {
        throw new IllegalStateException("key number " + id + " claimed before " + size);
      }
      if (size == keys.length) {
        grow();
      }
      int slot = size++;
      keys[slot] = id;
      seqs[slot] = seq;
      ords[slot] = ord;
      return slot;
    }

    private void grow() {
      int n = keys.length * 2;
      keys = Arrays.copyOf(keys, n);
      seqs = Arrays.copyOf(seqs, n);
      ords = Arrays.copyOf(ords, n);
      upsert = Arrays.copyOf(upsert, n);
      rows = Arrays.copyOf(rows, n);
      holder = Arrays.copyOf(holder, n);
      heldRow = Arrays.copyOf(heldRow, n);
      if (table == null) {
        return; // claimed by number: no table to grow
      }
      table = new long[n * 4];
      mask = n * 2 - 1;
      for (int slot = 0; slot < size; slot++) {
        int h = mix(keys[slot]) & mask;
        while (table[2 * h + 1] != 0) {
          h = (h + 1) & mask;
        }
        table[2 * h] = keys[slot];
        table[2 * h + 1] = slot + 1;
      }
    }

    private static int mix(long key) {
      long h = key * 0x9E3779B97F4A7C15L;
      return (int) (h ^ (h >>> 32));
    }
  }
}
