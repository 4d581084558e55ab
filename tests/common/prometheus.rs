//! A strict parser of the Prometheus text exposition, and `scrape` for `/metrics`.

use std::net::SocketAddr;

use super::http::http_get;

/// One sample line of the Prometheus text exposition.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: std::collections::BTreeMap<String, String>,
    pub value: f64,
}

/// A parsed Prometheus text exposition.
#[derive(Debug, Default)]
pub struct Prom {
    /// Metric family name → TYPE.
    pub types: std::collections::BTreeMap<String, String>,
    /// Metric family name → HELP text.
    pub help: std::collections::BTreeMap<String, String>,
    pub samples: Vec<Sample>,
}

impl Prom {
    /// Parses the text format strictly: every line is `# HELP`, `# TYPE`, `# UNIT`,
    /// `# EOF`, another comment, blank, or a sample `name{labels} value [timestamp]`
    /// whose metric family has a TYPE line earlier in the text.
    pub fn parse(text: &str) -> Result<Prom, String> {
        let mut p = Prom::default();
        for (i, line) in text.lines().enumerate() {
            let err = |m: &str| format!("line {}: {m}: {line:?}", i + 1);
            if line.trim().is_empty() {
                continue;
            }
            if let Some(rest) = line.strip_prefix('#') {
                let rest = rest.trim_start();
                let mut w = rest.splitn(3, ' ');
                match w.next() {
                    Some("HELP") => {
                        let name = w.next().ok_or_else(|| err("HELP without a name"))?;
                        check_metric_name(name).map_err(|e| err(&e))?;
                        p.help.insert(name.to_string(), w.next().unwrap_or("").to_string());
                    }
                    Some("TYPE") => {
                        let name = w.next().ok_or_else(|| err("TYPE without a name"))?;
                        check_metric_name(name).map_err(|e| err(&e))?;
                        let t = w.next().ok_or_else(|| err("TYPE without a type"))?.trim();
                        let known = [
                            "counter",
                            "gauge",
                            "histogram",
                            "summary",
                            "untyped",
                            "unknown",
                            "info",
                            "stateset",
                            "gaugehistogram",
                        ];
                        if !known.contains(&t) {
                            return Err(err("unknown type"));
                        }
                        if p.types.insert(name.to_string(), t.to_string()).is_some() {
                            return Err(err("second TYPE line for the same metric"));
                        }
                    }
                    _ => {}
                }
                continue;
            }
            let s = parse_sample(line).map_err(|e| err(&e))?;
            if p.family(&s.name).is_none() {
                return Err(err("sample without a TYPE line for its metric"));
            }
            p.samples.push(s);
        }
        Ok(p)
    }

    /// The metric family (a name with a TYPE line) that sample name `name` belongs to.
    pub fn family(&self, name: &str) -> Option<&str> {
        if let Some((n, _)) = self.types.get_key_value(name) {
            return Some(n);
        }
        for (suffix, types) in [
            ("_total", &["counter"][..]),
            ("_created", &["counter", "histogram", "summary"][..]),
            ("_bucket", &["histogram", "gaugehistogram"][..]),
            ("_sum", &["histogram", "summary"][..]),
            ("_count", &["histogram", "summary"][..]),
            ("_info", &["info"][..]),
        ] {
            if let Some(base) = name.strip_suffix(suffix)
                && let Some((n, t)) = self.types.get_key_value(base)
                && types.contains(&t.as_str())
            {
                return Some(n);
            }
        }
        None
    }

    /// Samples named `name` whose labels include every pair of `labels`.
    pub fn select(&self, name: &str, labels: &[(&str, &str)]) -> Vec<&Sample> {
        self.samples
            .iter()
            .filter(|s| {
                s.name == name
                    && labels.iter().all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
            })
            .collect()
    }

    /// Sum of the values of `select(name, labels)`; 0 when there is none.
    pub fn sum(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.select(name, labels).iter().map(|s| s.value).sum()
    }
}

fn check_metric_name(n: &str) -> Result<(), String> {
    let ok = !n.is_empty()
        && !n.starts_with(|c: char| c.is_ascii_digit())
        && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':');
    if ok { Ok(()) } else { Err(format!("invalid metric name {n:?}")) }
}

fn parse_sample(line: &str) -> Result<Sample, String> {
    let name_end = line.find(['{', ' ']).ok_or("no value")?;
    let name = &line[..name_end];
    check_metric_name(name)?;
    let mut labels = std::collections::BTreeMap::new();
    let mut rest = &line[name_end..];
    if let Some(r) = rest.strip_prefix('{') {
        let mut chars = r.char_indices().peekable();
        let end;
        loop {
            // Skip separators.
            while let Some((_, c)) = chars.peek() {
                if *c == ',' || *c == ' ' {
                    chars.next();
                } else {
                    break;
                }
            }
            match chars.peek() {
                Some((i, '}')) => {
                    end = *i;
                    break;
                }
                None => return Err("unterminated label set".into()),
                _ => {}
            }
            let mut key = String::new();
            for (_, c) in chars.by_ref() {
                if c == '=' {
                    break;
                }
                key.push(c);
            }
            if key.is_empty()
                || key.starts_with(|c: char| c.is_ascii_digit())
                || !key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            {
                return Err(format!("invalid label name {key:?}"));
            }
            if chars.next().map(|(_, c)| c) != Some('"') {
                return Err(format!("label {key}: value not quoted"));
            }
            let mut value = String::new();
            loop {
                match chars.next() {
                    Some((_, '\\')) => match chars.next() {
                        Some((_, 'n')) => value.push('\n'),
                        Some((_, '\\')) => value.push('\\'),
                        Some((_, '"')) => value.push('"'),
                        other => return Err(format!("label {key}: bad escape {other:?}")),
                    },
                    Some((_, '"')) => break,
                    Some((_, c)) => value.push(c),
                    None => return Err(format!("label {key}: unterminated value")),
                }
            }
            if labels.insert(key.clone(), value).is_some() {
                return Err(format!("label {key} given twice"));
            }
        }
        rest = &r[end + 1..];
    }
    let mut fields = rest.split_whitespace();
    let v = fields.next().ok_or("no value")?;
    let value = match v {
        "+Inf" | "Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        "NaN" => f64::NAN,
        _ => v.parse::<f64>().map_err(|_| format!("bad value {v:?}"))?,
    };
    if let Some(ts) = fields.next() {
        ts.parse::<f64>().map_err(|_| format!("bad timestamp {ts:?}"))?;
    }
    if fields.next().is_some() {
        return Err("trailing text after the value".into());
    }
    Ok(Sample { name: name.to_string(), labels, value })
}

/// Scrapes `/metrics` and parses it; panics with the text when it does not parse.
pub async fn scrape(addr: SocketAddr, token: Option<&str>) -> Prom {
    let r = http_get(addr, "/metrics", token).await;
    assert_eq!(r.status, 200, "GET /metrics: {r:?}");
    let text = r.text();
    Prom::parse(&text).unwrap_or_else(|e| panic!("/metrics does not parse: {e}\n{text}"))
}
