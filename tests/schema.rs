//! The JSON Schemas of the YAML files: the copies in `docs/schema/` are what
//! `steerdns schema` prints, every example and test configuration validates against them,
//! and each example file names its schema on its first line for editors.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{DEFAULT_PROFILES, LOCATION_KEYS, location_profiles, steerdns_yaml, with_admin};
use serde_json::Value;

const CONFIG_SCHEMA: &str = "docs/schema/config.json";
const PROFILE_SCHEMA: &str = "docs/schema/profile.json";

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(rel: &str) -> String {
    let path = root().join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// What the real binary prints for `steerdns schema <document>`.
fn printed_schema(document: &str) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_steerdns"))
        .args(["schema", document])
        .output()
        .expect("run steerdns schema");
    assert!(out.status.success(), "steerdns schema {document}: {out:?}");
    String::from_utf8(out.stdout).expect("UTF-8 schema")
}

fn validator(schema_file: &str) -> jsonschema::Validator {
    let schema: Value = serde_json::from_str(&read(schema_file)).expect("schema is JSON");
    jsonschema::draft7::new(&schema).unwrap_or_else(|e| panic!("{schema_file}: {e}"))
}

/// Every document of a YAML text as JSON values, typed as YAML 1.2 types them (as editors
/// do): only `true` and `false` are booleans, so a region code such as `NO` stays a string.
fn documents(name: &str, text: &str) -> Vec<Value> {
    let options = serde_saphyr::options! { strict_booleans: true };
    serde_saphyr::from_multiple_with_options(text, options)
        .unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// The schema's complaints about each document of `text`, as "NAME#DOC at PATH: message".
fn violations(v: &jsonschema::Validator, name: &str, text: &str) -> Vec<String> {
    let docs = documents(name, text);
    assert!(!docs.is_empty(), "{name}: no YAML document");
    let mut out = Vec::new();
    for (i, doc) in docs.iter().enumerate() {
        for e in v.iter_errors(doc) {
            let at = e.instance_path().to_string();
            let at = if at.is_empty() { "the top" } else { &at };
            out.push(format!("{name}#{} at {at}: {e}", i + 1));
        }
    }
    out
}

/// The `*.yaml` files of a directory, relative to the repository, in name order.
fn yaml_files(dir: &str) -> Vec<String> {
    let mut files: Vec<String> = std::fs::read_dir(root().join(dir))
        .unwrap_or_else(|e| panic!("{dir}: {e}"))
        .map(|e| e.expect("dir entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".yaml") || n.ends_with(".yml"))
        .map(|n| format!("{dir}/{n}"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no YAML files in {dir}");
    files
}

/// The example files (as shipped in the repository and the image) and their schema.
fn example_files() -> Vec<(String, &'static str)> {
    let mut files = vec![
        ("steerdns.yaml".to_string(), CONFIG_SCHEMA),
        ("docker/steerdns.yaml".to_string(), CONFIG_SCHEMA),
    ];
    for dir in ["profiles", "docker/profiles"] {
        files.extend(yaml_files(dir).into_iter().map(|f| (f, PROFILE_SCHEMA)));
    }
    files
}

#[test]
fn committed_schemas_are_what_steerdns_schema_prints() {
    for (document, file) in [("config", CONFIG_SCHEMA), ("profile", PROFILE_SCHEMA)] {
        let printed = printed_schema(document);
        assert!(
            read(file) == printed,
            "{file} is out of date; regenerate it with\n  \
             cargo run -- schema {document} > {file}"
        );
    }
}

#[test]
fn example_files_validate() {
    let config = validator(CONFIG_SCHEMA);
    let profile = validator(PROFILE_SCHEMA);
    let mut errors = Vec::new();
    for (file, schema) in example_files() {
        let v = if schema == CONFIG_SCHEMA { &config } else { &profile };
        errors.extend(violations(v, &file, &read(&file)));
    }
    assert!(errors.is_empty(), "schema violations:\n{}", errors.join("\n"));
}

#[test]
fn test_configurations_validate() {
    let config = validator(CONFIG_SCHEMA);
    let profile = validator(PROFILE_SCHEMA);
    let base = steerdns_yaml();
    let configs = [
        ("steerdns_yaml()", base.clone()),
        ("with LOCATION_KEYS", format!("{base}{LOCATION_KEYS}")),
        ("with_admin(token)", with_admin(&base, Some("token"))),
    ];
    let mut errors = Vec::new();
    for (name, text) in &configs {
        errors.extend(violations(&config, name, text));
    }
    for (name, text) in DEFAULT_PROFILES {
        errors.extend(violations(&profile, name, text));
    }
    for (name, text) in location_profiles() {
        errors.extend(violations(&profile, &format!("location/{name}"), &text));
    }
    assert!(errors.is_empty(), "schema violations:\n{}", errors.join("\n"));
}

/// A misspelled key, a value of the wrong kind and a missing key are each caught, as
/// `steerdns check` catches them.
#[test]
fn mistakes_fail_validation() {
    let profile = validator(PROFILE_SCHEMA);
    let config = validator(CONFIG_SCHEMA);
    let good = "name: www\nrouting: priority\nendpoints:\n  - { name: a, target: 192.0.2.1 }\n";
    assert_eq!(violations(&profile, "good", good), Vec::<String>::new());
    let cases = [
        (&profile, "name: www\nrouting: priority\nendpoint: []\n", "endpoint"),
        (&profile, "name: www\nrouting: priorty\n", "priorty"),
        (&profile, "name: www\nrouting: priority\nmonitor: { interval: 10 }\n", "10"),
        (&profile, "name: www\nrouting: priority\nmonitor: { timeout: 2x }\n", "2x"),
        (&profile, "routing: priority\n", "name"),
        (
            &profile,
            "name: w\nrouting: subnet\nendpoints: [{ name: a, subnets: [10.0.0.1] }]",
            "10.0.0.1",
        ),
        (
            &profile,
            "name: w\nrouting: priority\nendpoints: [{ name: A, target: 192.0.2.1 }]",
            "\"A\"",
        ),
        (
            &profile,
            "name: w\nrouting: priority\nendpoints: [{ name: a, target: cdn.example }]",
            "cdn",
        ),
        (&config, "zones: []\nlisten: { dns: [\"localhost:53\"] }\n", "localhost"),
        (&config, "zones: []\nlimits: { zone_file: 16mib }\n", "16mib"),
        (&config, "zone: []\n", "zone"),
    ];
    for (v, text, mentions) in cases {
        let found = violations(v, "case", text);
        assert!(
            found.iter().any(|e| e.contains(mentions)),
            "{text:?}: expected a violation mentioning {mentions:?}, got {found:?}"
        );
    }
}

/// Each example file starts with the yaml-language-server line naming its schema by a
/// path relative to the file, so editors find it.
#[test]
fn example_files_name_their_schema() {
    for (file, schema) in example_files() {
        let text = read(&file);
        let first = text.lines().next().unwrap_or_default();
        let named = first.strip_prefix("# yaml-language-server: $schema=").unwrap_or_else(|| {
            panic!("{file}: the first line should be `# yaml-language-server: $schema=...`")
        });
        let dir = root().join(&file).parent().unwrap().to_path_buf();
        let resolved: PathBuf = dir.join(named);
        let want = root().join(schema);
        assert_eq!(
            resolved.canonicalize().ok(),
            Some(want.canonicalize().unwrap()),
            "{file} names {named}, which is not {schema}"
        );
    }
}
