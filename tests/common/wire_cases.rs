//! The wire conformance cases that concern UDP: answers, EDNS, ECS, truncation, malformed
//! queries and routing as a client sees them over UDP (with TCP where a case compares the
//! two). Each case takes a running `Harness`, so that the same cases run against the UDP
//! sockets (tests/wire.rs) and through the AF_XDP fast path (tests/xdp.rs); `wire_tests!`
//! makes a test of each. Cases that concern TCP alone stay in tests/wire.rs.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::net::IpAddr;

use hickory_proto::rr::RData;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::*;

/// Makes a test of every case, each on a harness of its own started with
/// `Harness::start_via($via)` (which gives `None` to skip, having said why). Every public
/// `async fn NAME(h: &Harness)` below is a case (helpers are named `assert_…`) and must be
/// listed here.
#[macro_export]
macro_rules! wire_tests {
    ($via:expr) => {
        $crate::wire_tests!(@cases $via;
            answers_are_authoritative_and_never_recursive,
            name_outside_every_zone_is_refused,
            apex_soa_is_served_from_the_zone,
            apex_ns_with_in_zone_glue,
            nxdomain_has_soa_with_negative_ttl,
            nodata_for_wrong_type_at_static_name,
            nodata_for_other_types_at_profile_name,
            empty_non_terminal_is_nodata_not_nxdomain,
            static_records_txt_mx_srv,
            cname_is_returned_for_other_types_at_a_cname_name,
            in_zone_cname_chains_are_followed_through_static_records,
            profile_answers_a_and_aaaa_by_endpoint_family,
            host_name_endpoint_answers_cname,
            cname_query_at_address_only_profile_is_nodata,
            any_gets_a_single_hinfo_rfc8482,
            question_and_owner_echo_the_query_case,
            no_opt_in_reply_without_opt_in_query,
            opt_in_query_gets_opt_with_payload_1232,
            dnssec_ok_query_gets_a_normal_answer,
            unknown_edns_option_is_not_echoed,
            edns_version_1_gets_badvers_with_version_0,
            big_answer_over_udp_without_edns_is_truncated,
            big_answer_over_udp_with_large_edns_is_still_truncated,
            answer_is_truncated_only_when_larger_than_the_client_udp_size,
            ecs_echoed_with_scope_0_when_answer_does_not_depend_on_client,
            ecs_sticky_weighted_reports_scope_24_and_56,
            ecs_malformed_gets_formerr,
            ecs_source_prefix_0_gets_scope_0,
            other_opcodes_get_notimp,
            two_questions_or_none_get_formerr,
            malformed_queries_get_formerr,
            responses_are_dropped,
            disabled_profile_answers_nxdomain,
            priority_picks_priority_1,
            priority_skips_disabled_priority_1,
            weighted_splits_3_to_1,
            weight_0_endpoint_is_never_chosen_while_others_serve,
            multivalue_returns_max_return_in_rotating_order,
            multivalue_aaaa_returns_only_ipv6,
            sticky_same_subnet_gets_the_same_answer,
            sticky_different_subnets_reach_every_endpoint,
            nested_parent_answers_with_the_child_profile,
            nested_disabled_child_makes_parent_fail_over,
            udp_and_tcp_give_the_same_answer,
            malformed_udp_flood_does_not_break_the_server,
            a_burst_of_answers_leaves_no_reply_behind,
        );
    };
    (@cases $via:expr; $($case:ident,)*) => {
        /// A case written but missing from the list above would run nowhere.
        #[test]
        fn every_wire_case_is_a_test() {
            let source =
                include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/common/wire_cases.rs"));
            let written: Vec<&str> = source
                .lines()
                .filter_map(|l| l.strip_prefix("pub async fn ")?.strip_suffix("(h: &Harness) {"))
                .filter(|name| !name.starts_with("assert_"))
                .collect();
            assert_eq!(written, [$(stringify!($case)),*]);
        }

        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let Some(h) = $crate::common::Harness::start_via($via).await else { return };
                $crate::common::wire_cases::$case(&h).await;
                h.stop().await;
            }
        )*
    };
}

// ---------------------------------------------------------------------------------------
// Header flags, REFUSED
// ---------------------------------------------------------------------------------------

pub async fn answers_are_authoritative_and_never_recursive(h: &Harness) {
    let queries = [
        Q::new(&fq("www"), T_A),
        Q::new(ORIGIN, T_SOA),
        Q::new(&fq("info"), T_TXT),
        Q::new(&fq("nope"), T_A),
        Q::new(&fq("www"), T_MX),
    ];
    for q in queries {
        for rd in [false, true] {
            let q = if rd { q.clone().rd() } else { q.clone() };
            let r = h.udp(&q).await;
            assert_eq!(r.wire.id, q.id);
            assert!(r.qr(), "QR clear: {r:#?}");
            assert!(r.aa(), "AA clear for {}: {r:#?}", q.name);
            assert!(!r.ra(), "RA set for {}: {r:#?}", q.name);
            assert_eq!(r.msg.recursion_desired, rd, "RD not copied: {r:#?}");
            assert!(!r.tc());
        }
    }
}

pub async fn name_outside_every_zone_is_refused(h: &Harness) {
    for name in [
        "www.example.com.",
        "example.test.",
        "test.",
        ".",
        "xtm.example.test.",
        "www.tm.example.test.evil.",
    ] {
        for r in [h.udp(&Q::new(name, T_A)).await, h.tcp(&Q::new(name, T_A)).await] {
            assert_eq!(r.rcode(), REFUSED, "{name}: {r:#?}");
            assert!(!r.aa(), "{name}: AA set on REFUSED");
            assert!(!r.ra(), "{name}: RA set");
            assert!(r.msg.answers.is_empty() && r.msg.authorities.is_empty());
            assert_eq!(r.wire.question[..], Q::new(name, T_A).bytes()[12..]);
        }
    }
}

// ---------------------------------------------------------------------------------------
// Apex
// ---------------------------------------------------------------------------------------

pub async fn apex_soa_is_served_from_the_zone(h: &Harness) {
    let r = h.udp(&Q::new(ORIGIN, T_SOA)).await;
    r.single();
    let rec = &r.msg.answers[0];
    assert_eq!(rec.ttl, 3600);
    assert_eq!(rec.name.to_ascii(), ORIGIN);
    let RData::SOA(soa) = &rec.data else { panic!("{rec:?}") };
    assert_eq!(soa.mname.to_ascii(), "ns1.tm.example.test.");
    assert_eq!(soa.rname.to_ascii(), "hostmaster.example.test.");
    assert_eq!((soa.refresh, soa.retry, soa.expire, soa.minimum), (3600, 600, 604800, 30));
    assert!(soa.serial > 0, "serial {}", soa.serial);
}

