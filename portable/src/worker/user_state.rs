//! User state and timers of a stateful stage, kept in Weir's state.
//!
//! A stage whose first transform is a stateful ParDo runs as a stateful Weir operator: Weir
//! routes each key to one instance, keeps each key and window's state as a [`KeyedState`]
//! (checkpointed, rescaled and expired like any stateful DoFn's), and fires its timers. The
//! harness reaches that state through the State API while a bundle runs, and the operator's
//! thread answers ([`Keyed`]): a bag is a [`StateCell::Bag`] of the byte chunks appended, a
//! multimap a [`StateCell::Map`] of each map key's values, an ordered list a
//! [`StateCell::OrderedList`] by sort key. Weir keeps values in the harness's encodings and
//! never decodes them. Timers cross on the data stream in Beam's timer coder ([`TimerCodec`]):
//! those the harness sets land in the key and window's timers, and a firing is sent back as a
//! timer of its family.

use std::collections::{BTreeMap, HashMap};

use weir_sdk::coders::{read_timestamp, write_timestamp, write_varint, CoderError, WindowCoderKind};
use weir_sdk::kernel::KeyedStateEnv;
use weir_sdk::pane::PaneInfo;
use weir_sdk::state::{KeyedState, StateCell, StateTime, TimeDomain, TimerData, TimerFiring};
use weir_sdk::time::Timestamp;
use weir_sdk::window::Window;

use crate::preprocess::wire::Wire;
use crate::proto::fn_execution::v1 as fapi;
use crate::worker::{get_response, UserState};

/// What a stateful stage's operator knows of its state and timers.
#[derive(Debug, Clone)]
pub struct StageState {
    /// The stateful transform (the stage's first), whose state and timers these are.
    pub transform: String,
    /// Its timer families, with their clocks.
    pub timer_families: Vec<(String, TimeDomain)>,
    /// How keys and windows are encoded in state keys and timers.
    pub codec: TimerCodec,
    /// Whether the stage runs a splittable DoFn's restrictions, whose residuals wait in the
    /// state of the element they came from, each under a processing-time timer
    /// ([`RESIDUAL_FAMILY`]) that holds the watermark at its watermark estimate.
    pub defers: bool,
    /// The timer family of the DoFn's window expiration callback, fired for each key and
    /// window when the window expires (Beam Java's `@OnWindowExpiration`).
    pub expiration: Option<String>,
    /// Whether the DoFn requires time-sorted input (Beam's `@RequiresTimeSortedInput`): each
    /// element then waits in its key and window's state until the input watermark passes its
    /// timestamp plus this allowed lateness (ms), and goes to the harness in timestamp order;
    /// one later than that is dropped.
    pub sorted: Option<i64>,
}

/// The timer family of a deferred residual: Weir's family of deferred input, whose timers hold
/// their window open until they fire (a splittable DoFn has no timers of its own).
pub const RESIDUAL_FAMILY: &str = weir_sdk::state::DEFERRED_INPUT;

/// The state cell that keeps a key and window until its expiration callback (no user state id
/// starts with a NUL).
const EXPIRATION_MARK: &str = "\u{0}weir:expires";

/// The timer family that releases time-sorted input, and the prefix of the cells holding it
/// until then (each named by its timestamp, so that they sort by it).
pub const SORTED_FAMILY: &str = "\u{0}weir:sorted";

/// The name of a buffered time-sorted element's cell: its timestamp, made to sort as text,
/// then a sequence number.
fn sorted_cell(timestamp: Timestamp, n: usize) -> String {
    format!("{SORTED_FAMILY}/{:020}/{n:010}", (timestamp as i128 - i64::MIN as i128) as u128)
}

/// The timestamp a sorted cell's name holds.
fn sorted_timestamp(id: &str) -> Option<Timestamp> {
    let digits = id.strip_prefix(SORTED_FAMILY)?.strip_prefix('/')?.split('/').next()?;
    let shifted: i128 = digits.parse().ok()?;
    i64::try_from(shifted + i64::MIN as i128).ok()
}

/// The rest of a splittable DoFn's restriction that the harness handed back.
#[derive(Debug, Clone)]
pub struct Residual {
    /// Its windowed value, in the stage input's wire coder.
    pub element: Vec<u8>,
    /// How long after now it asks to resume, ms.
    pub delay_ms: i64,
    /// Where it holds the watermark: its watermark estimate, or its element's timestamp.
    pub hold: Timestamp,
}

