//! `notify:`: the webhooks status changes are posted to. Every key is checked at its
//! position; secret files are read here, bounded, so a reload picks up a rotated token and
//! a missing one is an error of the load, not of the first message.

use std::collections::HashSet;
use std::path::Path;
use std::time::Duration;

use http::header::{HeaderName, HeaderValue};

use super::check::{duration, int_or};
use super::raw::{Loc, RawNotify, RawWebhook};
use crate::diag::{self, Limit, Sink};
use crate::model::notify::{Format, NotifySettings, Secret, Webhook};

/// The most webhooks: each has its own task, queue and connections.
pub const MAX_WEBHOOKS: usize = 16;
/// The most extra headers of one webhook.
pub const MAX_HEADERS: usize = 16;
/// The largest secret file read.
pub const SECRET_FILE_LIMIT: Limit =
    Limit { bytes: 4096, set_by: "the limit of notify.webhooks[].secret_file" };

/// How often open alerts are sent to Alertmanager again by default: well within its
/// default `resolve_timeout` (5 minutes), after which it resolves an alert not sent again.
pub const DEFAULT_ALERT_REFRESH: Duration = Duration::from_secs(60);

/// The path Alertmanager's v2 API takes alerts at.
pub const ALERTMANAGER_PATH: &str = "/api/v2/alerts";

/// Headers steerdns sets itself on every request.
const RESERVED: [&str; 4] = ["content-type", "content-length", "host", "authorization"];

/// `notify:` checked; `base` is the configuration's directory, `server` the name messages
/// give this server.
pub fn build(
    sink: &mut Sink<'_>,
    raw: Option<&Loc<RawNotify>>,
    base: &Path,
    server: &str,
) -> Option<NotifySettings> {
    let raw = &raw?.value;
    let queue = int_or(sink, raw.queue.as_ref(), 1, 100_000, "notify.queue", 1000usize);
    if raw.webhooks.value.is_empty() {
        sink.on(&raw.webhooks, "notify.webhooks: at least one webhook is needed");
    }
    if raw.webhooks.value.len() > MAX_WEBHOOKS {
        sink.on(&raw.webhooks, format!("notify.webhooks: at most {MAX_WEBHOOKS} webhooks"));
    }
    let mut names = HashSet::new();
    let mut webhooks = Vec::new();
    for w in &raw.webhooks.value {
        let name = &w.value.name;
        if !names.insert(name.value.as_str()) {
            sink.on(name, format!("notify.webhooks: {:?} is named twice", name.value));
        }
        webhooks.extend(webhook(sink, &w.value, base));
    }
    Some(NotifySettings { webhooks, queue, server: server.to_string() })
}

fn webhook(sink: &mut Sink<'_>, raw: &RawWebhook, base: &Path) -> Option<Webhook> {
    let name = raw.name.value.clone();
    let name_ok = !name.is_empty()
        && name.len() <= 63
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_".contains(&b));
    if !name_ok {
        sink.on(
            &raw.name,
            format!("notify.webhooks[].name: {name:?} must be 1 to 63 letters, digits, - and _"),
        );
    }
    let format = match &raw.format {
        None => Some(Format::Generic),
        Some(f) => Format::parse(&f.value).or_else(|| {
            let msg = format!(
                "notify.webhooks[].format: {:?} must be generic, slack or alertmanager",
                f.value
            );
            sink.on(f, msg);
            None
        }),
    };
    let url = url(sink, &raw.url, format.unwrap_or(Format::Generic));
    let timeout = match &raw.timeout {
        None => Some(Duration::from_secs(5)),
        Some(t) => duration(sink, t, "notify.webhooks[].timeout").and_then(|d| {
            if (Duration::from_millis(100)..=Duration::from_secs(60)).contains(&d) {
                Some(d)
            } else {
                sink.on(t, "notify.webhooks[].timeout must be between 100ms and 1m");
                None
            }
        }),
    };
    let retries = int_or(sink, raw.retries.as_ref(), 0, 20, "notify.webhooks[].retries", 5u32);
    let headers = headers(sink, raw);
    let secret = raw.secret_file.as_ref().and_then(|f| secret(sink, f, base));
    let secret_ok = raw.secret_file.is_none() || secret.is_some();
    let refresh = refresh(sink, raw.refresh.as_ref(), format);
    match (name_ok, format, url, timeout, secret_ok, refresh) {
        (true, Some(format), Some(url), Some(timeout), true, Some(refresh)) => {
            Some(Webhook { name, url, format, timeout, headers, secret, retries, refresh })
        }
        _ => None,
    }
}

