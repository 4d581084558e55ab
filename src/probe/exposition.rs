//! Finds one sample in a Prometheus text exposition (format 0.0.4, and the sample lines of
//! OpenMetrics): the load of a feed given as `metric: 'name{label="value"}'`.
//!
//! Written here rather than taken from a crate: the one on crates.io (`prometheus-parse`)
//! brings regex, chrono and itertools for a job of a hundred lines, and does not undo the
//! escapes in label values, so `path="a\"b"` would never match. A selector matches a sample
//! of the same name that has every selector label with that value (other labels may be
//! there, as in PromQL); exactly one sample must match.

/// Why no single value came out of an exposition.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ExpositionError {
    #[error("line {line} of the exposition is not a sample: {why}")]
    Malformed { line: usize, why: &'static str },
    #[error("the exposition is not UTF-8")]
    NotUtf8,
    #[error("no sample matches {0}")]
    Absent(String),
    #[error("{count} samples match {selector}; the selector must pick one")]
    Ambiguous { selector: String, count: usize },
}

/// One sample line: its name, its labels (values unescaped) and its value.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: Vec<(String, String)>,
    pub value: f64,
}

/// The value of the one sample named `name` with every label of `labels`.
pub fn find(body: &[u8], name: &str, labels: &[(String, String)]) -> Result<f64, ExpositionError> {
    let text = std::str::from_utf8(body).map_err(|_| ExpositionError::NotUtf8)?;
    let (mut found, mut count) = (None, 0);
    for (i, line) in text.lines().enumerate() {
        let Some(sample) =
            parse_line(line).map_err(|why| ExpositionError::Malformed { line: i + 1, why })?
        else {
            continue;
        };
        let matches = sample.name == name
            && labels.iter().all(|(k, v)| sample.labels.iter().any(|(sk, sv)| sk == k && sv == v));
        if matches {
            count += 1;
            found = Some(sample.value);
        }
    }
    match (count, found) {
        (1, Some(v)) => Ok(v),
        (0, _) => Err(ExpositionError::Absent(selector_text(name, labels))),
        _ => Err(ExpositionError::Ambiguous { selector: selector_text(name, labels), count }),
    }
}

/// The selector as written in the configuration, for messages.
pub fn selector_text(name: &str, labels: &[(String, String)]) -> String {
    if labels.is_empty() {
        return name.to_string();
    }
    let inner: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v:?}")).collect();
    format!("{name}{{{}}}", inner.join(","))
}

/// One line: `None` for a blank line or a comment (`# HELP`, `# TYPE`, `# EOF`).
pub fn parse_line(line: &str) -> Result<Option<Sample>, &'static str> {
    let line = line.trim_start();
    if line.is_empty() || line.starts_with('#') {
        return Ok(None);
    }
    let name_end = line.find(|c: char| !is_name_char(c)).unwrap_or(line.len());
    let name = &line[..name_end];
    if name.is_empty() || name.starts_with(|c: char| c.is_ascii_digit()) {
        return Err("no metric name");
    }
    let mut rest = &line[name_end..];
    let mut labels = Vec::new();
    if let Some(after) = rest.strip_prefix('{') {
        rest = parse_labels(after, &mut labels)?;
    }
    if !rest.starts_with([' ', '\t']) {
        return Err("no space before the value");
    }
    let mut fields = rest.split_ascii_whitespace();
    let value = parse_value(fields.next().ok_or("no value")?)?;
    // An optional timestamp, then only an OpenMetrics exemplar (`# {…} v`) may follow.
    match fields.next() {
        None | Some("#") => {}
        Some(ts) if ts.parse::<f64>().is_ok() && fields.next().is_some_and(|f| f != "#") => {
            return Err("text after the timestamp");
        }
        Some(ts) if ts.parse::<f64>().is_ok() => {}
        Some(_) => return Err("the timestamp is not a number"),
    }
    Ok(Some(Sample { name: name.to_string(), labels, value }))
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == ':'
}

/// Reads `name="value",…}` after the opening brace into `labels`; what follows the `}`.
fn parse_labels<'a>(
    mut s: &'a str,
    labels: &mut Vec<(String, String)>,
) -> Result<&'a str, &'static str> {
    loop {
        s = s.trim_start();
        if let Some(rest) = s.strip_prefix('}') {
            return Ok(rest);
        }
        let end = s.find(|c: char| !is_name_char(c)).unwrap_or(s.len());
        let key = &s[..end];
        if key.is_empty() || key.contains(':') {
            return Err("a label name is missing or invalid");
        }
        s = s[end..].trim_start().strip_prefix('=').ok_or("a label has no '='")?;
        s = s.trim_start().strip_prefix('"').ok_or("a label value is not quoted")?;
        let mut value = String::new();
        let mut chars = s.char_indices();
        let close = loop {
            match chars.next().ok_or("a label value is not closed")? {
                (i, '"') => break i,
                (_, '\\') => match chars.next().ok_or("a label value is not closed")?.1 {
                    'n' => value.push('\n'),
                    '\\' => value.push('\\'),
                    '"' => value.push('"'),
                    _ => return Err("unknown escape in a label value"),
                },
                (_, c) => value.push(c),
            }
        };
        labels.push((key.to_string(), value));
        s = s[close + 1..].trim_start();
        if let Some(rest) = s.strip_prefix(',') {
            s = rest;
        } else if !s.starts_with('}') {
            return Err("labels are not separated by ','");
        }
    }
}

