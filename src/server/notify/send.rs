//! One attempt at delivering a message: an HTTP/1.1 POST on a fresh connection (hyper's
//! client connection, over tokio-rustls for https, with the probes' certificate checking),
//! within the webhook's timeout. At most `RESPONSE_LIMIT` bytes of the response body are
//! read: receivers answer with little, and a stranger's endless body must not hold the
//! sender.

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

use crate::model::notify::Webhook;
use crate::probe::tls::Clients;

/// The most response body bytes read (the rest is left unread, the connection closed).
pub const RESPONSE_LIMIT: usize = 64 * 1024;

/// How one attempt ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Attempt {
    /// A 2xx status.
    Delivered(u16),
    /// Any other status.
    Refused(u16),
    /// No response: cannot connect, TLS, timeout, a broken response.
    Failed(String),
}

/// POSTs `body` to `hook`.
pub async fn post(hook: &Webhook, body: Bytes, tls: &Clients) -> Attempt {
    match tokio::time::timeout(hook.timeout, attempt(hook, body, tls)).await {
        Ok(Ok(status)) if (200..300).contains(&status) => Attempt::Delivered(status),
        Ok(Ok(status)) => Attempt::Refused(status),
        Ok(Err(e)) => Attempt::Failed(e),
        Err(_) => Attempt::Failed(format!("no response within {:?}", hook.timeout)),
    }
}

async fn attempt(hook: &Webhook, body: Bytes, tls: &Clients) -> Result<u16, String> {
    let url = &hook.url;
    let host = url.host().unwrap_or_default();
    let https = url.scheme_str() == Some("https");
    let port = url.port_u16().unwrap_or(if https { 443 } else { 80 });
    // `[::1]` in a URL is `::1` to connect to and to name to TLS.
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    let tcp = TcpStream::connect((bare, port)).await.map_err(|e| format!("cannot connect: {e}"))?;
    let _ = tcp.set_nodelay(true);
    let authority = url.authority().map_or(host, |a| a.as_str());
    let mut request = http::Request::post(url.path_and_query().map_or("/", |p| p.as_str()))
        .header(http::header::HOST, authority)
        .header(http::header::CONTENT_TYPE, "application/json")
        .header(http::header::USER_AGENT, concat!("steerdns/", env!("CARGO_PKG_VERSION")));
    for (k, v) in &hook.headers {
        request = request.header(k.as_str(), v.as_str());
    }
    if let Some(secret) = &hook.secret {
        request = request.header(http::header::AUTHORIZATION, format!("Bearer {}", secret.0));
    }
    let request = request.body(Full::new(body)).map_err(|e| format!("bad request: {e}"))?;
    if !https {
        return exchange(tcp, request).await;
    }
    let connector = tls.get(true)?;
    let name = ServerName::try_from(bare.to_string()).map_err(|e| format!("bad host: {e}"))?;
    let stream = connector.connect(name, tcp).await.map_err(|e| format!("TLS: {e}"))?;
    exchange(stream, request).await
}

async fn exchange<S>(io: S, request: http::Request<Full<Bytes>>) -> Result<u16, String>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .map_err(|e| format!("HTTP: {e}"))?;
    // Runs the connection while the request is in flight; dropped with it.
    let conn = async move {
        let _ = conn.await;
        std::future::pending::<()>().await
    };
    let talk = async {
        let response = sender.send_request(request).await.map_err(|e| format!("HTTP: {e}"))?;
        let status = response.status().as_u16();
        let mut body = response.into_body();
        let mut read = 0;
        while read < RESPONSE_LIMIT {
            match body.frame().await {
                Some(Ok(frame)) => read += frame.data_ref().map_or(0, Bytes::len),
                Some(Err(e)) => return Err(format!("HTTP: {e}")),
                None => break,
            }
        }
        Ok(status)
    };
    tokio::select! {
        result = talk => result,
        () = conn => unreachable!("pending never completes"),
    }
}
