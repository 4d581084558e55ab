//! eBPF instructions and a small assembler with labels, so the XDP program can ship as
//! bytecode built here instead of needing clang and libbpf at build time.
//!
//! Encoding follows the kernel's `struct bpf_insn`: opcode, destination and source
//! registers in one byte (destination in the low nibble), a signed 16-bit offset and a
//! signed 32-bit immediate, little-endian on the hosts steerdns runs on.

/// One 8-byte instruction as the kernel reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
pub struct Insn {
    pub code: u8,
    /// Destination register in bits 0-3, source register in bits 4-7.
    pub regs: u8,
    pub off: i16,
    pub imm: i32,
}

impl Insn {
    /// The instruction's 8 bytes as the kernel reads them on a little-endian host.
    pub fn to_bytes(self) -> [u8; 8] {
        let mut b = [0u8; 8];
        b[0] = self.code;
        b[1] = self.regs;
        b[2..4].copy_from_slice(&self.off.to_le_bytes());
        b[4..8].copy_from_slice(&self.imm.to_le_bytes());
        b
    }
}

/// The eleven registers: R0 holds results, R1-R5 arguments (R1 is the context on entry),
/// R6-R9 survive calls, R10 is the read-only frame pointer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Reg {
    R0 = 0,
    R1,
    R2,
    R3,
    R4,
    R5,
    R6,
    R7,
    R8,
    R9,
    R10,
}

/// Access widths of loads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Size {
    B = 0x10,
    H = 0x08,
    W = 0x00,
    Dw = 0x18,
}

// Instruction classes.
const LD: u8 = 0x00;
const LDX: u8 = 0x01;
const ALU64: u8 = 0x07;
const JMP: u8 = 0x05;
const JMP32: u8 = 0x06;
// Modes and sources.
const IMM: u8 = 0x00;
const MEM: u8 = 0x60;
const K: u8 = 0x00;
const X: u8 = 0x08;

/// Arithmetic operations (64-bit).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Alu {
    Add = 0x00,
    And = 0x50,
    Mov = 0xb0,
}

/// Conditional jumps: unsigned comparisons and bit tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cond {
    Eq = 0x10,
    Gt = 0x20,
    Set = 0x40,
    Ne = 0x50,
}

const JA: u8 = 0x00;
const CALL: u8 = 0x80;
const EXIT: u8 = 0x90;
/// In the source register of a 64-bit immediate load: the immediate is a map's fd,
/// which the kernel replaces with the map's address.
const PSEUDO_MAP_FD: u8 = 1;

fn regs(dst: Reg, src: Reg) -> u8 {
    (src as u8) << 4 | dst as u8
}

/// A jump target, placed with `Asm::bind` before or after the jumps to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Label(usize);

/// Why a program could not be assembled: bugs of the program's builder, not of input.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AsmError {
    #[error("label {0} is used but never bound")]
    Unbound(usize),
    #[error("label {0} is bound twice")]
    Rebound(usize),
    #[error("a jump spans more than 32767 instructions")]
    TooFar,
}

/// Builds a program: instructions in order, jumps to labels resolved at `finish`.
#[derive(Default, Debug)]
pub struct Asm {
    insns: Vec<Insn>,
    labels: Vec<Option<usize>>,
    /// (instruction index, label) of every jump still to be resolved.
    fixups: Vec<(usize, Label)>,
    rebound: Option<usize>,
}

impl Asm {
    pub fn new() -> Asm {
        Asm::default()
    }

    pub fn label(&mut self) -> Label {
        self.labels.push(None);
        Label(self.labels.len() - 1)
    }

    /// Places `label` at the next instruction.
    pub fn bind(&mut self, label: Label) {
        if self.labels[label.0].replace(self.insns.len()).is_some() {
            self.rebound.get_or_insert(label.0);
        }
    }

    fn push(&mut self, code: u8, regs: u8, off: i16, imm: i32) -> &mut Asm {
        self.insns.push(Insn { code, regs, off, imm });
        self
    }

    /// `dst = *(size *)(src + off)`
    pub fn load(&mut self, size: Size, dst: Reg, src: Reg, off: i16) -> &mut Asm {
        self.push(LDX | MEM | size as u8, regs(dst, src), off, 0)
    }

