//! Trigger state machines: a [`Trigger`] executed per key and window.
//!
//! The trigger tree is flattened once per GroupByKey into [`TriggerMachine`] nodes (preorder,
//! node 0 the root); the per-window [`TriggerState`] is plain data (finished bits, element
//! counts, processing-time targets, on-time bits), so it can be merged when windows merge and
//! persisted by state stores. The engine calls `on_element` for every element, `should_fire` after
//! each batch and timer, and `on_fire` when it emits a pane.

use serde::{Deserialize, Serialize};
use weir_sdk::time::Timestamp;
use weir_sdk::trigger::Trigger;

#[derive(Clone, Debug)]
enum Kind {
    Default,
    AfterWatermark { early: Option<usize>, late: Option<usize> },
    ProcessingTime { delay_ms: i64, align: Option<(i64, i64)> },
    Count(i64),
    Repeatedly(usize),
    AfterEach(Vec<usize>),
    AfterFirst(Vec<usize>),
    AfterAll(Vec<usize>),
    OrFinally(usize, usize),
    Never,
}

/// The time a trigger is evaluated at.
#[derive(Clone, Copy, Debug)]
pub struct TriggerContext {
    /// The GroupByKey's input watermark.
    pub input_watermark: Timestamp,
    /// Current processing time.
    pub processing_time: Timestamp,
    /// The window's maximum timestamp.
    pub window_max: Timestamp,
}

impl TriggerContext {
    fn past_end_of_window(&self) -> bool {
        self.input_watermark > self.window_max
    }
}

/// Per-window state of a trigger.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TriggerState {
    nodes: Nodes,
}

/// The nodes' states of one window, the root's inline: a window of a one-node trigger (the
/// default trigger, a count, a processing-time delay) allocates nothing for it. Serialized as
/// the sequence of every node's state.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "Vec<NodeState>", into = "Vec<NodeState>")]
struct Nodes {
    root: NodeState,
    rest: Vec<NodeState>,
}

impl Nodes {
    fn new(n: usize) -> Self {
        Nodes { root: NodeState::default(), rest: vec![NodeState::default(); n.saturating_sub(1)] }
    }
}

impl From<Vec<NodeState>> for Nodes {
    fn from(nodes: Vec<NodeState>) -> Self {
        let mut nodes = nodes.into_iter();
        Nodes { root: nodes.next().unwrap_or_default(), rest: nodes.collect() }
    }
}

impl From<Nodes> for Vec<NodeState> {
    fn from(nodes: Nodes) -> Self {
        std::iter::once(nodes.root).chain(nodes.rest).collect()
    }
}

impl std::ops::Index<usize> for Nodes {
    type Output = NodeState;
    fn index(&self, i: usize) -> &NodeState {
        match i {
            0 => &self.root,
            _ => &self.rest[i - 1],
        }
    }
}

impl std::ops::IndexMut<usize> for Nodes {
    fn index_mut(&mut self, i: usize) -> &mut NodeState {
        match i {
            0 => &mut self.root,
            _ => &mut self.rest[i - 1],
        }
    }
}

/// The state of one node of the trigger tree.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
struct NodeState {
    finished: bool,
    on_time_fired: bool,
    count: i64,
    target: Option<Timestamp>,
}

/// A flattened trigger tree.
#[derive(Clone, Debug)]
pub struct TriggerMachine {
    nodes: Vec<Kind>,
}

impl TriggerMachine {
    /// Flattens `trigger`.
    pub fn new(trigger: &Trigger) -> Self {
        let mut m = TriggerMachine { nodes: Vec::new() };
        m.add(trigger);
        m
    }

