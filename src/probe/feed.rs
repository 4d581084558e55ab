//! The json and prometheus checks: a pulled health feed read over the feed reader
//! (`pull`), and its value judged: a status word, or a number against `healthy_when`
//! (`docs/probing.md`). A feed that answers without the value gives `Reason::NoData`,
//! which the monitor's `missing` policy turns into a success, a failure or no change.

use std::time::Duration;

use super::check::Reason;
use super::exposition::{self, ExpositionError};
use super::pull::{self, FeedError, FeedUrl, Reader};
use super::udp::reply_wait;
use crate::model::probe_params::{FeedParams, FeedValue, Threshold};
use crate::model::snapshot::ProbeSource;

/// Status words read as healthy (compared without regard to case); any other word, and
/// `false`, is unhealthy.
const HEALTHY_WORDS: [&str; 5] = ["healthy", "up", "ok", "true", "serving"];

/// A prepared feed check.
pub struct FeedCheck {
    url: Result<FeedUrl, String>,
    value: FeedValue,
    healthy_when: Option<Threshold>,
    /// Leaves the scheduler's timeout a margin, so a slow feed reads as one.
    wait: Duration,
    reader: Reader,
}

impl FeedCheck {
    pub fn new(p: &FeedParams, timeout: Duration) -> FeedCheck {
        let accept = match p.value {
            FeedValue::Pointer(_) => "application/json",
            FeedValue::Metric { .. } => "text/plain;version=0.0.4, */*;q=0.1",
        };
        let agent = concat!("steerdns-probe/", env!("CARGO_PKG_VERSION"));
        let url = FeedUrl::parse_as(&p.url, accept, agent).map_err(|e| e.to_string());
        FeedCheck {
            url,
            value: p.value.clone(),
            healthy_when: p.healthy_when,
            wait: reply_wait(timeout),
            reader: Reader::default(),
        }
    }

    pub fn setup_error(&self) -> Option<&str> {
        self.url.as_ref().err().map(String::as_str)
    }

    /// One reading of the feed, connecting from the `sources` address of its family.
    pub async fn run(&self, sources: ProbeSource) -> Result<(), Reason> {
        let url = self.url.as_ref().map_err(|e| Reason::Setup(e.clone()))?;
        let body = self.reader.body(url, self.wait, sources).await.map_err(|e| match e {
            FeedError::Timeout(d) => Reason::Timeout(d),
            // Said as every other probe says it: the configuration's mistake, not the feed's.
            source @ FeedError::Source { .. } => Reason::Setup(source.to_string()),
            other => Reason::Feed(other.to_string()),
        })?;
        judge(&body, &self.value, self.healthy_when)
    }
}

/// The verdict on a feed's body.
pub fn judge(
    body: &[u8],
    value: &FeedValue,
    healthy_when: Option<Threshold>,
) -> Result<(), Reason> {
    match value {
        FeedValue::Metric { name, labels } => {
            let x = exposition::find(body, name, labels).map_err(|e| match e {
                ExpositionError::Absent(_) => Reason::NoData(e.to_string()),
                other => Reason::Feed(other.to_string()),
            })?;
            compare(x, healthy_when)
        }
        FeedValue::Pointer(p) => {
            let doc = pull::json(body).map_err(|e| Reason::Feed(e.to_string()))?;
            let at = |what: &str| format!("{what} at JSON pointer {p:?}");
            let v = match doc.pointer(p) {
                None | Some(serde_json::Value::Null) => return Err(Reason::NoData(at("nothing"))),
                Some(v) => v,
            };
            match (v, healthy_when) {
                (serde_json::Value::Number(n), Some(_)) => {
                    compare(n.as_f64().unwrap_or(f64::NAN), healthy_when)
                }
                (_, Some(_)) => Err(Reason::Value(at(&format!("{} is not a number", short(v))))),
                (serde_json::Value::Bool(true), None) => Ok(()),
                (serde_json::Value::String(s), None)
                    if HEALTHY_WORDS.iter().any(|w| s.eq_ignore_ascii_case(w)) =>
                {
                    Ok(())
                }
                (serde_json::Value::Bool(false) | serde_json::Value::String(_), None) => {
                    Err(Reason::Value(at(&format!("status {}", short(v)))))
                }
                (_, None) => Err(Reason::Value(at(&format!(
                    "{} is not a status word (set healthy_when for a number)",
                    short(v)
                )))),
            }
        }
    }
}

