//! The fingerprint of a pipeline: what a checkpoint records so that only the same pipeline can
//! resume from it.
//!
//! State, offsets and output written by one pipeline are meaningless to another: a different
//! query reading the same checkpoint would start from the wrong offsets with the wrong state and
//! produce wrong results without a word. So a checkpoint stores the fingerprint of the pipeline
//! that wrote it, and a resume compares it with its own, entry by entry, and refuses at the first
//! difference, naming it. The fingerprint covers what changes results:
//!
//! - every transform, composite or primitive, by full step name and URN, in application order;
//! - each ParDo's DoFn type, outputs, side inputs and whether it keeps state;
//! - each source's description (what it reads and how it is configured);
//! - each PCollection's coder and windowing strategy (window function and its parameters,
//!   trigger, accumulation, allowed lateness, timestamp combiner);
//! - what the runner adds: its physical nodes and their kinds, the number of partitions, the key
//!   partitioning function and its version, and the state format.

use serde::{Deserialize, Serialize};
use weir_sdk::graph::{Payload, PipelineGraph, ReadPayload};

/// One entry of a fingerprint: what it describes, and how.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// What the entry is about, e.g. `transform 'Query5/Window'` or `partitioning`.
    pub what: String,
    /// Its value, e.g. a URN, a DoFn type, a windowing strategy.
    pub value: String,
}

/// The fingerprint of a pipeline as a runner executes it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fingerprint {
    /// The entries, in a fixed order.
    pub entries: Vec<Entry>,
}

impl Fingerprint {
    /// The fingerprint of everything in `graph` that changes results.
    pub fn of_graph(graph: &PipelineGraph) -> Self {
        let mut f = Fingerprint::default();
        for node in graph.nodes.iter().skip(1) {
            let step = format!("transform '{}'", node.full_name);
            f.push(&step, node.urn);
            match &node.payload {
                Payload::ParDo(p) => {
                    match p.fn_description.as_str() {
                        "" => f.push(format!("{step} DoFn"), p.fn_name),
                        what => f.push(format!("{step} DoFn"), format!("{} running {what}", p.fn_name)),
                    }
                    f.push(format!("{step} outputs"), p.output_tags.join(", "));
                    f.push(format!("{step} stateful"), p.stateful.to_string());
                    f.push(format!("{step} side inputs"), p.side_inputs.len().to_string());
                }
                Payload::Read(ReadPayload::Bounded(s)) => f.push(format!("{step} source"), s.describe()),
                Payload::Read(ReadPayload::Unbounded(s)) => f.push(format!("{step} source"), s.describe()),
                Payload::TestStream(events) => f.push(format!("{step} events"), format!("{events:?}")),
                _ => {}
            }
            for &pc in &node.outputs {
                let pc = graph.pcollection(pc);
                let of = format!("PCollection '{}'", pc.name);
                f.push(format!("{of} coder"), &pc.coder_name);
                f.push(format!("{of} windowing"), format!("{:?}", pc.windowing));
            }
        }
        f
    }

    /// Appends an entry.
    pub fn push(&mut self, what: impl Into<String>, value: impl Into<String>) {
        self.entries.push(Entry { what: what.into(), value: value.into() });
    }

    /// Appends the key partitioning, its function and version, for a runner that spreads state
    /// over however many partitions it restarts with (key group by key group).
    pub fn with_key_groups(mut self) -> Self {
        self.push("partitioning", weir_sdk::kernel::PARTITIONING);
        self
    }

    /// The first difference between a checkpoint's fingerprint (`self`) and a pipeline's, as a
    /// sentence; `None` when they are equal.
    pub fn first_difference(&self, pipeline: &Fingerprint) -> Option<String> {
        let (old, new) = (&self.entries, &pipeline.entries);
        for i in 0..old.len().max(new.len()) {
            match (old.get(i), new.get(i)) {
                (Some(a), Some(b)) if a == b => continue,
                (Some(a), Some(b)) if a.what == b.what => {
                    return Some(format!(
                        "{}: the checkpoint has {}, this pipeline has {}",
                        a.what,
                        shown(&a.value),
                        shown(&b.value)
                    ))
                }
                (Some(a), Some(b)) => {
                    return Some(format!(
                        "the checkpoint's pipeline has {} ({}) where this pipeline has {} ({})",
                        a.what,
                        shown(&a.value),
                        b.what,
                        shown(&b.value)
                    ))
                }
                (Some(a), None) => {
                    return Some(format!(
                        "the checkpoint's pipeline has {} ({}), which this pipeline lacks",
                        a.what,
                        shown(&a.value)
                    ))
                }
                (None, Some(b)) => {
                    return Some(format!(
                        "this pipeline has {} ({}), which the checkpoint's pipeline lacks",
                        b.what,
                        shown(&b.value)
                    ))
                }
                (None, None) => break,
            }
        }
        None
    }
}

/// A value in a message: quoted, and cut if very long.
fn shown(v: &str) -> String {
    const MAX: usize = 2000;
    if v.len() <= MAX {
        return format!("'{v}'");
    }
    let cut = (0..=MAX).rev().find(|&i| v.is_char_boundary(i)).unwrap_or(0);
    format!("'{}...' ({} bytes)", &v[..cut], v.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fp(entries: &[(&str, &str)]) -> Fingerprint {
        let mut f = Fingerprint::default();
        for (w, v) in entries {
            f.push(*w, *v);
        }
        f
    }

    #[test]
    fn names_the_first_difference() {
        let a = fp(&[("transform 'A'", "urn:read"), ("transform 'B'", "urn:pardo")]);
        assert_eq!(a.first_difference(&a.clone()), None);
        let changed = fp(&[("transform 'A'", "urn:read"), ("transform 'B'", "urn:gbk")]);
        let d = a.first_difference(&changed).unwrap();
        assert!(d.contains("transform 'B'") && d.contains("urn:pardo") && d.contains("urn:gbk"), "{d}");
        let renamed = fp(&[("transform 'A'", "urn:read"), ("transform 'C'", "urn:pardo")]);
        let d = a.first_difference(&renamed).unwrap();
        assert!(d.contains("'B'") && d.contains("'C'"), "{d}");
        let shorter = fp(&[("transform 'A'", "urn:read")]);
        assert!(a.first_difference(&shorter).unwrap().contains("which this pipeline lacks"));
        assert!(shorter.first_difference(&a).unwrap().contains("which the checkpoint's pipeline lacks"));
    }

    #[test]
    fn long_values_are_cut_on_a_character_boundary() {
        let long = "é".repeat(3000);
        let s = shown(&long);
        assert!(s.ends_with("(6000 bytes)") && s.len() < 2100, "{}", s.len());
    }
}
