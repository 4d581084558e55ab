//! The dns check: one query over UDP, again over TCP when the answer is truncated, judged
//! by its RCODE and optionally by what its answer section holds (`docs/probing.md`).

use std::net::{IpAddr, SocketAddr};

use hickory_proto::op::{Message, Query};
use hickory_proto::rr::{Name, RecordType};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::check::{Reason, classify, connect, udp_socket};
use crate::model::probe_params::DnsParams;

/// The largest UDP answer read: no EDNS is sent, so a compliant server sends at most 512
/// bytes; more room only tolerates servers that ignore that.
const UDP_LIMIT: usize = 4096;

/// A prepared dns check.
pub struct DnsCheck {
    query: Query,
    expected_rcode: u16,
    /// `answer_contains` as an address, matched against A and AAAA answers.
    answer_ip: Option<IpAddr>,
    /// `answer_contains` as text, matched against every answer's RDATA.
    answer_text: Option<String>,
}

impl DnsCheck {
    pub fn new(p: &DnsParams) -> Result<DnsCheck, String> {
        let name = Name::from_ascii(&p.query_name)
            .map_err(|e| format!("invalid query_name {:?}: {e}", p.query_name))?;
        let query = Query::query(name, RecordType::from(p.query_type));
        let answer_ip = p.answer_contains.as_deref().and_then(|a| a.parse().ok());
        let answer_text = p.answer_contains.clone().filter(|_| answer_ip.is_none());
        Ok(DnsCheck { query, expected_rcode: p.expected_rcode, answer_ip, answer_text })
    }

    /// Asks `addr` (from `source`) and judges the answer.
    pub async fn run(&self, addr: SocketAddr, source: Option<IpAddr>) -> Result<(), Reason> {
        // A fresh id per run: an answer to an earlier, timed-out query is not this one's.
        let id: u16 = rand::random();
        let mut msg = Message::query();
        msg.metadata.id = id;
        msg.add_query(self.query.clone());
        let wire =
            msg.to_vec().map_err(|e| Reason::Setup(format!("cannot encode the query: {e}")))?;
        let answer = match self.over_udp(&wire, id, addr, source).await? {
            answer if !answer.metadata.truncation => answer,
            _ => self.over_tcp(&wire, id, addr, source).await?,
        };
        self.judge(&answer)
    }

    async fn over_udp(
        &self,
        wire: &[u8],
        id: u16,
        addr: SocketAddr,
        source: Option<IpAddr>,
    ) -> Result<Message, Reason> {
        let socket = udp_socket(addr, source).await?;
        socket.send(wire).await.map_err(|e| classify(&e))?;
        let mut buf = vec![0; UDP_LIMIT];
        // Datagrams that are not the answer to this query (stray or forged) are skipped;
        // the scheduler's timeout bounds the wait.
        loop {
            let n = socket.recv(&mut buf).await.map_err(|e| classify(&e))?;
            if let Some(answer) = self.answer_to(&buf[..n], id) {
                return Ok(answer);
            }
        }
    }

    async fn over_tcp(
        &self,
        wire: &[u8],
        id: u16,
        addr: SocketAddr,
        source: Option<IpAddr>,
    ) -> Result<Message, Reason> {
        let mut tcp = connect(addr, source).await?;
        let mut framed = (wire.len() as u16).to_be_bytes().to_vec();
        framed.extend_from_slice(wire);
        tcp.write_all(&framed).await.map_err(|e| classify(&e))?;
        // The length prefix bounds the read at 65535 bytes.
        let len = tcp.read_u16().await.map_err(|e| classify(&e))?;
        let mut buf = vec![0; usize::from(len)];
        tcp.read_exact(&mut buf).await.map_err(|e| classify(&e))?;
        self.answer_to(&buf, id)
            .ok_or_else(|| Reason::Other("the TCP answer does not answer the query".to_string()))
    }

    /// `bytes` decoded when they are a response to this query.
    fn answer_to(&self, bytes: &[u8], id: u16) -> Option<Message> {
        let msg = Message::from_vec(bytes).ok()?;
        let ours = msg.metadata.id == id
            && msg.metadata.message_type == hickory_proto::op::MessageType::Response
            // Names compare without regard to case, as DNS does.
            && msg.queries.first().is_some_and(|q| {
                q.name() == self.query.name() && q.query_type() == self.query.query_type()
            });
        ours.then_some(msg)
    }

    fn judge(&self, answer: &Message) -> Result<(), Reason> {
        let got = u16::from(answer.metadata.response_code);
        if got != self.expected_rcode {
            return Err(Reason::Rcode { got, expected: self.expected_rcode });
        }
        let data = answer.answers.iter().map(|r| &r.data);
        let found = match (&self.answer_ip, &self.answer_text) {
            (Some(ip), _) => data.into_iter().any(|d| d.ip_addr() == Some(*ip)),
            (None, Some(text)) => data.into_iter().any(|d| d.to_string().contains(text.as_str())),
            (None, None) => return Ok(()),
        };
        match found {
            true => Ok(()),
            false => {
                let wanted = self.answer_ip.map_or_else(
                    || self.answer_text.clone().unwrap_or_default(),
                    |ip| ip.to_string(),
                );
                Err(Reason::Answer(wanted))
            }
        }
    }
}
