//! The XDP program of `listen.xdp`: UDP to one of the taken addresses and the taken port
//! goes to the AF_XDP socket of the receive queue it arrived on; every other packet goes on
//! to the kernel untouched.
//!
//! It parses only what it must and passes whatever it does not recognise: Ethernet without
//! VLAN tags, IPv4 without options and not a fragment, IPv6 whose next header is UDP (so
//! no extension headers and no fragments), then UDP. Anything stranger reaches the kernel's
//! own stack, which knows what to do with it.

use std::net::{Ipv4Addr, Ipv6Addr};

use super::insn::{Alu, Asm, AsmError, Cond, Insn, Label, Reg, Size};

/// XDP verdicts (`enum xdp_action`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(i32)]
pub enum Action {
    Aborted = 0,
    Drop = 1,
    Pass = 2,
    Tx = 3,
    Redirect = 4,
}

/// What the program takes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Filter {
    pub v4: Vec<Ipv4Addr>,
    pub v6: Vec<Ipv6Addr>,
    pub port: u16,
    /// The verdict for a matching packet whose queue has no socket in the map: `Pass` in
    /// service (the kernel then answers it as it would any packet), `Drop` in tests that
    /// need to see which packets matched without binding sockets.
    pub unbound: Action,
}

/// `bpf_redirect_map`'s helper number.
const REDIRECT_MAP: i32 = 51;
/// Offsets in `struct xdp_md`, the program's context.
const CTX_DATA: i16 = 0;
const CTX_DATA_END: i16 = 4;
const CTX_RX_QUEUE: i16 = 16;

const ETH_LEN: i16 = 14;
const IPV4_LEN: i16 = 20;
const IPV6_LEN: i16 = 40;
const UDP_LEN: i16 = 8;
const UDP: i32 = 17;

/// A 16-bit field as a little-endian load of its network-order bytes reads it.
fn be16(v: u16) -> i32 {
    i32::from(u16::from_le_bytes(v.to_be_bytes()))
}

/// Four address bytes as a little-endian 32-bit load reads them.
fn word(b: &[u8]) -> u32 {
    u32::from_le_bytes([b[0], b[1], b[2], b[3]])
}

impl Filter {
    /// The program, redirecting into the XSKMAP whose fd is `xsks`.
    pub fn program(&self, xsks: i32) -> Result<Vec<Insn>, AsmError> {
        use Reg::*;
        let mut a = Asm::new();
        let (pass, redirect, v6) = (a.label(), a.label(), a.label());
        a.mov_reg(R6, R1);
        a.load(Size::W, R2, R1, CTX_DATA);
        a.load(Size::W, R3, R1, CTX_DATA_END);
        // Ethernet: the frame must hold the EtherType.
        a.mov_reg(R4, R2).alu_imm(Alu::Add, R4, i32::from(ETH_LEN));
        a.jump_reg(Cond::Gt, R4, R3, pass);
        a.load(Size::H, R5, R2, ETH_LEN - 2);
        // A family without addresses has no code at all: the verifier refuses code that
        // cannot be reached.
        if !self.v6.is_empty() {
            a.jump_imm(Cond::Eq, R5, be16(0x86dd), v6);
        }
        if self.v4.is_empty() {
            a.goto(pass);
        } else {
            self.ipv4(&mut a, pass, redirect);
        }
        if !self.v6.is_empty() {
            a.bind(v6);
            self.ipv6(&mut a, pass);
        }

        // To the socket of this receive queue; the flags' low bits are the verdict when
        // the map has no socket there.
        a.bind(redirect);
        a.load(Size::W, R2, R6, CTX_RX_QUEUE);
        a.load_map_fd(R1, xsks);
        a.mov_imm(R3, self.unbound as i32);
        a.call(REDIRECT_MAP);
        a.exit();

        a.bind(pass);
        a.mov_imm(R0, Action::Pass as i32);
        a.exit();
        a.finish()
    }

