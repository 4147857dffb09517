// The page-view job of `benchmarks.peers` with Java functions, on a local MiniCluster.
//
//   generator (fromSequence) -> map stamping `created` -> keyBy (50 keys) -> count in ValueState
//   stamping `done` -> DiscardingSink, parallelism 2
//
// Compiled and run by benchmarks/flink_java.py against the jars of the installed PyFlink.
// Arguments (all --name value): records, rate (rec/s over all map subtasks, 0 = max), interval
// (ms, 0 = no checkpoints), mode (exactly-once | at-least-once), unaligned (true|false),
// slow-subtask (index of the count subtask that busy-waits, -1 = none), slow-us (its busy wait per
// record in microseconds), rest-port, work (directory: the count subtasks write their
// (created, done) stamps there as little-endian doubles, seconds since the epoch).
// Prints "BARRIERFLOW_FLINK_STARTED {json}" once the job runs and "BARRIERFLOW_PEER_ROW {json}"
// when it has finished (the last `/jobs/<id>/checkpoints` response is in it).
import java.io.DataOutputStream;
import java.io.FileOutputStream;
import java.io.BufferedOutputStream;
import java.io.InputStream;
import java.net.HttpURLConnection;
import java.net.URL;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.HashMap;
import java.util.Map;

import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.api.common.functions.RichMapFunction;
import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.api.common.state.ValueStateDescriptor;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.java.functions.KeySelector;
import org.apache.flink.api.java.tuple.Tuple2;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.core.execution.JobClient;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.KeyedProcessFunction;
import org.apache.flink.streaming.api.functions.sink.v2.DiscardingSink;
import org.apache.flink.util.Collector;

public class PageView {
    static final int PARALLELISM = 2;
    static final int KEYS = 50;

    static double now() {
        java.time.Instant t = java.time.Instant.now();
        return t.getEpochSecond() + t.getNano() / 1e9;
    }

    /** Stamps `created` and paces its share of `rate`. */
    public static class Stamp extends RichMapFunction<Long, Tuple2<Integer, Double>> {
        final double rate;
        long sent;
        double start;

        Stamp(double rate) { this.rate = rate; }

        @Override
        public void open(OpenContext context) { start = now(); }

        @Override
        public Tuple2<Integer, Double> map(Long i) throws Exception {
            if (rate > 0) {
                double due = start + sent / (rate / PARALLELISM);
                double wait = due - now();
                if (wait > 0.001) Thread.sleep((long) (wait * 1000));
            }
            sent++;
            return Tuple2.of((int) (i % KEYS), now());
        }
    }

    public static class Key implements KeySelector<Tuple2<Integer, Double>, Integer> {
        @Override
        public Integer getKey(Tuple2<Integer, Double> r) { return r.f0; }
    }

    /** Counts per key in ValueState, stamps `done`; the slow subtask busy-waits per record. */
    public static class Count extends KeyedProcessFunction<Integer, Tuple2<Integer, Double>, Long> {
        final String work;
        final int slowSubtask;
        final long slowNanos;
        transient ValueState<Long> count;
        transient ByteBuffer stamps;
        transient int index;
        transient boolean slow;

        Count(String work, int slowSubtask, long slowNanos) {
            this.work = work; this.slowSubtask = slowSubtask; this.slowNanos = slowNanos;
        }

        @Override
        public void open(OpenContext context) {
            count = getRuntimeContext().getState(new ValueStateDescriptor<>("count", Types.LONG));
            index = getRuntimeContext().getTaskInfo().getIndexOfThisSubtask();
            slow = index == slowSubtask;
            stamps = ByteBuffer.allocate(1 << 20).order(ByteOrder.LITTLE_ENDIAN);
        }

        @Override
        public void processElement(Tuple2<Integer, Double> r, Context ctx, Collector<Long> out) throws Exception {
            if (slow) {
                long until = System.nanoTime() + slowNanos;
                while (System.nanoTime() < until) { Thread.onSpinWait(); }
            }
            Long n = count.value();
            n = n == null ? 1L : n + 1;
            count.update(n);
            if (stamps.remaining() < 16) {
                ByteBuffer bigger = ByteBuffer.allocate(stamps.capacity() * 2).order(ByteOrder.LITTLE_ENDIAN);
                stamps.flip();
                bigger.put(stamps);
                stamps = bigger;
            }
            stamps.putDouble(r.f1).putDouble(now());
            out.collect(n);
        }