impl StageState {
    /// The key of stage input element `value` (a KV, in its wire form).
    pub fn key_of<'v>(&self, value: &'v [u8]) -> Result<&'v [u8], String> {
        let n = self.codec.key.skip(value).ok_or("an element whose key does not decode")?;
        Ok(&value[..n])
    }

    /// The timer ports of a bundle: one per timer family.
    pub fn ports(&self) -> impl Iterator<Item = crate::worker::Port> + '_ {
        self.timer_families.iter().map(|(f, _)| crate::worker::Port::Timers(self.transform.clone(), f.clone()))
    }

    fn domain(&self, family: &str) -> Result<TimeDomain, String> {
        self.timer_families.iter().find(|(f, _)| f == family).map(|(_, d)| *d).ok_or_else(|| {
            format!("a timer of family '{family}', which transform '{}' does not declare", self.transform)
        })
    }
}

/// Beam's timer coder over the stage's key and window coders.
#[derive(Debug, Clone)]
pub struct TimerCodec {
    /// The key's wire form.
    pub key: Wire,
    /// The window coder.
    pub window: WindowCoderKind,
}

/// One timer as Beam's timer coder carries it.
#[derive(Debug, Clone, PartialEq)]
pub struct WireTimer {
    /// The key's bytes.
    pub key: Vec<u8>,
    /// The dynamic timer tag ("" for a plain timer).
    pub tag: String,
    /// Its windows.
    pub windows: Vec<Window>,
    /// `None` for a cleared timer; else when it fires and the timestamp it holds.
    pub set: Option<(Timestamp, Timestamp)>,
}

impl TimerCodec {
    /// Every timer in `bytes`.
    pub fn decode_all(&self, mut bytes: &[u8]) -> Result<Vec<WireTimer>, CoderError> {
        let mut out = Vec::new();
        while !bytes.is_empty() {
            out.push(self.decode(&mut bytes)?);
        }
        Ok(out)
    }

    fn decode(&self, input: &mut &[u8]) -> Result<WireTimer, CoderError> {
        let cut = || CoderError::new("a timer cut short");
        let n = self.key.skip(input).ok_or_else(cut)?;
        let key = input[..n].to_vec();
        *input = &input[n..];
        let len = weir_sdk::coders::read_varint(input)? as usize;
        let tag = input.get(..len).ok_or_else(cut)?;
        let tag = String::from_utf8(tag.to_vec()).map_err(|_| CoderError::new("a timer tag that is not UTF-8"))?;
        *input = &input[len..];
        let count = i32::from_be_bytes(input.get(..4).ok_or_else(cut)?.try_into().map_err(|_| cut())?);
        *input = &input[4..];
        if count < 0 || (self.window == WindowCoderKind::Global && count > 1) {
            return Err(CoderError::new(format!("a timer in {count} windows")));
        }
        let windows = (0..count).map(|_| self.window.decode(input)).collect::<Result<Vec<_>, _>>()?;
        let clear = *input.first().ok_or_else(cut)? != 0;
        *input = &input[1..];
        let set = if clear {
            None
        } else {
            let fire = read_timestamp(input)?;
            let hold = read_timestamp(input)?;
            PaneInfo::decode(input)?;
            Some((fire, hold))
        };
        Ok(WireTimer { key, tag, windows, set })
    }

    /// A firing of `key`'s timer in `window`, as the harness reads it.
    pub fn encode_firing(&self, key: &[u8], window: &Window, firing: &TimerFiring, out: &mut Vec<u8>) {
        out.extend_from_slice(key);
        write_varint(firing.id.len() as u64, out);
        out.extend_from_slice(firing.id.as_bytes());
        out.extend_from_slice(&1i32.to_be_bytes());
        window.encode(out);
        out.push(0);
        write_timestamp(firing.fire_timestamp, out);
        write_timestamp(firing.output_timestamp.unwrap_or(firing.fire_timestamp), out);
        PaneInfo::NO_FIRING.encode(out);
    }
}

