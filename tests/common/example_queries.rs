//! One query per routing method of the example configuration (`steerdns.yaml`), labelled
//! as the benchmark reports it: shared by the core benchmark and the instruction-count
//! example, which include this file by path (neither can import the test harness).

/// (label, name asked for type A, client subnet of the ECS option if any).
pub type ExampleQuery = (&'static str, &'static str, Option<&'static str>);

pub const EXAMPLE_QUERIES: &[ExampleQuery] = &[
    ("static", "info.tm.example.test.", None),
    ("nxdomain", "missing.tm.example.test.", None),
    ("priority", "www.tm.example.test.", None),
    ("weighted", "api.tm.example.test.", None),
    ("weighted-sticky-ecs", "app.tm.example.test.", Some("203.0.113.0/24")),
    ("multivalue", "pool.tm.example.test.", None),
    ("nested", "global.tm.example.test.", None),
    ("geographic-ecs", "geo.tm.example.test.", Some("192.0.2.128/25")),
    ("subnet-ecs", "office.tm.example.test.", Some("198.51.100.15/32")),
    ("performance-ecs", "fast.tm.example.test.", Some("198.51.100.130/32")),
    ("groups-ecs", "accel.tm.example.test.", Some("198.51.100.0/24")),
    ("zone-ecs", "svc.tm.example.test.", Some("10.1.0.0/16")),
    ("geoproximity-ecs", "near.tm.example.test.", Some("192.0.2.0/25")),
];
