//! In front of every route: requests for endpoints go to the proxy.

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;

use crate::state::AppState;

/// In front of every route: endpoint traffic (`Host: NAME.<domain>`, which wins over any
/// path, `/e/NAME/...`, `/w/WORKFLOW/NAME/...`) goes through the proxy, untouched by the API's
/// error wrapping; everything else goes on to the API.
pub async fn endpoints_first(State(st): State<AppState>, req: Request, next: Next) -> Response {
    let domain = st.config.endpoint_domain.clone();
    let req = match st.gateway.proxy.dispatch(req, Some(&domain)).await {
        Ok(resp) => return resp,
        Err(req) => req,
    };
    // Per-workflow path endpoints keep their full path: `/w/WORKFLOW/NAME/...`.
    let path = req.uri().path().to_string();
    if let Some(rest) = path.strip_prefix("/w/") {
        let mut parts = rest.splitn(3, '/');
        if let (Some(wf), Some(name)) = (parts.next(), parts.next()) {
            let key = format!("w/{wf}/{name}");
            return st.gateway.proxy.handle(&key, req, None).await;
        }
    }
    next.run(req).await
}
