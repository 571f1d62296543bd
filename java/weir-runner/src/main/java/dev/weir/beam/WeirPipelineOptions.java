package dev.weir.beam;

import java.util.List;
import org.apache.beam.sdk.options.Description;
import org.apache.beam.sdk.options.PortablePipelineOptions;

/** Options of {@link WeirRunner}: Beam's portable options, and where weir-job-server is. */
public interface WeirPipelineOptions extends PortablePipelineOptions {
  @Description(
      "The weir-job-server to start (default: the first on the PATH). Ignored when --jobEndpoint"
          + " names a running job server.")
  String getWeirJobServer();

  void setWeirJobServer(String value);

  @Description(
      "Weir's own flags for the job server WeirRunner starts, e.g. --weirFlags=--runner,timely,"
          + "--workers,2 (Weir's --runner, --parallelism, --checkpoint-dir and the rest).")
  List<String> getWeirFlags();

  void setWeirFlags(List<String> value);

  @Description("How long to wait for the job server WeirRunner starts to listen, in seconds.")
  @org.apache.beam.sdk.options.Default.Integer(60)
  int getWeirJobServerStartTimeoutSeconds();

  void setWeirJobServerStartTimeoutSeconds(int value);
}
