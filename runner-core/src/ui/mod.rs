//! The live page of a streaming query (`--ui-port`), after Spark's Structured Streaming tab: a
//! small HTTP server on its own thread serving one self-contained page (its script, styles and
//! charts inline; no CDN, so it works offline) and the JSON API that feeds it:
//!
//! - `/api/queries`: every query of the process, with its status and last error;
//! - `/api/progress?id=ID`: the query's recent `StreamingQueryProgress` objects, oldest first;
//! - `/api/metrics?id=ID`: its metrics, attempted and committed;
//! - `/api/plan?id=ID`: its physical plan as nodes and edges.
//!
//! The query never waits for the page: after each batch the engine appends the batch's progress
//! to a bounded queue under a lock held only to push, and the server takes shared references to
//! what it needs under the same short lock, then builds and writes its answer without it. The
//! server (`http`) answers on threads of its own with timeouts on every socket, so a slow or
//! absent client costs the query nothing, and other clients at most a few seconds.

mod http;

use crate::plan::PhysicalPlan;
use serde_json::{json, Value};
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use weir_sdk::graph::PipelineGraph;
use weir_sdk::metrics::MetricResults;
use weir_sdk::{Error, Result};

/// Progress reports the page keeps per query.
const KEPT: usize = 600;

/// The page, with everything it needs inline.
const PAGE: &str = include_str!("page.html");

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// What the page shows of one query; the engine updates it, the server reads it.
pub struct UiQuery {
    id: String,
    name: String,
    runner: String,
    plan: Value,
    metrics: MetricResults,
    progress: Mutex<VecDeque<Arc<Value>>>,
    status: Mutex<(String, Option<String>)>,
    active: Box<dyn Fn() -> bool + Send + Sync>,
}

impl UiQuery {
    /// A query named `name` (id `id`) running `plan` of `graph`, its metrics read from
    /// `metrics`; `active` says whether a batch is running.
    pub fn new(
        id: &str,
        name: &str,
        runner: &str,
        (graph, plan): (&PipelineGraph, &PhysicalPlan),
        metrics: MetricResults,
        active: impl Fn() -> bool + Send + Sync + 'static,
    ) -> Arc<Self> {
        Arc::new(UiQuery {
            id: id.to_string(),
            name: name.to_string(),
            runner: runner.to_string(),
            plan: plan_json(graph, plan),
            metrics,
            progress: Mutex::new(VecDeque::new()),
            status: Mutex::new(("RUNNING".into(), None)),
            active: Box::new(active),
        })
    }

    /// Appends a batch's (epoch's) progress.
    pub fn push(&self, progress: Value) {
        let mut p = lock(&self.progress);
        if p.len() == KEPT {
            p.pop_front();
        }
        p.push_back(Arc::new(progress));
    }

    /// The query ended: `FINISHED`, `STOPPED` or `FAILED` with its error.
    pub fn finish(&self, state: &str, error: Option<String>) {
        *lock(&self.status) = (state.to_string(), error);
    }

    fn summary(&self) -> Value {
        let (state, error) = lock(&self.status).clone();
        let (batches, last) = {
            let p = lock(&self.progress);
            (p.len(), p.back().cloned())
        };
        let message = match (state.as_str(), (self.active)()) {
            ("RUNNING", true) => "Processing new data",
            ("RUNNING", false) => "Waiting for next trigger",
            _ => "Stopped",
        };
        json!({
            "id": self.id, "name": self.name, "runner": self.runner, "state": state,
            "message": message, "lastError": error, "batches": batches, "lastProgress": last.as_deref(),
        })
    }

    fn metrics_json(&self) -> Value {
        let r = self.metrics.all_metrics();
        let row = |kind: &str, key: &weir_sdk::metrics::MetricKey, attempted: Value, committed: Option<Value>| {
            json!({
                "kind": kind, "step": key.step.clone().unwrap_or_default(),
                "namespace": key.name.namespace, "name": key.name.name,
                "attempted": attempted, "committed": committed,
            })
        };
        let dist = |d: &weir_sdk::metrics::DistributionResult| json!({ "count": d.count, "sum": d.sum, "min": d.min, "max": d.max });
        let mut rows: Vec<Value> = Vec::new();
        rows.extend(
            r.counters.iter().map(|c| row("counter", &c.key, json!(c.attempted), c.committed.map(|v| json!(v)))),
        );
        rows.extend(
            r.distributions
                .iter()
                .map(|d| row("distribution", &d.key, dist(&d.attempted), d.committed.as_ref().map(dist))),
        );
        rows.extend(
            r.gauges
                .iter()
                .map(|g| row("gauge", &g.key, json!(g.attempted.value), g.committed.as_ref().map(|v| json!(v.value)))),
        );
        json!(rows)
    }
}

/// The plan as the page draws it: nodes (name, kind, description) and edges between them.
fn plan_json(graph: &PipelineGraph, plan: &PhysicalPlan) -> Value {
    let producer = |pc| plan.nodes.iter().position(|n| n.outputs.contains(&pc));
    let nodes: Vec<Value> =
        plan.nodes.iter().map(|n| json!({ "name": n.name, "kind": n.kind, "description": n.description })).collect();
    let mut edges = Vec::new();
    for (i, n) in plan.nodes.iter().enumerate() {
        for &pc in n.inputs.iter().chain(&n.side_inputs) {
            if let Some(from) = producer(pc) {
                edges.push(json!({ "from": from, "to": i, "collection": graph.pcollection(pc).name }));
            }
        }
    }
    json!({ "nodes": nodes, "edges": edges })
}

