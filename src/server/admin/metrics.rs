//! `/metrics`: the Prometheus text exposition, rendered at scrape time from the running
//! snapshot's counters, the totals of retired ones and the prober's results, and encoded
//! by prometheus-client. Metric names and labels are listed in `docs/operations.md`.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;

use crate::model::Snapshot;
use crate::probe::{EndpointState, Prober};
use crate::routing::{Ctx, status};
use crate::server::control::Control;
use crate::server::totals::Series;

type Labels = Vec<(&'static str, String)>;

/// A gauge series.
#[derive(Debug)]
struct Gauge {
    name: &'static str,
    help: &'static str,
    labels: Labels,
    value: f64,
}

/// A histogram series, with per-bucket counts (prometheus-client accumulates them).
#[derive(Debug)]
struct Histogram {
    name: &'static str,
    help: &'static str,
    labels: Labels,
    sum: f64,
    count: u64,
    buckets: Vec<(f64, u64)>,
}

const HELP: &[(&str, &str)] = &[
    (
        "steerdns_queries",
        "DNS queries answered, by zone, profile (empty for static names), query type and rcode",
    ),
    ("steerdns_answers", "Endpoints handed out in answers, by profile and endpoint"),
    ("steerdns_ecs_queries", "Queries with and without EDNS Client Subnet"),
    (
        "steerdns_cookie_queries",
        "Queries by their DNS cookie: none, client cookie only, valid or invalid server cookie",
    ),
    ("steerdns_reloads", "Configuration reloads applied"),
    ("steerdns_reload_failures", "Configuration reloads rejected (the old configuration stayed)"),
    (
        "steerdns_reload_requests",
        "Reloads asked for, by trigger (requests during a reload share the one after it)",
    ),
    ("steerdns_probe_results", "Health probe results, by profile, endpoint and result"),
    ("steerdns_probe_skipped", "Health probe runs discarded unjudged, by reason"),
    (
        "steerdns_rate_limited",
        "UDP answers held back by response rate limiting: dropped, or sent truncated (slipped)",
    ),
    (
        "steerdns_xdp_malformed_frames",
        "Frames the AF_XDP fast path dropped because they held no whole UDP datagram",
    ),
    (
        "steerdns_xdp_dropped_frames",
        "Frames for the AF_XDP fast path the kernel dropped before a worker saw them, by reason",
    ),
    ("steerdns_dnssec_signed_answers", "Answers that carried DNSSEC signatures"),
    (
        "steerdns_dnssec_signatures",
        "Signatures put in answers, by where they came from: a thread's cache, the pre-signed table, or signed on the spot",
    ),
    ("steerdns_dnssec_dropped", "Queries not answered because the signing budget was spent"),
    ("steerdns_rum_reports", "Real user measurement reports, by result: stored or why refused"),
    (
        "steerdns_rum_evictions",
        "Client networks evicted from the measurements to stay within rum.max_networks",
    ),
    (
        "steerdns_load_feed_errors",
        "Failed reads of pulled load feeds, by profile, endpoint and reason",
    ),
    ("steerdns_notify_sent", "Status change notifications delivered, by webhook"),
    (
        "steerdns_notify_failed",
        "Status change notifications given up after the last retry, by webhook",
    ),
    ("steerdns_notify_retried", "Notification attempts retried after a failure, by webhook"),
    (
        "steerdns_notify_dropped",
        "Status change notifications dropped from a full webhook queue, by webhook",
    ),
    (
        "steerdns_flatten_lookups",
        "Lookups of flattened host names at the resolvers, by name and result (ok, failed)",
    ),
    (
        "steerdns_flatten_stale_answers",
        "Answers that carried a flattened name's addresses past their records' expiry",
    ),
    ("steerdns_dnstap_sent", "dnstap messages written to the query log's file or socket"),
    (
        "steerdns_dnstap_dropped",
        "dnstap messages lost: the writer's queue was full, or no reader was connected",
    ),
];

fn help(name: &str) -> &'static str {
    HELP.iter().find(|(n, _)| *n == name).map_or("steerdns counter", |(_, h)| h)
}