/// Where a bundle's state is: every key and window of the operator's partition (a bundle of
/// elements), or the one key and window of a timer firing.
pub enum Cells<'a> {
    /// The operator's state, by key and window.
    Env(&'a mut dyn KeyedStateEnv),
    /// One key and window's state.
    One {
        /// The key's bytes.
        key: &'a [u8],
        /// The window.
        window: Window,
        /// Its state.
        state: &'a mut KeyedState,
        /// The time context.
        time: StateTime,
    },
}

impl Cells<'_> {
    fn get(&mut self, key: &[u8], window: &Window) -> Result<&mut KeyedState, String> {
        self.get_at(key, window).map(|(s, _)| s)
    }

    /// The state of `key` in `window`, and the processing time.
    fn get_at(&mut self, key: &[u8], window: &Window) -> Result<(&mut KeyedState, Timestamp), String> {
        self.get_timed(key, window).map(|(s, t)| (s, t.processing_time))
    }

    /// The state of `key` in `window`, and the time context.
    fn get_timed(&mut self, key: &[u8], window: &Window) -> Result<(&mut KeyedState, StateTime), String> {
        match self {
            Cells::Env(env) => Ok(env.state(key, window)),
            Cells::One { key: k, window: w, state, time } if *k == key && w == window => Ok((state, *time)),
            Cells::One { window: w, .. } => Err(format!(
                "a timer callback for window {w} touched the state or timers of another key or window ({window})"
            )),
        }
    }
}

/// A bundle's user state and timers: answers the harness's State API requests, applies the
/// timers it sets, and undoes both if the bundle must run again elsewhere.
pub struct Keyed<'a> {
    /// The stage's state and timers.
    pub stage: &'a StageState,
    /// Where the state is.
    pub cells: Cells<'a>,
    /// Each key and window touched, as it was before: restored if the bundle fails.
    undo: HashMap<(Vec<u8>, Window), KeyedState>,
    /// The windows of the SDK's own coder that the bundle's elements and timers are in, by their
    /// bytes: a state key carries only those (see [`crate::worker::state_key_window`]).
    sdk_windows: HashMap<Vec<u8>, Window>,
}

impl<'a> Keyed<'a> {
    /// State at `cells`, of `stage`.
    pub fn new(stage: &'a StageState, cells: Cells<'a>) -> Self {
        let mut keyed = Keyed { stage, cells, undo: HashMap::new(), sdk_windows: HashMap::new() };
        if let Cells::One { window, .. } = keyed.cells {
            keyed.holds(&window);
        }
        keyed
    }

    /// Notes that the bundle holds an element or timer in `window`.
    pub fn holds(&mut self, window: &Window) {
        if let Window::Sdk(w) = window {
            self.sdk_windows.entry(w.to_bytes()).or_insert(*window);
        }
    }

    /// The window of a state key's `bytes`.
    fn state_window(&self, bytes: &[u8]) -> Result<Window, String> {
        if self.stage.codec.window == WindowCoderKind::Sdk {
            return self.sdk_windows.get(bytes).copied().ok_or_else(|| {
                format!("state of a window the bundle holds no element or timer of ({} bytes)", bytes.len())
            });
        }
        self.stage.codec.window.decode(&mut &bytes[..]).map_err(|e| format!("state window: {e}"))
    }

    /// The state of `key` in `window`, remembered as it was at its first touch.
    fn touch(&mut self, key: &[u8], window: &Window) -> Result<&mut KeyedState, String> {
        let state = self.cells.get(key, window)?;
        self.undo.entry((key.to_vec(), *window)).or_insert_with(|| state.clone());
        Ok(state)
    }

    /// Applies the timers the harness set or cleared in a bundle's output, by family.
    pub fn set_timers(&mut self, timers: &HashMap<(String, String), Vec<u8>>) -> Result<(), String> {
        let stage = self.stage;
        let mut families: Vec<_> = timers.iter().collect();
        families.sort_by(|a, b| a.0.cmp(b.0));
        for ((_, family), bytes) in families {
            let domain = stage.domain(family)?;
            let decoded = stage.codec.decode_all(bytes).map_err(|e| format!("timers of family '{family}': {e}"))?;
            for t in decoded {
                for w in &t.windows {
                    let state = self.touch(&t.key, w)?;
                    let id = (family.clone(), t.tag.clone());
                    match t.set {
                        None => drop(state.timers.remove(&id)),
                        Some((fire, hold)) => {
                            state.timers.insert(id, TimerData { domain, fire, output: Some(hold) });
                        }
                    }
                    state.touch();
                }
            }
        }
        Ok(())
    }

