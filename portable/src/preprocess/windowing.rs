//! A submitted pipeline's windowing as Weir's: window functions, triggers, accumulation,
//! allowed lateness and timestamp combiners read from the Runner API protos into the
//! [`WindowingStrategy`] Weir's own GroupByKey runs.
//!
//! Only what Weir runs natively is accepted (the planner refuses the rest at Prepare with the
//! transform named); what the protos say that Weir cannot honour exactly is an error here,
//! never silently approximated.

use std::sync::Arc;
use std::time::Duration;

use crate::proto::pipeline::v1 as rapi;
use prost::Message;
use rapi::trigger::Trigger as T;
use weir_sdk::time::Timestamp;
use weir_sdk::trigger::{AccumulationMode, ClosingBehavior, OnTimeBehavior, TimestampCombiner, Trigger};
use weir_sdk::window::Window;
use weir_sdk::window_fn::{FixedWindows, GlobalWindows, Sessions, SlidingWindows, WindowFn, WindowingStrategy};

use weir_sdk::urns::window_fns as urns;

fn duration(d: Option<prost_types::Duration>) -> Result<Duration, String> {
    let d = d.unwrap_or_default();
    let nanos = i128::from(d.seconds) * 1_000_000_000 + i128::from(d.nanos);
    u64::try_from(nanos).map(Duration::from_nanos).map_err(|_| format!("a negative or huge duration {d:?}"))
}

fn offset(t: Option<prost_types::Timestamp>) -> Result<Duration, String> {
    let t = t.unwrap_or_default();
    duration(Some(prost_types::Duration { seconds: t.seconds, nanos: t.nanos }))
}

/// The window function `spec` names (one of [`urns`]), from its payload.
pub fn window_fn(spec: &rapi::FunctionSpec) -> Result<Arc<dyn WindowFn>, String> {
    let bad = |e: prost::DecodeError| format!("the payload of {} does not decode: {e}", spec.urn);
    Ok(match spec.urn.as_str() {
        urns::GLOBAL => Arc::new(GlobalWindows),
        urns::FIXED => {
            let p = rapi::FixedWindowsPayload::decode(&spec.payload[..]).map_err(bad)?;
            Arc::new(FixedWindows::of(duration(p.size)?).with_offset(offset(p.offset)?))
        }
        urns::SLIDING => {
            let p = rapi::SlidingWindowsPayload::decode(&spec.payload[..]).map_err(bad)?;
            Arc::new(SlidingWindows::of(duration(p.size)?).every(duration(p.period)?).with_offset(offset(p.offset)?))
        }
        urns::SESSIONS => {
            let p = rapi::SessionWindowsPayload::decode(&spec.payload[..]).map_err(bad)?;
            Arc::new(Sessions::with_gap_duration(duration(p.gap_size)?))
        }
        other => return Err(format!("the window function {other} is known only to the SDK")),
    })
}

fn sub(t: Option<&rapi::Trigger>, what: &str) -> Result<Trigger, String> {
    t.map(trigger).transpose()?.ok_or_else(|| format!("a trigger without its {what}"))
}

fn all(ts: &[rapi::Trigger]) -> Result<Vec<Trigger>, String> {
    ts.iter().map(trigger).collect()
}

/// A trigger proto as Weir's.
pub fn trigger(t: &rapi::Trigger) -> Result<Trigger, String> {
    let Some(t) = t.trigger.as_ref() else { return Err("an empty trigger".into()) };
    Ok(match t {
        T::Default(_) => Trigger::Default,
        T::AfterEndOfWindow(w) => Trigger::AfterWatermark {
            early: w.early_firings.as_deref().map(trigger).transpose()?.map(Box::new),
            late: w.late_firings.as_deref().map(trigger).transpose()?.map(Box::new),
        },
        T::AfterProcessingTime(p) => {
            use rapi::timestamp_transform::TimestampTransform as X;
            let (mut delay_ms, mut align) = (0, None);
            for (i, x) in p.timestamp_transforms.iter().enumerate() {
                match (i, x.timestamp_transform.as_ref()) {
                    (0, Some(X::Delay(d))) => delay_ms = d.delay_millis,
                    (0 | 1, Some(X::AlignTo(a))) if align.is_none() => align = Some((a.period, a.offset)),
                    _ => return Err(format!("a processing-time trigger's transforms {:?}", p.timestamp_transforms)),
                }
            }
            Trigger::AfterProcessingTime { delay_ms, align }
        }
        T::AfterSynchronizedProcessingTime(_) => Trigger::AfterSynchronizedProcessingTime,
        T::ElementCount(n) => Trigger::AfterCount(i64::from(n.element_count)),
        T::Never(_) => Trigger::Never,
        T::Always(_) => Trigger::Repeatedly(Box::new(Trigger::AfterCount(1))),
        T::AfterAll(a) => Trigger::AfterAll(all(&a.subtriggers)?),
        T::AfterAny(a) => Trigger::AfterFirst(all(&a.subtriggers)?),
        T::AfterEach(a) => Trigger::AfterEach(all(&a.subtriggers)?),
        T::OrFinally(o) => Trigger::OrFinally(
            Box::new(sub(o.main.as_deref(), "main trigger")?),
            Box::new(sub(o.finally.as_deref(), "finally trigger")?),
        ),
        T::Repeat(r) => Trigger::Repeatedly(Box::new(sub(r.subtrigger.as_deref(), "repeated trigger")?)),
    })
}

