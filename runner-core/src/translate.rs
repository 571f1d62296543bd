//! The translation framework: a registry of translators keyed by URN, applied composite-first.
//!
//! Walking the graph top-down, a composite is translated as a whole when a translator for its URN
//! accepts it ([`Translator::can_translate`]); otherwise the walk descends into its parts. Every
//! primitive must have a translator, or translation fails with an error naming the step, its URN
//! and the runner (ARCHITECTURE.md, "The physical plan").

use std::collections::HashMap;
use weir_sdk::graph::{PipelineGraph, TransformNode};
use weir_sdk::visitor::{CompositeBehavior, PipelineVisitor};
use weir_sdk::{Error, Result};

/// The runner-visible payload of a composite, if it is a `T` (e.g. Combine.perKey's kernel).
pub fn composite_payload<T: 'static>(node: &TransformNode) -> Option<&T> {
    match &node.payload {
        weir_sdk::graph::Payload::Composite(p) => p.downcast_ref::<T>(),
        _ => None,
    }
}

/// The kernels of a primitive carried as [`weir_sdk::graph::Payload::Primitive`], if they are a
/// `T`.
pub fn primitive_payload<T: 'static>(node: &TransformNode) -> Option<&T> {
    match &node.payload {
        weir_sdk::graph::Payload::Primitive(p) => p.downcast_ref::<T>(),
        _ => None,
    }
}

/// Translates one kind of transform into a runner's plan, held in the context `C`.
pub trait Translator<C>: Send + Sync {
    /// Whether this translator handles this particular node (e.g. a native Combine only for
    /// some windowing). Primitives whose translator refuses fail translation.
    fn can_translate(&self, _node: &TransformNode, _graph: &PipelineGraph) -> bool {
        true
    }
    /// Adds the node to the plan.
    fn translate(&self, node: &TransformNode, graph: &PipelineGraph, ctx: &mut C) -> Result<()>;
}

/// Translators of one runner, keyed by URN.
pub struct TranslatorRegistry<C> {
    runner: &'static str,
    translators: HashMap<&'static str, Box<dyn Translator<C>>>,
}

/// What a translation did: the composites translated as a whole.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct TranslationReport {
    /// Full names and URNs of composites translated natively.
    pub native_composites: Vec<(String, String)>,
}

impl<C> TranslatorRegistry<C> {
    /// An empty registry for the runner named `runner`.
    pub fn new(runner: &'static str) -> Self {
        TranslatorRegistry { runner, translators: HashMap::new() }
    }

    /// Registers the translator of `urn`.
    pub fn register(&mut self, urn: &'static str, translator: impl Translator<C> + 'static) -> &mut Self {
        self.register_boxed(urn, Box::new(translator))
    }

    /// Registers the translator of `urn`, already boxed.
    pub fn register_boxed(&mut self, urn: &'static str, translator: Box<dyn Translator<C>>) -> &mut Self {
        self.translators.insert(urn, translator);
        self
    }

    /// Whether a translator is registered for `urn`.
    pub fn supports(&self, urn: &str) -> bool {
        self.translators.contains_key(urn)
    }

    /// Translates `graph` into `ctx`, composites first.
    pub fn translate(&self, graph: &PipelineGraph, ctx: &mut C) -> Result<TranslationReport> {
        let mut v = TranslatingVisitor { registry: self, ctx, error: None, report: TranslationReport::default() };
        graph.traverse(&mut v);
        match v.error {
            Some(e) => Err(e),
            None => Ok(v.report),
        }
    }
}

struct TranslatingVisitor<'a, C> {
    registry: &'a TranslatorRegistry<C>,
    ctx: &'a mut C,
    error: Option<Error>,
    report: TranslationReport,
}