    fn add(&mut self, t: &Trigger) -> usize {
        let i = self.nodes.len();
        self.nodes.push(Kind::Never);
        let kind = match t {
            Trigger::Default => Kind::Default,
            Trigger::Never => Kind::Never,
            Trigger::AfterWatermark { early, late } => {
                let early = early.as_ref().map(|e| self.add(e));
                let late = late.as_ref().map(|l| self.add(l));
                Kind::AfterWatermark { early, late }
            }
            Trigger::AfterProcessingTime { delay_ms, align } => {
                Kind::ProcessingTime { delay_ms: *delay_ms, align: *align }
            }
            // Processing time is one clock in Weir's runners, so synchronized processing time
            // is the arrival time of the pane's first element.
            Trigger::AfterSynchronizedProcessingTime => Kind::ProcessingTime { delay_ms: 0, align: None },
            Trigger::AfterCount(n) => Kind::Count(*n),
            Trigger::Repeatedly(t) => Kind::Repeatedly(self.add(t)),
            Trigger::AfterEach(ts) => Kind::AfterEach(ts.iter().map(|t| self.add(t)).collect()),
            Trigger::AfterFirst(ts) => Kind::AfterFirst(ts.iter().map(|t| self.add(t)).collect()),
            Trigger::AfterAll(ts) => Kind::AfterAll(ts.iter().map(|t| self.add(t)).collect()),
            Trigger::OrFinally(t, u) => {
                let t = self.add(t);
                let u = self.add(u);
                Kind::OrFinally(t, u)
            }
        };
        self.nodes[i] = kind;
        i
    }

    /// A fresh state.
    pub fn new_state(&self) -> TriggerState {
        TriggerState { nodes: Nodes::new(self.nodes.len()) }
    }

    /// Whether the root trigger has finished (the window is closed).
    pub fn is_finished(&self, s: &TriggerState) -> bool {
        s.nodes.root.finished
    }

    /// Whether [`TriggerMachine::on_elements`] can change a state: whether the trigger counts
    /// elements or starts a processing-time delay at one.
    pub fn counts_elements(&self) -> bool {
        self.nodes.iter().any(|k| matches!(k, Kind::Count(_) | Kind::ProcessingTime { .. }))
    }

    /// Records `n` new elements of the window.
    pub fn on_elements(&self, s: &mut TriggerState, n: i64, ctx: &TriggerContext) {
        self.element(0, s, n, ctx);
    }

    fn element(&self, i: usize, s: &mut TriggerState, n: i64, ctx: &TriggerContext) {
        if s.nodes[i].finished {
            return;
        }
        match &self.nodes[i] {
            Kind::Default | Kind::Never => {}
            Kind::AfterWatermark { early, late } => {
                let sub = if s.nodes[i].on_time_fired { *late } else { *early };
                if let Some(c) = sub {
                    self.element(c, s, n, ctx);
                }
            }
            Kind::ProcessingTime { delay_ms, align } => {
                if s.nodes[i].target.is_none() {
                    s.nodes[i].target = Some(aligned(ctx.processing_time.saturating_add(*delay_ms), *align));
                }
            }
            Kind::Count(_) => s.nodes[i].count += n,
            Kind::Repeatedly(c) => self.element(*c, s, n, ctx),
            Kind::AfterEach(cs) => {
                if let Some(c) = cs.iter().copied().find(|&c| !s.nodes[c].finished) {
                    self.element(c, s, n, ctx);
                }
            }
            Kind::AfterFirst(cs) | Kind::AfterAll(cs) => {
                for &c in cs {
                    self.element(c, s, n, ctx);
                }
            }
            Kind::OrFinally(t, u) => {
                self.element(*t, s, n, ctx);
                self.element(*u, s, n, ctx);
            }
        }
    }

    /// Whether the trigger fires now.
    pub fn should_fire(&self, s: &TriggerState, ctx: &TriggerContext) -> bool {
        self.fires(0, s, ctx)
    }

