package dev.weir.beam;

import java.io.BufferedReader;
import java.io.File;
import java.io.IOException;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.apache.beam.runners.portability.PortableRunner;
import org.apache.beam.sdk.Pipeline;
import org.apache.beam.sdk.PipelineResult;
import org.apache.beam.sdk.PipelineRunner;
import org.apache.beam.sdk.metrics.MetricResults;
import org.apache.beam.sdk.options.PipelineOptions;
import org.joda.time.Duration;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Runs a Beam Java pipeline on Weir: {@code --runner=WeirRunner}.
 *
 * <p>Without {@code --jobEndpoint} it starts {@code weir-job-server} ({@code --weirJobServer}, or
 * the first on the PATH) on a free port of 127.0.0.1 with {@code --weirFlags}, runs the pipeline
 * there through Beam's {@link PortableRunner}, and stops the server once the pipeline ends (its
 * metrics read first, so {@link PipelineResult#metrics()} still answers). With {@code
 * --jobEndpoint} it submits there, failing at once when nothing listens. The SDK harness is
 * LOOPBACK (in this JVM) unless {@code --defaultEnvironmentType} says otherwise. The server's
 * output, harness logs included, goes to this JVM's log.
 */
public class WeirRunner extends PipelineRunner<PipelineResult> {
  private static final Logger LOG = LoggerFactory.getLogger(WeirRunner.class);
  private static final Pattern LISTENS = Pattern.compile("listens on .*:(\\d+)$");

  private final WeirPipelineOptions options;

  private WeirRunner(WeirPipelineOptions options) {
    this.options = options;
  }

  /** Beam's entry point: the runner of these options. */
  public static WeirRunner fromOptions(PipelineOptions options) {
    return new WeirRunner(options.as(WeirPipelineOptions.class));
  }

  @Override
  public PipelineResult run(Pipeline pipeline) {
    if (options.getDefaultEnvironmentType() == null
        || options.getDefaultEnvironmentType().isEmpty()) {
      options.setDefaultEnvironmentType("LOOPBACK");
    }
    String endpoint = options.getJobEndpoint();
    if (endpoint != null && !endpoint.isEmpty()) {
      checkEndpoint(endpoint);
      return PortableRunner.fromOptions(options).run(pipeline);
    }
    JobServer server = JobServer.start(options);
    options.setJobEndpoint(server.endpoint());
    try {
      return new StoppingResult(PortableRunner.fromOptions(options).run(pipeline), server);
    } catch (RuntimeException e) {
      server.stop();
      throw e;
    }
  }

  /** Fails naming {@code endpoint} when nothing listens there. */
  static void checkEndpoint(String endpoint) {
    int colon = endpoint.lastIndexOf(':');
    String host = colon > 0 ? endpoint.substring(0, colon) : "localhost";
    try (Socket s = new Socket()) {
      s.connect(new InetSocketAddress(host, Integer.parseInt(endpoint.substring(colon + 1))), 5000);
    } catch (IOException | RuntimeException e) {
      throw new IllegalStateException(
          "no Weir job server answers at --jobEndpoint="
              + endpoint
              + " ("
              + e
              + "): start one (weir-job-server --job-port PORT), or leave --jobEndpoint out and"
              + " WeirRunner starts its own",
          e);
    }
  }

  /** A weir-job-server this runner started. */
  static final class JobServer {
    private final Process process;
    private final int port;

    private JobServer(Process process, int port) {
      this.process = process;
      this.port = port;
    }

    String endpoint() {
      return "localhost:" + port;
    }

    static String binary(WeirPipelineOptions options) {
      String given = options.getWeirJobServer();
      if (given != null && !given.isEmpty()) {
        if (!new File(given).canExecute()) {
          throw new IllegalArgumentException(
              "--weirJobServer=" + given + " is not an executable file");
        }
        return given;
      }
      String path = System.getenv("PATH");
      for (String dir : (path == null ? "" : path).split(File.pathSeparator)) {
        File candidate = new File(dir, "weir-job-server");
        if (candidate.canExecute()) {
          return candidate.getPath();
        }
      }
      throw new IllegalArgumentException(
          "weir-job-server is not on the PATH: give its path with --weirJobServer, or build it"
              + " (cargo build --release -p weir-portable --bin weir-job-server)");
    }

