//! The dashboard page: `GET /` and its assets under `/assets/…`, plain HTML, CSS and ES
//! modules from `server/assets/`, embedded in the binary with `include_bytes!` (no CDN,
//! no bundler, works offline). The page speaks only the JSON API of `API.md` with the
//! token the person signs in with; what it shows and how is described in
//! `server/assets/app.js`.
//!
//! Why beside the route table (`routes::table`), not in it: that table is the JSON API
//! and generates the OpenAPI document; the page and its files are not API operations,
//! need no token and answer no JSON. [`ASSETS`] is this module's own table, and
//! [`routes`] builds its routes from it; `server/tests/dashboard.rs` checks each is
//! served, and `server/tests/openapi.rs` that none of them is in the OpenAPI document.
//!
//! Answers:
//! - the asset's `Content-Type`;
//! - `Cache-Control: no-cache` with a strong `ETag` (a hash of the bytes), and 304 to a
//!   matching `If-None-Match`: file names carry no content hash (there is no bundler),
//!   so a long `max-age` would keep old modules after an upgrade, while revalidation
//!   costs one small request per file;
//! - [`CONTENT_SECURITY_POLICY`]: only this origin, for scripts, styles, images and
//!   `fetch`; no inline script or style, no frames, no form posts, no `<base>`;
//! - `X-Content-Type-Options: nosniff`, `Referrer-Policy: no-referrer`.
//!
//! Tokens never reach a URL: the page sends `Authorization: Bearer` on every call,
//! reads `GET /api/stream` with `fetch` (an `EventSource` cannot send that header), and
//! keeps the token in `sessionStorage`.
//!
//! Left out: server-side rendering, compression (the files are small), a login session
//! on the server (the API's bearer tokens are the only credentials).

use std::sync::LazyLock;

use axum::Router;
use axum::http::header::{
    CACHE_CONTROL, CONTENT_SECURITY_POLICY as CSP, CONTENT_TYPE, ETAG, IF_NONE_MATCH,
    REFERRER_POLICY, X_CONTENT_TYPE_OPTIONS,
};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use sha2::{Digest, Sha256};

/// One embedded file and the path it is served at.
#[derive(Debug, Clone, Copy)]
pub struct Asset {
    pub path: &'static str,
    pub content_type: &'static str,
    pub body: &'static [u8],
}

const HTML: &str = "text/html; charset=utf-8";
const JS: &str = "text/javascript; charset=utf-8";
const CSS: &str = "text/css; charset=utf-8";
const SVG: &str = "image/svg+xml";

/// Every file of the page. `/` is the page itself; the rest are loaded by it.
pub const ASSETS: [Asset; 11] = [
    Asset {
        path: "/",
        content_type: HTML,
        body: include_bytes!("../assets/index.html"),
    },
    Asset {
        path: "/assets/style.css",
        content_type: CSS,
        body: include_bytes!("../assets/style.css"),
    },
    Asset {
        path: "/assets/icon.svg",
        content_type: SVG,
        body: include_bytes!("../assets/icon.svg"),
    },
    Asset {
        path: "/assets/app.js",
        content_type: JS,
        body: include_bytes!("../assets/app.js"),
    },
    Asset {
        path: "/assets/api.js",
        content_type: JS,
        body: include_bytes!("../assets/api.js"),
    },
    Asset {
        path: "/assets/stream.js",
        content_type: JS,
        body: include_bytes!("../assets/stream.js"),
    },
    Asset {
        path: "/assets/dom.js",
        content_type: JS,
        body: include_bytes!("../assets/dom.js"),
    },
    Asset {
        path: "/assets/views.js",
        content_type: JS,
        body: include_bytes!("../assets/views.js"),
    },
    Asset {
        path: "/assets/editor.js",
        content_type: JS,
        body: include_bytes!("../assets/editor.js"),
    },
    Asset {
        path: "/assets/testpanel.js",
        content_type: JS,
        body: include_bytes!("../assets/testpanel.js"),
    },
    Asset {
        path: "/assets/access.js",
        content_type: JS,
        body: include_bytes!("../assets/access.js"),
    },
];

/// The page may load and call only its own origin.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; img-src 'self'; connect-src 'self'; base-uri 'none'; \
     form-action 'none'; frame-ancestors 'none'";

/// `Cache-Control` of every asset (see the module docs for why not `max-age`).
pub const CACHE_CONTROL_VALUE: &str = "no-cache";

/// The strong `ETag` of each asset, in [`ASSETS`] order.
static ETAGS: LazyLock<Vec<String>> = LazyLock::new(|| {
    ASSETS
        .iter()
        .map(|asset| {
            let digest = Sha256::digest(asset.body);
            let hex: String = digest[..12]
                .iter()
                .map(|byte| format!("{byte:02x}"))
                .collect();
            format!("\"{hex}\"")
        })
        .collect()
});

/// The routes of [`ASSETS`], for any router state.
pub fn routes<S: Clone + Send + Sync + 'static>() -> Router<S> {
    ASSETS
        .iter()
        .enumerate()
        .fold(Router::new(), |router, (index, asset)| {
            router.route(
                asset.path,
                get(move |headers: HeaderMap| async move { respond(index, &headers) }),
            )
        })
}

/// Whether `If-None-Match` names `etag` (or `*`).
fn not_modified(headers: &HeaderMap, etag: &str) -> bool {
    headers
        .get_all(IF_NONE_MATCH)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .map(|tag| tag.trim().trim_start_matches("W/"))
        .any(|tag| tag == etag || tag == "*")
}

fn respond(index: usize, headers: &HeaderMap) -> Response {
    let asset = &ASSETS[index];
    let etag = &ETAGS[index];
    let fresh = not_modified(headers, etag);
    tracing::debug!(
        path = asset.path,
        not_modified = fresh,
        "dashboard asset served"
    );
    let mut response = if fresh {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        ([(CONTENT_TYPE, asset.content_type)], asset.body).into_response()
    };
    let answer = response.headers_mut();
    answer.insert(CACHE_CONTROL, HeaderValue::from_static(CACHE_CONTROL_VALUE));
    if let Ok(value) = HeaderValue::from_str(etag) {
        answer.insert(ETAG, value);
    }
    answer.insert(CSP, HeaderValue::from_static(CONTENT_SECURITY_POLICY));
    answer.insert(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    answer.insert(REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn if_none_match_accepts_lists_weak_tags_and_star() {
        let etag = "\"abc\"";
        let with = |value: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(
                IF_NONE_MATCH,
                HeaderValue::from_str(value).expect("a value"),
            );
            headers
        };
        assert!(not_modified(&with("\"abc\""), etag), "the same tag");
        assert!(
            not_modified(&with("\"x\", W/\"abc\""), etag),
            "in a list, weak"
        );
        assert!(not_modified(&with("*"), etag), "any");
        assert!(!not_modified(&with("\"abd\""), etag), "another tag");
        assert!(!not_modified(&HeaderMap::new(), etag), "no header");
    }

    #[test]
    fn asset_paths_are_unique_and_etags_differ() {
        let mut paths: Vec<_> = ASSETS.iter().map(|asset| asset.path).collect();
        paths.sort_unstable();
        paths.dedup();
        assert_eq!(paths.len(), ASSETS.len(), "one route per asset");
        let mut etags = ETAGS.clone();
        etags.sort();
        etags.dedup();
        assert_eq!(etags.len(), ASSETS.len(), "every file has its own tag");
    }
}
