//! [`CombineTable`] for a typed `CombineFn`: the accumulators of Combine.perKey per window and
//! encoded key, for runners' hash aggregation of windows that fire once.
//!
//! Each window has a table of its own: a hash table of 4-byte group indices (small, so it stays
//! in cache) over a vector of groups, each with its hash, its encoded key (inline up to 16 bytes,
//! any integer key; longer keys in an arena of the window's), its input count and its typed
//! accumulator. Firing a window takes its whole table at once: no timer, hold or pane state
//! per group. The windows are ordered by their maximum timestamps, so the ones a watermark
//! releases are the first.

use super::CombineKernelImpl;
use crate::coders::{Coder, CoderError, Element, ElementCoder};
use crate::combine_fn::CombineFn;
use crate::error::UserError;
use crate::kernel::{
    lifted_value, Batch, Bundle, CombineTable, EncodedKvBatch, TableEntries, TableKeys, WindowEntries,
};
use crate::kv::KV;
use crate::pane::PaneInfo;
use crate::time::Timestamp;
use crate::window::Window;
use crate::windowed_value::WindowedValue;
use std::collections::BTreeMap;
use std::hash::BuildHasher;

/// One key's accumulator in one window.
struct Group<A> {
    hash: u64,
    /// The encoded key's length.
    len: u32,
    /// The table's update epoch in which the group was last counted as updated, and
    /// [`CHANGED`] while the group is in its window's `changed` list.
    updated: u32,
    /// The key itself when it has at most 16 bytes, else its start in the window's arena.
    key: [u8; 16],
    /// Inputs combined.
    count: u64,
    acc: A,
}

impl<A> Group<A> {
    fn key<'a>(&'a self, long_keys: &'a [u8]) -> &'a [u8] {
        super::held_key(&self.key, self.len, long_keys)
    }
}

/// The bit of [`Group::updated`] that says the group changed since the table's changes were
/// last taken ([`CombineTable::take_changed`]); the rest is the update epoch.
const CHANGED: u32 = 1 << 31;

/// The groups of one window.
struct WindowGroups<A> {
    table: hashbrown::HashTable<u32>,
    groups: Vec<Group<A>>,
    long_keys: Vec<u8>,
    /// The groups changed since the changes were last taken, while they are kept.
    changed: Vec<u32>,
}

impl<A> Default for WindowGroups<A> {
    fn default() -> Self {
        WindowGroups {
            table: hashbrown::HashTable::new(),
            groups: Vec::new(),
            long_keys: Vec::new(),
            changed: Vec::new(),
        }
    }
}

/// An encoded key: inline when short (hashed and compared as one 128-bit word), else bytes.
#[derive(Clone, Copy)]
enum KeyRef<'a> {
    Short([u8; 16], usize),
    Long(&'a [u8]),
}

impl<'a> KeyRef<'a> {
    fn of(bytes: &'a [u8]) -> Self {
        if bytes.len() <= 16 {
            let mut inline = [0u8; 16];
            inline[..bytes.len()].copy_from_slice(bytes);
            KeyRef::Short(inline, bytes.len())
        } else {
            KeyRef::Long(bytes)
        }
    }

    fn hash(&self, hasher: &hashbrown::DefaultHashBuilder) -> u64 {
        match self {
            KeyRef::Short(inline, len) => hasher.hash_one((u128::from_le_bytes(*inline), *len as u32)),
            KeyRef::Long(bytes) => hasher.hash_one(bytes),
        }
    }

    fn len(&self) -> usize {
        match self {
            KeyRef::Short(_, len) => *len,
            KeyRef::Long(bytes) => bytes.len(),
        }
    }
}

/// The table of a `CombineFn` `F` keyed by `K`.
pub(super) struct Table<K, F: CombineFn> {
    fn_: F,
    key: ElementCoder<K>,
    input: ElementCoder<F::In>,
    acc: ElementCoder<F::Accum>,
    hasher: hashbrown::DefaultHashBuilder,
    /// The windows' groups, in slots reused as windows fire.
    slots: Vec<WindowGroups<F::Accum>>,
    free: Vec<usize>,
    /// Each window's slot, and the windows in the order of their maximum timestamps.
    slot_of: hashbrown::HashMap<Window, usize>,
    order: BTreeMap<(Timestamp, Window), usize>,
    /// The last window looked up and its slot (inputs come in runs of one window).
    last: Option<(Window, usize)>,
    groups: usize,
    epoch: u32,
    updated: u64,
    /// Whether changes are kept ([`CombineTable::take_changed`]), and the groups of the
    /// windows fired since they were last taken, as (encoded key, window).
    tracking: bool,
    fired: Vec<(Vec<u8>, Window)>,
    /// A longer key's encoding.
    scratch: Vec<u8>,
}