    fn fires(&self, i: usize, s: &TriggerState, ctx: &TriggerContext) -> bool {
        if s.nodes[i].finished {
            return false;
        }
        match &self.nodes[i] {
            Kind::Default => ctx.past_end_of_window(),
            Kind::Never => false,
            Kind::AfterWatermark { early, late } => {
                if s.nodes[i].on_time_fired {
                    late.is_some_and(|l| self.fires(l, s, ctx))
                } else {
                    ctx.past_end_of_window() || early.is_some_and(|e| self.fires(e, s, ctx))
                }
            }
            Kind::ProcessingTime { .. } => s.nodes[i].target.is_some_and(|t| ctx.processing_time >= t),
            Kind::Count(n) => s.nodes[i].count >= *n,
            Kind::Repeatedly(c) => self.fires(*c, s, ctx),
            Kind::AfterEach(cs) => {
                cs.iter().copied().find(|&c| !s.nodes[c].finished).is_some_and(|c| self.fires(c, s, ctx))
            }
            Kind::AfterFirst(cs) => cs.iter().any(|&c| self.fires(c, s, ctx)),
            Kind::AfterAll(cs) => cs.iter().all(|&c| s.nodes[c].finished || self.fires(c, s, ctx)),
            Kind::OrFinally(t, u) => self.fires(*t, s, ctx) || self.fires(*u, s, ctx),
        }
    }

    /// Records that the trigger fired (call only when `should_fire` was true).
    pub fn on_fire(&self, s: &mut TriggerState, ctx: &TriggerContext) {
        self.fire(0, s, ctx);
    }

    fn fire(&self, i: usize, s: &mut TriggerState, ctx: &TriggerContext) {
        match &self.nodes[i] {
            Kind::Default | Kind::Never => {}
            Kind::AfterWatermark { early, late } => {
                if !s.nodes[i].on_time_fired {
                    if ctx.past_end_of_window() {
                        // The on-time firing ends the early phase.
                        s.nodes[i].on_time_fired = true;
                        if let Some(e) = early {
                            self.reset(*e, s);
                        }
                        if late.is_none() {
                            s.nodes[i].finished = true;
                        }
                    } else if let Some(e) = *early {
                        self.fire(e, s, ctx);
                        if s.nodes[e].finished {
                            self.reset(e, s);
                        }
                    }
                } else if let Some(l) = *late {
                    self.fire(l, s, ctx);
                    if s.nodes[l].finished {
                        self.reset(l, s);
                    }
                }
            }
            Kind::ProcessingTime { .. } | Kind::Count(_) => s.nodes[i].finished = true,
            Kind::Repeatedly(c) => {
                self.fire(*c, s, ctx);
                if s.nodes[*c].finished {
                    self.reset(*c, s);
                }
            }
            Kind::AfterEach(cs) => {
                if let Some(c) = cs.iter().copied().find(|&c| !s.nodes[c].finished) {
                    self.fire(c, s, ctx);
                }
                if cs.iter().all(|&c| s.nodes[c].finished) {
                    s.nodes[i].finished = true;
                }
            }
            Kind::AfterFirst(cs) => {
                for &c in cs {
                    if self.fires(c, s, ctx) {
                        self.fire(c, s, ctx);
                    }
                }
                s.nodes[i].finished = true;
            }
            Kind::AfterAll(cs) => {
                for &c in cs {
                    if !s.nodes[c].finished {
                        self.fire(c, s, ctx);
                    }
                }
                s.nodes[i].finished = true;
            }
            Kind::OrFinally(t, u) => {
                if self.fires(*u, s, ctx) {
                    self.fire(*u, s, ctx);
                    s.nodes[i].finished = true;
                } else {
                    self.fire(*t, s, ctx);
                    if s.nodes[*t].finished {
                        s.nodes[i].finished = true;
                    }
                }
            }
        }
    }

    /// Clears the state of node `i` and its descendants (a repeated trigger starts over).
    fn reset(&self, i: usize, s: &mut TriggerState) {
        s.nodes[i].finished = false;
        s.nodes[i].count = 0;
        s.nodes[i].target = None;
        s.nodes[i].on_time_fired = false;
        let children: Vec<usize> = match &self.nodes[i] {
            Kind::AfterWatermark { early, late } => early.iter().chain(late.iter()).copied().collect(),
            Kind::Repeatedly(c) => vec![*c],
            Kind::AfterEach(cs) | Kind::AfterFirst(cs) | Kind::AfterAll(cs) => cs.clone(),
            Kind::OrFinally(t, u) => vec![*t, *u],
            _ => vec![],
        };
        for c in children {
            self.reset(c, s);
        }
    }