    /// Keeps `residuals` of an element of `key` in `window` in that key and window's state,
    /// each under a processing-time timer due after its delay.
    pub fn defer(&mut self, key: &[u8], window: &Window, residuals: Vec<Residual>) -> Result<(), String> {
        if residuals.is_empty() {
            return Ok(());
        }
        let (state, now) = self.cells.get_at(key, window)?;
        self.undo.entry((key.to_vec(), *window)).or_insert_with(|| state.clone());
        let mut n = 0usize;
        for r in residuals {
            let id = loop {
                let id = format!("{RESIDUAL_FAMILY}/{n}");
                n += 1;
                if !state.cells.contains_key(&id) {
                    break id;
                }
            };
            let fire = now.saturating_add(r.delay_ms.max(0));
            let timer = TimerData { domain: TimeDomain::ProcessingTime, fire, output: Some(r.hold) };
            state.timers.insert((RESIDUAL_FAMILY.to_string(), id.clone()), timer);
            state.cells.insert(id, StateCell::Value(r.element));
        }
        state.touch();
        Ok(())
    }

    /// Keeps the key and window of element `value` (a KV) until its window expires, when the
    /// stage has a window expiration callback: Beam calls it for every key and window that had
    /// input, whether or not its state holds anything.
    pub fn expires(&mut self, value: &[u8], window: &Window) -> Result<(), String> {
        if self.stage.expiration.is_none() {
            return Ok(());
        }
        let key = self.stage.key_of(value)?;
        let state = self.touch(key, window)?;
        if !state.cells.contains_key(EXPIRATION_MARK) {
            state.cells.insert(EXPIRATION_MARK.to_string(), StateCell::Value(Vec::new()));
            state.touch();
        }
        Ok(())
    }

    /// Buffers `element` (a stage input element, as the bundle encodes it) at `timestamp` in the
    /// state of `key` in `window` until the input watermark passes `timestamp + lateness`;
    /// whether it was kept (an element already that late is dropped).
    pub fn sort(
        &mut self,
        key: &[u8],
        window: &Window,
        timestamp: Timestamp,
        lateness: i64,
        element: Vec<u8>,
    ) -> Result<bool, String> {
        let (state, time) = self.cells.get_timed(key, window)?;
        let release = timestamp.saturating_add(lateness);
        if release < time.input_watermark {
            return Ok(false);
        }
        self.undo.entry((key.to_vec(), *window)).or_insert_with(|| state.clone());
        // Elements of one timestamp keep their order of arrival, under numbers not in use.
        let id = (state.cells.len()..).map(|n| sorted_cell(timestamp, n)).find(|id| !state.cells.contains_key(id));
        state.cells.insert(id.ok_or("no free name for a time-sorted element")?, StateCell::Value(element));
        reset_sorted_timer(state, lateness);
        state.touch();
        Ok(true)
    }

    /// Whether the job is being drained, as the state of `key` in `window` is told.
    pub fn draining(&mut self, key: &[u8], window: &Window) -> Result<bool, String> {
        Ok(self.cells.get_timed(key, window)?.1.draining)
    }

    /// The bundle stands: nothing to undo.
    pub fn commit(&mut self) {
        self.undo.clear();
    }

    /// The bundle failed: every key and window it touched is as it was.
    pub fn rollback(&mut self) {
        for ((key, window), before) in std::mem::take(&mut self.undo) {
            if let Ok(state) = self.cells.get(&key, &window) {
                *state = before;
            }
        }
    }
}

/// Takes from `state` the buffered time-sorted elements released by `watermark` (their
/// timestamp plus `lateness` before it), in timestamp order, and sets the release timer for
/// the rest.
pub fn release_sorted(state: &mut KeyedState, watermark: Timestamp, lateness: i64) -> Vec<Vec<u8>> {
    let due: Vec<String> = state
        .cells
        .keys()
        .filter(|id| sorted_timestamp(id).is_some_and(|t| t.saturating_add(lateness) < watermark))
        .cloned()
        .collect();
    let mut released: Vec<(String, Vec<u8>)> = Vec::with_capacity(due.len());
    for id in due {
        if let Some(StateCell::Value(e)) = state.cells.remove(&id) {
            released.push((id, e));
        }
    }
    // Named by timestamp, then arrival: their names sort as the elements must.
    released.sort_by(|a, b| a.0.cmp(&b.0));
    reset_sorted_timer(state, lateness);
    state.touch();
    released.into_iter().map(|(_, e)| e).collect()
}