    /// `dst op= imm` on 64 bits (the immediate is sign-extended).
    pub fn alu_imm(&mut self, op: Alu, dst: Reg, imm: i32) -> &mut Asm {
        self.push(ALU64 | K | op as u8, regs(dst, Reg::R0), 0, imm)
    }

    /// `dst op= src` on 64 bits.
    pub fn alu_reg(&mut self, op: Alu, dst: Reg, src: Reg) -> &mut Asm {
        self.push(ALU64 | X | op as u8, regs(dst, src), 0, 0)
    }

    /// `dst = imm`
    pub fn mov_imm(&mut self, dst: Reg, imm: i32) -> &mut Asm {
        self.alu_imm(Alu::Mov, dst, imm)
    }

    /// `dst = src`
    pub fn mov_reg(&mut self, dst: Reg, src: Reg) -> &mut Asm {
        self.alu_reg(Alu::Mov, dst, src)
    }

    fn jump(&mut self, code: u8, regs: u8, imm: i32, to: Label) -> &mut Asm {
        self.fixups.push((self.insns.len(), to));
        self.push(code, regs, 0, imm)
    }

    /// `if dst cond imm goto to`, comparing all 64 bits.
    pub fn jump_imm(&mut self, cond: Cond, dst: Reg, imm: i32, to: Label) -> &mut Asm {
        self.jump(JMP | K | cond as u8, regs(dst, Reg::R0), imm, to)
    }

    /// `if (u32)dst cond (u32)imm goto to`: compares the low 32 bits only, so an address
    /// word with its top bit set needs no sign-extension tricks.
    pub fn jump32_imm(&mut self, cond: Cond, dst: Reg, imm: u32, to: Label) -> &mut Asm {
        self.jump(JMP32 | K | cond as u8, regs(dst, Reg::R0), imm as i32, to)
    }

    /// `if dst cond src goto to`, comparing all 64 bits.
    pub fn jump_reg(&mut self, cond: Cond, dst: Reg, src: Reg, to: Label) -> &mut Asm {
        self.jump(JMP | X | cond as u8, regs(dst, src), 0, to)
    }

    /// `goto to`
    pub fn goto(&mut self, to: Label) -> &mut Asm {
        self.jump(JMP | JA, 0, 0, to)
    }

    /// `dst = address of the map with this fd` (two instruction slots).
    pub fn load_map_fd(&mut self, dst: Reg, fd: i32) -> &mut Asm {
        self.push(LD | IMM | Size::Dw as u8, (PSEUDO_MAP_FD << 4) | dst as u8, 0, fd);
        self.push(0, 0, 0, 0)
    }

    /// Calls kernel helper number `helper`; arguments in R1-R5, result in R0.
    pub fn call(&mut self, helper: i32) -> &mut Asm {
        self.push(JMP | CALL, 0, 0, helper)
    }

    /// Returns R0.
    pub fn exit(&mut self) -> &mut Asm {
        self.push(JMP | EXIT, 0, 0, 0)
    }