    /// From an IPv4 EtherType on: to `redirect` if taken, else to `pass`.
    fn ipv4(&self, a: &mut Asm, pass: Label, redirect: Label) {
        use Reg::*;
        a.jump_imm(Cond::Ne, R5, be16(0x0800), pass);
        // IPv4: the whole fixed header and the UDP header present.
        a.mov_reg(R4, R2).alu_imm(Alu::Add, R4, i32::from(ETH_LEN + IPV4_LEN + UDP_LEN));
        a.jump_reg(Cond::Gt, R4, R3, pass);
        // Version 4 with a 20-byte header: no options.
        a.load(Size::B, R5, R2, ETH_LEN);
        a.jump_imm(Cond::Ne, R5, 0x45, pass);
        // More-fragments flag or a fragment offset: a fragment.
        a.load(Size::H, R5, R2, ETH_LEN + 6);
        a.alu_imm(Alu::And, R5, be16(0x3fff));
        a.jump_imm(Cond::Ne, R5, 0, pass);
        a.load(Size::B, R5, R2, ETH_LEN + 9);
        a.jump_imm(Cond::Ne, R5, UDP, pass);
        let port4 = a.label();
        a.load(Size::W, R5, R2, ETH_LEN + 16);
        for ip in &self.v4 {
            a.jump32_imm(Cond::Eq, R5, word(&ip.octets()), port4);
        }
        a.goto(pass);
        a.bind(port4);
        a.load(Size::H, R5, R2, ETH_LEN + IPV4_LEN + 2);
        a.jump_imm(Cond::Eq, R5, be16(self.port), redirect);
        a.goto(pass);
    }

    /// From an IPv6 EtherType on: falls through to the redirect if taken, else to `pass`.
    fn ipv6(&self, a: &mut Asm, pass: Label) {
        use Reg::*;
        // IPv6: the fixed header and the UDP header present, UDP right after the header.
        a.mov_reg(R4, R2).alu_imm(Alu::Add, R4, i32::from(ETH_LEN + IPV6_LEN + UDP_LEN));
        a.jump_reg(Cond::Gt, R4, R3, pass);
        a.load(Size::B, R5, R2, ETH_LEN + 6);
        a.jump_imm(Cond::Ne, R5, UDP, pass);
        let port6 = a.label();
        for ip in &self.v6 {
            let o = ip.octets();
            let next = a.label();
            for (i, chunk) in o.chunks(4).enumerate() {
                a.load(Size::W, R5, R2, ETH_LEN + 24 + 4 * i as i16);
                a.jump32_imm(Cond::Ne, R5, word(chunk), next);
            }
            a.goto(port6);
            a.bind(next);
        }
        a.goto(pass);
        a.bind(port6);
        a.load(Size::H, R5, R2, ETH_LEN + IPV6_LEN + 2);
        a.jump_imm(Cond::Ne, R5, be16(self.port), pass);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_read_in_network_order() {
        // 0x0800 arrives as bytes 08 00; a little-endian load of them is 0x0008.
        assert_eq!(be16(0x0800), 0x0008);
        assert_eq!(be16(53), 0x3500);
        assert_eq!(word(&[192, 0, 2, 1]), 0x0102_00c0);
    }

    #[test]
    fn every_address_adds_its_comparisons() {
        let v4 = Ipv4Addr::new(198, 18, 0, 1);
        let v6: Ipv6Addr = "2001:db8::1".parse().unwrap();
        let base = Filter { v4: vec![v4], v6: vec![v6], port: 53, unbound: Action::Pass };
        let n = base.program(3).unwrap().len();
        let more = Filter { v4: vec![v4, v4], v6: vec![v6, v6], ..base };
        // One compare for IPv4; four word loads, four compares and a jump for IPv6.
        assert_eq!(more.program(3).unwrap().len(), n + 1 + 9);
    }
}