    static JobServer start(WeirPipelineOptions options) {
      List<String> cmd = new ArrayList<>();
      cmd.add(binary(options));
      cmd.add("--job-port");
      cmd.add("0");
      if (options.getWeirFlags() != null) {
        cmd.addAll(options.getWeirFlags());
      }
      Process process;
      try {
        process = new ProcessBuilder(cmd).start();
      } catch (IOException e) {
        throw new IllegalStateException("cannot start " + String.join(" ", cmd) + ": " + e, e);
      }
      CompletableFuture<Integer> port = new CompletableFuture<>();
      StringBuilder errors = new StringBuilder();
      pump(process.getInputStream(), port, null);
      pump(process.getErrorStream(), null, errors);
      int timeout = options.getWeirJobServerStartTimeoutSeconds();
      try {
        int p = port.get(timeout, TimeUnit.SECONDS);
        LOG.info("weir-job-server listens on 127.0.0.1:{} ({})", p, String.join(" ", cmd));
        return new JobServer(process, p);
      } catch (Exception e) {
        process.destroyForcibly();
        String why;
        synchronized (errors) {
          why = errors.toString();
        }
        throw new IllegalStateException(
            "weir-job-server did not start within "
                + timeout
                + " s ("
                + String.join(" ", cmd)
                + "): "
                + (why.isEmpty() ? e.toString() : why.trim()),
            e);
      }
    }

    /**
     * Copies a stream of the server to this JVM's log; on stdout, completes {@code port} when the
     * server says where it listens; on stderr, keeps the first lines for a start that fails.
     */
    private static void pump(InputStream in, CompletableFuture<Integer> port, StringBuilder keep) {
      Thread t =
          new Thread(
              () -> {
                try (BufferedReader r =
                    new BufferedReader(new InputStreamReader(in, StandardCharsets.UTF_8))) {
                  String line;
                  while ((line = r.readLine()) != null) {
                    Matcher m = LISTENS.matcher(line);
                    if (port != null && !port.isDone() && m.find()) {
                      port.complete(Integer.parseInt(m.group(1)));
                    }
                    if (keep != null) {
                      synchronized (keep) {
                        if (keep.length() < 4000) {
                          keep.append(line).append('\n');
                        }
                      }
                    }
                    LOG.info("weir-job-server: {}", line);
                  }
                } catch (IOException e) {
                  LOG.debug("weir-job-server's output ended: {}", e.toString());
                }
                if (port != null) {
                  port.completeExceptionally(new IllegalStateException("the server exited"));
                }
              },
              "weir-job-server-output");
      t.setDaemon(true);
      t.start();
    }

    void stop() {
      if (process.isAlive()) {
        process.destroy();
        try {
          if (!process.waitFor(10, TimeUnit.SECONDS)) {
            process.destroyForcibly();
          }
        } catch (InterruptedException e) {
          process.destroyForcibly();
          Thread.currentThread().interrupt();
        }
      }
    }

    boolean isAlive() {
      return process.isAlive();
    }
  }

  /**
   * The pipeline's result; stops the job server once the pipeline reached a terminal state,
   * after reading its metrics.
   */
  static final class StoppingResult implements PipelineResult {
    private final PipelineResult inner;
    private final JobServer server;
    private final Thread onExit;
    private MetricResults metrics;

    StoppingResult(PipelineResult inner, JobServer server) {
      this.inner = inner;
      this.server = server;
      this.onExit = new Thread(server::stop, "weir-job-server-stop");
      Runtime.getRuntime().addShutdownHook(onExit);
    }

    private synchronized State stopIfDone(State state) {
      if (state != null && state.isTerminal() && server.isAlive()) {
        try {
          metrics = inner.metrics();
          metrics.allMetrics();
        } catch (RuntimeException e) {
          LOG.debug("no metrics of the job: {}", e.toString());
        }
        server.stop();
        try {
          Runtime.getRuntime().removeShutdownHook(onExit);
        } catch (IllegalStateException e) {
          // The JVM is already shutting down.
        }
      }
      return state;
    }

    @Override
    public State getState() {
      return server.isAlive() ? stopIfDone(inner.getState()) : inner.getState();
    }

    @Override
    public State cancel() throws IOException {
      return stopIfDone(inner.cancel());
    }

    @Override
    public State waitUntilFinish(Duration duration) {
      try {
        return stopIfDone(inner.waitUntilFinish(duration));
      } catch (RuntimeException e) {
        stopIfDone(State.FAILED);
        throw e;
      }
    }

    @Override
    public State waitUntilFinish() {
      try {
        return stopIfDone(inner.waitUntilFinish());
      } catch (RuntimeException e) {
        stopIfDone(State.FAILED);
        throw e;
      }
    }

    /** Whether the job server still runs. */
    boolean serverAlive() {
      return server.isAlive();
    }

    @Override
    public synchronized MetricResults metrics() {
      return metrics != null ? metrics : inner.metrics();
    }
  }
}