impl<K: Element, F: CombineFn> Table<K, F> {
    pub(super) fn new(kernel: &CombineKernelImpl<K, F>) -> Self {
        Table {
            fn_: kernel.fn_.clone(),
            key: ElementCoder::new(),
            input: ElementCoder::new(),
            acc: ElementCoder::new(),
            hasher: hashbrown::DefaultHashBuilder::default(),
            slots: Vec::new(),
            free: Vec::new(),
            slot_of: hashbrown::HashMap::new(),
            order: BTreeMap::new(),
            last: None,
            groups: 0,
            epoch: 1,
            updated: 0,
            tracking: false,
            fired: Vec::new(),
            scratch: Vec::new(),
        }
    }

    /// The slot of `window`, made when missing.
    fn slot(&mut self, window: Window) -> usize {
        if let Some((w, s)) = self.last {
            if w == window {
                return s;
            }
        }
        let s = match self.slot_of.get(&window) {
            Some(&s) => s,
            None => {
                let s = self.free.pop().unwrap_or_else(|| {
                    self.slots.push(WindowGroups::default());
                    self.slots.len() - 1
                });
                self.slot_of.insert(window, s);
                self.order.insert((window.max_timestamp(), window), s);
                s
            }
        };
        self.last = Some((window, s));
        s
    }

    /// The index of the group of `key` in the window in slot `s`, made (with `make`'s
    /// accumulator) when missing, counted as updated.
    fn group(&mut self, s: usize, key: KeyRef<'_>, make: impl FnOnce(&F) -> F::Accum) -> usize {
        let hash = key.hash(&self.hasher);
        let found = self.find_hashed(s, key, hash);
        let w = &mut self.slots[s];
        let len = key.len();
        let g = match found {
            Some(g) => g,
            None => {
                let inline = match key {
                    KeyRef::Short(inline, _) => inline,
                    KeyRef::Long(bytes) => {
                        let mut at = [0u8; 16];
                        at[..8].copy_from_slice(&(w.long_keys.len() as u64).to_le_bytes());
                        w.long_keys.extend_from_slice(bytes);
                        at
                    }
                };
                w.groups.push(Group { hash, len: len as u32, updated: 0, key: inline, count: 0, acc: make(&self.fn_) });
                let g = w.groups.len() - 1;
                let groups = &w.groups;
                w.table.insert_unique(hash, g as u32, |&g| groups[g as usize].hash);
                self.groups += 1;
                g
            }
        };
        let w = &mut self.slots[s];
        let group = &mut w.groups[g];
        if group.updated & !CHANGED != self.epoch {
            group.updated = self.epoch | (group.updated & CHANGED);
            self.updated += 1;
        }
        if self.tracking && group.updated & CHANGED == 0 {
            group.updated |= CHANGED;
            w.changed.push(g as u32);
        }
        g
    }

    /// The index of the group of `key` in the window in slot `s`, if held.
    fn find(&self, s: usize, key: KeyRef<'_>) -> Option<usize> {
        self.find_hashed(s, key, key.hash(&self.hasher))
    }

    /// [`Table::find`] with the key's hash.
    fn find_hashed(&self, s: usize, key: KeyRef<'_>, hash: u64) -> Option<usize> {
        let w = &self.slots[s];
        let len = key.len();
        let (groups, long_keys) = (&w.groups, &w.long_keys);
        w.table
            .find(hash, |&g| {
                let g = &groups[g as usize];
                g.hash == hash
                    && g.len as usize == len
                    && match key {
                        KeyRef::Short(inline, _) => g.key == inline,
                        KeyRef::Long(bytes) => g.key(long_keys) == bytes,
                    }
            })
            .map(|&g| g as usize)
    }

    /// Whether the group of `key` in `window` is held.
    fn holds(&self, key: KeyRef<'_>, window: &Window) -> bool {
        self.slot_of.get(window).is_some_and(|&s| self.find(s, key).is_some())
    }

    /// Calls `missing` for each typed row whose group is not held.
    fn missing_typed(
        &self,
        rows: impl Iterator<Item = (Window, K)>,
        missing: &mut TableKeys<'_>,
    ) -> Result<(), CoderError> {
        let mut scratch = Vec::new();
        for (window, key) in rows {
            let mut inline = [0u8; 16];
            let key = match self.key.encode_small(&key, &mut inline) {
                Some(len) => KeyRef::Short(inline, len),
                None => {
                    scratch.clear();
                    self.key.encode(&key, &mut scratch)?;
                    KeyRef::of(&scratch)
                }
            };
            if !self.holds(key, &window) {
                match key {
                    KeyRef::Short(inline, len) => missing(&inline[..len], window),
                    KeyRef::Long(bytes) => missing(bytes, window),
                }
            }
        }
        Ok(())
    }