fn compare(x: f64, healthy_when: Option<Threshold>) -> Result<(), Reason> {
    match healthy_when {
        Some(t) if !t.holds(x) => Err(Reason::Value(format!("value {x}, healthy when {t}"))),
        _ => Ok(()),
    }
}

/// A JSON value as text, cut at 60 characters.
fn short(v: &serde_json::Value) -> String {
    let t = v.to_string();
    if t.chars().count() <= 60 { t } else { t.chars().take(60).chain(['…']).collect() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_judged() {
        let ptr = |p: &str| FeedValue::Pointer(p.to_string());
        let metric = FeedValue::Metric {
            name: "up".to_string(),
            labels: vec![("job".to_string(), "eu".to_string())],
        };
        let when = |t: &str| Threshold::parse(t);
        let prom = b"# TYPE up gauge\nup{job=\"eu\"} 1\nup{job=\"us\"} 0\nload 0.93\n";
        let cases: Vec<(&[u8], FeedValue, Option<Threshold>, &str)> = vec![
            (br#"{"status":"UP"}"#, ptr("/status"), None, "ok"),
            (br#"{"status":"ok"}"#, ptr("/status"), None, "ok"),
            (br#"{"status":true}"#, ptr("/status"), None, "ok"),
            (
                br#"{"status":"down"}"#,
                ptr("/status"),
                None,
                "value: status \"down\" at JSON pointer \"/status\"",
            ),
            (
                br#"{"status":false}"#,
                ptr("/status"),
                None,
                "value: status false at JSON pointer \"/status\"",
            ),
            (
                br#"{"status":null}"#,
                ptr("/status"),
                None,
                "nodata: no data: nothing at JSON pointer \"/status\"",
            ),
            (
                br#"{"other":1}"#,
                ptr("/status"),
                None,
                "nodata: no data: nothing at JSON pointer \"/status\"",
            ),
            (br#"{"load":0.5}"#, ptr("/load"), when("< 0.8"), "ok"),
            (
                br#"{"load":0.93}"#,
                ptr("/load"),
                when("< 0.8"),
                "value: value 0.93, healthy when < 0.8",
            ),
            (
                br#"{"load":"high"}"#,
                ptr("/load"),
                when("< 0.8"),
                "value: \"high\" is not a number at JSON pointer \"/load\"",
            ),
            (
                br#"{"load":3}"#,
                ptr("/load"),
                None,
                "value: 3 is not a status word (set healthy_when for a number) at JSON pointer \"/load\"",
            ),
            (b"not json", ptr("/x"), None, "feed"),
            (prom, metric.clone(), when(">= 1"), "ok"),
            (
                b"up{job=\"eu\"} 0\n",
                metric.clone(),
                when(">= 1"),
                "value: value 0, healthy when >= 1",
            ),
            (
                b"up{job=\"us\"} 1\n",
                metric,
                when(">= 1"),
                "nodata: no data: no sample matches up{job=\"eu\"}",
            ),
        ];
        for (body, value, t, want) in cases {
            let got = match judge(body, &value, t) {
                Ok(()) => "ok".to_string(),
                Err(Reason::Feed(_)) => "feed".to_string(),
                Err(r) => format!("{}: {r}", r.kind()),
            };
            assert_eq!(got, want, "{}", String::from_utf8_lossy(body));
        }
    }
}
