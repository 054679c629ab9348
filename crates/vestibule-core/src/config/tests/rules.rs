//! `[[rate_limit]]`: defaults, rates as limits, key parts, and `shared`.

use super::*;

#[test]
fn rule_defaults_follow_the_spec() {
    let c = parse(&format!("{MINIMAL}[[rate_limit]]\n")).unwrap();
    let r = &c.rate_limits[0];
    assert_eq!(r.name, "per-ip");
    assert_eq!(r.key, [KeyPart::ClientIp]);
    assert_eq!(
        r.algorithm,
        Algorithm::Window {
            window: Duration::from_secs(10),
            quota: 1000,
            penalty: Duration::from_secs(900)
        }
    );
    assert_eq!((r.scope, r.action), (Scope::All, Action::Block));
    // The README and conf/vestibule.toml document this default.
    assert_eq!(r.max_keys, 16_384);
}

/// A window rule's `limit` may be a rate: "5/10s" is a quota of 5 per 10 s window.
#[test]
fn window_limits_may_be_rates() {
    let rule = |text: &str| {
        parse(&format!("{MINIMAL}[[rate_limit]]\n{text}\n"))
            .unwrap()
            .rate_limits[0]
            .algorithm
    };
    let window = |secs, quota| Algorithm::Window {
        window: Duration::from_secs(secs),
        quota,
        penalty: Duration::from_secs(900),
    };
    assert_eq!(rule("limit = \"5/10s\""), window(10, 5));
    assert_eq!(rule("limit = \"100 / 1m\""), window(60, 100));
    assert_eq!(rule("limit = \"3/s\""), window(1, 3));
    // A number is still requests per second, averaged over the window.
    assert_eq!(rule("limit = 5\nwindow = \"10s\""), window(10, 50));
    // Token buckets take the same text for `limit` per `period`.
    assert_eq!(
        rule("algorithm = \"token_bucket\"\nlimit = \"15/1m\""),
        Algorithm::TokenBucket {
            limit: 15,
            period: Duration::from_secs(60),
            penalty: Duration::from_secs(900),
        }
    );
    for (text, wanted) in [
        (
            "limit = \"5/10s\"\nwindow = \"10s\"",
            ":5: rate_limit[0].window: is already given by limit = \"5/10s\"",
        ),
        (
            "limit = \"5/30s\"",
            ":4: rate_limit[0].limit: \"5/30s\": a window rule counts over 1s, 10s or 60s, got 30s",
        ),
        (
            "limit = \"five/10s\"",
            ":4: rate_limit[0].limit: \"five/10s\" is not a number of requests or a rate like \"5/10s\"",
        ),
        ("limit = \"5\"", ":4: rate_limit[0].limit: \"5\" is not a number"),
        ("limit = \"5/0s\"", ":4: rate_limit[0].limit: \"5/0s\" is not"),
        ("limit = \"5/ages\"", ":4: rate_limit[0].limit: \"5/ages\" is not"),
        ("limit = \"0/10s\"", ":4: rate_limit[0].limit: must be between 1 and 100000000, got 0"),
        (
            "algorithm = \"token_bucket\"\nlimit = \"1/2d\"",
            ":5: rate_limit[0].limit: \"1/2d\": the period must be between 1s and 24h",
        ),
        (
            "algorithm = \"token_bucket\"\nlimit = \"1/1s\"\nperiod = \"1s\"",
            ":6: rate_limit[0].period: is already given by limit",
        ),
        (
            "algorithm = \"concurrency\"\nlimit = \"4/1s\"",
            ":5: rate_limit[0].limit: \"4/1s\" is a rate; a concurrency rule's limit is a number",
        ),
    ] {
        let e = errors(&format!("{MINIMAL}[[rate_limit]]\n{text}\n"));
        assert!(e.contains(wanted), "{text}: {wanted} missing from {e}");
    } // Whatever is written, an error naming the key, never a panic.
    for text in [
        "/",
        "5/",
        "/10s",
        "99999999999999999999/10s",
        "-5/10s",
        "5/10s/3",
        "5/99999999999999999999999s",
        "5/1e400s",
        "5 / ",
        "\u{e9}/\u{e9}",
    ] {
        let e = errors(&format!("{MINIMAL}[[rate_limit]]\nlimit = \"{text}\"\n"));
        assert!(e.contains(":4: rate_limit[0].limit: "), "{text}: {e}");
    }
}

#[test]
fn key_parts() {
    let c = parse(&format!(
        "{MINIMAL}[[rate_limit]]\nkey = [\"client_ip\", \"host\", \"path\", \"method\", \"header:X-Api-Key\", \"cookie:session\"]\nmethods = [\"post\"]\n"
    ))
    .unwrap();
    let r = &c.rate_limits[0];
    assert_eq!(r.key.len(), 6);
    assert_eq!(
        r.key[4],
        KeyPart::Header(http::HeaderName::from_static("x-api-key"))
    );
    assert_eq!(r.methods, [http::Method::POST]);
}

#[test]
fn shared_applies_to_window_rules_only() {
    let c = parse(&format!("{MINIMAL}[[rate_limit]]\nshared = true\n")).unwrap();
    assert!(c.rate_limits[0].shared);
    assert!(
        !parse(&format!("{MINIMAL}[[rate_limit]]\n"))
            .unwrap()
            .rate_limits[0]
            .shared
    );
    let e = errors(&format!(
        "{MINIMAL}[[rate_limit]]\nalgorithm = \"token_bucket\"\nshared = true\n"
    ));
    assert!(e.contains("rate_limit[0].shared"), "{e}");
}