    /// Adds one input to the group of `key` in slot `s`.
    fn add_input(&mut self, s: usize, key: KeyRef<'_>, input: F::In) {
        let g = self.group(s, key, F::create_accumulator);
        let g = &mut self.slots[s].groups[g];
        self.fn_.add_input(&mut g.acc, input);
        g.count += 1;
    }

    /// Merges a decoded partial accumulator of `count` inputs into its group.
    fn merge(&mut self, s: usize, key: KeyRef<'_>, count: u64, acc: F::Accum) {
        let mut acc = Some(acc);
        let g = self.group(s, key, |_| acc.take().expect("an accumulator"));
        let (g, fn_) = (&mut self.slots[s].groups[g], &self.fn_);
        if let Some(acc) = acc {
            let old = std::mem::replace(&mut g.acc, fn_.create_accumulator());
            g.acc = fn_.merge_accumulators(vec![old, acc]);
        }
        g.count += count;
    }

    fn add_encoded(
        &mut self,
        rows: &EncodedKvBatch,
        expired: &mut dyn FnMut(&Window) -> bool,
    ) -> Result<u64, UserError> {
        let mut dropped = 0;
        for (i, row) in rows.rows.iter().enumerate() {
            let key = KeyRef::of(rows.key(i));
            if rows.lifted {
                let (count, acc) = lifted_value(rows.value(i))?;
                if expired(&row.window) {
                    dropped += count;
                    continue;
                }
                let acc = self.acc.decode_outer(acc)?;
                let s = self.slot(row.window);
                self.merge(s, key, count, acc);
            } else {
                if expired(&row.window) {
                    dropped += 1;
                    continue;
                }
                let input = self.input.decode_outer(rows.value(i))?;
                let s = self.slot(row.window);
                self.add_input(s, key, input);
            }
        }
        Ok(dropped)
    }

    fn add_typed(&mut self, input: Batch, expired: &mut dyn FnMut(&Window) -> bool) -> Result<u64, UserError> {
        let mut dropped = 0;
        let mut scratch = std::mem::take(&mut self.scratch);
        let result = Bundle::<KV<K, F::In>>::from_batch(input)?.try_for_each(|wv| -> Result<(), UserError> {
            if expired(&wv.window) {
                dropped += 1;
                return Ok(());
            }
            let mut inline = [0u8; 16];
            let key = match self.key.encode_small(&wv.value.key, &mut inline) {
                Some(len) => KeyRef::Short(inline, len),
                None => {
                    scratch.clear();
                    self.key.encode(&wv.value.key, &mut scratch)?;
                    KeyRef::of(&scratch)
                }
            };
            let s = self.slot(wv.window);
            self.add_input(s, key, wv.value.value);
            Ok(())
        });
        self.scratch = scratch;
        result.map(|()| dropped)
    }
}

impl<K: Element, F: CombineFn> CombineTable for Table<K, F> {
    fn add(&mut self, input: Batch, expired: &mut dyn FnMut(&Window) -> bool) -> Result<u64, UserError> {
        match input.downcast::<EncodedKvBatch>() {
            Ok(rows) => {
                let dropped = self.add_encoded(&rows, expired);
                rows.recycle();
                dropped
            }
            Err(input) => self.add_typed(input, expired),
        }
    }

    fn first_window(&self) -> Option<Window> {
        self.order.first_key_value().map(|((_, w), _)| *w)
    }

    fn fire_first(&mut self, pane: PaneInfo, limit: usize, out: &mut Vec<Batch>) -> Result<usize, UserError> {
        let Some(((timestamp, window), s)) = self.order.pop_first() else { return Ok(0) };
        self.slot_of.remove(&window);
        if self.last.is_some_and(|(w, _)| w == window) {
            self.last = None;
        }
        let w = std::mem::take(&mut self.slots[s]);
        self.free.push(s);
        let n = w.groups.len();
        self.groups -= n;
        if self.tracking {
            self.fired.extend(w.groups.iter().map(|g| (g.key(&w.long_keys).to_vec(), window)));
        }
        let mut bundle: Vec<WindowedValue<KV<K, F::Out>>> = match out.pop() {
            Some(last) if last.len() < limit => match last.downcast::<Vec<WindowedValue<KV<K, F::Out>>>>() {
                Ok(rows) => *rows,
                Err(last) => {
                    out.push(last);
                    Vec::new()
                }
            },
            Some(last) => {
                out.push(last);
                Vec::new()
            }
            None => Vec::new(),
        };
        for g in w.groups {
            if bundle.len() >= limit {
                out.push(Batch::new(std::mem::take(&mut bundle)));
            }
            if bundle.capacity() == 0 {
                bundle.reserve(limit.min(n));
            }
            let key = self.key.decode_outer(g.key(&w.long_keys))?;
            let value = KV::new(key, self.fn_.extract_output(g.acc));
            bundle.push(WindowedValue { value, timestamp, window, pane });
        }
        out.push(Batch::new(bundle));
        Ok(n)
    }