/// The live page's server and the query's place on it, when `--ui-port` asks for one: the query
/// `runner` runs (`plan` of `graph`), its metrics from `metrics`; `active` says whether a batch
/// is running.
pub fn serve(
    options: &weir_sdk::PipelineOptions,
    runner: &str,
    (graph, plan): (&PipelineGraph, &PhysicalPlan),
    metrics: &Arc<crate::metrics::JobMetrics>,
    active: impl Fn() -> bool + Send + Sync + 'static,
) -> Result<Option<(Arc<LiveUi>, Arc<UiQuery>)>> {
    let Some(port) = options.ui.port else { return Ok(None) };
    static QUERIES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = QUERIES.fetch_add(1, Ordering::Relaxed);
    let ui = shared(&options.ui.host, port)?;
    let page = UiQuery::new(
        &format!("{}-{n}", options.job_name),
        &options.job_name,
        runner,
        (graph, plan),
        MetricResults::new(metrics.clone()),
        active,
    );
    ui.add(page.clone());
    Ok(Some((ui, page)))
}

/// How a query's run ended, for its status on the page.
pub fn ended(page: &UiQuery, outcome: &Result<()>, stopped: bool) {
    match outcome {
        Ok(()) if stopped => page.finish("STOPPED", None),
        Ok(()) => page.finish("FINISHED", None),
        Err(Error::Cancelled) => page.finish("STOPPED", None),
        Err(e) => page.finish("FAILED", Some(e.to_string())),
    }
}

/// The page servers of this process, by address: the queries a process runs one after another
/// (the Nexmark launcher's) share one page.
static SERVERS: Mutex<Vec<(String, u16, Arc<LiveUi>)>> = Mutex::new(Vec::new());

/// The page server on `host:port` for this process, started by its first query.
pub fn shared(host: &str, port: u16) -> Result<Arc<LiveUi>> {
    let mut servers = lock(&SERVERS);
    if let Some((_, _, ui)) = servers.iter().find(|(h, p, _)| h == host && *p == port && port != 0) {
        return Ok(ui.clone());
    }
    let ui = Arc::new(LiveUi::start(host, port)?);
    servers.push((host.to_string(), port, ui.clone()));
    Ok(ui)
}

/// The running page server: stops when dropped.
pub struct LiveUi {
    server: http::HttpServer,
    queries: Arc<Mutex<Vec<Arc<UiQuery>>>>,
}

impl LiveUi {
    /// Serves the page on `host:port` (port 0: any free port).
    pub fn start(host: &str, port: u16) -> Result<LiveUi> {
        let queries: Arc<Mutex<Vec<Arc<UiQuery>>>> = Arc::default();
        let q = queries.clone();
        let server = http::HttpServer::start(host, port, Arc::new(move |url: &str| respond(url, &q)))?;
        tracing::info!(addr = %server.addr(), "live page at http://{}/", server.addr());
        Ok(LiveUi { server, queries })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.server.addr()
    }

    /// Shows `query` on the page.
    pub fn add(&self, query: Arc<UiQuery>) {
        lock(&self.queries).push(query);
    }
}

fn respond(url: &str, queries: &Mutex<Vec<Arc<UiQuery>>>) -> http::Answer {
    let (path, query) = url.split_once('?').unwrap_or((url, ""));
    let id = query.split('&').find_map(|kv| kv.strip_prefix("id=")).map(str::to_string);
    let find = |id: &Option<String>| {
        let qs = lock(queries);
        match id {
            Some(id) => qs.iter().find(|q| &q.id == id).cloned(),
            None => qs.first().cloned(),
        }
    };
    let answer = |status, content_type, body| http::Answer { status, content_type, body };
    match path {
        "/" | "/index.html" => answer(200, "text/html; charset=utf-8", PAGE.to_string()),
        "/api/queries" => {
            let all: Vec<Arc<UiQuery>> = lock(queries).clone();
            let all: Vec<Value> = all.iter().map(|q| q.summary()).collect();
            answer(200, "application/json", json!(all).to_string())
        }
        "/api/progress" | "/api/metrics" | "/api/plan" => match find(&id) {
            None => answer(404, "application/json", json!({ "error": format!("no query {id:?}") }).to_string()),
            Some(q) => {
                let body = match path {
                    "/api/progress" => {
                        // References under the lock; the copy and the text without it.
                        let kept: Vec<Arc<Value>> = lock(&q.progress).iter().cloned().collect();
                        serde_json::to_string(&kept.iter().map(|v| &**v).collect::<Vec<&Value>>()).unwrap_or_default()
                    }
                    "/api/metrics" => q.metrics_json().to_string(),
                    _ => q.plan.to_string(),
                };
                answer(200, "application/json", body)
            }
        },
        _ => answer(404, "text/plain; charset=utf-8", format!("no page at {path}")),
    }
}