    /// The state of a window merged from windows with `states`: counts add up, the earliest
    /// processing-time target wins, a sub-trigger is finished only if it finished in every
    /// merged window, and the on-time firing counts as done if it happened in any.
    pub fn merge(&self, states: &[&TriggerState]) -> TriggerState {
        let mut out = self.new_state();
        if states.is_empty() {
            return out;
        }
        for i in 0..self.nodes.len() {
            out.nodes[i].finished = states.iter().all(|s| s.nodes[i].finished);
            out.nodes[i].count = states.iter().map(|s| s.nodes[i].count).sum();
            out.nodes[i].target = states.iter().filter_map(|s| s.nodes[i].target).min();
            out.nodes[i].on_time_fired = states.iter().any(|s| s.nodes[i].on_time_fired);
        }
        out
    }

    /// The earliest processing-time target at or after `now` that the trigger waits for. Targets
    /// already passed need no timer: they are satisfied whenever the trigger is next evaluated.
    pub fn next_processing_time(&self, s: &TriggerState, now: Timestamp) -> Option<Timestamp> {
        (0..self.nodes.len())
            .filter(|&i| !s.nodes[i].finished && matches!(self.nodes[i], Kind::ProcessingTime { .. }))
            .filter_map(|i| s.nodes[i].target)
            .filter(|&t| t >= now)
            .min()
    }
}