    fn empty(&self) -> Batch {
        Batch::new(Vec::<WindowedValue<KV<K, F::Out>>>::new())
    }

    fn len(&self) -> usize {
        self.groups
    }

    fn bytes(&self) -> usize {
        let group = std::mem::size_of::<Group<F::Accum>>();
        self.order
            .values()
            .map(|&s| {
                let w = &self.slots[s];
                w.groups.len() * group + w.table.len() * 4 + w.long_keys.len()
            })
            .sum()
    }

    fn take_updated(&mut self) -> u64 {
        self.epoch = ((self.epoch + 1) & !CHANGED).max(1);
        std::mem::take(&mut self.updated)
    }

    fn take_changed(
        &mut self,
        written: &mut TableEntries<'_>,
        removed: &mut TableKeys<'_>,
    ) -> Result<bool, CoderError> {
        if !std::mem::replace(&mut self.tracking, true) {
            return Ok(false);
        }
        for (key, window) in self.fired.drain(..) {
            removed(&key, window);
        }
        for (&(_, window), &s) in &self.order {
            let w = &mut self.slots[s];
            for g in w.changed.drain(..) {
                let g = &mut w.groups[g as usize];
                g.updated &= !CHANGED;
                let mut acc = Vec::new();
                self.acc.encode(&g.acc, &mut acc)?;
                written(g.key(&w.long_keys), window, g.count, acc);
            }
        }
        Ok(true)
    }

    fn entries(&self, out: &mut TableEntries<'_>) -> Result<(), CoderError> {
        for (&(_, window), &s) in &self.order {
            let w = &self.slots[s];
            for g in &w.groups {
                let mut acc = Vec::new();
                self.acc.encode(&g.acc, &mut acc)?;
                out(g.key(&w.long_keys), window, g.count, acc);
            }
        }
        Ok(())
    }

    fn restore(&mut self, key: &[u8], window: Window, count: u64, acc: &[u8]) -> Result<(), CoderError> {
        let acc = self.acc.decode_outer(acc)?;
        let s = self.slot(window);
        self.merge(s, KeyRef::of(key), count, acc);
        Ok(())
    }

    fn missing(&self, input: &Batch, missing: &mut TableKeys<'_>) -> Result<(), CoderError> {
        if let Some(rows) = input.downcast_ref::<EncodedKvBatch>() {
            for (i, row) in rows.rows.iter().enumerate() {
                let key = rows.key(i);
                if !self.holds(KeyRef::of(key), &row.window) {
                    missing(key, row.window);
                }
            }
            return Ok(());
        }
        if let Some(rows) = input.downcast_ref::<Vec<WindowedValue<KV<K, F::In>>>>() {
            return self.missing_typed(rows.iter().map(|wv| (wv.window, wv.value.key.clone())), missing);
        }
        if let Some(u) = input.downcast_ref::<crate::batch::UniformBatch<KV<K, F::In>>>() {
            return self.missing_typed(u.values.iter().map(|kv| (u.window, kv.key.clone())), missing);
        }
        Err(CoderError::new(format!(
            "internal error: a batch of {:?} is not of element type {}",
            input.kind(),
            std::any::type_name::<KV<K, F::In>>()
        )))
    }

    fn window_sizes(&self, f: &mut dyn FnMut(Window, usize)) {
        let group = std::mem::size_of::<Group<F::Accum>>();
        for (&(_, window), &s) in &self.order {
            let w = &self.slots[s];
            f(window, w.groups.len() * group + w.table.len() * 4 + w.long_keys.len());
        }
    }

    fn take_window(&mut self, window: &Window, out: &mut WindowEntries<'_>) -> Result<usize, CoderError> {
        let Some(s) = self.slot_of.remove(window) else { return Ok(0) };
        self.order.remove(&(window.max_timestamp(), *window));
        if self.last.is_some_and(|(w, _)| w == *window) {
            self.last = None;
        }
        let w = std::mem::take(&mut self.slots[s]);
        self.free.push(s);
        let n = w.groups.len();
        self.groups -= n;
        let mut order: Vec<u32> = (0..n as u32).collect();
        order.sort_unstable_by(|&a, &b| {
            let (a, b) = (w.groups[a as usize].key(&w.long_keys), w.groups[b as usize].key(&w.long_keys));
            a.len().cmp(&b.len()).then_with(|| a.cmp(b))
        });
        let mut groups: Vec<Option<Group<F::Accum>>> = w.groups.into_iter().map(Some).collect();
        for g in order {
            let Some(g) = groups[g as usize].take() else { continue };
            let mut acc = Vec::new();
            self.acc.encode(&g.acc, &mut acc)?;
            out(g.key(&w.long_keys), g.count, acc);
        }
        Ok(n)
    }
}