/// The Prometheus text exposition of everything.
pub fn render(control: &Control) -> String {
    let prober = &*control.prober;
    let states = prober.endpoint_states();
    let snap = control.snapshot();
    let totals = &control.totals;
    let mut counters = totals.counters(&snap);
    let reloads = totals.reloads.load(Ordering::Relaxed);
    counters.insert(Series::new("steerdns_reloads", vec![]), reloads);
    let failures = totals.reload_failures.load(Ordering::Relaxed);
    counters.insert(Series::new("steerdns_reload_failures", vec![]), failures);
    for (trigger, n) in control.requests.counts() {
        let series =
            Series::new("steerdns_reload_requests", vec![("trigger", trigger.label().into())]);
        counters.insert(series, n);
    }
    counters.extend(probe_counters(&states));
    let skipped = Series::new("steerdns_probe_skipped", vec![("reason", "local_resources".into())]);
    counters.insert(skipped, prober.skipped_local());
    for (action, n) in
        [("dropped", &control.limiter.dropped), ("slipped", &control.limiter.slipped)]
    {
        let series = Series::new("steerdns_rate_limited", vec![("action", action.into())]);
        counters.insert(series, n.load(Ordering::Relaxed));
    }
    if snap.listen.xdp.is_some() {
        let stats = &control.xdp_stats;
        let malformed = stats.malformed.load(Ordering::Relaxed);
        counters.insert(Series::new("steerdns_xdp_malformed_frames", vec![]), malformed);
        for (reason, n) in
            [("no_free_frame", &stats.no_free_frame), ("rx_ring_full", &stats.rx_ring_full)]
        {
            let series =
                Series::new("steerdns_xdp_dropped_frames", vec![("reason", reason.into())]);
            counters.insert(series, n.load(Ordering::Relaxed));
        }
    }
    let signing = snap.sign_counts.totals();
    counters.insert(Series::new("steerdns_dnssec_signed_answers", vec![]), signing.answers);
    counters.insert(Series::new("steerdns_dnssec_dropped", vec![]), signing.dropped);
    for (source, n) in
        [("cache", signing.cached), ("presigned", signing.presigned), ("signed", signing.made)]
    {
        let series = Series::new("steerdns_dnssec_signatures", vec![("source", source.into())]);
        counters.insert(series, n);
    }
    let presigned = snap.signatures.table().map_or(0, |t| t.sigs.len());
    if let Some(tap) = control.dnstap.stats() {
        counters
            .insert(Series::new("steerdns_dnstap_sent", vec![]), tap.sent.load(Ordering::Relaxed));
        for (reason, n) in
            [("queue_full", &tap.dropped_queue_full), ("disconnected", &tap.dropped_disconnected)]
        {
            let series = Series::new("steerdns_dnstap_dropped", vec![("reason", reason.into())]);
            counters.insert(series, n.load(Ordering::Relaxed));
        }
    }
    if let Some(rum) = control.rum.get() {
        for (result, n) in rum.counts.reports() {
            counters
                .insert(Series::new("steerdns_rum_reports", vec![("result", result.into())]), n);
        }
        let evictions = rum.counts.evictions.load(Ordering::Relaxed);
        counters.insert(Series::new("steerdns_rum_evictions", vec![]), evictions);
    }
    if let Some(notifier) = control.notify.get() {
        for (webhook, c) in notifier.counts() {
            for (name, n) in [
                ("steerdns_notify_sent", &c.sent),
                ("steerdns_notify_failed", &c.failed),
                ("steerdns_notify_retried", &c.retried),
                ("steerdns_notify_dropped", &c.dropped),
            ] {
                let series = Series::new(name, vec![("webhook", webhook.clone())]);
                counters.insert(series, n.load(Ordering::Relaxed));
            }
        }
    }
    for ((profile, endpoint, reason), n) in control.load.error_counts() {
        let labels = vec![("profile", profile), ("endpoint", endpoint), ("reason", reason.into())];
        counters.insert(Series::new("steerdns_load_feed_errors", labels), n);
    }
    for slot in &snap.flat.slots {
        let name = slot.name.to_string();
        for (result, n) in [("ok", &slot.lookups_ok), ("failed", &slot.lookups_failed)] {
            let labels = vec![("name", name.clone()), ("result", result.into())];
            counters
                .insert(Series::new("steerdns_flatten_lookups", labels), n.load(Ordering::Relaxed));
        }
        let stale = slot.stale_answers.load(Ordering::Relaxed);
        counters.insert(Series::new("steerdns_flatten_stale_answers", vec![("name", name)]), stale);
    }
    let mut gauges = vec![
        Gauge {
            name: "steerdns_config_generation",
            help: "Generation of the running configuration",
            labels: vec![],
            value: snap.generation as f64,
        },
        Gauge {
            name: "steerdns_profiles",
            help: "Profiles in the running configuration",
            labels: vec![],
            value: snap.profiles.len() as f64,
        },
        Gauge {
            name: "steerdns_dnssec_presigned",
            help: "Signatures in the running configuration's pre-signed table",
            labels: vec![],
            value: presigned as f64,
        },
    ];
    if let Some(session) = &control.cluster {
        gauges.push(Gauge {
            name: "steerdns_cluster_connected",
            help: "1 while this replica renews its etcd lease in time, else 0",
            labels: vec![],
            value: if session.connected() { 1.0 } else { 0.0 },
        });
        gauges.push(Gauge {
            name: "steerdns_cluster_profiles_revision",
            help: "The etcd revision of the profiles this replica serves (0: profiles from files)",
            labels: vec![],
            value: control.served().borrow().revision as f64,
        });
    }
    if let Some(views) = control.health_views.get() {
        for (node, n) in views.view_counts() {
            gauges.push(Gauge {
                name: "steerdns_cluster_views",
                help: "Health views this replica counts, by the replica (node) they are from",
                labels: vec![("node", node)],
                value: n as f64,
            });
        }
    }
    if let Some(rum) = control.rum.get() {
        gauges.push(Gauge {
            name: "steerdns_rum_networks",
            help: "Client networks the real user measurements hold samples of",
            labels: vec![],
            value: rum.counts.networks.load(Ordering::Relaxed) as f64,
        });
    }
    gauges.extend(flat_gauges(&snap));
    gauges.extend(endpoint_status_gauges(&snap));
    gauges.extend(override_gauges(&snap));
    gauges.extend(load_gauges(&snap, &control.load.current()));
    gauges.extend(probe_gauges(prober, &states));
    let histograms = probe_histograms(prober);
    let mut registry = prometheus_client::registry::Registry::default();
    registry.register_collector(Box::new(Scrape { counters, gauges, histograms }));
    let mut out = String::new();
    prometheus_client::encoding::prometheus_text::encode(&mut out, &registry)
        .expect("writing to a String cannot fail");
    out
}