/// A sample value: a Go float, including `NaN`, `+Inf` and `-Inf`.
fn parse_value(s: &str) -> Result<f64, &'static str> {
    match s {
        "NaN" => Ok(f64::NAN),
        "+Inf" | "Inf" => Ok(f64::INFINITY),
        "-Inf" => Ok(f64::NEG_INFINITY),
        // Rust also reads "inf" and "nan" in any case, which the format does not allow.
        _ if s.bytes().any(|b| b.is_ascii_alphabetic() && !matches!(b, b'e' | b'E')) => {
            Err("the value is not a number")
        }
        _ => s.parse().map_err(|_| "the value is not a number"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sample as written in a table: name, labels, value.
    type Want<'a> = (&'a str, &'a [(&'a str, &'a str)], f64);

    fn labels(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn sample_lines() {
        // The examples of the text format's documentation ("Text format example").
        let cases: &[(&str, Option<Want<'_>>)] = &[
            ("# HELP http_requests_total The total number of HTTP requests.", None),
            ("# TYPE http_requests_total counter", None),
            ("", None),
            ("   ", None),
            (
                r#"http_requests_total{method="post",code="200"} 1027 1395066363000"#,
                Some(("http_requests_total", &[("method", "post"), ("code", "200")], 1027.0)),
            ),
            (
                r#"msdos_file_access_time_seconds{path="C:\\DIR\\FILE.TXT",error="Cannot find file:\n\"FILE.TXT\""} 1.458255915e9"#,
                Some((
                    "msdos_file_access_time_seconds",
                    &[("path", r"C:\DIR\FILE.TXT"), ("error", "Cannot find file:\n\"FILE.TXT\"")],
                    1.458255915e9,
                )),
            ),
            (
                "metric_without_timestamp_and_labels 12.47",
                Some(("metric_without_timestamp_and_labels", &[], 12.47)),
            ),
            (
                r#"something_weird{problem="division by zero"} +Inf -3982045"#,
                Some(("something_weird", &[("problem", "division by zero")], f64::INFINITY)),
            ),
            (
                r#"http_request_duration_seconds_bucket{le="0.05",} 24054"#,
                Some(("http_request_duration_seconds_bucket", &[("le", "0.05")], 24054.0)),
            ),
            ("rpc_duration_seconds_count 2693", Some(("rpc_duration_seconds_count", &[], 2693.0))),
            ("app:inflight{} -2", Some(("app:inflight", &[], -2.0))),
            // OpenMetrics: a sample with an exemplar.
            (
                r#"foo_bucket{le="1"} 7 # {trace_id="x"} 0.5"#,
                Some(("foo_bucket", &[("le", "1")], 7.0)),
            ),
        ];
        for (line, want) in cases {
            let got = parse_line(line).unwrap_or_else(|e| panic!("{line}: {e}"));
            let want = want.map(|(n, l, v)| Sample { name: n.into(), labels: labels(l), value: v });
            assert_eq!(got, want, "{line}");
        }
    }

    #[test]
    fn malformed_lines() {
        let cases = [
            ("{a=\"b\"} 1", "no metric name"),
            ("9lives 1", "no metric name"),
            ("m{a=\"b} 1", "a label value is not closed"),
            ("m{a=b} 1", "a label value is not quoted"),
            ("m{a} 1", "a label has no '='"),
            ("m{a=\"b\" c=\"d\"} 1", "labels are not separated by ','"),
            ("m{a=\"\\t\"} 1", "unknown escape in a label value"),
            ("m", "no space before the value"),
            ("m ", "no value"),
            ("m one", "the value is not a number"),
            ("m inf", "the value is not a number"),
            ("m 1 noon", "the timestamp is not a number"),
            ("m 1 2 3", "text after the timestamp"),
        ];
        for (line, why) in cases {
            assert_eq!(parse_line(line), Err(why), "{line}");
        }
    }

    #[test]
    fn finding_one_sample() {
        let body = br#"# TYPE app_inflight gauge
app_inflight{pool="eu",host="a"} 870
app_inflight{pool="us",host="b"} 120
app_inflight{pool="us",host="c"} 130
app_total 5
"#;
        type Case<'a> = (&'a str, &'a [(&'a str, &'a str)], Result<f64, ExpositionError>);
        let cases: &[Case<'_>] = &[
            ("app_total", &[], Ok(5.0)),
            ("app_inflight", &[("pool", "eu")], Ok(870.0)),
            ("app_inflight", &[("pool", "us"), ("host", "c")], Ok(130.0)),
            (
                "app_inflight",
                &[("pool", "us")],
                Err(ExpositionError::Ambiguous {
                    selector: "app_inflight{pool=\"us\"}".into(),
                    count: 2,
                }),
            ),
            (
                "app_inflight",
                &[],
                Err(ExpositionError::Ambiguous { selector: "app_inflight".into(), count: 3 }),
            ),
            (
                "app_inflight",
                &[("pool", "ap")],
                Err(ExpositionError::Absent("app_inflight{pool=\"ap\"}".into())),
            ),
            // A prefix of a name is another name.
            ("app", &[], Err(ExpositionError::Absent("app".into()))),
        ];
        for (name, l, want) in cases {
            assert_eq!(&find(body, name, &labels(l)), want, "{name} {l:?}");
        }
        let bad = b"ok 1\nbroken{\n";
        assert_eq!(
            find(bad, "ok", &[]),
            Err(ExpositionError::Malformed { line: 2, why: "a label name is missing or invalid" })
        );
        assert_eq!(find(b"\xff 1", "x", &[]), Err(ExpositionError::NotUtf8));
    }
}