/// Merges the windows of a window function only the SDK knows (see
/// `crate::translate::merge_windows`, which asks a harness).
pub trait SdkMerger: Send + Sync {
    /// One key's `windows` merged: each merge's windows and its result.
    fn merge(&self, windows: &[Window]) -> Result<Vec<(Vec<Window>, Window)>, String>;
}

/// Windows the SDK's own window function assigns (Beam Java's `serialized_java`, a
/// `WindowFn` only the harness can run), coded as global or interval windows or by a coder of
/// the SDK's own (then carried as bytes after their last instant, `SdkWindow`): Weir never
/// assigns them (the WindowInto that does runs in the harness), it groups and triggers on them
/// as on any window whose end it knows. Windows that merge are merged by a harness, through the
/// `merger` the translation gives them.
#[derive(Clone)]
pub struct SdkWindows {
    /// The window function as the pipeline gives it.
    pub spec: rapi::FunctionSpec,
    /// Whether its windows merge.
    pub merging: bool,
    /// Who merges them, once the job runs.
    pub merger: Option<Arc<dyn SdkMerger>>,
}

impl PartialEq for SdkWindows {
    fn eq(&self, other: &Self) -> bool {
        self.spec == other.spec
    }
}

impl std::fmt::Debug for SdkWindows {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the SDK's window function {} ({} bytes)", self.spec.urn, self.spec.payload.len())
    }
}

