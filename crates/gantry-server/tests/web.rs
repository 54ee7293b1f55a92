//! The web UI over real HTTP, against a server started in-process (no agent: workflows stay
//! PENDING). Sign-in and its cookie, CSRF refusals, the redirect to sign in, and that a page
//! shows what the API lets its user see: someone else's workflow is 404 here too. The flows in
//! a real browser are `crates/gantry/tests/web.rs`.

mod common;

use common::{client, Cluster, HELLO};
use reqwest::header::{CACHE_CONTROL, COOKIE, LOCATION, SET_COOKIE};
use reqwest::{Method, StatusCode};

/// A browser of one person: no redirects followed, cookies kept by hand.
struct Browser {
    base: String,
    http: reqwest::Client,
    session: Option<String>,
}

struct Page {
    status: StatusCode,
    headers: reqwest::header::HeaderMap,
    body: String,
}

impl Page {
    fn location(&self) -> &str {
        self.headers
            .get(LOCATION)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }

    /// The value of the first hidden `csrf` field.
    fn csrf(&self) -> String {
        let at = self
            .body
            .find(r#"name="csrf" value=""#)
            .unwrap_or_else(|| panic!("no csrf field in {}", self.body));
        let rest = &self.body[at + r#"name="csrf" value=""#.len()..];
        rest[..rest.find('"').unwrap()].to_string()
    }

    /// A `Set-Cookie` header for `name`, whole.
    fn set_cookie(&self, name: &str) -> Option<String> {
        self.headers
            .get_all(SET_COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .find(|v| v.starts_with(&format!("{name}=")))
            .map(str::to_string)
    }
}

fn cookie_value(set_cookie: &str) -> String {
    set_cookie
        .split(';')
        .next()
        .and_then(|kv| kv.split_once('='))
        .map(|(_, v)| v.to_string())
        .unwrap_or_default()
}

impl Browser {
    fn new(c: &Cluster) -> Browser {
        let _ = client(); // installs the crypto provider reqwest wants
        Browser {
            base: c.api.base.clone(),
            http: reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .unwrap(),
            session: None,
        }
    }

    async fn send(&self, req: reqwest::RequestBuilder, cookie: Option<&str>) -> Page {
        let req = match cookie.or(self.session.as_deref().map(|s| s as &str)) {
            Some(c) => req.header(COOKIE, c),
            None => req,
        };
        let resp = req.send().await.expect("the server answers");
        Page {
            status: resp.status(),
            headers: resp.headers().clone(),
            body: resp.text().await.unwrap_or_default(),
        }
    }

    async fn get(&self, path: &str) -> Page {
        self.send(self.http.get(format!("{}{path}", self.base)), None)
            .await
    }

    /// A form post, with extra headers.
    async fn post(&self, path: &str, form: &[(&str, &str)], headers: &[(&str, &str)]) -> Page {
        let mut req = self
            .http
            .request(Method::POST, format!("{}{path}", self.base))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(serde_urlencoded::to_string(form).unwrap());
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        self.send(req, None).await
    }

    /// Signs in with a token; returns the sign-in reply.
    async fn sign_in(&mut self, token: &str) -> Page {
        let form = self.get("/signin?next=/nodes").await;
        assert_eq!(form.status, StatusCode::OK);
        let pre = form
            .set_cookie("gantry_signin")
            .expect("the sign-in form sets its cookie");
        let csrf = form.csrf();
        assert_eq!(
            cookie_value(&pre),
            csrf,
            "double submit: cookie and field agree"
        );
        let pre_cookie = format!("gantry_signin={csrf}");
        let req = self
            .http
            .post(format!("{}/signin", self.base))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(
                serde_urlencoded::to_string([
                    ("token", token),
                    ("csrf", &csrf),
                    ("next", "/nodes"),
                ])
                .unwrap(),
            );
        let r = self.send(req, Some(&pre_cookie)).await;
        if let Some(s) = r.set_cookie("gantry_session") {
            self.session = Some(format!("gantry_session={}", cookie_value(&s)));
        }
        r
    }

    /// The session's CSRF token, from a page's forms.
    async fn csrf(&self) -> String {
        self.get("/workflows").await.csrf()
    }
}

#[tokio::test]
async fn pages_send_visitors_without_a_session_to_sign_in() {
    let c = Cluster::start().await;
    let wf = c.submit(&c.alice, HELLO).await;
    let b = Browser::new(&c);
    for path in [
        "/workflows".to_string(),
        format!("/workflows/{wf}"),
        format!("/workflows/{wf}/live"),
        format!("/workflows/{wf}/logs/main"),
        "/nodes".into(),
        "/endpoints".into(),
        "/images".into(),
    ] {
        let p = b.get(&path).await;
        assert_eq!(p.status, StatusCode::SEE_OTHER, "{path}");
        let next = serde_urlencoded::to_string([("next", &path)]).unwrap();
        assert_eq!(p.location(), format!("/signin?{next}"), "{path}");
    }
    assert_eq!(b.get("/").await.location(), "/workflows");
    // A session cookie the server did not seal is no session.
    let forged = b
        .send(
            b.http.get(format!("{}/workflows", b.base)),
            Some("gantry_session=AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"),
        )
        .await;
    assert_eq!(forged.status, StatusCode::SEE_OTHER);
    // Posts without a session change nothing either.
    let p = b.post(&format!("/workflows/{wf}/stop"), &[], &[]).await;
    assert_eq!(p.status, StatusCode::SEE_OTHER);
    c.assert_untouched(&wf).await;
}

#[tokio::test]
async fn signing_in_sets_an_http_only_same_site_cookie_and_signing_out_ends_it() {
    let c = Cluster::start().await;
    let mut b = Browser::new(&c);

    let refused = b.sign_in("gantry_not-a-token").await;
    assert_eq!(refused.status, StatusCode::UNAUTHORIZED);
    assert!(refused.body.contains("not valid"), "{}", refused.body);
    let agent = b.sign_in(&c.agent).await;
    assert_eq!(agent.status, StatusCode::UNAUTHORIZED);
    assert!(agent.body.contains("cannot sign in"), "{}", agent.body);
    assert!(b.session.is_none());

    let ok = b.sign_in(&c.alice).await;
    assert_eq!(ok.status, StatusCode::SEE_OTHER, "{}", ok.body);
    assert_eq!(ok.location(), "/nodes", "back where the visitor was going");
    let cookie = ok.set_cookie("gantry_session").expect("a session cookie");
    for flag in ["HttpOnly", "SameSite=Lax", "Path=/", "Max-Age=43200"] {
        assert!(cookie.contains(flag), "{flag} in {cookie}");
    }
    assert!(
        !cookie.contains("Secure"),
        "plain http: a Secure cookie would never come back"
    );
    assert!(
        !cookie.contains(&c.alice[7..]),
        "the token never travels in the cookie"
    );
    let page = b.get("/workflows").await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(page.body.contains("alice"));
    assert_eq!(
        page.headers.get(CACHE_CONTROL).unwrap(),
        "no-store",
        "pages are per user"
    );
    let csp = page.headers.get("content-security-policy").unwrap();
    assert!(csp.to_str().unwrap().contains("script-src 'self'"));

    // The sign-in form's own token: a post without it, or from another site, is refused.
    let anon = Browser::new(&c);
    let form = anon.get("/signin").await;
    let csrf = form.csrf();
    let mut req = b
        .http
        .post(format!("{}/signin", anon.base))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(serde_urlencoded::to_string([("token", c.bob.as_str()), ("csrf", &csrf)]).unwrap());
    let no_cookie = anon.send(req, Some("x=y")).await;
    assert_eq!(no_cookie.status, StatusCode::FORBIDDEN);
    req = b
        .http
        .post(format!("{}/signin", anon.base))
        .header("origin", "http://evil.example")
        .header("content-type", "application/x-www-form-urlencoded")
        .body(serde_urlencoded::to_string([("token", c.bob.as_str()), ("csrf", &csrf)]).unwrap());
    let cross = anon.send(req, Some(&format!("gantry_signin={csrf}"))).await;
    assert_eq!(cross.status, StatusCode::FORBIDDEN);

    let csrf = b.csrf().await;
    let out = b.post("/signout", &[("csrf", &csrf)], &[]).await;
    assert_eq!(out.status, StatusCode::SEE_OTHER);
    assert_eq!(out.location(), "/signin");
    assert!(out
        .set_cookie("gantry_session")
        .unwrap()
        .contains("Max-Age=0"));
    // The old cookie, replayed, is no session any more.
    assert_eq!(b.get("/workflows").await.status, StatusCode::SEE_OTHER);
}

#[tokio::test]
async fn forms_without_the_sessions_csrf_token_or_from_elsewhere_are_refused() {
    let c = Cluster::start().await;
    let wf = c.submit(&c.alice, HELLO).await;
    let mut alice = Browser::new(&c);
    alice.sign_in(&c.alice).await;
    let mut carol = Browser::new(&c);
    carol.sign_in(&c.carol).await;
    let csrf = alice.csrf().await;
    let carols = carol.csrf().await;
    assert_ne!(csrf, carols, "each session has its own token");
    let stop = format!("/workflows/{wf}/stop");
    let same_site = [("sec-fetch-site", "same-origin")];
    for (what, form, headers) in [
        ("no token", vec![], &same_site[..]),
        ("an empty token", vec![("csrf", "")], &same_site[..]),
        ("a wrong token", vec![("csrf", "0123abcd")], &same_site[..]),
        (
            "another session's token",
            vec![("csrf", carols.as_str())],
            &same_site[..],
        ),
        (
            "another site's origin",
            vec![("csrf", csrf.as_str())],
            &[("origin", "http://evil.example")][..],
        ),
        (
            "a cross-site fetch",
            vec![("csrf", csrf.as_str())],
            &[("sec-fetch-site", "cross-site")][..],
        ),
    ] {
        let p = alice.post(&stop, &form, headers).await;
        assert_eq!(p.status, StatusCode::FORBIDDEN, "{what}: {}", p.body);
        assert!(p.body.contains("Form refused"), "{what}");
    }
    c.assert_untouched(&wf).await;

    let origin = c.api.base.clone();
    let p = alice
        .post(&stop, &[("csrf", &csrf)], &[("origin", &origin)])
        .await;
    assert_eq!(p.status, StatusCode::SEE_OTHER, "{}", p.body);
    assert_eq!(p.location(), format!("/workflows/{wf}?done=stop"));
    assert!(c.event_kinds(&wf).await.contains("workflow.stop"));
}

#[tokio::test]
async fn a_page_shows_what_the_api_lets_its_user_see() {
    let c = Cluster::start().await;
    let wf = c.submit(&c.alice, HELLO).await;
    let mut bob = Browser::new(&c);
    bob.sign_in(&c.bob).await;
    let mut carol = Browser::new(&c);
    carol.sign_in(&c.carol).await;
    let mut alice = Browser::new(&c);
    alice.sign_in(&c.alice).await;

    // Alice's workflow: her group sees it, anyone else gets 404, as from the API.
    for path in [
        format!("/workflows/{wf}"),
        format!("/workflows/{wf}/live"),
        format!("/workflows/{wf}/logs/main"),
        format!("/workflows/{wf}/logs/main/live"),
    ] {
        let p = bob.get(&path).await;
        assert_eq!(p.status, StatusCode::NOT_FOUND, "{path}: {}", p.body);
        assert!(!p.body.contains("alice"), "{path} tells bob nothing");
    }
    assert!(!bob.get("/workflows").await.body.contains(&wf));
    let page = carol.get(&format!("/workflows/{wf}")).await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(page.body.contains("PENDING"));
    assert!(carol.get("/workflows").await.body.contains(&wf));
    // Bob cannot stop it either, even with a valid form.
    let csrf = bob.csrf().await;
    let p = bob
        .post(&format!("/workflows/{wf}/stop"), &[("csrf", &csrf)], &[])
        .await;
    assert_eq!(p.status, StatusCode::NOT_FOUND);
    c.assert_untouched(&wf).await;

    // Holds are for administrators: a user's well-formed post is refused and changes nothing.
    let p = alice
        .post(
            "/nodes/node-1/hold",
            &[
                ("csrf", &alice.csrf().await),
                ("kind", "cordon"),
                ("reason", "x"),
            ],
            &[],
        )
        .await;
    assert_eq!(p.status, StatusCode::FORBIDDEN, "{}", p.body);

    // A user-scoped endpoint is alice's alone.
    let p = alice
        .post(
            "/endpoints",
            &[
                ("csrf", &alice.csrf().await),
                ("name", "mine"),
                ("scope", "user"),
            ],
            &[],
        )
        .await;
    assert_eq!(p.status, StatusCode::SEE_OTHER, "{}", p.body);
    assert_eq!(p.location(), "/endpoints/mine?done=created");
    let page = alice.get("/endpoints/mine").await;
    assert!(page.body.contains("no backend") && page.body.contains("Delete mine"));
    assert_eq!(
        bob.get("/endpoints/mine").await.status,
        StatusCode::NOT_FOUND
    );
    assert!(!bob.get("/endpoints").await.body.contains("mine"));
    let csrf = bob.csrf().await;
    for action in ["approve", "reject", "delete"] {
        let p = bob
            .post(
                &format!("/endpoints/mine/{action}"),
                &[("csrf", &csrf), ("confirm", "mine")],
                &[],
            )
            .await;
        assert_eq!(p.status, StatusCode::NOT_FOUND, "{action}: {}", p.body);
    }
    // Deleting needs the name typed, whatever the page's script did.
    let csrf = alice.csrf().await;
    let p = alice
        .post(
            "/endpoints/mine/delete",
            &[("csrf", &csrf), ("confirm", "min")],
            &[],
        )
        .await;
    assert_eq!(p.status, StatusCode::BAD_REQUEST);
    let r = c.get(&c.alice, "/endpoints/mine").await;
    assert_eq!(r.status, StatusCode::OK, "still there");
    let p = alice
        .post(
            "/endpoints/mine/delete",
            &[("csrf", &csrf), ("confirm", "mine")],
            &[],
        )
        .await;
    assert_eq!(p.status, StatusCode::SEE_OTHER, "{}", p.body);
    let r = c.get(&c.alice, "/endpoints/mine").await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "deleted");
}

#[tokio::test]
async fn assets_are_embedded_and_cached_for_good() {
    let c = Cluster::start().await;
    let b = Browser::new(&c);
    let signin = b.get("/signin").await;
    let at = signin
        .body
        .find("/assets/gantry.css?v=")
        .expect("a versioned stylesheet");
    let url = &signin.body[at..at + signin.body[at..].find('"').unwrap()];
    let css = b.get(url).await;
    assert_eq!(css.status, StatusCode::OK);
    assert!(css.body.contains(":focus-visible"));
    assert_eq!(
        css.headers.get(CACHE_CONTROL).unwrap(),
        "public, max-age=31536000, immutable"
    );
    let etag = css
        .headers
        .get("etag")
        .unwrap()
        .to_str()
        .unwrap()
        .to_string();
    let again = b
        .send(
            b.http
                .get(format!("{}{url}", b.base))
                .header("if-none-match", &etag),
            None,
        )
        .await;
    assert_eq!(again.status, StatusCode::NOT_MODIFIED);
    let js = b.get("/assets/gantry.js").await;
    assert!(js
        .headers
        .get("content-type")
        .unwrap()
        .to_str()
        .unwrap()
        .starts_with("text/javascript"));
    assert_eq!(b.get("/assets/nope.js").await.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn a_live_workflow_stream_sends_events_and_status_and_ends_after_the_workflow_has() {
    let c = Cluster::start().await;
    let wf = c.submit(&c.alice, HELLO).await;
    let r = c
        .post(&c.alice, &format!("/workflows/{wf}/stop"), None)
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    c.wait_for_status(&c.alice, &wf, "STOPPED").await;
    let mut alice = Browser::new(&c);
    alice.sign_in(&c.alice).await;

    // An ended workflow's stream ends by itself: everything after `after`, its status, the end.
    let live = tokio::time::timeout(
        std::time::Duration::from_secs(30),
        alice.get(&format!("/workflows/{wf}/live")),
    )
    .await
    .expect("the stream of an ended workflow ends");
    assert_eq!(live.status, StatusCode::OK);
    let b = &live.body;
    assert!(
        b.contains("event: event") && b.contains("workflow.stop"),
        "{b}"
    );
    assert!(
        b.contains("event: status") && b.contains(r#""status":"STOPPED""#),
        "{b}"
    );
    assert!(b.contains(r#""terminal":true"#), "{b}");
    assert!(b.trim_end().ends_with("event: end\ndata: end"), "{b}");

    // From its last event on: no event, only the status and the end.
    let last = c.events_as(&c.alice, &wf).await.last().unwrap()["seq"].clone();
    let rest = alice
        .get(&format!("/workflows/{wf}/live?after={last}"))
        .await;
    assert!(!rest.body.contains("event: event"), "{}", rest.body);
    assert!(rest.body.contains("event: status"), "{}", rest.body);
    assert!(rest.body.trim_end().ends_with("data: end"), "{}", rest.body);
}
