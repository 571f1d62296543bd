//! Beam's bounded trie metrics (`beam:metrics:bounded_trie:v1`, Beam's `BoundedTrie`): sets of
//! string sequences (such as the files a source read, by directory) kept to at most `bound`
//! leaves by truncating the largest subtrees. Bundles' tries are combined as Beam's SDKs
//! combine them (Beam Python's `BoundedTrieData.combine`, Java's `BoundedTrieData.combine`), so
//! a job's value reads the same through the Job API as in the SDK.

use crate::proto::pipeline::v1 as rapi;
use std::collections::BTreeMap;

/// Beam's default bound.
const DEFAULT_BOUND: i32 = 100;

/// A bounded trie: empty, a single sequence, or a trie.
#[derive(Clone, Debug, PartialEq)]
pub struct Trie {
    root: Option<Node>,
    singleton: Option<Vec<String>>,
    bound: i32,
}

/// A node: its leaves below it (at least 1), and its children, or `None` when truncated (it
/// stands for possibly many sequences with its prefix).
#[derive(Clone, Debug, PartialEq)]
struct Node {
    size: i64,
    children: Option<BTreeMap<String, Node>>,
}

impl Node {
    fn new() -> Self {
        Node { size: 1, children: Some(BTreeMap::new()) }
    }

    fn from_proto(p: rapi::BoundedTrieNode) -> Self {
        if p.truncated {
            return Node { size: 1, children: None };
        }
        let children: BTreeMap<String, Node> = p.children.into_iter().map(|(k, v)| (k, Node::from_proto(v))).collect();
        let size = children.values().map(|c| c.size).sum::<i64>().max(1);
        Node { size, children: Some(children) }
    }

    fn to_proto(&self) -> rapi::BoundedTrieNode {
        match &self.children {
            None => rapi::BoundedTrieNode { truncated: true, children: Default::default() },
            Some(c) => rapi::BoundedTrieNode {
                truncated: false,
                children: c.iter().map(|(k, v)| (k.clone(), v.to_proto())).collect(),
            },
        }
    }

    /// Adds a sequence; returns the change in leaves.
    fn add(&mut self, segments: &[String]) -> i64 {
        let (Some(children), Some((head, tail))) = (&mut self.children, segments.split_first()) else { return 0 };
        let was_empty = children.is_empty();
        let mut delta = 0;
        let child = children.entry(head.clone()).or_insert_with(|| {
            delta = if was_empty { 0 } else { 1 };
            Node::new()
        });
        if !tail.is_empty() {
            delta += child.add(tail);
        }
        self.size += delta;
        delta
    }

    /// Truncates the largest subtree one level; returns the change in leaves.
    fn trim(&mut self) -> i64 {
        let Some(children) = &mut self.children else { return 0 };
        let Some(largest) = children.values_mut().reduce(|a, b| if b.size > a.size { b } else { a }) else {
            return 0;
        };
        let delta = if largest.size == 1 {
            let delta = 1 - self.size;
            self.children = None;
            delta
        } else {
            largest.trim()
        };
        self.size += delta;
        delta
    }

    /// Merges `other` in; returns the change in leaves.
    fn merge(&mut self, other: Node) -> i64 {
        let delta = match (&mut self.children, other.children) {
            (None, _) => 0,
            (Some(_), None) => {
                self.children = None;
                1 - self.size
            }
            (Some(_), Some(theirs)) if theirs.is_empty() => 0,
            (Some(mine), Some(theirs)) if mine.is_empty() => {
                *mine = theirs;
                other.size - self.size
            }
            (Some(mine), Some(theirs)) => {
                let mut delta = 0;
                for (prefix, child) in theirs {
                    match mine.get_mut(&prefix) {
                        Some(own) => delta += own.merge(child),
                        None => {
                            delta += child.size;
                            mine.insert(prefix, child);
                        }
                    }
                }
                delta
            }
        };
        self.size += delta;
        delta
    }
}

