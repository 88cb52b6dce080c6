//! The console's pages, server-side: each answers HTML with the seeded facts,
//! on both backends. (The browser tests in `tests/ui/` drive the same pages
//! in Chromium.)

use reqwest::StatusCode;
use serde_json::json;

use crate::helpers::{clean, enc, TestApp};
use crate::on_both_backends;

on_both_backends!(
    the_overview_shows_rejections_running_batches_and_alerts,
    the_dataset_grid_shows_fitness_versions_and_a_stale_cell,
    the_batch_page_shows_every_check_and_the_inputs_read,
    the_lineage_page_draws_the_stale_edge,
    alerts_repairs_and_search_pages_answer,
    unknown_things_are_html_404s,
);

const DT: &str = "2026-08-24";
const P: &str = "dt=2026-08-24";

/// A page: status, content type and the HTML.
async fn page(app: &TestApp, path: &str) -> (StatusCode, String, String) {
    let resp = app.client.get(format!("{}{path}", app.base)).send().await.expect("request");
    let status = resp.status();
    let ctype = resp.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
    (status, ctype, resp.text().await.expect("body"))
}

/// A page that answers 200 with HTML.
pub(crate) async fn html(app: &TestApp, path: &str) -> String {
    let (status, ctype, body) = page(app, path).await;
    assert_eq!(status, StatusCode::OK, "{path}: {body}");
    assert!(ctype.starts_with("text/html"), "{path}: {ctype}");
    body
}

async fn start(app: &TestApp, task: &str, dataset: &str, dt: &str, inputs: &[&str]) -> String {
    let p = format!("dt={dt}");
    let inputs: Vec<_> = inputs.iter().map(|d| json!({"dataset": d, "partition": p})).collect();
    let (status, started) = app
        .post("/v1/batches", &json!({"task": task, "dataset": dataset, "dt": dt, "partitions": [p], "inputs": inputs}))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{started}");
    started["batch_id"].as_str().unwrap().to_owned()
}

