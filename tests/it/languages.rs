//! Pages in the visitor's language, through the real proxy.

use crate::common::*;

/// (status, body, Content-Language, Vary) of the room's page for `accept_language`.
fn page(v: &Vestibule, path: &str, accept_language: Option<&str>) -> (u16, String, String, String) {
    let mut req = client()
        .get(v.url(path))
        .header("X-Forwarded-For", "10.7.0.1")
        .header("Accept", "text/html");
    if let Some(al) = accept_language {
        req = req.header("Accept-Language", al);
    }
    let resp = req.send().expect("the proxy answers");
    let header = |name: &str| {
        resp.headers()
            .get_all(name)
            .iter()
            .map(|v| v.to_str().unwrap_or("").to_owned())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let (lang, vary) = (header("content-language"), header("vary"));
    (resp.status().as_u16(), resp.text().unwrap(), lang, vary)
}

#[test]
fn pages_speak_the_visitors_language() {
    let origin = Origin::start();
    let v = Setup::new(origin.addr)
        .extra(TRUST_LOCAL)
        .extra("[[room]]\nname = \"sale\"\npages = \"pages\"\nallow_percentage = 0\ndefault_language = \"es\"")
        .extra("[[rate_limit]]\nname = \"tight\"\nalgorithm = \"token_bucket\"\nperiod = \"1m\"\nlimit = 1\nscope = \"all\"\npaths = [\"/api\"]")
        .start();

    let (status, html, lang, vary) = page(&v, "/", Some("de-AT,de;q=0.9,en;q=0.5"));
    assert_eq!(status, 200);
    assert_eq!(lang, "de");
    assert!(vary.contains("Accept-Language"), "{vary}");
    assert!(html.contains("<html lang=\"de\" dir=\"ltr\">"), "{html}");
    assert!(html.contains("sale ist gerade geschlossen"), "{html}");

    // Right to left.
    let (_, html, lang, _) = page(&v, "/", Some("ar-EG"));
    assert_eq!(lang, "ar");
    assert!(html.contains("<html lang=\"ar\" dir=\"rtl\">"), "{html}");

    // q-values: the higher wish wins whatever the order.
    let (_, _, lang, _) = page(&v, "/", Some("fr;q=0.3, ja;q=0.8"));
    assert_eq!(lang, "ja");

    // Nothing asked, or nothing we speak, or garbage: the room's default language.
    for al in [
        None,
        Some("sv-SE"),
        Some(";;;q=9e99,,,"),
        Some(&*"xx-YY;q=0.5,".repeat(2000)),
    ] {
        let (status, html, lang, _) = page(&v, "/", al);
        assert_eq!((status, lang.as_str()), (200, "es"), "{al:?}");
        assert!(html.contains("está cerrado"), "{html}");
    }

    // Rate-limit pages too.
    assert_eq!(page(&v, "/api", Some("fr")).0, 200);
    let (status, html, lang, _) = page(&v, "/api", Some("fr"));
    assert_eq!((status, lang.as_str()), (429, "fr"));
    assert!(html.contains("Trop de requêtes"), "{html}");

    // JSON answers carry no words to translate.
    let resp = client()
        .get(v.url("/"))
        .header("Accept", "application/json")
        .header("Accept-Language", "de")
        .send()
        .unwrap();
    assert!(resp.headers().get("content-language").is_none());
}

#[test]
fn operators_override_messages_and_add_languages() {
    let origin = Origin::start();
    let v = Setup::new(origin.addr)
        .extra(TRUST_LOCAL)
        .extra("[[room]]\nname = \"sale\"\npages = \"pages\"\nallow_percentage = 0")
        .file("pages/i18n/de.toml", "deny-intro = \"Heute ab 10 Uhr.\"\n")
        .file("pages/i18n/sv.toml", "deny-title = \"Stängt just nu\"\n")
        .start();
    let (_, html, _, _) = page(&v, "/", Some("de"));
    assert!(html.contains("Heute ab 10 Uhr."), "{html}");
    assert!(
        html.contains("sale ist gerade geschlossen"),
        "the rest stays German: {html}"
    );
    let (_, html, lang, _) = page(&v, "/", Some("sv"));
    assert_eq!(lang, "sv");
    assert!(html.contains("Stängt just nu"), "{html}");
    assert!(
        html.contains("Nobody is being let in"),
        "missing messages are English: {html}"
    );

    // Catalogs reload by themselves, new ones too.
    let g = v.generation();
    std::fs::write(
        v.path("pages/i18n/nl.toml"),
        "deny-title = \"Even dicht\"\n",
    )
    .unwrap();
    let g = v.wait_generation_above(g);
    let (_, html, _, _) = page(&v, "/", Some("nl"));
    assert!(html.contains("Even dicht"), "{html}");

    // A broken catalog edit is refused by the reload; the last good pages keep serving.
    std::fs::write(v.path("pages/i18n/de.toml"), "deny-intro = \"{ $n -> \"\n").unwrap();
    assert!(eventually(std::time::Duration::from_secs(5), || {
        v.status()["last_reload_error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("de.toml"))
    }));
    assert_eq!(v.generation(), g);
    let (_, html, _, _) = page(&v, "/", Some("de"));
    assert!(html.contains("Heute ab 10 Uhr."), "{html}");
}

#[test]
fn check_and_render_name_what_is_wrong() {
    let dir = tempfile::tempdir().unwrap();
    copy_pages(&dir.path().join("pages"));
    std::fs::write(
        dir.path().join("keys.toml"),
        format!("active = \"key1\"\n[ring]\nkey1 = \"{KEY1}\"\n"),
    )
    .unwrap();
    let config = dir.path().join("vestibule.toml");
    let text = |lang: &str| {
        format!(
            "[upstream]\npeers = [\"127.0.0.1:9\"]\n[[room]]\nname = \"sale\"\npages = \"pages\"\ndefault_language = \"{lang}\"\n"
        )
    };
    std::fs::write(&config, text("xx")).unwrap();
    let c = config.to_str().unwrap();
    let (code, _, err) = run_cli(&["--config", c, "--check"]);
    assert_ne!(code, 0);
    assert!(
        err.contains("room[0].default_language") && err.contains("no catalog for \"xx\""),
        "{err}"
    );
    std::fs::write(&config, text("not a tag!")).unwrap();
    let (_, _, err) = run_cli(&["--config", c, "--check"]);
    assert!(
        err.contains("room[0].default_language") && err.contains("not a language tag"),
        "{err}"
    );

    std::fs::write(&config, text("fa")).unwrap();
    let (code, out, err) = run_cli(&[
        "--config",
        c,
        "pages",
        "render",
        "--room",
        "sale",
        "--page",
        "keepwaiting",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("<html lang=\"fa\" dir=\"rtl\">"), "{out}");
    let (code, out, err) = run_cli(&[
        "--config",
        c,
        "pages",
        "render",
        "--room",
        "sale",
        "--page",
        "soldout",
        "--lang",
        "pt",
        "--message",
        "Volte às 10h",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("sale está esgotado") && out.contains("Volte às 10h"),
        "{out}"
    );
    let (code, out, _) = run_cli(&[
        "--config",
        c,
        "pages",
        "render",
        "--room",
        "sale",
        "--page",
        "startwaiting",
        "--lang",
        "ru",
        "--state",
        "wait",
    ]);
    assert_eq!(code, 0);
    assert!(out.contains("1\u{a0}234 человека"), "{out}");
    for (args, says) in [
        (
            &["--room", "nope", "--page", "deny"][..],
            "no room is named \"nope\"",
        ),
        (
            &["--room", "sale", "--page", "nope"][..],
            "no page \"nope\"",
        ),
        (
            &["--room", "sale", "--page", "deny", "--lang", "tlh"][..],
            "no catalog for \"tlh\"",
        ),
        (
            &["--room", "sale", "--page", "deny", "--state", "odd"][..],
            "no state \"odd\"",
        ),
    ] {
        let mut all = vec!["--config", c, "pages", "render"];
        all.extend_from_slice(args);
        let (code, _, err) = run_cli(&all);
        assert_ne!(code, 0);
        assert!(err.contains(says), "{args:?}: {err}");
    }
}