impl Trie {
    /// Decodes a `BoundedTrie` payload.
    pub fn decode(payload: &[u8]) -> Option<Trie> {
        let p = <rapi::BoundedTrie as prost::Message>::decode(payload).ok()?;
        Some(Trie {
            root: p.root.map(Node::from_proto),
            singleton: (!p.singleton.is_empty()).then_some(p.singleton),
            bound: if p.bound > 0 { p.bound } else { DEFAULT_BOUND },
        })
    }

    /// Encodes it as a `BoundedTrie` payload.
    pub fn encode(&self) -> Vec<u8> {
        let p = rapi::BoundedTrie {
            bound: self.bound,
            root: self.root.as_ref().map(Node::to_proto),
            singleton: self.singleton.clone().unwrap_or_default(),
        };
        prost::Message::encode_to_vec(&p)
    }

    fn is_empty(&self) -> bool {
        self.root.is_none() && self.singleton.is_none()
    }

    fn as_node(&self) -> Node {
        match (&self.root, &self.singleton) {
            (Some(root), _) => root.clone(),
            (None, singleton) => {
                let mut root = Node::new();
                if let Some(s) = singleton {
                    root.add(s);
                }
                root
            }
        }
    }

    /// Combines `other` in, truncating to the smaller bound.
    pub fn combine(&mut self, mut other: Trie) {
        if other.is_empty() {
            return;
        }
        if self.is_empty() {
            *self = other;
            return;
        }
        if self.root.is_none() && other.root.is_some() {
            std::mem::swap(self, &mut other);
        }
        let mut combined = self.as_node();
        match (other.root, other.singleton) {
            (Some(root), _) => {
                combined.merge(root);
            }
            (None, Some(s)) => {
                combined.add(&s);
            }
            (None, None) => {}
        }
        let bound = self.bound.min(other.bound);
        while combined.size > i64::from(bound) {
            if combined.trim() == 0 {
                break;
            }
        }
        *self = Trie { root: Some(combined), singleton: None, bound };
    }

    /// Every sequence, with whether it was truncated there (Beam's `get_result`).
    #[cfg(test)]
    fn flattened(&self) -> Vec<(Vec<String>, bool)> {
        fn walk(node: &Node, prefix: &mut Vec<String>, out: &mut Vec<(Vec<String>, bool)>) {
            match &node.children {
                None => out.push((prefix.clone(), true)),
                Some(c) if c.is_empty() => out.push((prefix.clone(), false)),
                Some(c) => {
                    for (k, child) in c {
                        prefix.push(k.clone());
                        walk(child, prefix, out);
                        prefix.pop();
                    }
                }
            }
        }
        let mut out = Vec::new();
        match (&self.root, &self.singleton) {
            (None, Some(s)) => out.push((s.clone(), false)),
            (None, None) => {}
            (Some(root), _) => walk(root, &mut Vec::new(), &mut out),
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seq(s: &[&str]) -> Vec<String> {
        s.iter().map(|x| x.to_string()).collect()
    }

    fn single(s: &[&str]) -> Trie {
        Trie { root: None, singleton: Some(seq(s)), bound: DEFAULT_BOUND }
    }

    #[test]
    fn bundles_tries_combine_as_beam_s_do() {
        // Three bundles, two of them with the same file: a trie of two directories.
        let mut t = single(&["dirA", "file1"]);
        t.combine(single(&["dirA", "file2"]));
        t.combine(single(&["dirB", "file1"]));
        t.combine(single(&["dirA", "file1"]));
        let got = t.flattened();
        let want =
            vec![(seq(&["dirA", "file1"]), false), (seq(&["dirA", "file2"]), false), (seq(&["dirB", "file1"]), false)];
        assert_eq!(got, want);
        // Through the wire and back.
        assert_eq!(Trie::decode(&t.encode()).unwrap().flattened(), want);
        // A bound of 2 truncates the largest subtree: dirA stands for both its files.
        let mut small = Trie { bound: 2, ..single(&["dirB", "file1"]) };
        small.combine(t);
        assert_eq!(small.flattened(), vec![(seq(&["dirA"]), true), (seq(&["dirB", "file1"]), false)]);
        // A truncated node absorbs what is merged into it.
        let mut more = single(&["dirA", "file9"]);
        more.combine(small.clone());
        assert_eq!(more.flattened(), small.flattened());
    }
}