/// `refresh`: only for Alertmanager, whose `resolve_timeout` it must stay within; bounded
/// below so that a mistake cannot flood the receiver, above so that alerts stay open.
fn refresh(
    sink: &mut Sink<'_>,
    raw: Option<&Loc<String>>,
    format: Option<Format>,
) -> Option<Duration> {
    let Some(raw) = raw else { return Some(DEFAULT_ALERT_REFRESH) };
    if format.is_some_and(|f| f != Format::Alertmanager) {
        sink.on(raw, "notify.webhooks[].refresh applies to format: alertmanager only");
        return None;
    }
    let d = duration(sink, raw, "notify.webhooks[].refresh")?;
    if (Duration::from_secs(1)..=Duration::from_secs(3600)).contains(&d) {
        Some(d)
    } else {
        sink.on(raw, "notify.webhooks[].refresh must be between 1s and 1h");
        None
    }
}

/// An `http://` or `https://` URL with a host; for Alertmanager, with its API path added.
fn url(sink: &mut Sink<'_>, raw: &Loc<String>, format: Format) -> Option<http::Uri> {
    let mut text = raw.value.trim().to_string();
    if format == Format::Alertmanager && !text.trim_end_matches('/').ends_with(ALERTMANAGER_PATH) {
        text = format!("{}{ALERTMANAGER_PATH}", text.trim_end_matches('/'));
    }
    let parsed = text.parse::<http::Uri>().ok().filter(|u| {
        matches!(u.scheme_str(), Some("http" | "https"))
            && u.host().is_some_and(|h| !h.is_empty())
            && !u.authority().is_some_and(|a| a.as_str().contains('@'))
    });
    if parsed.is_none() {
        let msg = format!(
            "notify.webhooks[].url: {:?} must be an http:// or https:// URL with a host (and no user name)",
            raw.value
        );
        sink.on(raw, msg);
    }
    parsed
}

fn headers(sink: &mut Sink<'_>, raw: &RawWebhook) -> Vec<(String, String)> {
    let Some(map) = &raw.headers else { return Vec::new() };
    if map.value.len() > MAX_HEADERS {
        sink.on(map, format!("notify.webhooks[].headers: at most {MAX_HEADERS} headers"));
    }
    let mut out = Vec::new();
    for (k, v) in &map.value {
        let Ok(name) = HeaderName::from_bytes(k.as_bytes()) else {
            sink.on(map, format!("notify.webhooks[].headers: invalid header name {k:?}"));
            continue;
        };
        if RESERVED.contains(&name.as_str()) {
            sink.on(map, format!("notify.webhooks[].headers: {k} is set by steerdns"));
            continue;
        }
        if !v.is_ascii() || HeaderValue::from_str(v).is_err() {
            sink.on(map, format!("notify.webhooks[].headers: invalid value of header {k}"));
            continue;
        }
        out.push((k.clone(), v.clone()));
    }
    out
}