/// Rounds `t` up to the next `offset + k * period` with Java's truncating `%`, as Beam's
/// `AlignFn` does.
fn aligned(t: Timestamp, align: Option<(i64, i64)>) -> Timestamp {
    match align {
        None => t,
        Some((period, offset)) => {
            let r = (t - offset) % period;
            if r == 0 {
                t
            } else {
                t + period - r
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_sdk::trigger::*;

    fn ctx(wm: i64, pt: i64) -> TriggerContext {
        TriggerContext { input_watermark: wm, processing_time: pt, window_max: 99 }
    }

    #[test]
    fn state_is_stored_as_the_sequence_of_every_nodes_state() {
        // The form checkpoints have always held: a sequence with one entry per node.
        #[derive(Serialize)]
        struct AsStored {
            nodes: Vec<NodeState>,
        }
        for trigger in [
            Trigger::Default,
            AfterPane::element_count_at_least(3),
            AfterWatermark::past_end_of_window().with_early_firings(AfterPane::element_count_at_least(2)).into(),
        ] {
            let m = TriggerMachine::new(&trigger);
            let mut s = m.new_state();
            m.on_elements(&mut s, 2, &ctx(0, 0));
            let nodes: Vec<NodeState> = s.nodes.clone().into();
            assert_eq!(nodes.len(), m.nodes.len());
            let bytes = postcard::to_allocvec(&s).unwrap();
            assert_eq!(bytes, postcard::to_allocvec(&AsStored { nodes }).unwrap());
            assert_eq!(postcard::from_bytes::<TriggerState>(&bytes).unwrap(), s);
        }
    }

    #[test]
    fn count_fires_once() {
        let m = TriggerMachine::new(&AfterPane::element_count_at_least(2));
        let mut s = m.new_state();
        m.on_elements(&mut s, 1, &ctx(0, 0));
        assert!(!m.should_fire(&s, &ctx(0, 0)));
        m.on_elements(&mut s, 1, &ctx(0, 0));
        assert!(m.should_fire(&s, &ctx(0, 0)));
        m.on_fire(&mut s, &ctx(0, 0));
        assert!(m.is_finished(&s));
    }

    #[test]
    fn repeatedly_resets() {
        let m = TriggerMachine::new(&Repeatedly::forever(AfterPane::element_count_at_least(2)));
        let mut s = m.new_state();
        m.on_elements(&mut s, 3, &ctx(0, 0));
        assert!(m.should_fire(&s, &ctx(0, 0)));
        m.on_fire(&mut s, &ctx(0, 0));
        assert!(!m.is_finished(&s));
        assert!(!m.should_fire(&s, &ctx(0, 0)));
        m.on_elements(&mut s, 2, &ctx(0, 0));
        assert!(m.should_fire(&s, &ctx(0, 0)));
    }

    #[test]
    fn watermark_with_early_and_late() {
        let t: Trigger = AfterWatermark::past_end_of_window()
            .with_early_firings(AfterPane::element_count_at_least(2))
            .with_late_firings(AfterPane::element_count_at_least(1))
            .into();
        let m = TriggerMachine::new(&t);
        let mut s = m.new_state();
        m.on_elements(&mut s, 2, &ctx(0, 0));
        assert!(m.should_fire(&s, &ctx(0, 0)));
        m.on_fire(&mut s, &ctx(0, 0));
        assert!(!m.should_fire(&s, &ctx(0, 0)), "early trigger repeats from zero");
        assert!(m.should_fire(&s, &ctx(100, 0)), "on time");
        m.on_fire(&mut s, &ctx(100, 0));
        assert!(!m.should_fire(&s, &ctx(100, 0)));
        m.on_elements(&mut s, 1, &ctx(100, 0));
        assert!(m.should_fire(&s, &ctx(100, 0)), "late");
        m.on_fire(&mut s, &ctx(100, 0));
        assert!(!m.is_finished(&s));
    }

    #[test]
    fn processing_time_with_alignment() {
        let t: Trigger = AfterProcessingTime::past_first_element_in_pane()
            .plus_delay_of(std::time::Duration::from_millis(5))
            .aligned_to(std::time::Duration::from_millis(10), 0)
            .into();
        let m = TriggerMachine::new(&t);
        let mut s = m.new_state();
        m.on_elements(&mut s, 1, &ctx(0, 13));
        assert_eq!(m.next_processing_time(&s, 13), Some(20));
        assert_eq!(m.next_processing_time(&s, 21), None);
        assert!(!m.should_fire(&s, &ctx(0, 19)));
        assert!(m.should_fire(&s, &ctx(0, 20)));
    }

    #[test]
    fn or_finally_and_after_each() {
        let t =
            Repeatedly::forever(AfterPane::element_count_at_least(2)).or_finally(AfterWatermark::past_end_of_window());
        let m = TriggerMachine::new(&t);
        let mut s = m.new_state();
        m.on_elements(&mut s, 2, &ctx(0, 0));
        m.on_fire(&mut s, &ctx(0, 0));
        assert!(!m.is_finished(&s));
        assert!(m.should_fire(&s, &ctx(100, 0)));
        m.on_fire(&mut s, &ctx(100, 0));
        assert!(m.is_finished(&s));

        let e = AfterEach::in_order(vec![AfterPane::element_count_at_least(1), AfterPane::element_count_at_least(2)]);
        let m = TriggerMachine::new(&e);
        let mut s = m.new_state();
        m.on_elements(&mut s, 1, &ctx(0, 0));
        assert!(m.should_fire(&s, &ctx(0, 0)));
        m.on_fire(&mut s, &ctx(0, 0));
        m.on_elements(&mut s, 1, &ctx(0, 0));
        assert!(!m.should_fire(&s, &ctx(0, 0)));
        m.on_elements(&mut s, 1, &ctx(0, 0));
        assert!(m.should_fire(&s, &ctx(0, 0)));
        m.on_fire(&mut s, &ctx(0, 0));
        assert!(m.is_finished(&s));
    }

    #[test]
    fn after_all_and_first() {
        let all = TriggerMachine::new(&AfterAll::of(vec![
            AfterPane::element_count_at_least(1),
            AfterWatermark::past_end_of_window().into(),
        ]));
        let mut s = all.new_state();
        all.on_elements(&mut s, 1, &ctx(0, 0));
        assert!(!all.should_fire(&s, &ctx(0, 0)));
        assert!(all.should_fire(&s, &ctx(100, 0)));
        let first = TriggerMachine::new(&AfterFirst::of(vec![
            AfterPane::element_count_at_least(5),
            AfterWatermark::past_end_of_window().into(),
        ]));
        let mut s = first.new_state();
        first.on_elements(&mut s, 1, &ctx(0, 0));
        assert!(first.should_fire(&s, &ctx(100, 0)));
        first.on_fire(&mut s, &ctx(100, 0));
        assert!(first.is_finished(&s));
    }

    #[test]
    fn merging_sums_counts() {
        let m = TriggerMachine::new(&AfterPane::element_count_at_least(3));
        let mut a = m.new_state();
        let mut b = m.new_state();
        m.on_elements(&mut a, 1, &ctx(0, 0));
        m.on_elements(&mut b, 2, &ctx(0, 0));
        let merged = m.merge(&[&a, &b]);
        assert!(m.should_fire(&merged, &ctx(0, 0)));
    }

    #[test]
    fn java_alignment() {
        assert_eq!(aligned(13, Some((10, 0))), 20);
        assert_eq!(aligned(20, Some((10, 0))), 20);
        assert_eq!(aligned(13, Some((10, 5))), 15);
    }

    /// A trigger tree of every kind, and states reached by feeding elements and firings.
    fn trees() -> Vec<Trigger> {
        vec![
            Trigger::Default,
            AfterPane::element_count_at_least(3),
            Repeatedly::forever(AfterPane::element_count_at_least(2)),
            AfterWatermark::past_end_of_window().with_early_firings(AfterPane::element_count_at_least(2)).into(),
            AfterEach::in_order(vec![AfterPane::element_count_at_least(1), AfterPane::element_count_at_least(2)]),
            AfterFirst::of(vec![
                AfterPane::element_count_at_least(4),
                AfterProcessingTime::past_first_element_in_pane()
                    .plus_delay_of(std::time::Duration::from_millis(5))
                    .into(),
            ]),
            AfterAll::of(vec![AfterPane::element_count_at_least(2), AfterWatermark::past_end_of_window().into()]),
        ]
    }

    fn state_after(m: &TriggerMachine, steps: &[(u8, i64)]) -> TriggerState {
        let mut s = m.new_state();
        for &(n, t) in steps {
            let c = ctx(t, t);
            m.on_elements(&mut s, i64::from(n % 4) + 1, &c);
            if m.should_fire(&s, &c) {
                m.on_fire(&mut s, &c);
            }
        }
        s
    }

    proptest::proptest! {
        /// Merging trigger states commutes and associates: the windows a merge joins can come
        /// in any order (a session merged left to right or right to left fires the same).
        #[test]
        fn merging_trigger_states_commutes_and_associates(
            tree in 0usize..7,
            a in proptest::collection::vec((0u8..8, 0i64..120), 0..6),
            b in proptest::collection::vec((0u8..8, 0i64..120), 0..6),
            c in proptest::collection::vec((0u8..8, 0i64..120), 0..6),
        ) {
            let m = TriggerMachine::new(&trees()[tree]);
            let (sa, sb, sc) = (state_after(&m, &a), state_after(&m, &b), state_after(&m, &c));
            proptest::prop_assert_eq!(m.merge(&[&sa, &sb]), m.merge(&[&sb, &sa]));
            let left = m.merge(&[&m.merge(&[&sa, &sb]), &sc]);
            let right = m.merge(&[&sa, &m.merge(&[&sb, &sc])]);
            proptest::prop_assert_eq!(&left, &right);
            proptest::prop_assert_eq!(&left, &m.merge(&[&sc, &sa, &sb]));
        }
    }
}