/// Sets the release timer of a key and window's buffered time-sorted elements to the earliest
/// one's release, holding the output watermark at its timestamp; clears it when none wait.
fn reset_sorted_timer(state: &mut KeyedState, lateness: i64) {
    let first = state.cells.keys().filter_map(|id| sorted_timestamp(id)).min();
    let id = (SORTED_FAMILY.to_string(), String::new());
    match first {
        Some(t) => {
            let timer = TimerData { domain: TimeDomain::EventTime, fire: t.saturating_add(lateness), output: Some(t) };
            state.timers.insert(id, timer);
        }
        None => drop(state.timers.remove(&id)),
    }
}

/// The user state a state key names: (transform, state id, window bytes, key bytes).
fn user_key(key: &fapi::StateKey) -> Option<(&str, &str, &[u8], &[u8])> {
    use fapi::state_key::Type;
    Some(match key.r#type.as_ref()? {
        Type::BagUserState(k) => (&k.transform_id, &k.user_state_id, &k.window, &k.key),
        Type::MultimapUserState(k) => (&k.transform_id, &k.user_state_id, &k.window, &k.key),
        Type::MultimapKeysUserState(k) => (&k.transform_id, &k.user_state_id, &k.window, &k.key),
        Type::MultimapEntriesUserState(k) => (&k.transform_id, &k.user_state_id, &k.window, &k.key),
        Type::OrderedListUserState(k) => (&k.transform_id, &k.user_state_id, &k.window, &k.key),
        _ => return None,
    })
    .map(|(t, s, w, k)| (t.as_str(), s.as_str(), w.as_slice(), k.as_slice()))
}

/// What a request does.
enum Op<'r> {
    Get,
    Append(&'r [u8]),
    Clear,
}

impl UserState for Keyed<'_> {
    fn serve(&mut self, r: &fapi::StateRequest) -> Result<fapi::state_response::Response, String> {
        use fapi::state_request::Request as R;
        use fapi::state_response::Response as A;
        let key = r.state_key.as_ref().ok_or("a state request without a state key")?;
        let (transform, id, window, user_key) = user_key(key).ok_or("not a user state key")?;
        if transform != self.stage.transform {
            return Err(format!("user state of transform '{transform}', which is not this stage's stateful transform"));
        }
        let window = self.state_window(window)?;
        let op = match r.request.as_ref() {
            Some(R::Get(g)) if g.continuation_token.is_empty() => Op::Get,
            Some(R::Get(_)) => return Err("a continuation token Weir never gave".into()),
            Some(R::Append(a)) => Op::Append(&a.data),
            Some(R::Clear(_)) => Op::Clear,
            None => return Err("a state request without a request".into()),
        };
        let state = if matches!(op, Op::Get) {
            self.cells.get(user_key, &window)?
        } else {
            let state = self.touch(user_key, &window)?;
            state.touch();
            state
        };
        let data = serve_cell(state, key, id, op)?;
        Ok(match r.request.as_ref() {
            Some(R::Get(_)) => get_response(data),
            Some(R::Append(_)) => A::Append(fapi::StateAppendResponse {}),
            _ => A::Clear(fapi::StateClearResponse {}),
        })
    }
}