pub async fn apex_ns_with_in_zone_glue(h: &Harness) {
    for r in [h.udp(&Q::new(ORIGIN, T_NS)).await, h.udp(&Q::new(ORIGIN, T_NS).edns()).await] {
        assert_eq!(r.rcode(), NOERROR);
        assert!(r.aa());
        let ns: BTreeSet<String> = r.answer_strings().into_iter().collect();
        let want: BTreeSet<String> =
            ["NS ns1.tm.example.test.".to_string(), "NS ns2.tm.example.test.".to_string()].into();
        assert_eq!(ns, want);
        assert!(r.msg.answers.iter().all(|a| a.ttl == 3600));
        let glue: BTreeSet<String> = r
            .msg
            .additionals
            .iter()
            .map(|a| format!("{} {}", a.name.to_ascii(), rdata_string(&a.data)))
            .collect();
        let want: BTreeSet<String> = [
            "ns1.tm.example.test. A 127.0.0.1",
            "ns1.tm.example.test. AAAA ::1",
            "ns2.tm.example.test. A 127.0.0.2",
            "ns2.tm.example.test. AAAA ::2",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        assert_eq!(glue, want, "{r:#?}");
    }
}

// ---------------------------------------------------------------------------------------
// Negative answers
// ---------------------------------------------------------------------------------------

pub async fn nxdomain_has_soa_with_negative_ttl(h: &Harness) {
    for name in ["nope", "deep.nope", "x.www", "x.a.b", "ns3", "bigger"] {
        for qtype in [T_A, T_AAAA, T_TXT] {
            let r = h.udp(&Q::new(&fq(name), qtype)).await;
            r.assert_negative(NXDOMAIN);
        }
    }
    h.tcp(&Q::new(&fq("nope"), T_A)).await.assert_negative(NXDOMAIN);
}

pub async fn nodata_for_wrong_type_at_static_name(h: &Harness) {
    for (name, qtype) in [
        ("info", T_AAAA),
        ("info", T_A),
        ("@", T_MX),
        ("@", T_A),
        ("mail", T_A),
        ("ns1", T_MX),
        ("ftp", T_AAAA),
        ("a.b", T_AAAA),
        ("big", T_A),
    ] {
        let r = h.udp(&Q::new(&fq(name), qtype)).await;
        r.assert_negative(NOERROR);
    }
}

pub async fn nodata_for_other_types_at_profile_name(h: &Harness) {
    for (name, qtype) in [
        ("www", T_MX),
        ("www", T_TXT),
        ("www", T_SRV),
        ("www", T_SOA),
        ("www", T_NS),
        ("api", T_MX),
        ("pool", T_TXT),
        ("global", T_MX),
    ] {
        let r = h.udp(&Q::new(&fq(name), qtype)).await;
        r.assert_negative(NOERROR);
    }
}

pub async fn empty_non_terminal_is_nodata_not_nxdomain(h: &Harness) {
    for qtype in [T_A, T_AAAA, T_TXT] {
        h.udp(&Q::new(&fq("b"), qtype)).await.assert_negative(NOERROR);
    }
    let r = h.udp(&Q::new(&fq("a.b"), T_A)).await;
    assert_eq!(r.single(), "A 192.0.2.99");
}

// ---------------------------------------------------------------------------------------
// Static records
// ---------------------------------------------------------------------------------------

pub async fn static_records_txt_mx_srv(h: &Harness) {
    let r = h.udp(&Q::new(ORIGIN, T_TXT)).await;
    assert_eq!(r.single(), r#"TXT "v=spf1 -all""#);
    assert_eq!(r.msg.answers[0].ttl, 3600);

    let r = h.udp(&Q::new(&fq("info"), T_TXT)).await;
    assert_eq!(r.single(), r#"TXT "steerdns test zone""#);
    assert_eq!(r.msg.answers[0].ttl, 300);

    let r = h.udp(&Q::new(&fq("mail"), T_MX)).await;
    assert_eq!(r.single(), "MX 10 mx.example.net.");

    let r = h.udp(&Q::new(&fq("_sip._udp"), T_SRV)).await;
    r.single();
    let RData::SRV(srv) = &r.msg.answers[0].data else { panic!("{r:#?}") };
    assert_eq!(
        (srv.priority, srv.weight, srv.port, srv.target.to_ascii()),
        (10, 60, 5060, "sip.example.net.".to_string())
    );

    let r = h.udp(&Q::new(&fq("ftp"), T_A)).await;
    assert_eq!(r.single(), "A 192.0.2.200");
    assert_eq!(r.msg.answers[0].ttl, 120);
}

pub async fn cname_is_returned_for_other_types_at_a_cname_name(h: &Harness) {
    for qtype in [T_A, T_AAAA, T_TXT, T_CNAME] {
        let r = h.udp(&Q::new(&fq("docs"), qtype)).await;
        assert_eq!(r.rcode(), NOERROR, "{r:#?}");
        assert!(r.aa());
        assert!(!r.msg.answers.is_empty(), "{r:#?}");
        let first = &r.msg.answers[0];
        assert_eq!(first.name.to_ascii(), fq("docs"));
        assert_eq!(rdata_string(&first.data), "CNAME www.tm.example.test.");
    }
}

pub async fn in_zone_cname_chains_are_followed_through_static_records(h: &Harness) {
    let r = h.udp(&Q::new(&fq("chain"), T_A)).await;
    let got: Vec<(String, String)> =
        r.msg.answers.iter().map(|a| (a.name.to_ascii(), rdata_string(&a.data))).collect();
    assert_eq!(
        got,
        vec![
            (fq("chain"), "CNAME hop.tm.example.test.".to_string()),
            (fq("hop"), "CNAME a.b.tm.example.test.".to_string()),
            (fq("a.b"), "A 192.0.2.99".to_string()),
        ]
    );
    // A loop ends after a bounded number of hops, with an answer.
    let r = h.udp(&Q::new(&fq("loop1"), T_A).edns()).await;
    assert_eq!(r.rcode(), NOERROR);
    assert!((2..=10).contains(&r.msg.answers.len()), "{r:#?}");
    // A chain to a profile name goes on with the profile's answer for the same client.
    let r = h.udp(&Q::new(&fq("docs"), T_A)).await;
    let got: Vec<(String, String)> =
        r.msg.answers.iter().map(|a| (a.name.to_ascii(), rdata_string(&a.data))).collect();
    assert_eq!(
        got,
        vec![
            (fq("docs"), "CNAME www.tm.example.test.".to_string()),
            (fq("www"), "A 192.0.2.10".to_string()),
        ]
    );
}

// ---------------------------------------------------------------------------------------
// Profile answers
// ---------------------------------------------------------------------------------------

pub async fn profile_answers_a_and_aaaa_by_endpoint_family(h: &Harness) {
    let r = h.udp(&Q::new(&fq("www"), T_A)).await;
    assert_eq!(r.single(), "A 192.0.2.10");
    assert_eq!(r.msg.answers[0].ttl, 30);
    assert_eq!(r.msg.answers[0].name.to_ascii(), fq("www"));
    assert!(r.msg.authorities.is_empty());

    let r = h.udp(&Q::new(&fq("www"), T_AAAA)).await;
    assert_eq!(r.single(), "AAAA 2001:db8::10");
    assert_eq!(r.msg.answers[0].ttl, 30);
}

pub async fn host_name_endpoint_answers_cname(h: &Harness) {
    // `alias`: the IPv4 endpoint is disabled, only the host name is eligible.
    for qtype in [T_CNAME, T_A, T_AAAA] {
        let r = h.udp(&Q::new(&fq("alias"), qtype)).await;
        assert_eq!(r.single(), "CNAME cdn.example.net.", "qtype {qtype}");
        assert_eq!(r.msg.answers[0].ttl, 50);
        assert_eq!(r.msg.answers[0].name.to_ascii(), fq("alias"));
    }
}

pub async fn cname_query_at_address_only_profile_is_nodata(h: &Harness) {
    for name in ["www", "prio2", "api", "pool", "global"] {
        h.udp(&Q::new(&fq(name), T_CNAME)).await.assert_negative(NOERROR);
    }
    // prio2 has no IPv6 endpoint either.
    h.udp(&Q::new(&fq("prio2"), T_AAAA)).await.assert_negative(NOERROR);
}

pub async fn any_gets_a_single_hinfo_rfc8482(h: &Harness) {
    for name in ["www", "@", "info", "pool", "mail"] {
        let r = h.udp(&Q::new(&fq(name), T_ANY)).await;
        r.single();
        let RData::HINFO(hinfo) = &r.msg.answers[0].data else { panic!("{name}: {r:#?}") };
        assert_eq!(&hinfo.cpu[..], b"RFC8482", "{name}");
        assert_eq!(r.msg.answers[0].name.to_ascii(), fq(name));
    }
    for name in ["nope", "x.www", "off"] {
        h.udp(&Q::new(&fq(name), T_ANY)).await.assert_negative(NXDOMAIN);
    }
}

pub async fn question_and_owner_echo_the_query_case(h: &Harness) {
    let cases = [
        ("WwW.Tm.ExAmPlE.TeSt.", T_A, true),
        ("tM.eXaMpLe.TeSt.", T_TXT, true),
        ("PoOl.TM.EXAMPLE.TEST.", T_A, true),
        ("NoPe.Tm.ExAmPlE.tEsT.", T_A, false),
    ];
    for (name, qtype, has_answer) in cases {
        let q = Q::new(name, qtype).edns();
        let sent = encode_name(name);
        for r in [h.udp(&q).await, h.tcp(&q).await] {
            assert_eq!(&r.raw[12..12 + sent.len()], &sent[..], "{name}: question bytes");
            assert_eq!(r.wire.question, q.bytes()[12..12 + sent.len() + 4]);
            if has_answer {
                assert!(!r.wire.answers.is_empty(), "{name}: {r:#?}");
                for a in &r.wire.answers {
                    assert_eq!(a.name, sent, "{name}: owner case");
                }
            } else {
                assert_eq!(r.rcode(), NXDOMAIN);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// EDNS
// ---------------------------------------------------------------------------------------

pub async fn no_opt_in_reply_without_opt_in_query(h: &Harness) {
    for q in [
        Q::new(&fq("www"), T_A),
        Q::new(&fq("nope"), T_A),
        Q::new(ORIGIN, T_NS),
        Q::new("example.com.", T_A),
    ] {
        let r = h.udp(&q).await;
        assert!(r.wire.opt().is_none(), "{r:#?}");
        assert!(r.msg.edns.is_none());
    }
}

pub async fn opt_in_query_gets_opt_with_payload_1232(h: &Harness) {
    for payload in [512, 1232, 4096, 65535] {
        for q in [
            Q::new(&fq("www"), T_A).payload(payload),
            Q::new(&fq("nope"), T_A).payload(payload),
            Q::new(ORIGIN, T_NS).payload(payload),
            Q::new("example.com.", T_A).payload(payload),
        ] {
            let r = h.udp(&q).await;
            let opts: Vec<_> = r.wire.additional.iter().filter(|a| a.rtype == T_OPT).collect();
            assert_eq!(opts.len(), 1, "{r:#?}");
            let opt = opts[0];
            assert_eq!(opt.name, vec![0], "OPT owner must be the root");
            assert_eq!(opt.class, 1232, "advertised payload");
            assert_eq!((opt.ttl >> 16) & 0xff, 0, "EDNS version");
            assert_eq!(r.msg.edns.as_ref().unwrap().max_payload(), 1232);
        }
    }
}

pub async fn dnssec_ok_query_gets_a_normal_answer(h: &Harness) {
    let r = h.udp(&Q::new(&fq("www"), T_A).dnssec_ok()).await;
    assert_eq!(r.single(), "A 192.0.2.10");
    let opt = r.wire.opt().expect("OPT");
    assert_eq!(opt.ttl & 0x8000, 0x8000, "DO is copied (RFC 3225 §3)");
    let r = h.udp(&Q::new(&fq("www"), T_A).edns()).await;
    assert_eq!(r.wire.opt().expect("OPT").ttl & 0x8000, 0, "DO stays clear when not asked");
}

pub async fn unknown_edns_option_is_not_echoed(h: &Harness) {
    let q = Q::new(&fq("www"), T_A).option(65001, b"hello");
    let r = h.udp(&q).await;
    assert_eq!(r.single(), "A 192.0.2.10");
    let opt = r.wire.opt().expect("OPT");
    assert!(opt.rdata.is_empty(), "options echoed: {:?}", r.wire.opt_options());

    // Next to ECS: only ECS comes back.
    let q = Q::new(&fq("www"), T_A)
        .option(65001, b"hello")
        .ecs(ip("198.51.100.0"), 24)
        .option(65002, &[]);
    let r = h.udp(&q).await;
    let codes: Vec<u16> = r.wire.opt_options().iter().map(|(c, _)| *c).collect();
    assert_eq!(codes, vec![8], "{r:#?}");
}

pub async fn edns_version_1_gets_badvers_with_version_0(h: &Harness) {
    for name in [fq("www"), fq("nope"), ORIGIN.to_string()] {
        for version in [1u8, 2, 255] {
            let q = Q::new(&name, T_A).version(version);
            for r in [h.udp(&q).await, h.tcp(&q).await] {
                assert_eq!(r.rcode(), BADVERS, "{name} v{version}: {r:#?}");
                assert_eq!(r.raw[3] & 0x0f, 0, "low RCODE bits of BADVERS");
                let opt = r.wire.opt().expect("OPT in BADVERS reply");
                assert_eq!((opt.ttl >> 24) & 0xff, 1, "extended RCODE");
                assert_eq!((opt.ttl >> 16) & 0xff, 0, "reply EDNS version");
                assert_eq!(opt.class, 1232);
                assert!(r.msg.answers.is_empty());
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Truncation
// ---------------------------------------------------------------------------------------

pub async fn big_answer_over_udp_without_edns_is_truncated(h: &Harness) {
    let q = Q::new(&fq("big"), T_TXT);
    let r = h.udp(&q).await;
    assert!(r.raw.len() <= 512, "UDP reply of {} bytes", r.raw.len());
    assert!(r.tc(), "TC clear: {r:#?}");
    assert!(r.aa());
    assert_eq!(r.rcode(), NOERROR);
    assert!(r.msg.answers.is_empty(), "{r:#?}");
    assert_eq!(r.wire.question, q.bytes()[12..]);
    assert!(r.wire.opt().is_none());
}

pub async fn big_answer_over_udp_with_large_edns_is_still_truncated(h: &Harness) {
    for payload in [1232, 4096, 65535] {
        let q = Q::new(&fq("big"), T_TXT).payload(payload);
        let r = h.udp(&q).await;
        assert!(r.raw.len() <= 1232, "UDP reply of {} bytes", r.raw.len());
        assert!(r.tc(), "payload {payload}: TC clear: {r:#?}");
        assert!(r.msg.answers.is_empty());
        assert!(r.wire.opt().is_some(), "OPT missing from truncated reply");
    }
}

pub async fn answer_is_truncated_only_when_larger_than_the_client_udp_size(h: &Harness) {
    let want: BTreeSet<String> =
        (0..MID_TXT_RECORDS).map(|i| format!("TXT {:?}", big_txt_string(i))).collect();
    // About 800 bytes: too big for 512 (no EDNS, or EDNS with a small payload) ...
    for q in [Q::new(&fq("mid"), T_TXT), Q::new(&fq("mid"), T_TXT).payload(600)] {
        let r = h.udp(&q).await;
        assert!(r.tc(), "{q:?}: TC clear");
        assert!(r.msg.answers.is_empty());
        assert!(r.raw.len() <= 600);
    }
    // ... complete with EDNS 1232 or more, and over TCP.
    for payload in [1232, 4096] {
        let r = h.udp(&Q::new(&fq("mid"), T_TXT).payload(payload)).await;
        assert!(!r.tc(), "payload {payload}: TC set");
        let got: BTreeSet<String> = r.answer_strings().into_iter().collect();
        assert_eq!(got, want);
        assert!(r.raw.len() > 512);
    }
    let r = h.tcp(&Q::new(&fq("mid"), T_TXT)).await;
    assert!(!r.tc());
    assert_eq!(r.msg.answers.len(), MID_TXT_RECORDS);
}

// ---------------------------------------------------------------------------------------
// EDNS Client Subnet
// ---------------------------------------------------------------------------------------

pub async fn ecs_echoed_with_scope_0_when_answer_does_not_depend_on_client(h: &Harness) {
    for name in ["www", "api", "pool", "info", "nope", "prio2", "global"] {
        let q = Q::new(&fq(name), T_A).ecs(ip("198.51.100.0"), 24);
        let r = h.udp(&q).await;
        assert_eq!(r.ecs(), Some((1, 24, 0, vec![198, 51, 100])), "{name}: {r:#?}");
        let q = Q::new(&fq(name), T_AAAA).ecs(ip("2001:db8:aa:bb00::"), 56);
        let r = h.udp(&q).await;
        assert_eq!(
            r.ecs(),
            Some((2, 56, 0, vec![0x20, 0x01, 0x0d, 0xb8, 0x00, 0xaa, 0xbb])),
            "{name}: {r:#?}"
        );
    }
}

pub async fn ecs_sticky_weighted_reports_scope_24_and_56(h: &Harness) {
    let q = Q::new(&fq("app"), T_A).ecs(ip("198.51.100.0"), 24);
    let r = h.udp(&q).await;
    r.single();
    assert_eq!(r.ecs(), Some((1, 24, 24, vec![198, 51, 100])), "{r:#?}");

    let q = Q::new(&fq("app"), T_AAAA).ecs(ip("2001:db8:aa:bb00::"), 56);
    let r = h.udp(&q).await;
    r.single();
    assert_eq!(
        r.ecs(),
        Some((2, 56, 56, vec![0x20, 0x01, 0x0d, 0xb8, 0x00, 0xaa, 0xbb])),
        "{r:#?}"
    );

    // A full address is echoed as sent; the scope is still the /24 the pick used.
    let q = Q::new(&fq("app"), T_A).ecs(ip("198.51.100.77"), 32);
    let r = h.udp(&q).await;
    assert_eq!(r.ecs(), Some((1, 32, 24, vec![198, 51, 100, 77])), "{r:#?}");
}

pub async fn ecs_malformed_gets_formerr(h: &Harness) {
    // (what, family, source, scope, address bytes) — RFC 7871 §6 / §7.1.
    let v6_7 = [0x20, 0x01, 0x0d, 0xb8, 0x00, 0xaa, 0xbb];
    let cases: &[(&str, u16, u8, u8, &[u8])] = &[
        ("too many address bytes", 1, 24, 0, &[198, 51, 100, 0]),
        ("too few address bytes", 1, 24, 0, &[198, 51]),
        ("no address bytes", 1, 24, 0, &[]),
        ("v6 too many address bytes", 2, 56, 0, &[0x20, 0x01, 0x0d, 0xb8, 0, 0xaa, 0xbb, 0]),
        ("bits set past the source prefix", 1, 23, 0, &[198, 51, 101]),
        ("v6 bits set past the source prefix", 2, 52, 0, &v6_7[..7]),
        ("scope non-zero in a query", 1, 24, 24, &[198, 51, 100]),
        ("scope non-zero with source 0", 1, 0, 8, &[]),
        ("unknown family 3", 3, 8, 0, &[1]),
        ("family 0", 0, 0, 0, &[]),
        ("source longer than the family", 1, 33, 0, &[1, 2, 3, 4, 5]),
        ("v6 source longer than the family", 2, 129, 0, &[0x20; 17]),
    ];
    for (what, family, source, scope, addr) in cases {
        let q = Q::new(&fq("app"), T_A).ecs_raw(*family, *source, *scope, addr);
        for r in [h.udp(&q).await, h.tcp(&q).await] {
            assert_eq!(r.rcode(), FORMERR, "{what}: {r:#?}");
            assert!(r.msg.answers.is_empty(), "{what}");
            assert!(r.wire.opt().is_some(), "{what}: OPT missing");
        }
    }
    // A too-short ECS option (no room for family/prefixes) as well.
    let q = Q::new(&fq("www"), T_A).option(8, &[0, 1, 24]);
    assert_eq!(h.udp(&q).await.rcode(), FORMERR);
    // Two ECS options.
    let q = Q::new(&fq("www"), T_A).ecs(ip("198.51.100.0"), 24).ecs(ip("198.51.101.0"), 24);
    assert_eq!(h.udp(&q).await.rcode(), FORMERR);
}

pub async fn ecs_source_prefix_0_gets_scope_0(h: &Harness) {
    for (family, qtype) in [(1u16, T_A), (2, T_AAAA), (1, T_AAAA)] {
        let q = Q::new(&fq("app"), qtype).ecs_raw(family, 0, 0, &[]);
        let r = h.udp(&q).await;
        r.single();
        assert_eq!(r.ecs(), Some((family, 0, 0, vec![])), "{r:#?}");
    }
}

// ---------------------------------------------------------------------------------------
// Opcodes, counts, responses
// ---------------------------------------------------------------------------------------

pub async fn other_opcodes_get_notimp(h: &Harness) {
    for op in [1u8, 2, 4, 5] {
        let q = Q::new(ORIGIN, T_SOA).opcode(op);
        for r in [h.udp(&q).await, h.tcp(&q).await] {
            assert_eq!(r.rcode(), NOTIMP, "opcode {op}: {r:#?}");
            assert_eq!((r.raw[2] >> 3) & 0x0f, op, "opcode echoed");
            assert!(r.qr());
            assert!(r.msg.answers.is_empty());
        }
    }
}

/// A header with the given counts followed by `body`.
pub fn packet(id: u16, flags: u16, counts: [u16; 4], body: &[u8]) -> Vec<u8> {
    let mut p = id.to_be_bytes().to_vec();
    p.extend_from_slice(&flags.to_be_bytes());
    for c in counts {
        p.extend_from_slice(&c.to_be_bytes());
    }
    p.extend_from_slice(body);
    p
}

pub fn question(name: &str, qtype: u16) -> Vec<u8> {
    let mut q = encode_name(name);
    q.extend_from_slice(&qtype.to_be_bytes());
    q.extend_from_slice(&1u16.to_be_bytes());
    q
}

pub async fn two_questions_or_none_get_formerr(h: &Harness) {
    let two = [question(&fq("www"), T_A), question(&fq("api"), T_A)].concat();
    let cases = [
        ("qdcount=2", packet(0x1001, 0, [2, 0, 0, 0], &two)),
        ("qdcount=0", packet(0x1002, 0, [0, 0, 0, 0], &[])),
        (
            "qdcount=0 with trailing question",
            packet(0x1003, 0, [0, 0, 0, 0], &two[..two.len() / 2]),
        ),
    ];
    for (what, p) in cases {
        let r = Reply::new(h.raw_udp(&p).await.expect("no UDP reply"));
        assert_eq!(r.wire.id, u16::from_be_bytes([p[0], p[1]]));
        assert_eq!(r.rcode(), FORMERR, "{what}: {r:#?}");
        assert!(r.qr());
        assert!(r.msg.answers.is_empty());
        let r = Reply::new(h.tcp_bytes(&p).await);
        assert_eq!(r.rcode(), FORMERR, "{what} over TCP: {r:#?}");
    }
}

pub async fn malformed_queries_get_formerr(h: &Harness) {
    let www = question(&fq("www"), T_A);
    let opt = |rdlen: u16, rdata: &[u8]| -> Vec<u8> {
        let mut o = vec![0, 0, 41, 0x04, 0xd0, 0, 0, 0, 0];
        o.extend_from_slice(&rdlen.to_be_bytes());
        o.extend_from_slice(rdata);
        o
    };
    let mut long_name = Vec::new();
    for _ in 0..5 {
        long_name.push(63);
        long_name.extend_from_slice(&[b'a'; 63]);
    }
    long_name.extend_from_slice(&[0, 0, 1, 0, 1]);
    let mut named_opt = vec![1, b'x', 0];
    named_opt.extend_from_slice(&opt(0, &[])[1..]);
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("question cut short", packet(0x5001, 0, [1, 0, 0, 0], &www[..www.len() - 2])),
        ("name cut short", packet(0x5002, 0, [1, 0, 0, 0], &www[..6])),
        ("label length 64", packet(0x5003, 0, [1, 0, 0, 0], &[64, b'a', 0, 0, 1, 0, 1])),
        ("label length 0x80", packet(0x5004, 0, [1, 0, 0, 0], &[0x80, b'a', 0, 0, 1, 0, 1])),
        ("compression loop in question", packet(0x5005, 0, [1, 0, 0, 0], &[0xc0, 12, 0, 1, 0, 1])),
        ("name longer than 255", packet(0x5006, 0, [1, 0, 0, 0], &long_name)),
        ("arcount with no record", packet(0x5007, 0, [1, 0, 0, 1], &www)),
        ("huge counts", packet(0x5008, 0, [1, 65535, 65535, 65535], &www)),
        (
            "OPT rdlength past the end",
            packet(0x5009, 0, [1, 0, 0, 1], &[www.clone(), opt(200, &[0, 8])].concat()),
        ),
        (
            "OPT option overflowing",
            packet(0x500a, 0, [1, 0, 0, 1], &[www.clone(), opt(4, &[0, 8, 0, 40])].concat()),
        ),
        (
            "two OPT records",
            packet(0x500b, 0, [1, 0, 0, 2], &[www.clone(), opt(0, &[]), opt(0, &[])].concat()),
        ),
        (
            "OPT in the answer section",
            packet(0x500c, 0, [1, 1, 0, 0], &[www.clone(), opt(0, &[])].concat()),
        ),
        (
            "OPT with a non-root owner",
            packet(0x500d, 0, [1, 0, 0, 1], &[www.clone(), named_opt].concat()),
        ),
    ];
    for (what, p) in cases {
        for raw in [h.udp_bytes(&p).await, h.tcp_bytes(&p).await] {
            let w = Wire::parse(&raw).unwrap_or_else(|| panic!("{what}: {raw:02x?}"));
            assert_eq!(w.id, u16::from_be_bytes([p[0], p[1]]), "{what}");
            assert!(raw[2] & 0x80 != 0, "{what}: QR clear");
            assert_eq!(w.rcode(), FORMERR, "{what}: {w:?}");
            assert!(w.answers.is_empty() && w.authority.is_empty(), "{what}");
        }
    }
}

pub async fn responses_are_dropped(h: &Harness) {
    // A query with QR set.
    let mut p = Q::new(&fq("www"), T_A).id(0x2001).bytes();
    p[2] |= 0x80;
    h.assert_no_reply(&p, "QR=1 query").await;
    // A real reply of the server reflected back at it (no reply loops).
    let reply = h.udp_bytes(&Q::new(&fq("www"), T_A).id(0x2002).bytes()).await;
    h.assert_no_reply(&reply, "reflected reply").await;
    let reply = h.udp_bytes(&Q::new(&fq("nope"), T_A).id(0x2003).edns().bytes()).await;
    h.assert_no_reply(&reply, "reflected NXDOMAIN").await;
    // Shorter than a header.
    h.assert_no_reply(&[0x20, 0x04, 0, 0, 0, 1], "6-byte packet").await;
}

pub async fn disabled_profile_answers_nxdomain(h: &Harness) {
    for name in ["off", "eu2"] {
        for qtype in [T_A, T_AAAA, T_CNAME, T_MX] {
            h.udp(&Q::new(&fq(name), qtype)).await.assert_negative(NXDOMAIN);
        }
    }
}

// ---------------------------------------------------------------------------------------
// Routing on the wire
// ---------------------------------------------------------------------------------------

pub async fn priority_picks_priority_1(h: &Harness) {
    for _ in 0..20 {
        assert_eq!(h.udp(&Q::new(&fq("www"), T_A)).await.single(), "A 192.0.2.10");
    }
}

pub async fn priority_skips_disabled_priority_1(h: &Harness) {
    for _ in 0..20 {
        let r = h.udp(&Q::new(&fq("prio2"), T_A)).await;
        assert_eq!(r.single(), "A 192.0.2.12");
        assert_eq!(r.msg.answers[0].ttl, 40);
    }
}

pub async fn weighted_splits_3_to_1(h: &Harness) {
    const N: usize = 2000;
    let mut counts: HashMap<String, usize> = HashMap::new();
    for _ in 0..N {
        *counts.entry(h.udp(&Q::new(&fq("api"), T_A)).await.single()).or_default() += 1;
    }
    let a = counts.get("A 192.0.2.20").copied().unwrap_or(0);
    let b = counts.get("A 198.51.100.20").copied().unwrap_or(0);
    assert_eq!(a + b, N, "unexpected answers: {counts:?}");
    let share = a as f64 / N as f64;
    assert!((share - 0.75).abs() <= 0.04, "site-a share {share}: {counts:?}");
}

pub async fn weight_0_endpoint_is_never_chosen_while_others_serve(h: &Harness) {
    for _ in 0..1000 {
        let r = h.udp(&Q::new(&fq("api"), T_A)).await;
        assert_ne!(r.single(), "A 203.0.113.20", "canary (weight 0) served");
    }
}

pub async fn multivalue_returns_max_return_in_rotating_order(h: &Harness) {
    let all: HashSet<IpAddr> =
        ["192.0.2.41", "192.0.2.42", "192.0.2.43", "192.0.2.44"].iter().map(|s| ip(s)).collect();
    let mut first: HashMap<IpAddr, usize> = HashMap::new();
    for _ in 0..400 {
        let r = h.udp(&Q::new(&fq("pool"), T_A)).await;
        assert_eq!(r.rcode(), NOERROR);
        let addrs = r.addrs();
        assert_eq!(addrs.len(), 3, "max_return 3: {r:#?}");
        assert_eq!(r.msg.answers.len(), 3);
        let distinct: HashSet<IpAddr> = addrs.iter().copied().collect();
        assert_eq!(distinct.len(), 3, "duplicates: {addrs:?}");
        assert!(distinct.is_subset(&all), "{addrs:?}");
        *first.entry(addrs[0]).or_default() += 1;
    }
    for a in &all {
        let n = first.get(a).copied().unwrap_or(0);
        assert!(n >= 30, "{a} first only {n} times of 400: {first:?}");
    }
}

pub async fn multivalue_aaaa_returns_only_ipv6(h: &Harness) {
    for _ in 0..20 {
        let r = h.udp(&Q::new(&fq("pool"), T_AAAA)).await;
        assert_eq!(r.answer_strings(), vec!["AAAA 2001:db8::44".to_string()]);
    }
}

pub async fn sticky_same_subnet_gets_the_same_answer(h: &Harness) {
    let mut seen = HashSet::new();
    for i in 0..50u8 {
        // /24 and host addresses inside the same /24.
        let q = if i % 2 == 0 {
            Q::new(&fq("app"), T_A).ecs(ip("198.51.100.0"), 24)
        } else {
            Q::new(&fq("app"), T_A).ecs(IpAddr::from([198, 51, 100, i]), 32)
        };
        seen.insert(h.udp(&q).await.single());
    }
    assert_eq!(seen.len(), 1, "one /24 got {seen:?}");

    let mut seen = HashSet::new();
    for i in 0..50u16 {
        // Different /64s inside one /56.
        let addr: IpAddr = format!("2001:db8:aa:bb{:02x}::", i % 256).parse().unwrap();
        let q = Q::new(&fq("app"), T_AAAA).ecs(addr, 64);
        seen.insert(h.udp(&q).await.single());
    }
    assert_eq!(seen.len(), 1, "one /56 got {seen:?}");
}

pub async fn sticky_different_subnets_reach_every_endpoint(h: &Harness) {
    let mut seen = BTreeSet::new();
    for n in 0..64u8 {
        let q = Q::new(&fq("app"), T_A).ecs(IpAddr::from([10, n, 7, 0]), 24);
        seen.insert(h.udp(&q).await.single());
    }
    let want: BTreeSet<String> = ["A 192.0.2.30", "A 198.51.100.30", "A 203.0.113.30"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert_eq!(seen, want);

    let mut seen = BTreeSet::new();
    for n in 0..64u16 {
        let addr: IpAddr = format!("2001:db8:{n:x}:100::").parse().unwrap();
        let q = Q::new(&fq("app"), T_AAAA).ecs(addr, 56);
        seen.insert(h.udp(&q).await.single());
    }
    let want: BTreeSet<String> =
        ["AAAA 2001:db8::30", "AAAA 2001:db8::31"].iter().map(|s| s.to_string()).collect();
    assert_eq!(seen, want);
}

pub async fn nested_parent_answers_with_the_child_profile(h: &Harness) {
    let mut seen = BTreeSet::new();
    for _ in 0..60 {
        let r = h.udp(&Q::new(&fq("global"), T_A)).await;
        seen.insert(r.single());
        assert_eq!(r.msg.answers[0].name.to_ascii(), fq("global"));
    }
    let want: BTreeSet<String> =
        ["A 192.0.2.51", "A 192.0.2.52"].iter().map(|s| s.to_string()).collect();
    assert_eq!(seen, want, "the weighted child eu should answer (both endpoints)");
    // No IPv6 anywhere below global.
    h.udp(&Q::new(&fq("global"), T_AAAA)).await.assert_negative(NOERROR);
}

pub async fn nested_disabled_child_makes_parent_fail_over(h: &Harness) {
    for _ in 0..20 {
        let r = h.udp(&Q::new(&fq("global2"), T_A)).await;
        assert_eq!(r.single(), "A 198.51.100.61");
        assert_eq!(r.msg.answers[0].name.to_ascii(), fq("global2"));
    }
    h.udp(&Q::new(&fq("eu2"), T_A)).await.assert_negative(NXDOMAIN);
}

// ---------------------------------------------------------------------------------------
// Transports
// ---------------------------------------------------------------------------------------

pub async fn udp_and_tcp_give_the_same_answer(h: &Harness) {
    let queries = [
        Q::new(&fq("www"), T_A),
        Q::new(&fq("www"), T_AAAA).edns(),
        Q::new(ORIGIN, T_SOA),
        Q::new(ORIGIN, T_NS).edns(),
        Q::new(ORIGIN, T_TXT),
        Q::new(&fq("nope"), T_A).edns(),
        Q::new(&fq("info"), T_AAAA),
        Q::new(&fq("alias"), T_A),
        Q::new(&fq("docs"), T_A),
        Q::new(&fq("www"), T_ANY),
        Q::new(&fq("app"), T_A).ecs(ip("198.51.100.0"), 24),
        Q::new(&fq("app"), T_A).ecs_raw(1, 24, 8, &[198, 51, 100]),
        Q::new(&fq("www"), T_A).version(1),
        Q::new("example.com.", T_A),
        Q::new(ORIGIN, T_SOA).opcode(4),
    ];
    for q in queries {
        let b = q.bytes();
        let u = h.udp_bytes(&b).await;
        let t = h.tcp_bytes(&b).await;
        assert_eq!(u, t, "{q:?}: UDP and TCP differ");
    }
}

// ---------------------------------------------------------------------------------------
// Robustness
// ---------------------------------------------------------------------------------------

/// Thousands of malformed packets, deterministic (seeded).
pub fn junk_packets() -> Vec<Vec<u8>> {
    let mut rng = SmallRng::seed_from_u64(0x5eed_d115);
    let mut out: Vec<Vec<u8>> = Vec::new();
    let valid = [
        Q::new(&fq("www"), T_A).bytes(),
        Q::new(&fq("app"), T_A).ecs(ip("198.51.100.0"), 24).option(65001, b"x").bytes(),
        Q::new(&fq("big"), T_TXT).payload(4096).bytes(),
        Q::new(&fq("pool"), T_AAAA).ecs(ip("2001:db8::"), 48).dnssec_ok().bytes(),
    ];
    // Every truncation of valid queries.
    for v in &valid {
        for len in 0..v.len() {
            out.push(v[..len].to_vec());
        }
    }
    // Random bytes, random lengths; some with QR clear and qdcount 1 to get past the header.
    for i in 0..2000 {
        let len = rng.random_range(0..700);
        let mut p: Vec<u8> = (0..len).map(|_| rng.random()).collect();
        if i % 2 == 0 && p.len() >= 12 {
            p[2] &= 0x07;
            p[4] = 0;
            p[5] = 1;
        }
        out.push(p);
    }
    // Bit flips / byte mutations of valid queries.
    for i in 0..1500 {
        let mut p = valid[i % valid.len()].clone();
        for _ in 0..rng.random_range(1..6) {
            let at = rng.random_range(0..p.len());
            p[at] = rng.random();
        }
        if i % 3 == 0 {
            p[2] &= 0x7f;
        }
        out.push(p);
    }
    // Bad label lengths: 64..=255 as the first label length and past the end.
    for len in 64..=255u8 {
        out.push(packet(
            0x3000 + u16::from(len),
            0,
            [1, 0, 0, 0],
            &[len, b'a', b'b', 0, 0, 1, 0, 1],
        ));
    }
    for len in 1..=63u8 {
        out.push(packet(0x3100, 0, [1, 0, 0, 0], &[len, b'a', b'b']));
    }
    // Compression in the question: pointers to itself, to each other, forward, past the end.
    for ptr in [
        vec![0xc0, 0x0c],
        vec![0xc0, 0x0e, 0xc0, 0x0c],
        vec![0x01, b'a', 0xc0, 0x0c],
        vec![0xc0, 0xff],
        vec![0xff, 0xff],
        vec![0x3f],
    ] {
        let mut body = ptr.clone();
        body.extend_from_slice(&[0, 1, 0, 1]);
        out.push(packet(0x3200, 0, [1, 0, 0, 0], &body));
    }
    // A pointer loop in an additional record's owner name and in an OPT.
    let mut body = question(&fq("www"), T_A);
    let loop_at = 12 + body.len();
    body.extend_from_slice(&(0xc000u16 | loop_at as u16).to_be_bytes());
    body.extend_from_slice(&[0, 1, 0, 1, 0, 0, 0, 0, 0, 0]);
    out.push(packet(0x3300, 0, [1, 0, 0, 1], &body));
    // Huge counts with little or no data.
    for counts in [
        [1, 65535, 65535, 65535],
        [1, 0, 0, 65535],
        [65535, 0, 0, 0],
        [65535, 65535, 65535, 65535],
        [1, 1, 0, 0],
    ] {
        out.push(packet(0x3400, 0, counts, &question(&fq("www"), T_A)));
    }
    // OPT with an rdlength past the end, options overflowing the rdata, two OPTs, OPT in
    // the answer section, OPT with a non-root owner.
    let www = question(&fq("www"), T_A);
    let opt = |rdlen: u16, rdata: &[u8]| -> Vec<u8> {
        let mut o = vec![0, 0, 41, 0x04, 0xd0, 0, 0, 0, 0];
        o.extend_from_slice(&rdlen.to_be_bytes());
        o.extend_from_slice(rdata);
        o
    };
    out.push(packet(0x3500, 0, [1, 0, 0, 1], &[www.clone(), opt(200, &[0, 8])].concat()));
    out.push(packet(0x3501, 0, [1, 0, 0, 1], &[www.clone(), opt(4, &[0, 8, 0, 40])].concat()));
    out.push(packet(0x3502, 0, [1, 0, 0, 2], &[www.clone(), opt(0, &[]), opt(0, &[])].concat()));
    out.push(packet(0x3503, 0, [1, 1, 0, 0], &[www.clone(), opt(0, &[])].concat()));
    let mut named_opt = vec![1, b'x', 0];
    named_opt.extend_from_slice(&opt(0, &[])[1..]);
    out.push(packet(0x3504, 0, [1, 0, 0, 1], &[www.clone(), named_opt].concat()));
    // A name over 255 bytes.
    let mut long = Vec::new();
    for _ in 0..5 {
        long.push(63);
        long.extend_from_slice(&[b'a'; 63]);
    }
    long.extend_from_slice(&[0, 0, 1, 0, 1]);
    out.push(packet(0x3600, 0, [1, 0, 0, 0], &long));
    // Oversized datagrams.
    out.push(packet(0x3700, 0, [1, 0, 0, 0], &vec![1u8; 5000]));
    out.push([Q::new(&fq("www"), T_A).bytes(), vec![0u8; 9000]].concat());
    // Filler until 5000.
    while out.len() < 5000 {
        let len = rng.random_range(12..64);
        let mut p: Vec<u8> = (0..len).map(|_| rng.random()).collect();
        p[2] &= 0x7f;
        out.push(p);
    }
    out
}

pub async fn assert_still_serving(h: &Harness) {
    let r = h.udp(&Q::new(&fq("www"), T_A)).await;
    assert_eq!(r.single(), "A 192.0.2.10");
    let r = h.tcp(&Q::new(&fq("www"), T_A)).await;
    assert_eq!(r.single(), "A 192.0.2.10");
    let r = h.udp(&Q::new(&fq("www"), T_AAAA).ecs(ip("198.51.100.0"), 24)).await;
    assert_eq!(r.single(), "AAAA 2001:db8::10");
    assert_eq!(r.ecs(), Some((1, 24, 0, vec![198, 51, 100])));
    let r = h.tcp(&Q::new(&fq("big"), T_TXT)).await;
    assert_eq!(r.msg.answers.len(), BIG_TXT_RECORDS);
    h.udp(&Q::new(&fq("nope"), T_A)).await.assert_negative(NXDOMAIN);
}

pub async fn malformed_udp_flood_does_not_break_the_server(h: &Harness) {
    let packets = junk_packets();
    assert!(packets.len() >= 5000);
    // Several source sockets, so every SO_REUSEPORT worker gets its share.
    let mut socks = Vec::new();
    for _ in 0..4 {
        socks.push(h.fresh_udp().await);
    }
    for (i, p) in packets.iter().enumerate() {
        // A send error (e.g. ICMP feedback) is fine; the server is what is under test.
        let _ = socks[i % socks.len()].send(p).await;
    }
    // A second round, to be sure bursts larger than one batch were seen.
    for (i, p) in packets.iter().enumerate() {
        let _ = socks[(i + 1) % socks.len()].send(p).await;
    }
    assert_still_serving(h).await;
    // Whatever the flood got back is a well-formed response.
    let mut replies = 0;
    for s in &socks {
        let mut buf = vec![0u8; 65535];
        while let Ok(n) = s.try_recv(&mut buf) {
            let w = Wire::parse(&buf[..n])
                .unwrap_or_else(|| panic!("ill-formed reply {:02x?}", &buf[..n]));
            assert!(w.flags & 0x8000 != 0, "reply without QR");
            replies += 1;
        }
    }
    assert!(replies > 0, "the flood got no reply at all (FORMERR expected for many)");
    // And a malformed packet still gets its FORMERR.
    let two = [question(&fq("www"), T_A), question(&fq("api"), T_A)].concat();
    let r = Reply::new(h.udp_bytes(&packet(0x4001, 0, [2, 0, 0, 0], &two)).await);
    assert_eq!(r.rcode(), FORMERR);
}

/// Answers to a burst larger than every ring and buffer of the server's UDP path all leave
/// it at once: a query after the burst is answered within the harness's retries, where
/// replies stranded by the burst and trickling out would hold it back for many seconds.
pub async fn a_burst_of_answers_leaves_no_reply_behind(h: &Harness) {
    let mut socks = Vec::new();
    for _ in 0..4 {
        let sock = h.fresh_udp().await.into_std().unwrap();
        sock.set_nonblocking(false).unwrap();
        socks.push(sock);
    }
    // Blocking sends from two threads: faster than the server answers, so its batches
    // come full.
    std::thread::scope(|scope| {
        for pair in socks.chunks(2) {
            scope.spawn(move || {
                for i in 0..16384 {
                    let q = Q::new(&fq("www"), T_A).bytes();
                    let _ = pair[i % 2].send(&q);
                }
            });
        }
    });
    let r = h.udp(&Q::new(&fq("www"), T_A)).await;
    assert_eq!(r.single(), "A 192.0.2.10");
    let mut replies = 0;
    for s in &socks {
        s.set_nonblocking(true).unwrap();
        let mut buf = vec![0u8; 65535];
        while let Ok(n) = s.recv(&mut buf) {
            assert_eq!(Reply::new(buf[..n].to_vec()).single(), "A 192.0.2.10");
            replies += 1;
        }
    }
    assert!(replies > 0, "the burst got no reply at all");
}
