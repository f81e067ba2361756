//! The namespace routes: pause and resume every task of a namespace at once.
//!
//! A pause records who asked (the caller's token name), so `ax status` can say why a
//! namespace is quiet.

use ax_scheduler_core::UtcMillis;
use axum::extract::{Extension, Path, State};
use axum::http::StatusCode;

use super::{actor, ApiState};
use ax_control::api::{ApiError, Principal};

pub(super) async fn pause_namespace(
    State(s): State<ApiState>,
    Extension(who): Extension<Principal>,
    Path(namespace): Path<String>,
) -> Result<StatusCode, ApiError> {
    s.operate
        .admit(&who, &format!("{namespace}/*"), UtcMillis::now())?;
    s.operations(&actor(&who))?
        .pause_namespace(namespace)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

pub(super) async fn resume_namespace(
    State(s): State<ApiState>,
    Extension(who): Extension<Principal>,
    Path(namespace): Path<String>,
) -> Result<StatusCode, ApiError> {
    s.operate
        .admit(&who, &format!("{namespace}/*"), UtcMillis::now())?;
    s.operations(&actor(&who))?
        .resume_namespace(namespace)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}
