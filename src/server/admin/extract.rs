//! Query and path extractors whose rejections are the API's JSON errors (`400
//! {"error": …}`) rather than axum's plain text, so that every error the API gives has
//! the one documented shape (a repeated query parameter, a path that is not UTF-8).

use axum::extract::{FromRequestParts, Path, Query};
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::response::Response;
use serde::de::DeserializeOwned;

use super::error;

/// `Query<T>`, rejected as JSON.
pub struct JsonQuery<T>(pub T);

/// `Path<T>`, rejected as JSON.
pub struct JsonPath<T>(pub T);

impl<T: DeserializeOwned + Send, S: Send + Sync> FromRequestParts<S> for JsonQuery<T> {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Response> {
        match Query::<T>::from_request_parts(parts, state).await {
            Ok(Query(v)) => Ok(JsonQuery(v)),
            Err(e) => Err(error(StatusCode::BAD_REQUEST, e.body_text())),
        }
    }
}

impl<T: DeserializeOwned + Send, S: Send + Sync> FromRequestParts<S> for JsonPath<T> {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Response> {
        match Path::<T>::from_request_parts(parts, state).await {
            Ok(Path(v)) => Ok(JsonPath(v)),
            Err(e) => Err(error(e.status(), e.body_text())),
        }
    }
}