async fn build(app: &TestApp, task: &str, dataset: &str, dt: &str, rows: u64, inputs: &[&str]) -> String {
    let id = start(app, task, dataset, dt, inputs).await;
    let (status, body) = app.commit(&id, &clean(&format!("dt={dt}"), rows)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    id
}

struct Seeded {
    daily: String,
    rejected: String,
    running: String,
}

/// Three days of history on a core dataset, a downstream build, a
/// restatement upstream, a volume rejection and a running batch.
async fn seed(app: &TestApp) -> Seeded {
    let (s, b) = app
        .request(
            reqwest::Method::PUT,
            "/v1/datasets/ods.orders",
            Some(&json!({"tier": "core", "owner": "orders-team", "unique_key": ["order_id"]})),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{b}");
    for (dt, rows) in [("2026-08-21", 1000), ("2026-08-22", 1010), ("2026-08-23", 990)] {
        build(app, "load_orders", "ods.orders", dt, rows, &[]).await;
    }
    let daily = build(app, "build_daily", "dwd.daily", "2026-08-23", 40, &["ods.orders"]).await;
    build(app, "load_orders", "ods.orders", "2026-08-23", 995, &[]).await;
    let rejected = start(app, "load_orders", "ods.orders", DT, &[]).await;
    let (status, body) = app.commit(&rejected, &clean(P, 120)).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    let running = start(app, "build_revenue", "ads.revenue", DT, &[]).await;
    Seeded { daily, rejected, running }
}

async fn the_overview_shows_rejections_running_batches_and_alerts(app: TestApp) {
    let s = seed(&app).await;
    let resp = app.client.get(format!("{}/", app.base)).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK, "/ redirects to the console");
    assert_eq!(resp.url().path(), "/ui/");
    let csp = resp.headers().get("content-security-policy").and_then(|v| v.to_str().ok()).unwrap_or_default();
    assert!(csp.contains("default-src 'self'"), "{csp}");
    let body = resp.text().await.unwrap();
    assert!(body.contains(&s.rejected));
    assert!(body.contains("volume_vs_baseline"));
    assert!(body.contains("change: -0.88, row_count: 120"), "observed");
    assert!(body.contains("baseline: 1000, max_change: 0.3, periods: 3"), "expected");
    assert!(body.contains(&s.running), "running batch");
    assert!(body.contains("1h 00m"), "lease time left (the test clock stands still)");
    assert!(body.contains("fix_source_data"), "the rejection's alert and its action");
}

async fn the_dataset_grid_shows_fitness_versions_and_a_stale_cell(app: TestApp) {
    let s = seed(&app).await;
    let body = html(&app, "/ui/datasets/ods.orders").await;
    assert!(body.contains(&format!(r#"data-partition="{P}" data-fitness="rejected""#)), "{body}");
    assert!(body.contains(r#"data-partition="dt=2026-08-23" data-fitness="ready""#));
    assert!(body.contains("v2 · 995"), "version and row count");
    assert!(body.contains("tried 120"), "what the rejected batch counted");
    assert!(body.contains(&format!("/ui/batches/{}", s.rejected)), "the cell links to its batch");
    assert!(body.contains("orders-team") && body.contains("overwrite_partition"), "policy");
    assert!(body.contains("<svg class=\"volume\""), "volume chart");
    assert!(body.contains("class=\"pt out\""), "the rejected volume lies outside the band");

    let body = html(&app, "/ui/datasets/dwd.daily").await;
    assert!(body.contains(r#"data-partition="dt=2026-08-23" data-fitness="stale_upstream""#), "{body}");
    assert!(body.contains("built on ods.orders dt=2026-08-23 version 1, now version 2"));
    assert!(body.contains(&format!("/ui/batches/{}", s.daily)));

    let index = html(&app, "/ui/datasets").await;
    for d in ["ods.orders", "dwd.daily", "ads.revenue"] {
        assert!(index.contains(&format!("/ui/datasets/{d}")), "{d}");
    }
}

async fn the_batch_page_shows_every_check_and_the_inputs_read(app: TestApp) {
    let s = seed(&app).await;
    let body = html(&app, &format!("/ui/batches/{}", s.rejected)).await;
    for name in ["marker_present", "rows_match_written", "unique_keys", "null_keys", "non_empty", "volume_vs_baseline"]
    {
        assert!(body.contains(&format!("<code>{name}</code>")), "{name}");
    }
    assert!(body.contains(r#"<tr class="c-fail">"#), "the failed check is marked");
    assert!(body.contains("baseline: 1000, max_change: 0.3, periods: 3"));
    assert!(body.contains("decided: rejected"), "timeline");
    assert!(body.contains("No earlier attempt left rows behind."));

    let body = html(&app, &format!("/ui/batches/{}", s.daily)).await;
    assert!(body.contains(r#"<tr class="stale">"#), "the restated input is marked: {body}");
    assert!(body.contains("<td>v1</td>"), "version read");
    assert!(body.contains("v2 <span class=\"badge s-stale_upstream\">"), "version now");
}

async fn the_lineage_page_draws_the_stale_edge(app: TestApp) {
    seed(&app).await;
    let body = html(&app, &format!("/ui/lineage?dataset=dwd.daily&partition={}", enc("dt=2026-08-23"))).await;
    assert!(
        body.contains(r#"<g class="edge stale" data-edge="ods.orders dt=2026-08-23 -&gt; dwd.daily dt=2026-08-23">"#),
        "{body}"
    );
    assert!(body.contains("read v1 · now v2"));
    assert_eq!(body.matches("<g class=\"node").count(), 2);

    let (status, _, _) = page(&app, "/ui/lineage?dataset=dwd.daily&partition=no%20spec").await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
}

async fn alerts_repairs_and_search_pages_answer(app: TestApp) {
    let s = seed(&app).await;
    let body = html(&app, "/ui/alerts").await;
    assert!(body.contains(&s.rejected) && body.contains("orders-team") && body.contains("fix_source_data"));
    assert!(body.contains("recompute_downstream"), "the stale downstream alert");
    let body = html(&app, "/ui/alerts?severity=warning").await;
    assert!(!body.contains("fix_source_data"), "the filter holds");
    let (status, _, _) = page(&app, "/ui/alerts?severity=loud").await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);

    let (status, plan) = app
        .post(
            "/v1/repairs",
            &json!({"dataset": "ods.orders", "partitions": [P], "action": "rebuild", "reason": "volume"}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{plan}");
    let id = plan["id"].as_i64().unwrap();
    let list = html(&app, "/ui/repairs").await;
    assert!(list.contains(&format!("/ui/repairs/{id}")));
    let body = html(&app, &format!("/ui/repairs/{id}")).await;
    for q in ["1 · Scope", "2 · Identity", "3 · Retry boundary", "4 · After"] {
        assert!(body.contains(q), "{q}");
    }

    let go = |q: &str| {
        let url = format!("{}/ui/search?q={}", app.base, enc(q));
        let client = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
        async move { client.get(url).send().await.unwrap() }
    };
    let r = go(&s.rejected).await;
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert_eq!(r.headers()["location"], format!("/ui/batches/{}", s.rejected).as_str());
    let r = go("ods.orders").await;
    assert_eq!(r.headers()["location"], "/ui/datasets/ods.orders");
    let r = go("load_orders").await;
    assert_eq!(r.status(), StatusCode::OK);
    assert!(r.text().await.unwrap().contains(&s.rejected), "the task's batches");
}

async fn unknown_things_are_html_404s(app: TestApp) {
    for path in ["/ui/batches/nope-20260824-001", "/ui/datasets/no.such", "/ui/repairs/99", "/ui/repairs/x"] {
        let (status, ctype, body) = page(&app, path).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}");
        assert!(ctype.starts_with("text/html") && body.contains("Not found"), "{path}: {body}");
    }
    // The API keeps its JSON errors.
    let (status, body) = app.get("/v1/batches/nope-20260824-001").await;
    assert_eq!((status, body["error"]["code"].as_str()), (StatusCode::NOT_FOUND, Some("batch_not_found")));
}

/// With auth on: a token once on the login form, then a session cookie
/// (HttpOnly, SameSite=Strict) that the pages accept and the API does not.
async fn the_console_signs_in_with_a_token_once(app: TestApp) {
    let reader = app.make_token(crate::auth::BOOT, "console-reader", &["read"]).await;
    let producer = app.make_token(crate::auth::BOOT, "loader", &["produce:ods.*"]).await;
    let plain = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let url = |p: &str| format!("{}{p}", app.base);

    // No session: to the login form, remembering the page.
    let r = plain.get(url("/ui/alerts?state=open")).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert_eq!(r.headers()["location"], "/ui/login?next=%2Fui%2Falerts%3Fstate%3Dopen");
    let r = plain.get(url("/ui/login?next=/ui/alerts")).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert!(r.text().await.unwrap().contains(r#"type="password" name="token""#));

    let login = |token: &str, next: &str| plain.post(url("/ui/login")).form(&[("token", token), ("next", next)]).send();
    // Wrong, and not allowed to read: the form again, saying why.
    let r = login("bgt_nope", "/ui/").await.unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    assert!(r.text().await.unwrap().contains("unknown or revoked token"));
    let r = login(&producer, "/ui/").await.unwrap();
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    assert!(r.headers().get("set-cookie").is_none());

    // Right: a session cookie, and back to the page (never off-site).
    let r = login(&reader, "https://evil.example/").await.unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert_eq!(r.headers()["location"], "/ui/");
    let set = r.headers()["set-cookie"].to_str().unwrap().to_owned();
    assert!(set.contains("HttpOnly") && set.contains("SameSite=Strict") && set.contains("Path=/ui"), "{set}");
    assert!(!set.contains("Max-Age") && !set.contains("Expires"), "a session cookie: {set}");
    let cookie = set.split(';').next().unwrap().to_owned();

    let r = plain.get(url("/ui/alerts")).header("cookie", &cookie).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let body = r.text().await.unwrap();
    assert!(body.contains("<h1>Alerts</h1>") && body.contains("Log out"));
    assert!(!body.contains(&reader), "the page never shows the token");
    // The cookie is the console's only: the API wants the header.
    let r = plain.get(url("/v1/alerts")).header("cookie", &cookie).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);

    // Revoked: the next page sends the person to log in again.
    let (status, _) =
        app.with_token(crate::auth::BOOT).request(reqwest::Method::DELETE, "/v1/tokens/console-reader", None).await;
    assert!(status.is_success(), "{status}");
    let r = plain.get(url("/ui/alerts")).header("cookie", &cookie).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert!(r.headers()["location"].to_str().unwrap().starts_with("/ui/login"));
}

mod signed_in {
    use crate::helpers::Backend;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sqlite_the_console_signs_in_with_a_token_once() {
        if let Some(app) = crate::auth::secured(Backend::Sqlite).await {
            super::the_console_signs_in_with_a_token_once(app).await
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn postgres_the_console_signs_in_with_a_token_once() {
        if let Some(app) = crate::auth::secured(Backend::Postgres).await {
            super::the_console_signs_in_with_a_token_once(app).await
        }
    }
}