impl WindowFn for SdkWindows {
    /// Already assigned by the harness: an element keeps its window.
    fn assign_windows(&self, _timestamp: Timestamp, window: &Window, out: &mut Vec<Window>) {
        out.push(*window);
    }
    fn is_merging(&self) -> bool {
        self.merging
    }
    fn try_merge_windows(&self, windows: &[Window]) -> Result<Vec<(Vec<Window>, Window)>, String> {
        match &self.merger {
            Some(m) => m.merge(windows),
            None => Err(format!("{self:?} merges its windows, and no SDK harness was given to merge them")),
        }
    }
    fn is_compatible(&self, other: &dyn WindowFn) -> bool {
        other.as_any().downcast_ref::<SdkWindows>() == Some(self)
    }
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

/// The window function of strategy `ws`: one Weir runs, or (for one only the SDK knows) the
/// harness's own.
fn strategy_window_fn(ws: &rapi::WindowingStrategy, coders: &Coders) -> Result<Arc<dyn WindowFn>, String> {
    let spec = ws.window_fn.as_ref().ok_or("a windowing strategy without a window function")?;
    match window_fn(spec) {
        Ok(f) => Ok(f),
        Err(e) if !is_known(&spec.urn) => {
            let merging = ws.merge_status == rapi::merge_status::Enum::NeedsMerge as i32;
            if !coders.contains_key(&ws.window_coder_id) {
                return Err(format!("{e}, and its window coder '{}' is not among the pipeline's", ws.window_coder_id));
            }
            Ok(Arc::new(SdkWindows { spec: spec.clone(), merging, merger: None }))
        }
        Err(e) => Err(e),
    }
}

/// Whether Weir runs window function `urn` itself.
pub fn is_known(urn: &str) -> bool {
    [urns::GLOBAL, urns::FIXED, urns::SLIDING, urns::SESSIONS].contains(&urn)
}

/// A pipeline's coders, by id.
pub type Coders = std::collections::HashMap<String, rapi::Coder>;

/// A windowing strategy proto as Weir's (`coders` are the pipeline's, for its window coder).
pub fn strategy(ws: &rapi::WindowingStrategy, coders: &Coders) -> Result<WindowingStrategy, String> {
    use rapi::{accumulation_mode, closing_behavior, on_time_behavior, output_time};
    let mut s = WindowingStrategy::of(strategy_window_fn(ws, coders)?);
    if let Some(t) = &ws.trigger {
        s.trigger = trigger(t)?;
    }
    s.accumulation_mode = match accumulation_mode::Enum::try_from(ws.accumulation_mode) {
        Ok(accumulation_mode::Enum::Discarding | accumulation_mode::Enum::Unspecified) => AccumulationMode::Discarding,
        Ok(accumulation_mode::Enum::Accumulating) => AccumulationMode::Accumulating,
        _ => return Err(format!("accumulation mode {}", ws.accumulation_mode)),
    };
    s.timestamp_combiner = match output_time::Enum::try_from(ws.output_time) {
        Ok(output_time::Enum::EndOfWindow | output_time::Enum::Unspecified) => TimestampCombiner::EndOfWindow,
        Ok(output_time::Enum::EarliestInPane) => TimestampCombiner::Earliest,
        Ok(output_time::Enum::LatestInPane) => TimestampCombiner::Latest,
        Err(_) => return Err(format!("output time {}", ws.output_time)),
    };
    // Both closing behaviors run as EMIT_IF_NONEMPTY, as on Prism, Beam's portable runner
    // ("identical without additional trigger firings"): a window's last pane at expiry comes
    // only when it holds elements not yet fired. Beam Python writes EMIT_ALWAYS into every
    // strategy (it cannot express the other), and its runners emit no extra pane repeating the
    // accumulated value at expiry; Beam's Java ReduceFnRunner (on Flink) would.
    s.closing_behavior = match closing_behavior::Enum::try_from(ws.closing_behavior) {
        Ok(
            closing_behavior::Enum::EmitAlways
            | closing_behavior::Enum::EmitIfNonempty
            | closing_behavior::Enum::Unspecified,
        ) => ClosingBehavior::FireIfNonEmpty,
        Err(_) => return Err(format!("closing behavior {}", ws.closing_behavior)),
    };
    s.on_time_behavior = match on_time_behavior::Enum::try_from(ws.on_time_behavior) {
        Ok(on_time_behavior::Enum::FireAlways | on_time_behavior::Enum::Unspecified) => OnTimeBehavior::FireAlways,
        Ok(on_time_behavior::Enum::FireIfNonempty) => OnTimeBehavior::FireIfNonEmpty,
        Err(_) => return Err(format!("on-time behavior {}", ws.on_time_behavior)),
    };
    s.allowed_lateness_ms = ws.allowed_lateness.max(0);
    // A merging strategy whose windows an earlier grouping merged: Beam marks it so.
    s.already_merged = ws.merge_status == rapi::merge_status::Enum::AlreadyMerged as i32;
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(urn: &str, payload: Vec<u8>) -> rapi::FunctionSpec {
        rapi::FunctionSpec { urn: urn.into(), payload }
    }

    #[test]
    fn window_functions_and_triggers_read_as_weir_s() {
        let secs = |s| Some(prost_types::Duration { seconds: s, nanos: 0 });
        let fixed = rapi::FixedWindowsPayload { size: secs(60), offset: None }.encode_to_vec();
        let f = window_fn(&spec(urns::FIXED, fixed)).unwrap();
        let mut out = Vec::new();
        f.assign_windows(61_000, &weir_sdk::window::Window::Global, &mut out);
        assert_eq!(out[0].max_timestamp(), 119_999);
        let sliding = rapi::SlidingWindowsPayload { size: secs(10), period: secs(5), offset: None }.encode_to_vec();
        out.clear();
        window_fn(&spec(urns::SLIDING, sliding)).unwrap().assign_windows(
            7_000,
            &out.first().copied().unwrap_or(weir_sdk::window::Window::Global),
            &mut out,
        );
        assert_eq!(out.len(), 2);
        assert!(window_fn(&spec("beam:window_fn:custom:v1", vec![])).unwrap_err().contains("known only to the SDK"));
        assert!(window_fn(&spec(urns::FIXED, vec![0xff])).is_err());

        let count =
            |n| rapi::Trigger { trigger: Some(T::ElementCount(rapi::trigger::ElementCount { element_count: n })) };
        let repeat = rapi::Trigger {
            trigger: Some(T::Repeat(Box::new(rapi::trigger::Repeat { subtrigger: Some(Box::new(count(2))) }))),
        };
        assert_eq!(trigger(&repeat).unwrap(), Trigger::Repeatedly(Box::new(Trigger::AfterCount(2))));
        let hollow = rapi::Trigger { trigger: Some(T::Repeat(Box::new(rapi::trigger::Repeat { subtrigger: None }))) };
        assert!(trigger(&hollow).is_err());
        let ws = rapi::WindowingStrategy {
            window_fn: Some(spec(urns::GLOBAL, vec![])),
            trigger: Some(repeat),
            accumulation_mode: rapi::accumulation_mode::Enum::Accumulating as i32,
            output_time: rapi::output_time::Enum::EarliestInPane as i32,
            allowed_lateness: 5_000,
            ..Default::default()
        };
        let s = strategy(&ws, &Coders::new()).unwrap();
        assert_eq!(s.accumulation_mode, AccumulationMode::Accumulating);
        assert_eq!(s.timestamp_combiner, TimestampCombiner::Earliest);
        assert_eq!(s.allowed_lateness_ms, 5_000);
        let retracting = rapi::WindowingStrategy { accumulation_mode: 3, ..ws };
        assert!(strategy(&retracting, &Coders::new()).is_err());
    }
}
