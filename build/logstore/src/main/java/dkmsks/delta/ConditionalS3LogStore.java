package dkmsks.delta;

import java.io.ByteArrayOutputStream;
import java.io.FileNotFoundException;
import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.FileAlreadyExistsException;
import java.util.Arrays;
import java.util.Iterator;

import io.delta.storage.HadoopFileSystemLogStore;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.FSDataOutputStreamBuilder;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Options;
import org.apache.hadoop.fs.Path;

/**
 * A Delta Lake LogStore for S3-compatible object stores that stays correct with any number of
 * writers: Spark drivers on any number of hosts and delta-rs processes on one table together.
 *
 * <p>Delta commits version N of a table by creating {@code _delta_log/N.json} and counts on the
 * store to refuse that create when the file exists: the loser of a race gets a
 * {@link FileAlreadyExistsException}, reads the winner's commit, checks its own transaction
 * against it and tries again at N + 1. Delta's own store for S3 ({@code S3SingleDriverLogStore})
 * looks for the file and then PUTs it, with a lock that only its own JVM sees: a second driver, or
 * a delta-rs writer, can commit N between the look and the PUT, and the PUT silently replaces that
 * commit (its data files stay, unreferenced). S3 refuses a PUT that carries
 * {@code If-None-Match: *} when the key exists (HTTP 412), and S3A (hadoop-aws 3.4.2 and later)
 * sends that header for a file created with the builder option
 * {@code fs.option.create.conditional.overwrite}; delta-rs commits the same way. No Delta release
 * uses it yet (delta-io/delta#3596, delta-io/delta#4813): this class does, and is what
 * {@code dkmsks.spark.s3.s3a_conf} configures for {@code s3://} and {@code s3a://} tables
 * ({@code spark.delta.logStore.<scheme>.impl}).
 *
 * <p>Reads and listings are Delta's plain Hadoop ones: S3 lists and reads after a write
 * consistently, so the single-driver store's cache of its own recent writes is not needed.
 */
public class ConditionalS3LogStore extends HadoopFileSystemLogStore {

    /** Hadoop's builder option for create-if-absent (hadoop-client-api 3.4.2 and later). */
    static final String CONDITIONAL_CREATE =
        Options.CreateFileOptionKeys.FS_OPTION_CREATE_CONDITIONAL_OVERWRITE;

    /** S3A's switch for conditional writes (on by default): named in the error when it is off. */
    static final String S3A_CONDITIONAL_SWITCH = "fs.s3a.create.conditional.enabled";

    public ConditionalS3LogStore(Configuration hadoopConf) {
        super(hadoopConf);
    }

    @Override
    public void write(
            Path path,
            Iterator<String> actions,
            Boolean overwrite,
            Configuration hadoopConf) throws IOException {
        final FileSystem fs = path.getFileSystem(hadoopConf);
        // The whole commit in memory first (a commit file is small): a failed create is then
        // settled by comparing what is stored with what this call meant to store.
        final byte[] payload = encode(actions);
        if (overwrite) {
            // Files Delta replaces on purpose (_last_checkpoint): a PUT replaces an object whole.
            try (FSDataOutputStream out = fs.create(path, true)) {
                out.write(payload);
            }
            return;
        }
        requireConditionalCreate(fs, path);
        try {
            createIfAbsent(fs, path, payload);
        } catch (IOException failure) {
            settle(fs, path, payload, failure);
        }
    }

    /** A PUT is all or nothing: a reader never sees part of a commit. */
    @Override
    public Boolean isPartialWriteVisible(Path path, Configuration hadoopConf) {
        return false;
    }

    private static byte[] encode(Iterator<String> actions) {
        final ByteArrayOutputStream bytes = new ByteArrayOutputStream();
        while (actions.hasNext()) {
            // One action per line, each line ended: what every Delta LogStore writes.
            bytes.writeBytes((actions.next() + "\n").getBytes(StandardCharsets.UTF_8));
        }
        return bytes.toByteArray();
    }

    /**
     * Refuses a filesystem that cannot create conditionally, rather than falling back to a
     * look-then-write that loses commits with a second writer.
     */
    private static void requireConditionalCreate(FileSystem fs, Path path) throws IOException {
        if (!fs.hasPathCapability(path, CONDITIONAL_CREATE)) {
            throw new UnsupportedOperationException(String.format(
                "%s commits Delta versions by create-if-absent (%s), which %s does not offer for %s:"
                    + " use S3A from hadoop-aws 3.4.2 or later with %s=true (its default) on a store"
                    + " that honours If-None-Match; committing without it could overwrite another"
                    + " writer's commit", ConditionalS3LogStore.class.getSimpleName(),
                CONDITIONAL_CREATE, fs.getClass().getName(), path, S3A_CONDITIONAL_SWITCH));
        }
    }

    /** Stores {@code payload} at {@code path} unless an object is there already. */
    private static void createIfAbsent(FileSystem fs, Path path, byte[] payload)
            throws IOException {
        final FSDataOutputStreamBuilder<?, ?> builder = fs.createFile(path);
        builder.overwrite(false);
        // must(), not opt(): a filesystem that does not know the option fails instead of
        // ignoring it.
        builder.must(CONDITIONAL_CREATE, true);
        final FSDataOutputStream out = builder.build();
        if (!out.hasCapability(CONDITIONAL_CREATE)) {
            out.abort();
            throw new UnsupportedOperationException(
                "the output stream for " + path + " does not create conditionally");
        }
        try {
            out.write(payload);
        } catch (IOException | RuntimeException failure) {
            // close() would publish what was buffered: a partial commit. Abort drops it.
            out.abort();
            throw failure;
        }
        out.close();  // the PUT, with If-None-Match: *
    }

    /**
     * After a failed create: returns when the stored object is this payload (the create did
     * land: the client retried a PUT whose answer was lost and the retry got 412), throws
     * {@link FileAlreadyExistsException} when another writer's commit holds the version, and
     * rethrows {@code failure} when nothing is stored.
     */
    private static void settle(FileSystem fs, Path path, byte[] payload, IOException failure)
            throws IOException {
        final byte[] stored;
        try {
            stored = readAtMost(fs, path, payload.length + 1);
        } catch (FileNotFoundException absent) {
            throw failure;  // not created (network, credentials, ...): Delta fails the commit
        } catch (IOException probeFailure) {
            failure.addSuppressed(probeFailure);
            throw failure;
        }
        if (Arrays.equals(stored, payload)) {
            return;
        }
        // Another commit holds this version: S3A's 412 (RemoteFileChangedException) or its
        // existence check (Hadoop's FileAlreadyExistsException), or any error after which the
        // object found is not ours. A conditional PUT of ours still in flight cannot replace it.
        final FileAlreadyExistsException taken = new FileAlreadyExistsException(path.toString());
        taken.initCause(failure);
        throw taken;
    }

    private static byte[] readAtMost(FileSystem fs, Path path, int limit) throws IOException {
        try (InputStream in = fs.open(path)) {
            return in.readNBytes(limit);
        }
    }
}