fn secret(sink: &mut Sink<'_>, file: &Loc<String>, base: &Path) -> Option<Secret> {
    let path = base.join(&file.value);
    // The error names the file, never what it holds.
    let text = match diag::read_limited(&path, SECRET_FILE_LIMIT) {
        Ok(text) => text,
        Err(e) => {
            let msg = format!("notify.webhooks[].secret_file: cannot read {}: {e}", path.display());
            sink.on(file, msg);
            return None;
        }
    };
    let token = text.trim();
    if token.is_empty() || HeaderValue::from_str(&format!("Bearer {token}")).is_err() {
        let msg = format!(
            "notify.webhooks[].secret_file: {} must hold one token of visible ASCII characters",
            path.display()
        );
        sink.on(file, msg);
        return None;
    }
    Some(Secret(token.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(yaml: &str, base: &Path) -> (Option<NotifySettings>, Vec<String>) {
        let raw: Loc<RawNotify> = serde_saphyr::from_str(yaml).expect("parses");
        let mut errors = Vec::new();
        let file = Path::new("steerdns.yaml");
        let settings = build(&mut Sink { file, errors: &mut errors }, Some(&raw), base, "ns1");
        let errors =
            errors.iter().map(|e| format!("{}:{} {}", e.pos.line, e.pos.col, e.message)).collect();
        (settings, errors)
    }

    #[test]
    fn a_full_webhook_loads_with_its_secret_trimmed() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("token"), "s3cret\n").unwrap();
        let yaml = "webhooks:\n  - name: ops\n    url: https://hooks.example.net/steerdns\n    \
                    format: slack\n    timeout: 2s\n    headers: {X-Team: dns}\n    \
                    secret_file: token\n    retries: 3\n  - name: am\n    \
                    url: http://127.0.0.1:9093/\n    format: alertmanager\n  - name: am2\n    \
                    url: http://127.0.0.1:9094\n    format: alertmanager\n    refresh: 20s\n\
                    queue: 50\n";
        let (settings, errors) = load(yaml, dir.path());
        assert_eq!(errors, Vec::<String>::new());
        let s = settings.unwrap();
        assert_eq!((s.queue, s.server.as_str(), s.webhooks.len()), (50, "ns1", 3));
        let ops = &s.webhooks[0];
        assert_eq!(ops.url.to_string(), "https://hooks.example.net/steerdns");
        assert_eq!(
            (ops.format, ops.timeout, ops.retries),
            (Format::Slack, Duration::from_secs(2), 3)
        );
        assert_eq!(ops.headers, [("X-Team".to_string(), "dns".to_string())]);
        assert_eq!(ops.secret, Some(Secret("s3cret".into())));
        assert!(!format!("{ops:?}").contains("s3cret"), "Debug shows no secret");
        let am = &s.webhooks[1];
        assert_eq!(am.url.to_string(), "http://127.0.0.1:9093/api/v2/alerts");
        assert_eq!(
            (am.format, am.timeout, am.retries, am.secret.is_none()),
            (Format::Alertmanager, Duration::from_secs(5), 5, true)
        );
        assert_eq!(am.refresh, Duration::from_secs(60));
        assert_eq!(s.webhooks[2].refresh, Duration::from_secs(20));
    }

    #[test]
    fn every_mistake_is_reported_where_it_is() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("empty"), "  \n").unwrap();
        let yaml = "webhooks:\n  - name: ops\n    url: ftp://x/\n    format: teams\n  \
                    - name: ops\n    url: http://h/\n    timeout: 5m\n    retries: 99\n    \
                    headers: {Host: x}\n    secret_file: missing\n  - name: a b\n    \
                    url: http://h/\n    secret_file: empty\n    refresh: 1m\n  \
                    - name: am\n    url: http://h/\n    format: alertmanager\n    \
                    refresh: 500ms\nqueue: 0\n";
        let (_, errors) = load(yaml, dir.path());
        let starts: Vec<&str> = errors.iter().map(|e| e.split(' ').next().unwrap()).collect();
        assert_eq!(
            starts,
            [
                "19:8", "4:13", "3:10", "5:11", "7:14", "8:14", "9:14", "10:18", "11:11", "13:18",
                "14:14", "18:14"
            ],
            "{errors:#?}"
        );
        let all = errors.join("\n");
        for want in [
            "notify.queue",
            "teams",
            "named twice",
            "timeout",
            "retries",
            "Host is set by steerdns",
            "cannot read",
            "a b",
            "one token",
            "refresh applies to format: alertmanager only",
            "refresh must be between 1s and 1h",
        ] {
            assert!(all.contains(want), "{want}: {all}");
        }
    }
}