impl<C> PipelineVisitor for TranslatingVisitor<'_, C> {
    fn enter_composite(&mut self, node: &TransformNode, graph: &PipelineGraph) -> CompositeBehavior {
        if self.error.is_some() {
            return CompositeBehavior::DoNotEnter;
        }
        match self.registry.translators.get(node.urn) {
            Some(t) if t.can_translate(node, graph) => {
                if let Err(e) = t.translate(node, graph, self.ctx) {
                    self.error = Some(e);
                } else {
                    self.report.native_composites.push((node.full_name.clone(), node.urn.to_string()));
                }
                CompositeBehavior::DoNotEnter
            }
            _ => CompositeBehavior::Enter,
        }
    }

    fn visit_primitive(&mut self, node: &TransformNode, graph: &PipelineGraph) {
        if self.error.is_some() {
            return;
        }
        let unsupported = |reason: &str| Error::Unsupported {
            step: node.full_name.clone(),
            urn: node.urn.to_string(),
            runner: self.registry.runner.to_string(),
            reason: reason.to_string(),
        };
        self.error = match self.registry.translators.get(node.urn) {
            Some(t) if t.can_translate(node, graph) => t.translate(node, graph, self.ctx).err(),
            Some(_) => Some(unsupported("the runner's translator rejects this configuration")),
            None => Some(unsupported("no translator is registered for this URN")),
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_sdk::prelude::*;

    struct Record;

    impl Translator<Vec<String>> for Record {
        fn translate(&self, node: &TransformNode, _: &PipelineGraph, ctx: &mut Vec<String>) -> Result<()> {
            ctx.push(node.full_name.clone());
            Ok(())
        }
    }

    struct Refuse;

    impl Translator<Vec<String>> for Refuse {
        fn can_translate(&self, _: &TransformNode, _: &PipelineGraph) -> bool {
            false
        }
        fn translate(&self, _: &TransformNode, _: &PipelineGraph, _: &mut Vec<String>) -> Result<()> {
            Ok(())
        }
    }

    fn pipeline() -> Pipeline {
        let p = Pipeline::create();
        p.apply("Create", Create::of(vec![KV::new(1, 2)])).apply("Sum", Sum::per_key());
        p
    }

    fn primitives() -> TranslatorRegistry<Vec<String>> {
        let mut r = TranslatorRegistry::new("test");
        for urn in weir_sdk::urns::PRIMITIVES {
            r.register(urn, Record);
        }
        // A native read, as the micro-batch runner has: the Read composite whole.
        r.register(weir_sdk::urns::READ, Record);
        r
    }

    #[test]
    fn composites_translate_natively_when_accepted() {
        let mut r = primitives();
        r.register(weir_sdk::urns::COMBINE_PER_KEY, Record);
        let mut steps = vec![];
        let report = r.translate(&pipeline().graph(), &mut steps).unwrap();
        assert_eq!(steps, vec!["Create/Read".to_string(), "Sum".to_string()]);
        let natives = [("Create/Read", weir_sdk::urns::READ), ("Sum", weir_sdk::urns::COMBINE_PER_KEY)];
        assert_eq!(report.native_composites, natives.map(|(n, u)| (n.to_string(), u.to_string())));
    }

    #[test]
    fn refused_composites_are_expanded() {
        let mut r = primitives();
        r.register(weir_sdk::urns::COMBINE_PER_KEY, Refuse);
        let mut steps = vec![];
        let report = r.translate(&pipeline().graph(), &mut steps).unwrap();
        assert_eq!(steps, vec!["Create/Read", "Sum/GroupByKey", "Sum/Combine.GroupedValues/Combine"]);
        assert_eq!(report.native_composites.len(), 1, "only the read");
    }

    #[test]
    fn untranslatable_primitives_name_step_urn_and_runner() {
        let mut r = TranslatorRegistry::new("test");
        r.register(weir_sdk::urns::READ, Record);
        let err = r.translate(&pipeline().graph(), &mut vec![]).unwrap_err().to_string();
        assert!(
            err.contains("'Sum/GroupByKey'")
                && err.contains("beam:transform:group_by_key:v1")
                && err.contains("test runner"),
            "{err}"
        );
    }
}
