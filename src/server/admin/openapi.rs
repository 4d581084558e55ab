//! `GET /api/v1/openapi.json`: the API's OpenAPI 3.1 description, docs/api/openapi.yaml
//! built into the binary and converted to JSON on first request, for clients and API
//! tools that read JSON only.

use std::sync::OnceLock;

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};

/// The description as written.
pub const YAML: &str = include_str!("../../../docs/api/openapi.yaml");

/// The description as JSON, or why the built-in YAML does not convert (a build error in
/// effect, which tests/openapi.rs catches).
pub fn json() -> Result<&'static str, &'static str> {
    static JSON: OnceLock<Result<String, String>> = OnceLock::new();
    let converted = JSON.get_or_init(|| {
        let value: serde_json::Value =
            serde_saphyr::from_str(YAML).map_err(|e| format!("openapi.yaml: {e}"))?;
        Ok(value.to_string())
    });
    converted.as_ref().map(String::as_str).map_err(String::as_str)
}

pub async fn serve() -> Response {
    match json() {
        Ok(body) => ([(header::CONTENT_TYPE, "application/json")], body).into_response(),
        Err(e) => super::error(StatusCode::INTERNAL_SERVER_ERROR, e),
    }
}
