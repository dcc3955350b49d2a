//! The dashboard page and its assets (`fronta_server::dashboard`): each is served
//! without a token with its content type, `Cache-Control: no-cache`, an `ETag` that a
//! repeat answers with 304, and a Content-Security-Policy that allows only this origin;
//! the page names no outside URL (no CDN: it works offline), every file it loads is
//! served, and the page routes are not part of the API's OpenAPI document.

mod support;

use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use fronta_server::dashboard::{ASSETS, CONTENT_SECURITY_POLICY};
use support::Harness;

/// Absolute URLs an asset may contain: the SVG namespace is an identifier, never fetched.
const ALLOWED_ABSOLUTE: [&str; 1] = ["http://www.w3.org/2000/svg"];

fn text_of(body: &[u8]) -> &str {
    std::str::from_utf8(body).expect("assets are UTF-8 text")
}

#[tokio::test]
async fn the_page_and_every_asset_are_served_without_a_token_with_their_content_type() {
    let harness = Harness::new();
    for asset in &ASSETS {
        let reply = harness.call(Method::GET, asset.path, None, None).await;
        assert_eq!(
            reply.status,
            StatusCode::OK,
            "{} is served without a token",
            asset.path
        );
        let content_type = reply.headers[header::CONTENT_TYPE]
            .to_str()
            .expect("a content type");
        assert_eq!(content_type, asset.content_type, "{}", asset.path);
        assert_eq!(
            reply.bytes.as_ref(),
            asset.body,
            "{} is the embedded file",
            asset.path
        );
        assert_eq!(
            reply.headers[header::CACHE_CONTROL],
            "no-cache",
            "{} is revalidated",
            asset.path
        );
        assert_eq!(
            reply.headers[header::CONTENT_SECURITY_POLICY],
            CONTENT_SECURITY_POLICY,
            "{} carries the policy",
            asset.path
        );
        assert_eq!(reply.headers[header::X_CONTENT_TYPE_OPTIONS], "nosniff");
        assert!(
            reply.headers.contains_key(header::ETAG),
            "{} has an ETag",
            asset.path
        );
    }
    let page = harness.call(Method::GET, "/", None, None).await;
    assert!(
        page.headers[header::CONTENT_TYPE]
            .to_str()
            .expect("text")
            .starts_with("text/html"),
        "the page is HTML"
    );
    let script = harness
        .call(Method::GET, "/assets/app.js", None, None)
        .await;
    assert!(
        script.headers[header::CONTENT_TYPE]
            .to_str()
            .expect("text")
            .starts_with("text/javascript"),
        "modules are JavaScript (browsers refuse modules of another type)"
    );
}

#[tokio::test]
async fn a_matching_if_none_match_answers_304_and_another_the_file() {
    let harness = Harness::new();
    let first = harness
        .call(Method::GET, "/assets/app.js", None, None)
        .await;
    let etag = first.headers[header::ETAG].clone();
    let again = |tag: axum::http::HeaderValue| {
        Request::builder()
            .method(Method::GET)
            .uri("/assets/app.js")
            .header(header::IF_NONE_MATCH, tag)
            .body(Body::empty())
            .expect("a request")
    };
    let repeat = harness.send(again(etag.clone())).await;
    assert_eq!(repeat.status, StatusCode::NOT_MODIFIED, "the same tag: 304");
    assert!(repeat.bytes.is_empty(), "a 304 has no body");
    assert_eq!(repeat.headers[header::ETAG], etag, "the tag is repeated");
    let other = harness
        .send(again(axum::http::HeaderValue::from_static("\"other\"")))
        .await;
    assert_eq!(other.status, StatusCode::OK, "another tag: the file");
    assert_eq!(other.bytes, first.bytes, "the same file");
}

#[tokio::test]
async fn the_page_names_no_outside_url_and_every_file_it_loads_is_served() {
    let served: Vec<&str> = ASSETS.iter().map(|asset| asset.path).collect();
    for asset in &ASSETS {
        let text = text_of(asset.body);
        let mut rest = text;
        while let Some(at) = rest.find("://") {
            let start = rest[..at]
                .rfind(|c: char| !c.is_ascii_alphanumeric())
                .map_or(0, |i| i + 1);
            let end = rest[at..]
                .find(|c: char| c == '"' || c == '\'' || c == ')' || c.is_whitespace())
                .map_or(rest.len(), |i| at + i);
            let url = &rest[start..end];
            assert!(
                ALLOWED_ABSOLUTE.contains(&url),
                "{} names an outside URL: {url}",
                asset.path
            );
            rest = &rest[end..];
        }
        assert!(
            !text.contains("src=\"//") && !text.contains("href=\"//"),
            "{} has no protocol-relative URL",
            asset.path
        );
        // Every file the page or a module loads is one of the served assets.
        let references = text
            .split(['"', '\''])
            .filter(|part| part.starts_with("/assets/") || part.starts_with("./"))
            .filter(|part| {
                part.ends_with(".js") || part.ends_with(".css") || part.ends_with(".svg")
            });
        for reference in references {
            let path = match reference.strip_prefix("./") {
                Some(name) => format!("/assets/{name}"),
                None => reference.to_owned(),
            };
            assert!(
                served.contains(&path.as_str()),
                "{} loads {reference}, which is not served",
                asset.path
            );
        }
    }
    let page = text_of(ASSETS[0].body);
    assert!(
        page.contains("<script type=\"module\" src=\"/assets/app.js\">"),
        "the entry module"
    );
    assert!(
        !page.contains("<script>"),
        "no inline script (the policy forbids it)"
    );
    assert!(
        !page.contains("style=\""),
        "no inline style (the policy forbids it)"
    );
}

#[tokio::test]
async fn page_routes_are_not_api_operations_and_api_routes_keep_their_answers() {
    let harness = Harness::new();
    let document = harness
        .call(Method::GET, "/api/openapi.json", None, None)
        .await
        .json;
    for asset in &ASSETS {
        assert!(
            document["paths"].get(asset.path).is_none(),
            "{} is not in the OpenAPI document",
            asset.path
        );
        let post = harness.call(Method::POST, asset.path, None, None).await;
        assert_eq!(
            post.status,
            StatusCode::METHOD_NOT_ALLOWED,
            "{} takes GET only",
            asset.path
        );
    }
    let unknown = harness
        .call(Method::GET, "/assets/nope.js", None, None)
        .await;
    assert_eq!(unknown.status, StatusCode::NOT_FOUND, "an unknown asset");
    assert_eq!(unknown.code(), "not_found", "in the API's error shape");
    let api = harness.call(Method::GET, "/api/runs", None, None).await;
    assert_eq!(
        api.status,
        StatusCode::UNAUTHORIZED,
        "the API still needs a token"
    );
}