/// Per flattened name and family: 1 while it has addresses to serve (fresh or stale).
fn flat_gauges(snap: &Snapshot) -> Vec<Gauge> {
    use crate::model::flat::Family;
    let mut out = Vec::new();
    for slot in &snap.flat.slots {
        for family in [Family::V4, Family::V6] {
            out.push(Gauge {
                name: "steerdns_flatten_usable",
                help: "1 while a flattened name has addresses of the family to serve, else 0",
                labels: vec![("name", slot.name.to_string()), ("family", family.as_str().into())],
                value: if slot.usable(family) { 1.0 } else { 0.0 },
            });
        }
    }
    out
}

/// One series per endpoint, value 1, labelled with its current status (a drained
/// endpoint's is what its probes say; `steerdns_endpoint_drained` says it is drained).
fn endpoint_status_gauges(snap: &Snapshot) -> Vec<Gauge> {
    let ctx = Ctx::of(snap);
    snap.profiles
        .iter()
        .flat_map(|p| p.endpoints.iter().map(move |ep| (p, ep)))
        .map(|(p, ep)| Gauge {
            name: "steerdns_endpoint_status",
            help: "Current status of each endpoint (1 for the status it is in)",
            labels: vec![
                ("profile", p.name.clone()),
                ("endpoint", ep.name.clone()),
                ("status", status::health_status(ctx, ep).as_str().to_string()),
            ],
            value: 1.0,
        })
        .collect()
}

/// One series per drained endpoint (value 1) and per run-time weight or bias (its value).
fn override_gauges(snap: &Snapshot) -> Vec<Gauge> {
    let mut out = Vec::new();
    for p in &snap.profiles {
        let overridden = |e: &&crate::model::Endpoint| {
            e.drained || e.weight_override.is_some() || e.bias_override.is_some()
        };
        for ep in p.endpoints.iter().filter(overridden) {
            let labels = vec![("profile", p.name.clone()), ("endpoint", ep.name.clone())];
            if ep.drained {
                out.push(Gauge {
                    name: "steerdns_endpoint_drained",
                    help: "1 for each endpoint drained at run time (it takes no answers)",
                    labels: labels.clone(),
                    value: 1.0,
                });
            }
            if let Some(w) = ep.weight_override {
                out.push(Gauge {
                    name: "steerdns_endpoint_weight_override",
                    help: "The weight set at run time, for each endpoint that has one",
                    labels: labels.clone(),
                    value: f64::from(w),
                });
            }
            if let Some(b) = ep.bias_override {
                out.push(Gauge {
                    name: "steerdns_endpoint_bias_override",
                    help: "The geoproximity bias set at run time, for each endpoint that has one",
                    labels,
                    value: f64::from(b),
                });
            }
        }
    }
    out
}

