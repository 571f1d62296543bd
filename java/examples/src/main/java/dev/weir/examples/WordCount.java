package dev.weir.examples;

import java.util.Arrays;
import org.apache.beam.sdk.Pipeline;
import org.apache.beam.sdk.PipelineResult;
import org.apache.beam.sdk.io.TextIO;
import org.apache.beam.sdk.options.Default;
import org.apache.beam.sdk.options.Description;
import org.apache.beam.sdk.options.PipelineOptions;
import org.apache.beam.sdk.options.PipelineOptionsFactory;
import org.apache.beam.sdk.options.Validation;
import org.apache.beam.sdk.transforms.Count;
import org.apache.beam.sdk.transforms.Filter;
import org.apache.beam.sdk.transforms.FlatMapElements;
import org.apache.beam.sdk.transforms.MapElements;
import org.apache.beam.sdk.values.TypeDescriptors;

/** Beam's word count, unchanged but for {@code --runner=WeirRunner}. */
public class WordCount {
  /** Where to read and write. */
  public interface Options extends PipelineOptions {
    @Description("The text to count the words of")
    @Validation.Required
    String getInputFile();

    void setInputFile(String value);

    @Description("Prefix of the files of counts")
    @Default.String("counts")
    String getOutput();

    void setOutput(String value);
  }

  public static void main(String[] args) {
    Options options = PipelineOptionsFactory.fromArgs(args).withValidation().as(Options.class);
    Pipeline p = Pipeline.create(options);
    p.apply("Read", TextIO.read().from(options.getInputFile()))
        .apply(
            "Words",
            FlatMapElements.into(TypeDescriptors.strings())
                .via(line -> Arrays.asList(line.split("[^\\p{L}]+"))))
        .apply(Filter.by(w -> !w.isEmpty()))
        .apply(Count.perElement())
        .apply(
            MapElements.into(TypeDescriptors.strings())
                .via(kv -> kv.getKey() + ": " + kv.getValue()))
        .apply("Write", TextIO.write().to(options.getOutput()));
    PipelineResult.State state = p.run().waitUntilFinish();
    System.out.println("word count: " + state);
    if (state != PipelineResult.State.DONE) {
      System.exit(1);
    }
  }
}
