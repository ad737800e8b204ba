//! The HTTP side, on axum (already in the tree through the embedded broker): `/metrics` on
//! its own address, and the web view (`/`, `/fragment`, `/api/fleet`) behind its token.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{Query, Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use tokio::sync::watch;
use tracing::{error, info};

use super::fleet::FleetDoc;
use super::metrics::{Metrics, CONTENT_TYPE};
use super::{page, ObserveError};

type Docs = watch::Receiver<Option<Arc<FleetDoc>>>;

async fn listen(addr: SocketAddr, router: Router, what: &'static str) -> Result<(), ObserveError> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| ObserveError::Listen(addr, e))?;
    let bound = listener.local_addr().unwrap_or(addr);
    info!("{what} on http://{bound}/");
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, router).await {
            error!("{what} stopped: {e}");
        }
    });
    Ok(())
}

/// `GET /metrics` on `addr`.
pub(super) async fn serve_metrics(
    addr: SocketAddr,
    metrics: Arc<Metrics>,
    docs: Docs,
) -> Result<(), ObserveError> {
    let router = Router::new().route(
        "/metrics",
        get(move || {
            let doc = docs.borrow().clone();
            let text = metrics.render(doc.as_deref());
            async move { ([(header::CONTENT_TYPE, CONTENT_TYPE)], text) }
        }),
    );
    listen(addr, router, "metrics").await
}

/// The web view on `addr`, every route behind `token`.
pub(super) async fn serve_view(
    addr: SocketAddr,
    token: String,
    docs: Docs,
) -> Result<(), ObserveError> {
    let router = Router::new()
        .route("/", get(index))
        .route("/fragment", get(fragment))
        .route("/api/fleet", get(api))
        .layer(middleware::from_fn_with_state(Arc::new(token), auth))
        .with_state(docs);
    listen(addr, router, "web view").await
}

/// Equal in time whatever the first difference.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}

/// The token of a request: `Authorization: Bearer TOKEN`, else `?token=TOKEN`.
fn token_of(headers: &HeaderMap, query: Option<&HashMap<String, String>>) -> Option<String> {
    if let Some(v) = headers.get(header::AUTHORIZATION) {
        return v
            .to_str()
            .ok()
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(|t| t.trim().to_string());
    }
    query.and_then(|q| q.get("token").cloned())
}

async fn auth(State(token): State<Arc<String>>, req: Request, next: Next) -> Response {
    let query = Query::<HashMap<String, String>>::try_from_uri(req.uri()).ok();
    match token_of(req.headers(), query.as_ref().map(|q| &q.0)) {
        Some(t) if same(t.as_bytes(), token.as_bytes()) => next.run(req).await,
        _ => (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Bearer")],
            "401: this view needs its token (Authorization: Bearer TOKEN, or ?token=TOKEN)\n",
        )
            .into_response(),
    }
}

async fn index(State(docs): State<Docs>) -> Html<String> {
    let doc = docs.borrow().clone();
    Html(page::page(doc.as_deref()))
}

async fn fragment(State(docs): State<Docs>) -> Html<String> {
    let doc = docs.borrow().clone();
    Html(page::body(doc.as_deref()))
}

async fn api(State(docs): State<Docs>) -> Response {
    match docs.borrow().clone() {
        Some(d) => Json(d.as_ref()).into_response(),
        None => (
            StatusCode::SERVICE_UNAVAILABLE,
            "the first view of the fleet is not ready yet\n",
        )
            .into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_comes_from_the_header_first_then_the_query() {
        let mut h = HeaderMap::new();
        let q: HashMap<String, String> = [("token".to_string(), "q".to_string())].into();
        assert_eq!(token_of(&h, Some(&q)).as_deref(), Some("q"));
        h.insert(header::AUTHORIZATION, "Bearer h".parse().unwrap());
        assert_eq!(token_of(&h, Some(&q)).as_deref(), Some("h"));
        h.insert(header::AUTHORIZATION, "Basic h".parse().unwrap());
        assert_eq!(token_of(&h, Some(&q)), None);
        assert!(same(b"abc", b"abc"));
        assert!(!same(b"abc", b"abd"));
        assert!(!same(b"abc", b"ab"));
    }
}