    /// The program, with every jump's offset counted from the instruction after it.
    pub fn finish(mut self) -> Result<Vec<Insn>, AsmError> {
        if let Some(l) = self.rebound {
            return Err(AsmError::Rebound(l));
        }
        for &(at, Label(l)) in &self.fixups {
            let target = self.labels[l].ok_or(AsmError::Unbound(l))?;
            let off = target as i64 - (at as i64 + 1);
            self.insns[at].off = i16::try_from(off).map_err(|_| AsmError::TooFar)?;
        }
        Ok(self.insns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Expected bytes from the kernel's instruction-set document (and what `llvm-objdump -d`
    /// prints for clang's output: `r2 = *(u32 *)(r1 + 4)` is `61 12 04 00 00 00 00 00`).
    /// Emits one instruction.
    type Emit = fn(&mut Asm);

    #[test]
    fn instructions_encode_as_the_kernel_reads_them() {
        let cases: Vec<(Emit, [u8; 8])> = vec![
            (
                |a| {
                    a.load(Size::W, Reg::R2, Reg::R1, 4);
                },
                [0x61, 0x12, 4, 0, 0, 0, 0, 0],
            ),
            (
                |a| {
                    a.load(Size::H, Reg::R5, Reg::R2, 12);
                },
                [0x69, 0x25, 12, 0, 0, 0, 0, 0],
            ),
            (
                |a| {
                    a.load(Size::B, Reg::R5, Reg::R2, 23);
                },
                [0x71, 0x25, 23, 0, 0, 0, 0, 0],
            ),
            (
                |a| {
                    a.load(Size::Dw, Reg::R0, Reg::R10, -8);
                },
                [0x79, 0xa0, 0xf8, 0xff, 0, 0, 0, 0],
            ),
            (
                |a| {
                    a.mov_imm(Reg::R0, 2);
                },
                [0xb7, 0x00, 0, 0, 2, 0, 0, 0],
            ),
            (
                |a| {
                    a.mov_reg(Reg::R6, Reg::R1);
                },
                [0xbf, 0x16, 0, 0, 0, 0, 0, 0],
            ),
            (
                |a| {
                    a.alu_imm(Alu::Add, Reg::R4, 42);
                },
                [0x07, 0x04, 0, 0, 42, 0, 0, 0],
            ),
            (
                |a| {
                    a.alu_imm(Alu::And, Reg::R5, -1);
                },
                [0x57, 0x05, 0, 0, 0xff, 0xff, 0xff, 0xff],
            ),
            (
                |a| {
                    a.alu_reg(Alu::Add, Reg::R4, Reg::R2);
                },
                [0x0f, 0x24, 0, 0, 0, 0, 0, 0],
            ),
            (
                |a| {
                    a.call(51);
                },
                [0x85, 0x00, 0, 0, 51, 0, 0, 0],
            ),
            (
                |a| {
                    a.exit();
                },
                [0x95, 0x00, 0, 0, 0, 0, 0, 0],
            ),
        ];
        for (emit, want) in cases {
            let mut a = Asm::new();
            emit(&mut a);
            let insns = a.finish().unwrap();
            assert_eq!(insns.len(), 1);
            assert_eq!(insns[0].to_bytes(), want, "{:?}", insns[0]);
        }
    }

    #[test]
    fn map_fd_load_takes_two_slots() {
        let mut a = Asm::new();
        a.load_map_fd(Reg::R1, 7);
        let insns = a.finish().unwrap();
        assert_eq!(insns[0].to_bytes(), [0x18, 0x11, 0, 0, 7, 0, 0, 0]);
        assert_eq!(insns[1].to_bytes(), [0; 8]);
    }

    #[test]
    fn jumps_count_from_the_next_instruction() {
        let mut a = Asm::new();
        let (back, fwd) = (a.label(), a.label());
        a.bind(back);
        a.jump_reg(Cond::Gt, Reg::R4, Reg::R3, fwd); // 0: forward over 1 and 2
        a.jump32_imm(Cond::Ne, Reg::R5, 0xc0a8_0001, fwd); // 1: forward over 2
        a.goto(back); // 2: back to 0
        a.bind(fwd);
        a.exit(); // 3
        let insns = a.finish().unwrap();
        assert_eq!(insns[0].to_bytes(), [0x2d, 0x34, 2, 0, 0, 0, 0, 0]);
        assert_eq!(insns[1].to_bytes(), [0x56, 0x05, 1, 0, 0x01, 0x00, 0xa8, 0xc0]);
        assert_eq!(insns[2].to_bytes(), [0x05, 0x00, 0xfd, 0xff, 0, 0, 0, 0]);
        assert_eq!(insns[1].off, 1);
        assert_eq!(insns[2].off, -3);
    }

    #[test]
    fn builder_mistakes_are_reported() {
        let mut a = Asm::new();
        let l = a.label();
        a.goto(l);
        assert_eq!(a.finish(), Err(AsmError::Unbound(0)));
        let mut a = Asm::new();
        let l = a.label();
        a.bind(l);
        a.bind(l);
        assert_eq!(a.finish(), Err(AsmError::Rebound(0)));
    }
}