        @Override
        public void close() throws Exception {
            Path dir = Paths.get(work, "stamps");
            Files.createDirectories(dir);
            Path part = dir.resolve("count" + index + ".bin.part");
            try (DataOutputStream out = new DataOutputStream(new BufferedOutputStream(new FileOutputStream(part.toFile())))) {
                out.write(stamps.array(), 0, stamps.position());
            }
            Files.move(part, dir.resolve("count" + index + ".bin"));
        }
    }

    static String get(String url) {
        try {
            HttpURLConnection c = (HttpURLConnection) new URL(url).openConnection();
            c.setConnectTimeout(2000);
            c.setReadTimeout(5000);
            if (c.getResponseCode() != 200) return null;
            try (InputStream in = c.getInputStream()) {
                return new String(in.readAllBytes(), StandardCharsets.UTF_8);
            }
        } catch (Exception e) {
            return null;
        }
    }

    public static void main(String[] argv) throws Exception {
        Map<String, String> a = new HashMap<>(Map.of("records", "1000000", "rate", "0", "interval", "100",
            "mode", "exactly-once", "unaligned", "false", "slow-subtask", "-1", "slow-us", "0",
            "rest-port", "0", "work", "."));
        for (int i = 0; i + 1 < argv.length; i += 2) {
            String key = argv[i].replaceFirst("^--", "");
            if (!a.containsKey(key)) throw new IllegalArgumentException("PageView: unknown option --" + key);
            a.put(key, argv[i + 1]);
        }
        long records = Long.parseLong(a.get("records"));
        long interval = Long.parseLong(a.get("interval"));
        Map<String, String> conf = new HashMap<>();
        conf.put("rest.bind-address", "127.0.0.1");
        conf.put("rest.address", "127.0.0.1");
        conf.put("rest.bind-port", a.get("rest-port"));
        conf.put("rest.port", a.get("rest-port"));
        conf.put("web.checkpoints.history", "100000");
        // the REST metrics are a cache refreshed every 10 s by default: rates sampled over a few seconds need it fresh
        conf.put("metrics.fetcher.update-interval", "100");
        conf.put("parallelism.default", String.valueOf(PARALLELISM));
        if (interval > 0) {
            conf.put("execution.checkpointing.interval", interval + " ms");
            conf.put("execution.checkpointing.mode", a.get("mode").equals("at-least-once") ? "AT_LEAST_ONCE" : "EXACTLY_ONCE");
            conf.put("execution.checkpointing.unaligned.enabled", a.get("unaligned"));
            // written as files, as barrierflow writes its own (Flink's default keeps them in the
            // JobManager's memory)
            conf.put("execution.checkpointing.storage", "filesystem");
            conf.put("execution.checkpointing.dir",
                     new java.io.File(a.get("work"), "flink-checkpoint-data").getAbsoluteFile().toURI().toString());
        }
        StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment(Configuration.fromMap(conf));
        env.setParallelism(PARALLELISM);
        env.fromSequence(0, records - 1)
            .map(new Stamp(Double.parseDouble(a.get("rate"))))
            .keyBy(new Key())
            .process(new Count(a.get("work"), Integer.parseInt(a.get("slow-subtask")),
                               Long.parseLong(a.get("slow-us")) * 1000L))
            .sinkTo(new DiscardingSink<>());
        var cp = env.getCheckpointConfig();
        String effective = String.format("{\"checkpointing\": %b, \"unaligned\": %b, \"interval_ms\": %s, \"mode\": \"%s\"}",
            cp.isCheckpointingEnabled(), cp.isUnalignedCheckpointsEnabled(),
            interval > 0 ? String.valueOf(cp.getCheckpointInterval()) : "null",
            interval > 0 ? a.get("mode") : "none");
        JobClient job = env.executeAsync("pageview-java");
        String base = "http://127.0.0.1:" + a.get("rest-port");
        System.out.println("BARRIERFLOW_FLINK_STARTED {\"rest\": \"" + base + "\", \"job\": \"" + job.getJobID() + "\"}");
        System.out.flush();
        var result = job.getJobExecutionResult();
        String checkpoints = null;
        while (!result.isDone()) {  // the last history before the MiniCluster goes away with the job
            String got = get(base + "/jobs/" + job.getJobID() + "/checkpoints");
            if (got != null) checkpoints = got;
            Thread.sleep(200);
        }
        result.get();
        System.out.println("BARRIERFLOW_PEER_ROW {\"effective\": " + effective + ", \"checkpoints\": "
            + (checkpoints == null ? "null" : checkpoints) + "}");
        System.out.flush();
        System.exit(0);
    }
}
