//! The cluster's handshake: before any data moves, every process shows worker 0 what it is
//! about to run (the Weir version, the pipeline's shape and parameters, the physical plan, and
//! the options but its own index and hostfile), and a process that differs from process 0
//! stops the whole cluster with an error naming the first difference.

use crate::process::Process;
use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;
use timely::dataflow::channels::pact::Exchange;
use timely::dataflow::operators::generic::Operator;
use timely::dataflow::operators::{Capability, Input, Probe};
use timely::dataflow::{InputHandle, ProbeHandle};
use timely::worker::Worker;
use weir_runner_core::fingerprint::Fingerprint;
use weir_sdk::graph::PipelineGraph;
use weir_sdk::{Error, PipelineOptions, Result};

/// What every process of a cluster must agree on.
pub(crate) fn fingerprint(
    graph: &PipelineGraph,
    plan: &weir_runner_core::plan::PhysicalPlan,
    options: &PipelineOptions,
) -> Fingerprint {
    let mut f = Fingerprint::default();
    f.push("Weir version", env!("CARGO_PKG_VERSION"));
    f.entries.extend(Fingerprint::of_graph(graph).entries);
    for n in &plan.nodes {
        f.push(format!("physical node '{}'", n.name), n.kind);
    }
    // The options, but what differs by process by design.
    let mut t = options.get::<crate::TimelyOptions>().into_owned();
    t.process_id = 0;
    t.hostfile = None;
    t.local_addresses = None;
    let options = format!("{:?}", options.clone().with(t));
    // One entry per field, named without the group that opens before it (`Group { field: v`).
    for (k, part) in options.split(", ").enumerate() {
        f.push(format!("option {k}"), part.rsplit("{ ").next().unwrap_or(part));
    }
    f
}

/// The first difference between process 0's fingerprint and process `p`'s, as a sentence.
fn difference(zero: &Fingerprint, p: usize, other: &Fingerprint) -> Option<String> {
    let n = zero.entries.len().max(other.entries.len());
    (0..n).find_map(|i| match (zero.entries.get(i), other.entries.get(i)) {
        (Some(a), Some(b)) if a == b => None,
        (Some(a), Some(b)) if a.what.starts_with("option") => Some(format!(
            "process {p} was started with other options: process 0 has `{}`, process {p} has `{}`",
            a.value, b.value
        )),
        (Some(a), Some(b)) => Some(format!(
            "process {p} runs another pipeline or version: {}: process 0 has {}, process {p} has {} ({})",
            a.what, a.value, b.value, b.what
        )),
        (Some(a), None) => Some(format!("process {p} runs another pipeline: it has no {}", a.what)),
        (None, Some(b)) => Some(format!("process {p} runs another pipeline: process 0 has no {}", b.what)),
        (None, None) => None,
    })
}

type Shown = (u32, (u32, Fingerprint));
type Verdict = (u32, Option<String>);

/// Runs the handshake on this worker: `Ok` once worker 0 found every process alike, the
/// difference as an error otherwise (on every worker).
pub(crate) fn run(worker: &mut Worker, process: &Process) -> Result<()> {
    let me = worker.index();
    let peers = worker.peers();
    let own = process.fingerprint.clone();
    let verdict: Rc<RefCell<Option<Option<String>>>> = Rc::new(RefCell::new(None));
    let mut input: InputHandle<u64, timely::container::CapacityContainerBuilder<Vec<Shown>>> = InputHandle::new();
    let probe = ProbeHandle::new();
    let slot = verdict.clone();
    worker.dataflow::<u64, _, _>(|scope| {
        let zero = own.clone();
        scope
            .input_from(&mut input)
            .unary_frontier(Exchange::new(|r: &Shown| r.0 as u64), "Handshake", move |_, _| {
                let mut shown: Vec<(u32, Fingerprint)> = Vec::new();
                let mut cap: Option<Capability<u64>> = None;
                move |(input, frontier), output| {
                    input.for_each(|c, data| {
                        if cap.is_none() {
                            cap = c.least().map(|t| c.delayed(t, 0));
                        }
                        shown.extend(data.drain(..).map(|(_, s)| s));
                    });
                    if frontier.frontier().is_empty() {
                        if let Some(cap) = cap.take() {
                            shown.sort_by_key(|(p, _)| *p);
                            let found = shown.iter().find_map(|(p, f)| difference(&zero, *p as usize, f));
                            output.session(&cap).give_iterator((0..peers).map(|w| (w as u32, found.clone())));
                        }
                    }
                }
            })
            .probe_with(&probe)
            .sink(Exchange::new(|r: &Verdict| r.0 as u64), "Verdict", move |(input, _)| {
                input.for_each(|_, data| {
                    for (_, v) in data.drain(..) {
                        *slot.borrow_mut() = Some(v);
                    }
                });
            });
    });
    if me == process.place.first {
        input.send((0, (process.place.process_id as u32, own)));
    }
    drop(input);
    loop {
        if let Some(v) = verdict.borrow_mut().take() {
            return match v {
                None => Ok(()),
                Some(difference) => Err(Error::Options(format!("the cluster's processes differ: {difference}"))),
            };
        }
        if process.job.is_cancelled() {
            return Err(Error::Cancelled);
        }
        if !worker.step_or_park(Some(Duration::from_millis(5))) && probe.done() && verdict.borrow().is_none() {
            return Err(Error::Internal {
                component: "timely runner".into(),
                message: "the cluster's handshake ended without a verdict".into(),
            });
        }
    }
}