/// Per endpoint with a load feed: its effective share, and the load and utilisation of
/// the last step when it had a fresh reading.
fn load_gauges(snap: &Snapshot, map: &crate::server::load::LoadMap) -> Vec<Gauge> {
    let mut out = Vec::new();
    for (profile, endpoint, _) in crate::server::load::plan::feeds(snap) {
        let labels = vec![("profile", profile.to_string()), ("endpoint", endpoint.to_string())];
        let state = map.get(profile, endpoint).map(|e| &e.state);
        let state = state.unwrap_or(&crate::model::load::EndpointLoad::FULL);
        out.push(Gauge {
            name: "steerdns_endpoint_share",
            help: "The effective share of each endpoint with a load feed (1: all its traffic)",
            labels: labels.clone(),
            value: state.share,
        });
        if let Some(load) = state.load {
            out.push(Gauge {
                name: "steerdns_endpoint_load",
                help: "The load last read of each endpoint with a load feed",
                labels: labels.clone(),
                value: load,
            });
        }
        if let Some(u) = state.utilisation {
            out.push(Gauge {
                name: "steerdns_endpoint_utilisation",
                help: "The utilisation (load / capacity) last read of each endpoint with a load feed",
                labels,
                value: u,
            });
        }
    }
    out
}

fn probe_counters(states: &[EndpointState]) -> Vec<(Series, u64)> {
    let mut out = Vec::new();
    for s in states {
        for (kind, n) in &s.results {
            let labels = vec![
                ("profile", s.profile.clone()),
                ("endpoint", s.endpoint.clone()),
                ("result", kind.to_string()),
            ];
            out.push((Series::new("steerdns_probe_results", labels), *n));
        }
    }
    out
}

fn probe_gauges(prober: &Prober, states: &[EndpointState]) -> Vec<Gauge> {
    let stats = prober.stats();
    let mut out = vec![
        Gauge {
            name: "steerdns_probes",
            help: "Distinct health probes running",
            labels: vec![],
            value: stats.probes as f64,
        },
        Gauge {
            name: "steerdns_probe_lag_max_seconds",
            help: "Largest delay of a probe run behind its schedule since the previous scrape",
            labels: vec![],
            value: stats.max_lag.as_secs_f64(),
        },
    ];
    for s in states {
        for m in s.monitors.iter().flat_map(|c| &c.monitors) {
            let labels = vec![
                ("profile", s.profile.clone()),
                ("endpoint", s.endpoint.clone()),
                ("monitor", m.name.clone()),
                ("status", m.status.as_str().to_string()),
            ];
            let help = "1 for each monitor of each monitored endpoint, labelled with its status";
            out.push(Gauge { name: "steerdns_monitor_status", help, labels, value: 1.0 });
        }
        let Some(last) = &s.last_probe else { continue };
        out.push(Gauge {
            name: "steerdns_probe_last_duration_seconds",
            help: "Duration of each endpoint's latest health probe",
            labels: vec![("profile", s.profile.clone()), ("endpoint", s.endpoint.clone())],
            value: last.latency.as_secs_f64(),
        });
    }
    out
}

fn probe_histograms(prober: &Prober) -> Vec<Histogram> {
    prober
        .durations()
        .into_iter()
        .filter(|h| h.count > 0)
        .map(|h| Histogram {
            name: "steerdns_probe_duration_seconds",
            help: "Duration of health probes, by protocol",
            labels: vec![("protocol", h.protocol.to_string())],
            sum: h.sum,
            count: h.count,
            buckets: h.buckets,
        })
        .collect()
}

/// The scrape's data, encoded by prometheus-client.
#[derive(Debug)]
struct Scrape {
    counters: BTreeMap<Series, u64>,
    gauges: Vec<Gauge>,
    histograms: Vec<Histogram>,
}

/// Names in first-seen order, each once (series of one name are adjacent).
fn names<'a>(
    all: impl Iterator<Item = (&'static str, &'static str)> + 'a,
) -> Vec<(&'static str, &'static str)> {
    let mut names: Vec<_> = all.collect();
    names.dedup();
    names
}

impl prometheus_client::collector::Collector for Scrape {
    fn encode(&self, mut enc: DescriptorEncoder) -> std::fmt::Result {
        for (name, h) in names(self.counters.keys().map(|s| (s.name, help(s.name)))) {
            let mut m = enc.encode_descriptor(name, h, None, MetricType::Counter)?;
            for (series, v) in self.counters.iter().filter(|(s, _)| s.name == name) {
                m.encode_family(&series.labels)?.encode_counter::<NoLabelSet, _, u64>(v, None)?;
            }
        }
        for (name, h) in names(self.gauges.iter().map(|g| (g.name, g.help))) {
            let mut m = enc.encode_descriptor(name, h, None, MetricType::Gauge)?;
            for g in self.gauges.iter().filter(|g| g.name == name) {
                m.encode_family(&g.labels)?.encode_gauge(&g.value)?;
            }
        }
        for (name, h) in names(self.histograms.iter().map(|g| (g.name, g.help))) {
            let mut m = enc.encode_descriptor(name, h, None, MetricType::Histogram)?;
            for g in self.histograms.iter().filter(|g| g.name == name) {
                m.encode_family(&g.labels)?
                    .encode_histogram::<NoLabelSet>(g.sum, g.count, &g.buckets, None)?;
            }
        }
        Ok(())
    }
}
