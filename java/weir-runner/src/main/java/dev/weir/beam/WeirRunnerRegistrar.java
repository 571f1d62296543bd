package dev.weir.beam;

import java.util.Collections;
import org.apache.beam.sdk.PipelineRunner;
import org.apache.beam.sdk.options.PipelineOptions;
import org.apache.beam.sdk.options.PipelineOptionsRegistrar;
import org.apache.beam.sdk.runners.PipelineRunnerRegistrar;

/**
 * Registers {@link WeirRunner} (so {@code --runner=WeirRunner} resolves) and its options with
 * Beam, through {@code META-INF/services}.
 */
public final class WeirRunnerRegistrar {
  private WeirRunnerRegistrar() {}

  /** The runner. */
  public static final class Runner implements PipelineRunnerRegistrar {
    @Override
    public Iterable<Class<? extends PipelineRunner<?>>> getPipelineRunners() {
      return Collections.singletonList(WeirRunner.class);
    }
  }

  /** Its options. */
  public static final class Options implements PipelineOptionsRegistrar {
    @Override
    public Iterable<Class<? extends PipelineOptions>> getPipelineOptions() {
      return Collections.singletonList(WeirPipelineOptions.class);
    }
  }
}
