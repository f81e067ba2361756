//! The routes about the cluster and the caller: `GET /status` and `GET /whoami`.
//!
//! `/whoami` needs no backend: the authorization layer already found the caller, so it
//! answers even while the replica has no backend connected.

use axum::extract::{Extension, State};
use axum::Json;

use super::{ApiResult, ApiState};
use ax_control::api::{Principal, StatusView, WhoAmI};

pub(super) async fn status(State(s): State<ApiState>) -> ApiResult<StatusView> {
    Ok(Json(s.backend()?.status().await?))
}

/// Needs no backend: the answer is the authorization layer's.
pub(super) async fn whoami(Extension(who): Extension<Principal>) -> Json<WhoAmI> {
    Json(WhoAmI {
        name: who.name.to_string(),
        role: who.role,
    })
}