/// Does `op` on the cell `id` of `state`, of the kind `key` names; a `Get`'s bytes.
fn serve_cell(state: &mut KeyedState, key: &fapi::StateKey, id: &str, op: Op<'_>) -> Result<Vec<u8>, String> {
    use fapi::state_key::Type;
    let cell = state.cells.get_mut(id);
    let wrong = |c: &StateCell| format!("state '{id}' holds {c:?}-kind values, not those of {:?}", key.r#type);
    match (key.r#type.as_ref(), op) {
        (Some(Type::BagUserState(_)), Op::Get) => match cell {
            None => Ok(Vec::new()),
            Some(StateCell::Bag(chunks)) => Ok(chunks.concat()),
            Some(c) => Err(wrong(c)),
        },
        (Some(Type::BagUserState(_)), Op::Append(data)) => match cell {
            None => {
                state.cells.insert(id.to_string(), StateCell::Bag(vec![data.to_vec()]));
                Ok(Vec::new())
            }
            Some(StateCell::Bag(chunks)) => {
                chunks.push(data.to_vec());
                Ok(Vec::new())
            }
            Some(c) => Err(wrong(c)),
        },
        (Some(Type::MultimapUserState(k)), op) => {
            let map = match cell {
                None if matches!(op, Op::Get | Op::Clear) => return Ok(Vec::new()),
                None => match state.cells.entry(id.to_string()).or_insert(StateCell::Map(BTreeMap::new())) {
                    StateCell::Map(m) => m,
                    c => return Err(wrong(c)),
                },
                Some(StateCell::Map(m)) => m,
                Some(c) => return Err(wrong(c)),
            };
            match op {
                Op::Get => Ok(map.get(&k.map_key).cloned().unwrap_or_default()),
                Op::Append(data) => {
                    map.entry(k.map_key.clone()).or_default().extend_from_slice(data);
                    Ok(Vec::new())
                }
                Op::Clear => {
                    map.remove(&k.map_key);
                    if map.is_empty() {
                        state.cells.remove(id);
                    }
                    Ok(Vec::new())
                }
            }
        }
        (Some(Type::MultimapKeysUserState(_)), Op::Get) => match cell {
            None => Ok(Vec::new()),
            Some(StateCell::Map(m)) => Ok(m.keys().flat_map(|k| k.iter().copied()).collect()),
            Some(c) => Err(wrong(c)),
        },
        (Some(Type::OrderedListUserState(k)), op) => {
            let (from, to) = k.range.as_ref().map_or((i64::MIN, i64::MAX), |r| (r.start, r.end));
            ordered_list(state, id, (from, to), op)
        }
        (Some(Type::BagUserState(_) | Type::MultimapKeysUserState(_)), Op::Clear) => {
            state.cells.remove(id);
            Ok(Vec::new())
        }
        (t, _) => Err(format!("this request on state {t:?} is not supported by Weir's portable runner")),
    }
}

/// An ordered list's `op` over sort keys in `[from, to)`. Elements are a varint sort key then
/// the length-prefixed value; Weir keeps each element's bytes under its sort key, in the order
/// appended.
fn ordered_list(state: &mut KeyedState, id: &str, (from, to): (i64, i64), op: Op<'_>) -> Result<Vec<u8>, String> {
    let list = match state.cells.entry(id.to_string()).or_insert(StateCell::OrderedList(BTreeMap::new())) {
        StateCell::OrderedList(l) => l,
        c => return Err(format!("state '{id}' holds {c:?}, not an ordered list")),
    };
    let out = match op {
        // An empty range, which a map's range would refuse.
        Op::Get | Op::Clear if from >= to => Vec::new(),
        Op::Get => list.range((from, 0)..(to, 0)).flat_map(|(_, v)| v.iter().copied()).collect(),
        Op::Clear => {
            let gone: Vec<_> = list.range((from, 0)..(to, 0)).map(|(k, _)| *k).collect();
            for k in gone {
                list.remove(&k);
            }
            Vec::new()
        }
        Op::Append(mut data) => {
            let element = Wire::Kv(Box::new(Wire::Varint), Box::new(Wire::Prefixed));
            while !data.is_empty() {
                let n = element.skip(data).ok_or("an ordered list element cut short")?;
                let sort_key = weir_sdk::coders::read_varint(&mut &data[..n]).map_err(|e| e.to_string())? as i64;
                let seq = list.range((sort_key, 0)..=(sort_key, u64::MAX)).next_back().map_or(0, |((_, s), _)| s + 1);
                list.insert((sort_key, seq), data[..n].to_vec());
                data = &data[n..];
            }
            Vec::new()
        }
    };
    if list.is_empty() {
        state.cells.remove(id);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timer_set_by_the_harness_reads_back_as_it_fires() {
        let codec = TimerCodec { key: Wire::Prefixed, window: WindowCoderKind::Global };
        let firing = TimerFiring {
            family: "f".into(),
            id: "tag".into(),
            domain: TimeDomain::EventTime,
            fire_timestamp: 42,
            output_timestamp: Some(40),
        };
        let mut bytes = Vec::new();
        codec.encode_firing(&[1, b'k'], &Window::Global, &firing, &mut bytes);
        let t = codec.decode_all(&bytes).unwrap();
        assert_eq!(
            t,
            vec![WireTimer {
                key: vec![1, b'k'],
                tag: "tag".into(),
                windows: vec![Window::Global],
                set: Some((42, 40))
            }]
        );
        for n in 0..bytes.len() {
            assert!(codec.decode_all(&bytes[..n]).is_err() || n == 0, "{n}");
        }
    }

    #[test]
    fn a_time_sorted_element_never_takes_the_cell_of_one_still_waiting() {
        let stage = StageState {
            transform: "t".into(),
            timer_families: Vec::new(),
            codec: TimerCodec { key: Wire::Prefixed, window: WindowCoderKind::Global },
            defers: false,
            expiration: None,
            sorted: Some(0),
        };
        let mut state = KeyedState::default();
        let time = StateTime::at(0, 0, weir_sdk::time::MAX_TIMESTAMP);
        let mut keyed = Keyed::new(&stage, Cells::One { key: b"k", window: Window::Global, state: &mut state, time });
        // Two waiting at 5 and one at 1; the one at 1 is released, so the cells number two again.
        for (t, e) in [(5, "a"), (1, "b"), (5, "c")] {
            assert!(keyed.sort(b"k", &Window::Global, t, 0, e.into()).unwrap());
        }
        drop(keyed);
        assert_eq!(release_sorted(&mut state, 2, 0), [b"b".to_vec()]);
        let mut keyed = Keyed::new(&stage, Cells::One { key: b"k", window: Window::Global, state: &mut state, time });
        assert!(keyed.sort(b"k", &Window::Global, 5, 0, b"d".to_vec()).unwrap());
        drop(keyed);
        assert_eq!(release_sorted(&mut state, 6, 0), [b"a".to_vec(), b"c".to_vec(), b"d".to_vec()]);
    }

    #[test]
    fn time_sorted_elements_are_released_in_timestamp_order_once_the_watermark_passes_them() {
        let mut state = KeyedState::default();
        for (n, t) in [5i64, -3, 7, weir_sdk::time::MIN_TIMESTAMP, 5].into_iter().enumerate() {
            state.cells.insert(sorted_cell(t, n), StateCell::Value(format!("{t}#{n}").into_bytes()));
        }
        assert_eq!(sorted_timestamp(&sorted_cell(-3, 1)), Some(-3));
        // With 2 ms of allowed lateness, a watermark of 8 releases what is at or before 5.
        let released: Vec<String> =
            release_sorted(&mut state, 8, 2).into_iter().map(|e| String::from_utf8(e).unwrap()).collect();
        let min = weir_sdk::time::MIN_TIMESTAMP;
        assert_eq!(released, [format!("{min}#3"), "-3#1".into(), "5#0".into(), "5#4".into()]);
        let timer = &state.timers[&(SORTED_FAMILY.to_string(), String::new())];
        assert_eq!((timer.fire, timer.output), (9, Some(7)), "the rest is released once the watermark passes 7 + 2");
        assert_eq!(release_sorted(&mut state, 10, 2).len(), 1);
        assert!(state.timers.is_empty(), "nothing waits: no timer");
    }

    #[test]
    fn ordered_list_ranges_read_and_clear_by_sort_key() {
        let mut state = KeyedState::default();
        let el = |k: u8, v: u8| vec![k, 1, v];
        let data: Vec<u8> = [el(5, b'a'), el(3, b'b'), el(5, b'c')].concat();
        ordered_list(&mut state, "l", (i64::MIN, i64::MAX), Op::Append(&data)).unwrap();
        let all = ordered_list(&mut state, "l", (i64::MIN, i64::MAX), Op::Get).unwrap();
        assert_eq!(all, [el(3, b'b'), el(5, b'a'), el(5, b'c')].concat());
        ordered_list(&mut state, "l", (5, 6), Op::Clear).unwrap();
        assert_eq!(ordered_list(&mut state, "l", (0, 10), Op::Get).unwrap(), el(3, b'b'));
        ordered_list(&mut state, "l", (0, 10), Op::Clear).unwrap();
        assert!(state.cells.is_empty());
    }
}
